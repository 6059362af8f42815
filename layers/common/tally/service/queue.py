"""One queue of everything that needs a person (R41), read from the rows that already exist.

Every item has one readable, stable id, a kind, merchant and order, an amount in yuan, an age, the reason
in plain words, a state (OPEN → ACKNOWLEDGED → RESOLVED | IGNORED), an owner and its history (who, when,
what, why). The state is stored on the item's source row and a closed item leaves that row's sparse index,
so `tally manual list`, `tally pending`, the morning number the poller publishes (ManualOver24h) and the
alarm on it are all computed from `WorkQueue.list()` and agree by construction.

The service API (for the CLI and the console):
    list(filter) -> [item dict]      get(id) -> item dict (+ the source row)
    act(id, action, by=, reason=, **fields) -> item dict after the action
    bulk(filter, action, by=, reason=, dry_run=, **fields) -> what would change / what changed
    morning() -> the three numbers
Items are plain dicts: amounts as yuan strings (`amount`) next to integer cents (`amount_cent`), times ISO UTC.

Actions never open a second path for money: `replay` is ManualQueue.replay (the product path again),
`refund-outcome` is the refund state machine (RefundService.record_outcome), a recon diff is resolved by
ReconService.resolve (with its reversing entry), a volume drop is confirmed by ReconService.confirm.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tally import errors
from tally.domain.money import format_cents
from tally.observability import M, count, logger
from tally.store.queue import Expect, QueueStore, StaleItem
from tally.store.tables import iso_now

List = list  # WorkQueue.list shadows the builtin inside the class body

OPEN, ACKNOWLEDGED, RESOLVED, IGNORED = "OPEN", "ACKNOWLEDGED", "RESOLVED", "IGNORED"
LIVE = (OPEN, ACKNOWLEDGED)
DAY_S = 24 * 3600
CERT_WARNING_S = 7 * DAY_S

# notify_event manual kinds listed (the `manual` index is keyed by kind, so each is one Query). Any other
# kind a writer adds is shown generically once it is named here.
KEPT_KINDS = (
    "quarantined",
    "rejected",
    "suspected_forgery",
    "no_transaction_id",
    "certificate",
    "settlement_unknown",  # R43: store/payments.py and store/refunds.py write it in the booking transaction
    "merchant_not_ready",  # R47: the live credential doctor
    "bill_upload",  # an uploaded bill in a folder recon cannot file (service/recon.py, L5)
    "alert_delivery",  # a chat card not delivered after its retries (service/alerts.py)
)
REPLAYABLE = ("quarantined", "rejected")  # kept with the body and headers the ingest path needs again

# kind → (what it is in plain words, how long it may stay open before it counts in the morning number)
KINDS: dict[str, tuple[str, int]] = {
    "unbooked-payment": ("a payment that came in and was not booked", DAY_S),
    "quarantined": ("a signed notification Tally could not read", DAY_S),
    "rejected": ("notifications refused for their signature (kept 7 days)", DAY_S),
    "suspected-forgery": ("a report that claims another merchant's money", DAY_S),
    "no-transaction-id": ("a SUCCESS notification without a transaction id", DAY_S),
    "refund-report": ("a refund report Tally could not apply", DAY_S),
    "refund": ("a refund waiting for a person (abnormal, no outcome, mismatch)", DAY_S),
    "refund-task": ("money that came in and must go back (could not be booked)", DAY_S),
    "recon-diff": ("a difference between the channel's bill and our ledger", DAY_S),
    "recon-blocked": ("a day's bill was refused, so the day is not reconciled", DAY_S),
    "volume-drop": ("a day's bill is much smaller than the day before", DAY_S),
    "order": ("an order the poller could not settle", DAY_S),
    "certificate": ("a channel certificate about to expire with no successor", 0),
    "settlement-unknown": ("a booked payment or refund whose settlement amount is unknown (R43)", DAY_S),
    "merchant-not-ready": ("a merchant whose credentials fail the live check: its orders are refused", 0),
    "bill-upload": ("an uploaded bill under a folder that names no day: not reconciled", DAY_S),
    "alert-delivery": ("a chat card that did not reach its destination: the pager is silent", 0),
}
PREFIXES = ("pay-", "evt-", "rejected-", "report-", "refund-", "task-", "diff-", "recon-", "order-", "cert-")
ACTIONS = ("ack", "resolve", "ignore", "replay", "refund-outcome", "abnormal-refund", "close-task")
# given to an action but never written to an item's history (the user's bank card for abnormal-refund)
SECRET_FIELDS = frozenset({"bank_account", "real_name"})


class QueueError(errors.InvalidRequest, ValueError):
    """The action does not fit the item (unknown id, closed already, not offered for this kind): says why."""


class WorkQueue:
    def __init__(
        self,
        store: QueueStore,
        *,
        manual: Any = None,
        refunds: Any = None,
        recon: Any = None,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.manual = manual
        self.refunds = refunds
        self.recon = recon
        self.clock = clock

    # ================================================================ reading

    def list(
        self,
        filter: str | dict[str, Any] | None = None,
        *,
        over_s: int | None = None,
        counted: bool = True,
    ) -> List[dict[str, Any]]:
        """Every live item (OPEN or ACKNOWLEDGED), oldest first, narrowed by `filter` (see parse_filter).
        `over_s` replaces every kind's threshold (0: anything open counts as overdue). `counted=False` skips
        reading the rejected groups' aggregate counts (the poller's gauge counts items, not refusals)."""
        now = self.clock()
        items = [self._finish(i, now, over_s) for i in self._collect(now, counted)]
        wanted = parse_filter(filter) if isinstance(filter, str) or filter is None else filter
        items = [i for i in items if _matches(i, wanted)]
        return sorted(items, key=lambda i: (str(i["since"] or ""), i["id"]))  # oldest first, stable

    def get(self, item_id: str) -> dict[str, Any]:
        item_id = _legacy(item_id)
        for item in self.list():
            if item["id"] == item_id:
                source = self._source(item)
                rows = source if isinstance(source, list) else [source]
                history = sorted((h for r in rows if r for h in _history(r)), key=lambda h: h.get("at", ""))
                return {**item, "history": history or item["history"], "source": source}
        closed = self._closed(item_id)
        if closed is not None:
            return closed
        raise QueueError(f"no open item {item_id} (`tally manual list` shows the ids)")

    def morning(self, *, over_s: int | None = None, counted: bool = True) -> dict[str, Any]:
        """The numbers the morning starts from: open items, of which past their threshold, by kind."""
        items = self.list(over_s=over_s, counted=counted)
        over = [i for i in items if i["overdue"]]
        return {
            "open": len(items),
            "over_threshold": len(over),
            "oldest_age_s": max((i["age_s"] for i in items), default=0),
            "by_kind": dict(Counter(i["kind"] for i in items)),
            "amount_cent": sum(i["amount_cent"] or 0 for i in items),
            "items": items,
        }

    def publish(self) -> dict[str, Any]:
        """The poller's every-minute gauge (zero included): items past their threshold (R37, R41)."""
        numbers = self.morning(counted=False)
        count(M.MANUAL_AGED, numbers["over_threshold"])
        return numbers

    # ================================================================ acting

    def act(self, item_id: str, action: str, *, by: str, reason: str = "", **fields: Any) -> dict[str, Any]:
        item_id = _legacy(item_id)
        if action not in ACTIONS:
            raise QueueError(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
        by, reason = (by or "").strip(), (reason or "").strip()
        if not by:
            raise QueueError("say who you are (--by): the item keeps it")
        if action != "ack" and not reason:
            raise QueueError("say why (--why): the item keeps it")
        if not item_id.startswith(PREFIXES):
            raise QueueError(
                f"manual item ids look like {', '.join(p + '…' for p in PREFIXES)} "
                f"(as `tally manual list` prints them), not {item_id!r}"
            )
        item = next((i for i in self.list({"id": item_id}) if i["id"] == item_id), None)
        result = self._act(item_id, item, action, by, reason, fields)
        self.count_cleared([result])
        return result

    def _act(
        self,
        item_id: str,
        item: dict[str, Any] | None,
        action: str,
        by: str,
        reason: str,
        fields: dict[str, Any],
    ) -> dict[str, Any]:
        if item is None:
            raise QueueError(f"{item_id} is not open (resolved, replayed or booked already, or no such item)")
        if action not in item["actions"]:
            raise QueueError(
                f"{item_id} is a {item['kind']}: its actions are {', '.join(item['actions'])}, not {action}"
            )
        entry = {"at": iso_now(self.clock()), "by": by, "action": action, "why": reason}
        entry.update(
            {k: str(v) for k, v in fields.items() if v not in (None, "", False) and k not in SECRET_FIELDS}
        )
        try:
            outcome = getattr(self, "_" + item["source_kind"])(item, action, entry, fields)
        except StaleItem:
            raise QueueError(f"{item_id} changed meanwhile (someone else acted on it): list again") from None
        count(M.MANUAL_REPLAYED if action == "replay" else M.MANUAL_RESOLVED)
        logger.info("queue item acted on", extra={"item": item_id, "action": action, "by": by})
        if action == "ack":
            after: dict[str, Any] | None = {
                **item,
                "state": ACKNOWLEDGED,
                "owner": fields.get("owner") or by,
                "history": [*item["history"], entry],
            }
        elif action == "replay" and item["source_kind"] == "day":  # the re-run may block the day again
            after = next((i for i in self.list({"id": item_id}) if i["id"] == item_id), None)
        else:
            after = None  # closed: it left its row's index, so no list shows it any more
        closed = {**item, "state": _closed_state(action), "history": [*item["history"], entry]}
        return {
            "id": item_id,
            "action": action,
            "outcome": outcome,
            "state": after["state"] if after else closed["state"],
            "item": after or closed,
        }

    def bulk(
        self,
        filter: str | dict[str, Any] | None,
        action: str,
        *,
        by: str,
        reason: str = "",
        dry_run: bool = True,
        claim: Callable[[dict[str, Any]], str] | None = None,
        after: Callable[[dict[str, Any], dict[str, Any] | None, str], None] | None = None,
        items: List[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """The same action on every live item the filter selects; `dry_run` says what would change (counts and
        amounts in yuan) and changes nothing. Items whose kind does not offer the action are left alone.

        A bulk replay run (service/replay.py) passes `claim(item)` -> "act" | "skip" (done already, or taken by
        another process) | "stop" (paused: the rest is for the next call), and `after(item, result, error)`.
        `items`: what `list(filter)` answered already (a run's first call acts on the listing its plan counted:
        one listing, not two, and the plan is exactly the set the call walks)."""
        items = self.list(filter) if items is None else items
        fit = [i for i in items if action in i["actions"]]
        total = sum(i["amount_cent"] or 0 for i in fit)
        report: dict[str, Any] = {
            "action": action,
            "dry_run": dry_run,
            "matched": len(items),
            "would_change" if dry_run else "changed": len(fit),
            "skipped": [i["id"] for i in items if action not in i["actions"]],
            "amount_cent": total,
            "amount": format_cents(total),
            "by_kind": dict(Counter(i["kind"] for i in fit)),
            "notifications": sum(int(i.get("kept") or 1) for i in fit),
            "items": [
                {k: i[k] for k in ("id", "kind", "merchant", "order", "amount", "reason")} for i in fit
            ],
            "errors": {},
        }
        if action == "abnormal-refund" and fields.get("to") == "user-bank-card" and len(fit) > 1:
            raise QueueError("one user's bank card is for one refund: name the item, not a --filter")
        if dry_run:
            return report
        if not (by or "").strip() or (action != "ack" and not (reason or "").strip()):
            raise QueueError("say who you are (--by) and why (--why): every item keeps both")
        done, cents, passed = [], 0, 0
        for item in fit:
            verdict = claim(item) if claim is not None else "act"
            if verdict == "stop":
                break
            if verdict != "act":
                passed += 1
                continue
            result, error = None, ""
            try:
                result = self._act(item["id"], item, action, by.strip(), reason.strip(), dict(fields))
                done.append(result)
                cents += int(item["amount_cent"] or 0)
            except (QueueError, LookupError, ValueError) as exc:
                error = str(exc)
                report["errors"][item["id"]] = error
            if after is not None:
                after(item, result, error)
        report["changed"] = len(done)
        report["changed_cent"] = cents
        report["changed_amount"] = format_cents(cents)
        report["passed"] = passed  # claim said skip: done by this run before, or by another process now
        self.count_cleared(done)
        return report

    def count_cleared(self, results: List[dict[str, Any]]) -> None:
        """The 14-day chart's counters (console Morning): each item an action closed counts as cleared today
        and as a closed item opened on its own day; opened(day) = live items since that day + those. One ADD
        per distinct day. Only closes through the queue are counted (docs/console.md)."""
        today = _china_day(iso_now(self.clock()))
        closed = [r for r in results if r["item"] and r["item"].get("state") in (RESOLVED, IGNORED)]
        if not closed:
            return
        born = Counter(_china_day(r["item"].get("since")) for r in closed)
        days = {today: (len(closed), born.pop(today, 0))} | {d: (0, n) for d, n in born.items() if d}
        for day, (cleared, born_closed) in days.items():
            try:
                self.store.count_day(day, cleared=cleared, born_closed=born_closed)
            except Exception as exc:  # noqa: BLE001 - the action is done; a chart counter must not undo it
                logger.warning("queue day counter not written", extra={"day": day, "error": str(exc)[:200]})

    # ---------------------------------------------------------------- per source: the action's one write

    def _payment(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        key = {"pk": item["source_key"]}
        if action == "replay":
            return self._manual().replay("raw:" + item["source_key"], by=entry["by"], why=entry["why"])[
                "outcome"
            ]
        if action == "ack":
            self.store.record(
                self.store.t.notify_raw,
                key,
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.PAYMENT_UNBOOKED,
            )
            return "acknowledged"
        self.store.record(
            self.store.t.notify_raw,
            key,
            entry,
            state=_closed_state(action),
            expect=Expect.PAYMENT_UNBOOKED,
            sets={"resolution": entry},
            remove=("pending_pk", "pending_at"),
        )
        return _closed_state(action).lower()

    def _kept(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        outcomes = []
        for pk in item["source_keys"]:
            if action == "replay":
                outcomes.append(
                    self._manual().replay("event:" + pk, by=entry["by"], why=entry["why"])["outcome"]
                )
                continue
            ack = action == "ack"
            self.store.record(
                self.store.t.notify_event,
                {"pk": pk},
                entry,
                state=ACKNOWLEDGED if ack else _closed_state(action),
                owner=(fields.get("owner") or entry["by"]) if ack else None,
                expect=Expect.KEPT_NOTIFICATION,
                sets=None if ack else {"resolution": entry},
                remove=() if ack else ("manual_kind",),
            )
            outcomes.append("acknowledged" if ack else _closed_state(action).lower())
        return ", ".join(f"{n} {o}" for o, n in Counter(outcomes).items())

    def _report(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        pk, sk = item["source_key"]
        ack = action == "ack"
        self.store.record(
            self.store.t.refund_raw,
            {"pk": pk, "sk": sk},
            entry,
            state=ACKNOWLEDGED if ack else _closed_state(action),
            owner=(fields.get("owner") or entry["by"]) if ack else None,
            expect=Expect.REFUND_REPORT,
            sets=None if ack else {"resolution": entry},
            remove=() if ack else ("manual_pk",),
        )
        return "acknowledged" if ack else _closed_state(action).lower()

    def _refund(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        refund_no = item["source_key"]
        key = {"pk": refund_no}
        if action == "ack":
            self.store.record(
                self.store.t.refunds,
                key,
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.MANUAL_REFUND,
            )
            return "acknowledged"
        if action == "abnormal-refund":
            if self.refunds is None:
                raise QueueError("no refund service wired")
            route = str(fields.get("to") or "")
            card = {k: str(fields[k]) for k in ("bank_type", "bank_account", "real_name") if fields.get(k)}
            try:
                _built(self.refunds).apply_abnormal(
                    refund_no, route, card or None, by=entry["by"], reason=entry["why"]
                )
            except (LookupError, ValueError) as exc:
                raise QueueError(str(exc)) from None
            self.store.append_history(self.store.t.refunds, key, entry, RESOLVED)
            return f"sent to the {route.replace('-', ' ')}: tracked to its outcome like any refund"
        outcome = str(fields.get("outcome") or "").upper()
        if outcome not in ("SUCCESS", "FAIL"):
            raise QueueError(
                "a refund is closed by recording its outcome on the merchant platform: --outcome SUCCESS "
                "(money went back: booked) or --outcome FAIL (it did not: the amount is released)"
            )
        if self.refunds is None:
            raise QueueError("no refund service wired")
        applied, after = _built(self.refunds).record_outcome(
            refund_no, outcome == "SUCCESS", by=entry["by"], reason=entry["why"]
        )
        if after.get("status") != outcome:
            raise QueueError(f"refund {refund_no} is {after.get('status')} ({applied}): nothing recorded")
        self.store.append_history(self.store.t.refunds, key, entry, RESOLVED)
        return f"{outcome} recorded ({'booked' if outcome == 'SUCCESS' else 'released'})"

    def _task(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        ack = action == "ack"
        if action == "close-task":
            code = str(fields.get("code") or "")
            if code not in ("refunded-at-channel", "booked-after-all"):
                raise QueueError("close-task needs --code refunded-at-channel or --code booked-after-all")
        self.store.record(
            self.store.t.refund_tasks,
            {"pk": item["source_key"]},
            entry,
            state=ACKNOWLEDGED if ack else _closed_state(action),
            owner=(fields.get("owner") or entry["by"]) if ack else None,
            expect=Expect.MANUAL_TASK,
            sets=None if ack else {"status": "CLOSED", "resolution": entry, "closed_at": entry["at"]},
        )
        return "acknowledged" if ack else "task closed"

    def _diff(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        pk, sk = item["source_key"]
        if action == "ack":
            self.store.record(
                self.store.t.recon_diff,
                {"pk": pk, "sk": sk},
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.OPEN_DIFF,
            )
            return "acknowledged"
        channel, mchid, bill_date = pk.split("#", 2)
        self._recon().resolve(
            channel,
            mchid,
            bill_date,
            sk,
            by=entry["by"],
            note=entry["why"],
            ignore=action == "ignore",
            reverse=bool(fields.get("reverse")),
        )
        return (
            "diff "
            + _closed_state(action).lower()
            + (" with a reversing entry" if fields.get("reverse") else "")
        )

    def _day(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        pk, sk = item["source_key"]
        if action == "replay":  # a confirmed volume drop: the day is re-run from the bill kept in S3
            channel, mchid, bill_date = pk.split("#", 2)
            run = self._recon().confirm(channel, mchid, bill_date, entry["by"], entry["why"])
            return f"re-run: {run.get('status')}"
        ack = action == "ack"
        self.store.record(
            self.store.t.recon_runs,
            {"pk": pk, "sk": sk},
            entry,
            state=ACKNOWLEDGED if ack else _closed_state(action),
            owner=(fields.get("owner") or entry["by"]) if ack else None,
            expect=Expect.BLOCKED_DAY,
            sets=None if ack else {"resolution": entry},
            remove=() if ack else ("blocked_pk",),
        )
        return "acknowledged" if ack else _closed_state(action).lower()

    def _order(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        pk = item["source_key"]
        if action == "ack":
            self.store.record(
                self.store.t.orders,
                {"pk": pk},
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.MANUAL_ORDER,
            )
            return "acknowledged"
        if action == "replay":  # back into the poll index, due now: the poller asks the channel again
            from tally.store.polling import poll_pk

            self.store.record(
                self.store.t.orders,
                {"pk": pk},
                entry,
                state=RESOLVED,
                sets={"poll_pk": poll_pk(pk), "poll_due": entry["at"], "poll_errors": 0},
                expect=Expect.MANUAL_ORDER,
            )
            return "polled again"
        self.store.record(
            self.store.t.orders,
            {"pk": pk},
            entry,
            state=_closed_state(action),
            sets={"resolution": entry},
            remove=("poll_pk", "poll_due"),
            expect=Expect.MANUAL_ORDER,
        )
        return _closed_state(action).lower()

    # ================================================================ building items

    def _collect(self, now: float, counted: bool = True) -> List[dict[str, Any]]:
        items = [self._payment_item(r) for r in self.store.unbooked_payments()]
        for kind in KEPT_KINDS:
            rows = self.store.kept_notifications(kind)
            items += (
                self._rejected_items(rows, counted)
                if kind == "rejected"
                else [self._kept_item(r) for r in rows]
            )
        items += [self._report_item(r) for r in self.store.refund_reports()]
        items += [self._refund_item(r) for r in self.store.refunds_with_person()]
        items += [self._task_item(r) for r in self.store.refund_tasks("MANUAL")]
        items += [self._diff_item(r) for r in self.store.open_diffs()]
        items += [self._day_item(r) for r in self.store.blocked_days()]
        items += [self._order_item(r) for r in self.store.orders_with_person()]
        return items

    def _payment_item(self, row: dict[str, Any]) -> dict[str, Any]:
        channel, _, txn = str(row["pk"]).partition("#")
        return _item(
            row,
            f"pay-{channel}-{txn}",
            "unbooked-payment",
            "payment",
            row["pk"],
            channel=channel,
            merchant=row.get("mchid"),
            order=row.get("out_trade_no"),
            amount_cent=row.get("paid_cent"),
            since=row.get("pending_at") or row.get("handled_at"),
            reason=plain(row.get("manual_reason") or "not booked"),
            actions=("ack", "resolve", "ignore", "replay"),
        )

    def _kept_item(self, row: dict[str, Any]) -> dict[str, Any]:
        kind = str(row.get("manual_kind") or row.get("kind") or "kept").replace("_", "-")
        return _item(
            row,
            f"evt-{row['pk']}",
            kind,
            "kept",
            row["pk"],
            keys=[row["pk"]],
            channel=row.get("channel"),
            merchant=row.get("mchid"),
            order=row.get("out_trade_no") or row.get("refund_no"),
            amount_cent=row.get("amount_cent"),
            since=row.get("created_at"),
            reason=plain(row.get("reason") or row.get("trade_state") or kind),
            actions=("ack", "resolve", "ignore", "replay")
            if kind in REPLAYABLE
            else ("ack", "resolve", "ignore"),
        )

    def _rejected_items(self, rows: List[dict[str, Any]], counted: bool = True) -> List[dict[str, Any]]:
        """Rejected notifications, one item per (channel, merchant, cause) with a count (R40)."""
        groups: dict[tuple[str, str, str], List[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            cause = str(row.get("cause") or row.get("reason") or "rejected")
            groups[(str(row.get("channel")), str(row.get("mchid")), cause)].append(row)
        # the real count: every kept row names its hour's aggregate row, which counted the rows not kept too
        aggregates = {key: sorted({_aggregate_pk(r) for r in group}) for key, group in groups.items()}
        wanted = [pk for pks in aggregates.values() for pk in pks] if counted else []
        refusals = self.store.rejection_counts(wanted) if wanted else {}
        items = []
        for (channel, mchid, cause), group in groups.items():
            group.sort(key=lambda r: str(r.get("created_at")))
            first = group[0]
            refused = max(len(group), sum(refusals.get(pk, 0) for pk in aggregates[(channel, mchid, cause)]))
            states = {r.get("q_state") or OPEN for r in group}
            owners = {str(r["q_owner"]) for r in group if r.get("q_owner")}
            item = _item(
                first,
                f"rejected-{channel}-{mchid}-{_slug(cause)}",
                "rejected",
                "kept",
                first["pk"],
                keys=[r["pk"] for r in group],
                channel=channel,
                merchant=mchid,
                order=None,
                amount_cent=None,
                since=first.get("created_at"),
                reason=f"{refused} notification(s) refused ({len(group)} kept): {plain(cause)}",
                actions=("ack", "resolve", "ignore", "replay"),
            )
            item["count"] = refused
            item["kept"] = len(group)
            item["state"] = OPEN if OPEN in states else ACKNOWLEDGED
            item["owner"] = ", ".join(sorted(owners)) or None
            item["history"] = sorted((h for r in group for h in _history(r)), key=lambda h: h.get("at", ""))
            items.append(item)
        return items

    def _report_item(self, row: dict[str, Any]) -> dict[str, Any]:
        channel = str(row.get("channel") or str(row["pk"]).partition("#")[0])
        refund_no = str(row.get("refund_no") or str(row["pk"]).rpartition("#")[2])
        return _item(
            row,
            f"report-{str(row['pk']).replace('#', '-')}-{row['sk']}",  # the key names the merchant too (R39)
            "refund-report",
            "report",
            (row["pk"], row["sk"]),
            channel=channel,
            merchant=row.get("mchid"),
            order=row.get("out_trade_no"),
            amount_cent=row.get("refund_cent")
            if row.get("refund_cent") is not None
            else row.get("cumulative_cent"),
            since=row.get("handled_at") or row.get("notified_at"),
            reason=plain(f"the channel says refund {refund_no} is {row['sk']}: {row.get('outcome') or ''}"),
            actions=("ack", "resolve", "ignore"),
        )

    def _refund_item(self, row: dict[str, Any]) -> dict[str, Any]:
        return _item(
            row,
            f"refund-{row['pk']}",
            "refund",
            "refund",
            row["pk"],
            channel=row.get("channel"),
            merchant=row.get("mchid"),
            order=row.get("out_trade_no"),
            amount_cent=row.get("amount_cent"),
            since=row.get("poll_due") or row.get("updated_at"),
            reason=plain(row.get("manual_reason") or "with a person"),
            actions=("ack", "refund-outcome", "abnormal-refund", "resolve")
            if str(row.get("manual_reason") or "").startswith("ABNORMAL")
            else ("ack", "refund-outcome", "resolve"),
        )

    def _task_item(self, row: dict[str, Any]) -> dict[str, Any]:
        return _item(
            row,
            f"task-{row['pk']}",
            "refund-task",
            "task",
            row["pk"],
            channel=row.get("channel"),
            merchant=row.get("mchid"),
            order=row.get("out_trade_no"),
            amount_cent=row.get("amount_cent"),
            since=row.get("ended_at") or row.get("created_at"),
            reason=plain(
                f"{row.get('reason') or 'could not be booked'}; {row.get('manual_reason') or ''}".strip("; ")
            ),
            actions=("ack", "close-task", "resolve", "ignore"),
        )

    def _diff_item(self, row: dict[str, Any]) -> dict[str, Any]:
        amount = row.get("channel_amount_cent")
        amount = row.get("local_amount_cent") if amount is None else amount
        return _item(
            row,
            f"diff-{row['pk']}/{row['sk']}",
            "recon-diff",
            "diff",
            (row["pk"], row["sk"]),
            channel=row.get("channel"),
            merchant=row.get("mchid"),
            order=row.get("out_trade_no") or row.get("refund_no"),
            amount_cent=amount,
            since=row.get("opened_at"),
            reason=plain(
                f"{row.get('cls') or row.get('item')} on {row.get('bill_date')}: {row.get('detail') or ''}"
            ),
            actions=("ack", "resolve", "ignore"),
        )

    def _day_item(self, row: dict[str, Any]) -> dict[str, Any]:
        volume = (row.get("block_code") or row.get("guard")) == "VOLUME_DROP"
        return _item(
            row,
            f"recon-{row['pk']}",
            "volume-drop" if volume else "recon-blocked",
            "day",
            (row["pk"], row["sk"]),
            channel=row.get("channel"),
            merchant=row.get("mchid"),
            order=None,
            amount_cent=None,
            since=row.get("blocked_at"),
            reason=plain(
                f"{row.get('bill_date')} not reconciled: {row.get('reason') or row.get('block_code')}"
            ),
            actions=("ack", "resolve", "ignore", "replay") if volume else ("ack", "resolve", "ignore"),
        )

    def _order_item(self, row: dict[str, Any]) -> dict[str, Any]:
        return _item(
            row,
            f"order-{row['pk']}",
            "order",
            "order",
            row["pk"],
            channel=row.get("channel"),
            merchant=row.get("mchid"),
            order=row.get("out_trade_no"),
            amount_cent=row.get("amount_cent"),
            since=row.get("manual_at") or row.get("poll_due"),
            reason=plain(row.get("manual_reason") or "the poller gave up"),
            actions=("ack", "resolve", "ignore", "replay"),
        )

    # ================================================================ helpers

    def _finish(self, item: dict[str, Any], now: float, over_s: int | None) -> dict[str, Any]:
        age = _age_s(item["since"], now)
        threshold = KINDS.get(item["kind"], ("", DAY_S))[1] if over_s is None else over_s
        amount = item["amount_cent"]
        item.update(
            what=KINDS.get(item["kind"], (item["kind"].replace("-", " "), DAY_S))[0],
            age_s=age,
            age=human_age(age),
            threshold_s=threshold,
            overdue=age >= threshold,
            amount=None if amount is None else format_cents(int(amount)),
        )
        return item

    def _source(self, item: dict[str, Any]) -> Any:
        table = {
            "payment": self.store.t.notify_raw,
            "kept": self.store.t.notify_event,
            "report": self.store.t.refund_raw,
            "refund": self.store.t.refunds,
            "task": self.store.t.refund_tasks,
            "diff": self.store.t.recon_diff,
            "day": self.store.t.recon_runs,
            "order": self.store.t.orders,
        }.get(item["source_kind"])
        if table is None:
            return None
        keys = item.get("source_keys") or [item["source_key"]]
        rows = [self.store.get(table, _key(k)) for k in keys[:20]]
        return rows[0] if len(rows) == 1 else rows

    def _closed(self, item_id: str) -> dict[str, Any] | None:
        """A closed item by id (its row, state and history), for `show` after the work is done."""
        for prefix, table, key in (
            ("pay-", self.store.t.notify_raw, lambda rest: {"pk": rest.replace("-", "#", 1)}),
            ("evt-", self.store.t.notify_event, lambda rest: {"pk": rest}),
            ("refund-", self.store.t.refunds, lambda rest: {"pk": rest}),
            ("task-", self.store.t.refund_tasks, lambda rest: {"pk": rest}),
            ("order-", self.store.t.orders, lambda rest: {"pk": rest}),
        ):
            if item_id.startswith(prefix):
                row = self.store.get(table, key(item_id[len(prefix) :]))
                if row is None:
                    return None
                return {
                    "id": item_id,
                    "state": row.get("q_state") or ("RESOLVED" if row.get("resolution") else "CLOSED"),
                    "owner": row.get("q_owner"),
                    "history": _history(row),
                    "source": row,
                }
        return None

    def _manual(self) -> Any:
        if self.manual is None:
            raise QueueError("no manual queue wired for replay")
        return _built(self.manual)

    def _recon(self) -> Any:
        if self.recon is None:
            raise QueueError("no reconciliation service wired")
        return _built(self.recon)


# ==================================================================== pure helpers


def _item(
    row: dict[str, Any],
    item_id: str,
    kind: str,
    source_kind: str,
    source_key: Any,
    *,
    actions: tuple[str, ...],
    keys: list[str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    state = row.get("q_state") if row.get("q_state") in LIVE else OPEN
    return {
        "id": item_id,
        "kind": kind,
        "state": state,
        "owner": row.get("q_owner"),
        **fields,
        "count": 1,
        "actions": list(actions),
        "history": _history(row),
        "source_kind": source_kind,
        "source_key": source_key,
        **({"source_keys": keys} if keys else {}),
    }


def _aggregate_pk(row: dict[str, Any]) -> str:
    """The hour's aggregate row a kept rejected row was counted on (service/ingest.py `aggregate`): its own
    `aggregate_pk` when the index projects it, else rebuilt from the projected channel, merchant, cause, hour."""
    if row.get("aggregate_pk"):
        return str(row["aggregate_pk"])
    hour = str(row.get("created_at") or "")[:13]
    return f"rejected-count#{row.get('channel')}#{row.get('mchid')}#{row.get('cause')}#{hour}"


def _china_day(iso: Any) -> str:
    """The Asia/Shanghai date of an ISO UTC time ('' when there is none)."""
    from tally.domain.clock import CHINA

    if not isinstance(iso, str) or not iso:
        return ""
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(CHINA).date().isoformat()
    except ValueError:
        return ""


def _built(dependency: Any) -> Any:
    """A service, or the zero-argument function that builds it (bootstrap's cached builders)."""
    return dependency() if callable(dependency) else dependency


def _history(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Every audit entry the row holds, in one shape: at, by, action, why (recon's `note` included)."""
    out = []
    for h in row.get("history") or []:
        if isinstance(h, dict):
            out.append({**h, "why": h.get("why") or h.get("note") or ""})
    return out


def _key(k: Any) -> dict[str, Any]:
    return {"pk": k[0], "sk": k[1]} if isinstance(k, tuple) else {"pk": k}


def _closed_state(action: str) -> str:
    return IGNORED if action == "ignore" else RESOLVED


def _legacy(item_id: str) -> str:
    """The ids the old `tally manual` printed (raw:<channel#id>, event:<pk>) still work."""
    if item_id.startswith("raw:"):
        return "pay-" + item_id[4:].replace("#", "-", 1)
    if item_id.startswith("event:"):
        return "evt-" + item_id[6:]
    return item_id


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "-", text).strip("-").lower()[:40] or "unknown"


def _age_s(iso: Any, now: float) -> int:
    if not isinstance(iso, str) or not iso:
        return 0
    try:
        return max(0, int(now - datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()))
    except ValueError:
        return 0


def human_age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"


_CENTS_CLAUSE = re.compile(r"([^;]*?)\s*\(cents\)")
_NUMBER = re.compile(r"(?<![\w#:\-])-?\d+(?![\w#:\-])")  # not the parts of a date, a time or an id


def plain(text: str) -> str:
    """Internal vocabulary in plain words: amounts given in cents become yuan, `!=` reads as "expected",
    handled=2 is "with a person". E.g. "amount 5 != order's 506 (cents)" → "amount ¥0.05, expected order's ¥5.06"."""

    def yuan(clause: re.Match[str]) -> str:
        return _NUMBER.sub(lambda n: "¥" + format_cents(int(n.group(0))), clause.group(1))

    text = _CENTS_CLAUSE.sub(yuan, str(text))
    text = text.replace(" != ", ", expected ").replace("handled=2", "with a person")
    return re.sub(r"\s+", " ", text).strip()


_AGE = re.compile(r"^age\s*([<>])\s*(\d+)\s*([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_filter(text: str | None) -> dict[str, Any]:
    """`kind=refund,merchant=1900000109,age>2h,state=open,owner=alice,channel=alipay` → a filter dict.
    `kind` matches the kind or its prefix (kind=recon matches recon-diff and recon-blocked)."""
    wanted: dict[str, Any] = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        age = _AGE.match(part.replace(" ", ""))
        if age:
            op, n, unit = age.groups()
            wanted["age_gt" if op == ">" else "age_lt"] = int(n) * _UNITS[unit]
            continue
        name, eq, value = part.partition("=")
        names = ("kind", "merchant", "channel", "state", "owner", "id", "order", "since", "until")
        if not eq or name.strip() not in names:
            raise QueueError(
                f"filter {part!r}: use kind=…, merchant=…, channel=…, state=…, owner=…, order=…, id=…, "
                "since=…, until=…, age>…, age<…"
            )
        if name.strip() in ("since", "until"):
            wanted[name.strip()] = parse_bound(value.strip(), end=name.strip() == "until")
            continue
        wanted[name.strip()] = value.strip()
    return wanted


def parse_bound(text: str, *, end: bool = False) -> datetime:
    """`since=`/`until=` of a filter: a date (Asia/Shanghai, like every date the CLI takes: `until` a date
    means through its end), or an ISO time (UTC unless it says otherwise). Items are kept when
    since <= item.since < until."""
    from datetime import UTC, timedelta

    from tally.domain.clock import CHINA

    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = datetime.fromisoformat(text).replace(tzinfo=CHINA)
            return (day + timedelta(days=1) if end else day).astimezone(UTC)
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise QueueError(
            f"{text!r}: since/until take a date (2026-12-01) or a time (2026-12-01T08:00:00Z)"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)


def _parse_utc(iso: Any) -> datetime | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    from datetime import UTC

    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _matches(item: dict[str, Any], wanted: dict[str, Any]) -> bool:
    for name, value in wanted.items():
        if name == "age_gt" and not item["age_s"] > value:
            return False
        if name == "age_lt" and not item["age_s"] < value:
            return False
        if name == "kind" and not (item["kind"] == value or item["kind"].startswith(value)):
            return False
        if name == "state" and item["state"] != str(value).upper():
            return False
        if name == "id" and item["id"] != _legacy(str(value)):
            return False
        if name in ("since", "until"):
            when = _parse_utc(item.get("since"))
            if when is None or (when < value if name == "since" else when >= value):
                return False
        if name in ("merchant", "channel", "owner", "order") and str(item.get(name)) != value:
            return False
    return True
