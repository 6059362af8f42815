"""`tally ledger backfill-settlement`: settlement figures for entries booked before R43 (docs/settlement.md §6.2,
§8 "2 legacy"; docs/recon.md "Migration").

For one channel and a range of bill dates, every PAYMENT and REFUND entry without `settlement_cent` /
`settlement_refund_cent` gets its figures from what was kept when it was booked, never from a guess:

* a PAYMENT: its notify_raw row's `settlement` (kept since R43 was wired); else the kept body read again by
  the channel's own notify step (verified and decrypted as on arrival, `received_at` = its first arrival),
  the figures its builder makes of it; else, when the payer paid the whole order (amount_cent ==
  order_total_cent: no coupon could have been used), the order amount settles in full;
* a REFUND: its SUCCESS report's `settlement` (refund_raw); else the report's basis, or only the refund's
  amount, rebuilt with the booked payment's Settlement (channels/settlement.build_refund).

What none of that settles **stays legacy, listed with its reason** (a payment whose raw row lacks the
promotion detail and whose payer paid less than the order; a refund of a NOCASH-coupon payment whose report
stated no settlement refund): recon keeps matching it on amount_cent and counts it (`legacy_payments` /
`legacy_refunds`). The backfill asks no channel (no network): it reads what Tally kept.

Each write is conditional (`attribute_not_exists(settlement_cent)`, store/backfill.py): a re-run, or a run
beside a booking, writes nothing twice; entries that already have figures count as `already`.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from tally import errors
from tally.apigw import HttpRequest
from tally.channels import registry as channel_registry
from tally.channels.settlement import refund_fields
from tally.domain.money import format_cents
from tally.domain.refunds import refund_raw_key
from tally.domain.settlement import settlement_of_entry
from tally.store.backfill import SettlementBackfillStore
from tally.store.tables import iso_now

CHUNK = 100  # entries handed to the pool at once (bounded memory; progress lines at least this often)
MAX_DAYS = 400  # a range is bounded: one run reads at most this many bill dates
LISTED = 500  # legacy entries listed one by one; the rest are counted by reason
DONE, ALREADY, LEGACY = "done", "already", "legacy"


class BackfillError(errors.InvalidRequest, ValueError):
    """The run cannot be made as asked (a bad date range, an unknown channel): says why."""


def days_between(day_from: str, day_to: str | None) -> list[str]:
    try:
        first = dt.date.fromisoformat(day_from)
        last = dt.date.fromisoformat(day_to) if day_to else first
    except ValueError:
        raise BackfillError(f"dates are YYYY-MM-DD, got {day_from!r} / {day_to!r}") from None
    if last < first:
        raise BackfillError(f"--to {last} is before --from {first}")
    n = (last - first).days + 1
    if n > MAX_DAYS:
        raise BackfillError(f"{n} days: at most {MAX_DAYS} in one run (run it again for the rest)")
    return [(first + dt.timedelta(days=i)).isoformat() for i in range(n)]


class SettlementBackfill:
    def __init__(
        self,
        store: SettlementBackfillStore,
        merchants: Any = None,
        *,
        clock: Callable[[], float] = time.time,
        window_s: int = 300,
        workers: int = 8,
    ):
        self.workers = workers
        self.store = store
        self.merchants = merchants  # the directory the channels' notify steps verify kept bodies with
        self.clock = clock
        self.window_s = window_s

    def run(
        self,
        channel: str,
        day_from: str,
        day_to: str | None = None,
        *,
        dry_run: bool = False,
        merchant: str | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
        every: int = 200,
    ) -> dict[str, Any]:
        """`channel`: the CLI's word (route) or the stored one. Returns the counts and the legacy list."""
        stored = _stored(channel)
        days = days_between(day_from, day_to)
        counts: Counter[str] = Counter()
        reasons: Counter[str] = Counter()
        legacy: list[dict[str, Any]] = []
        by_kind: Counter[str] = Counter()
        seen = 0

        def settle(entry: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
            result, reason, fields = self.one(entry)
            if (
                result == DONE
                and not dry_run
                and not self.store.write(entry["pk"], fields or {}, self._now())
            ):
                result = ALREADY  # figures booked (or backfilled) meanwhile: never overwritten
            return entry, result, reason

        with ThreadPoolExecutor(self.workers) as pool:  # reads and conditional writes, several at a time
            for day in days:
                for entry, result, reason in self._settled(
                    pool, settle, self.store.entries(stored, day, merchant)
                ):
                    seen += 1
                    counts[result] += 1
                    by_kind[f"{entry.get('kind')}:{result}"] += 1
                    if result == LEGACY:
                        reasons[_reason_class(reason)] += 1
                        if len(legacy) < LISTED:
                            legacy.append(
                                {
                                    "pk": entry["pk"],
                                    "kind": entry.get("kind"),
                                    "mchid": entry.get("mchid"),
                                    "bill_date": entry.get("bill_date"),
                                    "amount_cent": entry.get("amount_cent"),
                                    "amount": format_cents(int(entry.get("amount_cent") or 0)),
                                    "reason": reason,
                                }
                            )
                    if progress is not None and seen % every == 0:
                        progress(
                            {"day": day, "examined": seen, **{k: counts[k] for k in (DONE, ALREADY, LEGACY)}}
                        )
        return {
            "channel": stored,
            "from": days[0],
            "to": days[-1],
            "dry_run": dry_run,
            "merchant": merchant,
            "examined": seen,
            DONE: counts[DONE],
            ALREADY: counts[ALREADY],
            LEGACY: counts[LEGACY],
            "by_kind": dict(sorted(by_kind.items())),
            "legacy_reasons": dict(reasons.most_common()),
            "legacy_entries": legacy,
            "legacy_unlisted": max(0, counts[LEGACY] - len(legacy)),
        }

    # ------------------------------------------------------------------ one entry

    def one(self, entry: dict[str, Any]) -> tuple[str, str, dict[str, int] | None]:
        """(done | already | legacy, why, the figures to write)."""
        kind = entry.get("kind")
        if entry.get("settlement_cent") is not None or entry.get("settlement_refund_cent") is not None:
            return ALREADY, "", None
        if kind == "PAYMENT":
            return self._payment(entry)
        return self._refund(entry)

    def _payment(self, entry: dict[str, Any]) -> tuple[str, str, dict[str, int] | None]:
        raw = self.store.payment_raw(entry["pk"])
        why = "no raw row"
        if raw is not None and raw.get("settlement"):
            return DONE, "the raw row's settlement", {k: int(v) for k, v in raw["settlement"].items()}
        if raw is not None:
            notice, why = self._reread(raw)
            if notice is not None and notice.settlement is not None:
                if int(notice.paid_cent) != int(entry["amount_cent"]):
                    said, booked = (
                        format_cents(int(notice.paid_cent)),
                        format_cents(int(entry["amount_cent"])),
                    )
                    return LEGACY, f"the kept body says {said} paid, the entry {booked}: for a person", None
                return DONE, "the kept body read again", dict(notice.settlement)
            if notice is not None:
                why = f"the kept body: {notice.settlement_error}"
        whole = settlement_of_entry(entry)
        if whole is not None:
            return DONE, "payer paid the whole order", whole.entry_fields()
        payer, order = (
            format_cents(int(entry["amount_cent"])),
            format_cents(int(entry.get("order_total_cent") or 0)),
        )
        return LEGACY, f"{why}; payer {payer} < order {order}: the coupon split is unknown", None

    def _reread(self, raw: dict[str, Any]) -> tuple[Any, str]:
        """The kept body through the channel's notify step again, as on arrival (verified, decrypted)."""
        if raw.get("body") is None:
            return None, "no body kept (booked from a query, or only a prefix was kept)"
        if self.merchants is None:
            return None, "no merchant directory to verify the kept body with"
        api = raw.get("notify_api")
        found = channel_registry.find(
            lambda c: c.stored == raw["channel"] and (c.api or None) == (api or None)
        )
        if found is None:
            return None, f"no notify path for channel {raw['channel']!r}"
        url_merchant = str(raw.get("sp_mchid") or raw["mchid"])
        arrived = raw.get("notified_at")
        try:
            merchant = found.merchant(self.merchants, url_merchant)
            request = HttpRequest(
                "POST",
                f"/notify/{found.route}/{url_merchant}",
                dict(raw.get("headers") or {}),
                str(raw["body"]).encode("utf-8"),
                {found.merchant_param: url_merchant},
            )
            read = found.read_notification(
                request,
                merchant,
                self.merchants,
                clock=self.clock,
                window_s=self.window_s,
                received_at=_epoch(arrived) if arrived else None,
            )
        except Exception as exc:  # noqa: BLE001 - one unreadable body is one legacy entry, never the run
            return None, f"the kept body could not be read again: {type(exc).__name__}: {str(exc)[:120]}"
        if read.reject is not None or read.quarantine is not None:
            return None, f"the kept body does not verify or parse now: {read.reject or read.quarantine}"
        matching = [p for p in read.payments if p.raw_key == raw["pk"]]
        if not matching:
            return None, "the kept body names another payment"
        return matching[0], ""

    def _refund(self, entry: dict[str, Any]) -> tuple[str, str, dict[str, int] | None]:
        key = refund_raw_key(entry["channel"], entry["mchid"], entry["refund_no"])
        reports = [
            r for r in self.store.refund_reports(key) if str(r.get("outcome") or "").startswith("SUCCESS")
        ]
        reports += [r for r in self.store.refund_reports(key) if r not in reports]
        for report in reports:
            if report.get("settlement"):
                fields = {k: int(v) for k, v in report["settlement"].items()}
                if fields.get("refund_cent") == int(entry["amount_cent"]):
                    return DONE, "the report's settlement", fields
        payment = None
        if entry.get("transaction_id"):
            payment_pk = f"{entry['channel']}#{entry['mchid']}#{entry['transaction_id']}"
            booked = self.store.ledger_entry(payment_pk)
            if booked is not None and booked.get("settlement_cent") is None:  # legacy too: settle it first
                result, _, settled = self._payment(booked)  # (written in its own turn; order does not matter)
                booked = {**booked, **settled} if result == DONE and settled else booked
            payment = settlement_of_entry(booked)
        basis = next((r["settlement_basis"] for r in reports if r.get("settlement_basis")), None)
        built = refund_fields(basis, payment, int(entry["amount_cent"]))
        if built["settlement"] is not None and built["settlement"]["refund_cent"] == int(
            entry["amount_cent"]
        ):
            return DONE, "rebuilt with the payment's settlement", built["settlement"]
        if (
            built["settlement"] is None and basis is not None
        ):  # the basis alone failed: the amount may still do
            plain = refund_fields(None, payment, int(entry["amount_cent"]))
            if plain["settlement"] is not None:
                return DONE, "the refund's amount and the payment's settlement", plain["settlement"]
        return LEGACY, str(built["settlement_error"] or "the report states another amount"), None

    @staticmethod
    def _settled(pool: ThreadPoolExecutor, settle: Callable[..., Any], entries: Any) -> Any:
        """`settle` over the entries, CHUNK at a time on the pool, results in the entries' order."""
        chunk: list[dict[str, Any]] = []
        for entry in entries:
            chunk.append(entry)
            if len(chunk) >= CHUNK:
                yield from pool.map(settle, chunk)
                chunk = []
        if chunk:
            yield from pool.map(settle, chunk)

    def _now(self) -> str:
        return iso_now(self.clock())


def _stored(channel: str) -> str:
    found = channel_registry.find(lambda c: channel in (c.route, c.stored, c.name, c.order_word))
    if found is None:
        raise BackfillError(f"unknown channel {channel!r}")
    return found.stored


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _reason_class(reason: str) -> str:
    """Legacy reasons grouped for the summary: the text before the first colon or semicolon."""
    return reason.replace(";", ":").split(":")[0].strip()[:80] or "unknown"
