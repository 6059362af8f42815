"""The finance view of one day (issue #14): payments, refunds, fees and net per merchant and channel for one
bill_date (the channel's day, Asia/Shanghai), next to that day's reconciliation verdict. Read-only (R42).

Every figure is the one merchant-day arithmetic (domain/merchant_day, R49): the statement, the CSVs, the
console and the order story read the same `MerchantDay`, so their booked, fees and net agree to the cent. The
ledger is read through its `by_bill_date` index (one paged Query for the day, never a scan); fees are the day's
FEE entries (booked by recon from the bill's rows once its guards passed, docs/settlement.md §6.5); a day
reconciled before FEE entries existed falls back to its latest finished run's `totals.fee_e5` (rounded half up
to the fen); before a run has read the bill they are not known (`fee_cent` None, `fees_status` "not booked
yet") and the net leaves them out, saying so.

    LedgerDayService(ledger, recon, merchants, lag_config, clock).day("2024-05-01", merchant=None) -> {
        "bill_date", "merchant",
        "rows": [{MerchantDay.as_dict() (payments, payment_cent/_yuan, refunds, refund_*, reversals, reversal_*,
                  fee_* (None / "": not booked), fees_status, fee_returned_*, net_*, net_includes_fee,
                  expected_*, landed_*, short_*, due, landing, landing_words),
                  "recon": {"status", "state", "words", "reason", "run", "open_diffs", "worked_diffs",
                            "finished_at"} or None,
                  "verdict": {"code" AGREES|DIFFERS|DONE|PENDING|NOT_CHECKED, "reason", "differs",
                              "fund_net_cent"}}, ...],
        "totals": {the money fields summed},
    }
`csv_text(view)` renders it for a spreadsheet (UTF-8 with BOM, yuan with two decimals, numbers stay numbers).

The daily statement (docs/settlement.md §5, §6.7) is the same merchant-day rendered by `domain/statement`:
`LedgerDayService.statement(day)` for `tally ledger day --statement`, `statement_text` for the recon run that
writes `reports/{channel}/{mchid}/{day}/statement.csv`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from tally.channels import registry as channel_registry
from tally.domain.fundflow import ConfigError, SettlementLag, lag_of
from tally.domain.merchant_day import MerchantDay, count_diffs, day_state, merchant_day
from tally.domain.money import format_cents
from tally.domain.recon import round_units
from tally.domain.statement import (
    NOT_CHECKED,
    StatementVerdict,
    day_verdict,
    statement_csv,
    statement_row,
)
from tally.store.recon import recon_pk

# a merchant-day as read: the figures, the latest trade run, the verdict, the day's differences
DayRead = tuple[MerchantDay, dict[str, Any] | None, StatementVerdict, list[dict[str, Any]]]
UNREAD = StatementVerdict(NOT_CHECKED, "not read for this view")
RECONCILED_CHANNELS = (
    channel_registry.reconciled()
)  # the stored channels whose bills the recon function reads
FINISHED = ("MATCHED", "DIFFS", "QUIET", "BLOCKED")


def merchant_lag(channel: str, config: dict[str, Any] | None) -> SettlementLag | None:
    """The merchant's settlement lag (its record's `settlement_lag` over the channel's default); a record that
    cannot be used reads as the channel's default here (the fund-flow run blocks on it, loudly)."""
    terms = channel_registry.fund_flow_terms(channel)
    if terms is None:
        return None
    try:
        return lag_of(terms.lag, (config or {}).get("settlement_lag"))
    except ConfigError:
        return terms.lag


def statement_text(
    channel: str,
    mchid: str,
    bill_date: str,
    entries: Any,
    runs: list[dict[str, Any]] | None = None,
    *,
    lag: SettlementLag | None = None,
    today: str | None = None,
) -> str:
    """The statement CSV of one merchant's day, with its three-way verdict from the day's recon runs (R45):
    the same merchant-day `LedgerDayService.statement` builds (R49)."""
    verdict = day_verdict(runs) if runs is not None else None
    day = merchant_day(
        channel,
        mchid,
        bill_date,
        entries,
        landed_cent=verdict.fund_net_cent if verdict else None,
        fee_fallback_cent=_run_fee(_latest(runs or [])),
        due=lag.due(bill_date) if lag else None,
        today=today,
        fund_flow_read=channel in RECONCILED_CHANNELS and lag is not None,
    )
    return statement_csv([statement_row(mchid, channel, bill_date, day, verdict)])


class LedgerDayService:
    def __init__(
        self,
        ledger: Any,
        recon: Any,
        merchants: Callable[[], list[tuple[str, str]]] | None = None,
        lag_config: Callable[[str, str], dict[str, Any]] | None = None,
        today: Callable[[], str] | None = None,
        hidden: tuple[str, ...] = (),
    ):
        self.ledger = ledger  # store.recon.LedgerView
        self.recon = recon  # store.recon.ReconStore
        self.merchants = merchants  # store.tables.MerchantStore.configured: (channel, merchant id)
        self.lag_config = lag_config  # (stored channel, merchant) -> {"settlement_lag": …} (R45)
        self.today = today  # Asia/Shanghai date, ISO: decides "in transit" or "missing"
        self.hidden = hidden  # synthetic merchants (the heartbeat's): never in finance totals (R54)

    def merchant_days(
        self, bill_date: str, merchant: str | None = None, *, recon: bool = True
    ) -> list[DayRead]:
        """Every merchant-day of `bill_date` (R49): (the figures, the latest run, the verdict as the day's
        differences stand now, those differences). A merchant with nothing booked and no run is left out; the
        synthetic merchants are left out (R54). `recon` False: the booked figures only (no run, difference or
        settlement-lag read: the Morning page's 14-day chart)."""
        cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for entry in self.ledger.all_of_day(bill_date, mchid=merchant):
            cells.setdefault((str(entry.get("channel")), str(entry.get("mchid"))), []).append(entry)
        for channel, mchid in self.merchants() if self.merchants else []:
            if channel in RECONCILED_CHANNELS and (merchant is None or mchid == merchant):
                cells.setdefault((channel, mchid), [])
        out: list[DayRead] = []
        today = self.today() if self.today else None
        for (channel, mchid), entries in sorted(cells.items()):
            if mchid in self.hidden and merchant != mchid:
                continue
            reconciled = channel in RECONCILED_CHANNELS
            if not recon:
                if entries:
                    out.append((merchant_day(channel, mchid, bill_date, entries), None, UNREAD, []))
                continue
            runs = self.recon.run_rows(recon_pk(channel, mchid, bill_date)) if reconciled else []
            run = _latest(runs)
            if run is None and not entries:
                continue  # a configured merchant with nothing booked and no run: nothing to show
            diffs = self.recon.diffs_of(recon_pk(channel, mchid, bill_date)) if runs else []
            verdict = (
                day_verdict(runs, diffs=diffs)
                if reconciled
                else StatementVerdict(NOT_CHECKED, f"channel {channel} is not reconciled")
            )
            lag = self._lag(channel, mchid)
            day = merchant_day(
                channel,
                mchid,
                bill_date,
                entries,
                fee_fallback_cent=_run_fee(run),
                due=lag.due(bill_date) if lag else None,
                landed_cent=verdict.fund_net_cent,
                today=today,
                fund_flow_read=reconciled and lag is not None,
            )
            out.append((day, run, verdict, diffs))
        return out

    def day(self, bill_date: str, merchant: str | None = None, *, recon: bool = True) -> dict[str, Any]:
        rows = []
        for figures, run, verdict, diffs in self.merchant_days(bill_date, merchant, recon=recon):
            row = figures.as_dict()
            row["recon"] = _recon(run, diffs)
            row["verdict"] = verdict.as_dict()
            rows.append(row)
        return {"bill_date": bill_date, "merchant": merchant, "rows": rows, "totals": _totals(rows)}

    def statement(self, bill_date: str, merchant: str | None = None) -> list[dict[str, str]]:
        """The statement rows of the day, one per merchant and channel (the same merchant-day as `day`)."""
        return [
            statement_row(d.mchid, d.channel, bill_date, d, verdict)
            for d, _, verdict, _ in self.merchant_days(bill_date, merchant)
            if d.payments or d.refunds or d.reversals or d.fees_known
        ]

    def _lag(self, channel: str, mchid: str) -> SettlementLag | None:
        return merchant_lag(channel, self.lag_config(channel, mchid) if self.lag_config else None)


def _latest(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest finished trade-bill run (newest first), else the latest trade run at all."""
    trade = [r for r in runs if r.get("leg") != "fundflow"]
    finished = [r for r in trade if r.get("status") in FINISHED]
    chosen = finished or trade
    return chosen[0] if chosen else None


def _run_fee(run: dict[str, Any] | None) -> int | None:
    """A day reconciled before FEE entries were booked: the run's own fee total, to the fen."""
    totals = (run or {}).get("totals") or {}
    return round_units(int(totals["fee_e5"]), 5, 2) if isinstance(totals.get("fee_e5"), int) else None


def _recon(run: dict[str, Any] | None, diffs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The day's run as it reads now: its differences counted open and worked apart (R49)."""
    if run is None:
        return None
    counted = count_diffs(diffs)
    state, words = day_state(run.get("status"), counted)
    return {
        "status": run.get("status"),
        "state": state,
        "words": words,
        "reason": run.get("reason", ""),
        "run": run.get("sk"),
        "open_diffs": counted.open,
        "worked_diffs": counted.worked,
        "expected_diffs": counted.expected,
        "finished_at": run.get("finished_at"),
    }


SUMMED = (
    "payments",
    "payment_cent",
    "refunds",
    "refund_cent",
    "reversals",
    "reversal_cent",
    "fee_returned_cent",
    "net_cent",
    "expected_cent",
)


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {k: sum(int(r[k]) for r in rows) for k in SUMMED}
    fees = [r["fee_cent"] for r in rows if r["fee_cent"] is not None]
    total["fee_cent"] = sum(fees) if fees else None
    total["fees_missing_for"] = sum(1 for r in rows if r["fee_cent"] is None)
    total["fees_status"] = "booked" if not total["fees_missing_for"] else "not booked yet"
    landed = [r["landed_cent"] for r in rows]
    total["landed_cent"] = sum(landed) if landed and None not in landed else None
    total["short_cent"] = (
        None if total["landed_cent"] is None else total["expected_cent"] - total["landed_cent"]
    )
    for name in (
        "payment",
        "refund",
        "reversal",
        "fee",
        "fee_returned",
        "net",
        "expected",
        "landed",
        "short",
    ):
        cents = total.get(f"{name}_cent")
        total[f"{name}_yuan"] = "" if cents is None else format_cents(int(cents))
    return total


CSV_COLUMNS = [
    ("bill_date", "bill_date"),
    ("channel", "channel"),
    ("merchant", "mchid"),
    ("payments", "payments"),
    ("payments_yuan", "payment_yuan"),
    ("refunds", "refunds"),
    ("refunds_yuan", "refund_yuan"),
    ("reversals_yuan", "reversal_yuan"),
    ("fees_yuan", "fee_yuan"),  # charged, positive; empty while not booked (fees_status says so)
    ("fees_returned_yuan", "fee_returned_yuan"),
    ("fees_status", "fees_status"),
    ("net_yuan", "net_yuan"),
    ("expected_yuan", "expected_yuan"),
    ("due", "due"),
    ("landed_yuan", "landed_yuan"),  # empty until the fund flow is read (landing says why)
    ("short_by_yuan", "short_yuan"),
    ("landing", "landing"),
    ("recon", "recon_status"),
    ("open_diffs", "open_diffs"),
    ("worked_diffs", "worked_diffs"),
    ("recon_reason", "recon_reason"),
    (
        "verdict",
        "verdict_code",
    ),  # ledger = trade bill = fund flow (R45), DONE once every difference is worked
    ("differs", "verdict_differs"),
    ("verdict_reason", "verdict_reason"),
]


def csv_text(view: dict[str, Any]) -> str:
    """The day for a spreadsheet: one line per merchant and channel, then the total (UTF-8 with BOM). Numeric
    columns hold numbers or nothing; what is not known yet says so in its status column."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow([title for title, _ in CSV_COLUMNS])
    for row in [*view["rows"], {**view["totals"], "channel": "TOTAL", "mchid": ""}]:
        recon = row.get("recon") or {}
        total = row.get("channel") == "TOTAL"
        flat = {
            **row,
            "bill_date": view["bill_date"],
            "recon_status": recon.get("state") or ("" if total else "not reconciled"),
            "open_diffs": recon.get("open_diffs", ""),
            "worked_diffs": recon.get("worked_diffs", ""),
            "recon_reason": recon.get("words") or recon.get("reason", ""),
            "verdict_code": (row.get("verdict") or {}).get("code", ""),
            "verdict_differs": ", ".join((row.get("verdict") or {}).get("differs", [])),
            "verdict_reason": (row.get("verdict") or {}).get("reason", ""),
        }
        w.writerow(["" if flat.get(key) is None else flat.get(key, "") for _, key in CSV_COLUMNS])
    return "\ufeff" + out.getvalue()
