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
from tally.domain.journal import Ref
from tally.domain.money import format_cents
from tally.observability import M, count, logger
from tally.service.journal import SYSTEM_CHAIN, DecisionJournal, JournalBusy
from tally.store.journal import ref_key
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
    "webhook_failing",  # an endpoint that failed a delivery's whole retry window (service/webhooks.py)
    "event_generation_failed",  # a committed change whose event could not be built (service/outbox.py)
    "alert_delivery",  # a chat card not delivered after its retries (service/alerts.py)
    "audit_mismatch",  # a day whose books do not verify against its seal (service/audit.py, docs/audit.md)
    "heartbeat_echo",  # the channel's security echo did not come back (service/heartbeat.py)
)
FORGERY_KIND = "suspected-forgery"
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
    "bill-layout": ("a day's bill has a layout no parser knows: quarantined until it is mapped", DAY_S),
    "order": ("an order the poller could not settle", DAY_S),
    "certificate": ("a channel certificate about to expire with no successor", 0),
    "settlement-unknown": ("a booked payment or refund whose settlement amount is unknown (R43)", DAY_S),
    "merchant-not-ready": ("a merchant whose credentials fail the live check: its orders are refused", 0),
    "bill-upload": ("an uploaded bill under a folder that names no day: not reconciled", DAY_S),
    "webhook-failing": ("a merchant's webhook endpoint that kept failing: paused, its events held", 0),
    "event-generation-failed": ("a committed change whose event could not be built", 0),
    "alert-delivery": ("a chat card that did not reach its destination: the pager is silent", 0),
    "audit-mismatch": ("a day whose books no longer match what was sealed: someone changed a record", 0),
    "heartbeat-echo": (
        "the channel's echo did not reach Tally's notify route: its callbacks may not either",
        0,
    ),
}
PREFIXES = (
    "pay-",
    "evt-",
    "rejected-",
    "forgery-",
    "report-",
    "refund-",
    "task-",
    "diff-",
    "recon-",
    "order-",
    "cert-",
)
ACTIONS = (
    "ack",
    "resolve",
    "ignore",
    "replay",
    "refund-outcome",
    "abnormal-refund",
    "close-task",
    "refund-now",  # R48: the payment back through the one refund path (its refund task's refund)
    "accept-amount",  # R48: book what the channel says was paid on an amount mismatch
)
CLOSING = ("resolve", "ignore", "close-task", "refund-now", "accept-amount")  # one decision for a whole case
# R48: the kinds that concern one order's money: every live item of these kinds naming the same merchant and
# order is one case (the oldest part leads; the others attach to it and close with it)
CASE_KINDS = frozenset(
    {
        "unbooked-payment",
        "order",
        "refund-task",
        "recon-diff",
        "refund",
        "refund-report",
        "settlement-unknown",
        "no-transaction-id",
    }
)
# What each closing action accepts as --code, per kind (the console offers exactly these; anything else is
# refused with this list). `resolve` without a code stays allowed: the reason says what was done.
TASK_CODES = ("refunded-at-channel", "booked-after-all")
RESOLVE_CODES: dict[str, tuple[str, ...]] = {
    "unbooked-payment": ("refunded-by-hand", "settled-outside-tally", "confirmed-junk", "other"),
    "order": ("closed-by-hand", "settled-outside-tally", "confirmed-junk", "other"),
    "refund-task": ("refunded-by-hand", "settled-outside-tally", "other"),
    "recon-diff": ("explained", "corrected", "channel-fixed", "other"),
    "refund": ("settled-outside-tally", "other"),
    "refund-report": ("refunded-by-hand", "confirmed-junk", "other"),
    "settlement-unknown": ("queried", "other"),
    "no-transaction-id": ("booked-by-query", "confirmed-junk", "other"),
    "quarantined": ("key-fixed", "confirmed-junk", "other"),
    "rejected": ("key-fixed", "confirmed-junk", "other"),
    "suspected-forgery": ("reported", "confirmed-junk", "other"),
    "certificate": ("added", "other"),
    "merchant-not-ready": ("key-fixed", "other"),
    "recon-blocked": ("bill-fixed", "other"),
    "volume-drop": ("confirmed", "other"),
    "bill-upload": ("filed", "other"),
    "bill-layout": ("mapped", "other"),
    "webhook-failing": ("receiver-fixed", "endpoint-removed", "other"),
    "event-generation-failed": ("republished", "other"),
    "alert-delivery": ("robot-fixed", "other"),
    "heartbeat-echo": ("key-fixed", "other"),
}
# given to an action but never written to an item's history (the user's bank card for abnormal-refund)
SECRET_FIELDS = frozenset({"bank_account", "real_name"})


class QueueError(errors.InvalidRequest, ValueError):
    """The action does not fit the item (unknown id, closed already, not offered for this kind): says why."""


class SetChanged(QueueError):
    """R52: the items a bulk confirm would act on are not the ones its preview showed; `preview` is the new one."""

    def __init__(self, preview: dict[str, Any]):
        self.preview = preview
        super().__init__(
            f"the selection changed since the preview: now {preview.get('would_change', preview.get('changed'))} "
            f"item(s), {preview['amount']} yuan; nothing was done: look at the new preview and confirm again"
        )


def same_set(report: dict[str, Any], expect: dict[str, Any]) -> bool:
    """R52: is this the set a preview showed? Its ids when the preview carried them, and its count and amount."""
    if expect.get("ids") is not None and sorted(expect["ids"]) != sorted(report["ids"]):
        return False
    count_now = report.get("would_change", report.get("changed"))
    if expect.get("count") is not None and int(expect["count"]) != count_now:
        return False
    return expect.get("amount_cent") is None or int(expect["amount_cent"]) == report["amount_cent"]


class WorkQueue:
    def __init__(
        self,
        store: QueueStore,
        *,
        manual: Any = None,
        refunds: Any = None,
        recon: Any = None,
        republish: Any = None,
        clock: Callable[[], float] = time.time,
        journal: DecisionJournal | None = None,
    ):
        self.store = store
        self.manual = manual
        self.refunds = refunds
        self.recon = recon
        self.republish = republish  # an event-generation-failed case's replay (service/outbox.py)
        self.clock = clock
        self.journal = journal  # issue #36: every person's action is journaled in its own write

    # ================================================================ the journal (docs/audit.md)

    def _record(
        self, item: dict[str, Any], table: str, key: dict[str, Any], entry: dict[str, Any], **how: Any
    ) -> Any:
        return self._journaled(
            item,
            table,
            key,
            entry,
            lambda append: self.store.record(table, key, entry, journal=append, **how),
        )

    def _append_history(
        self, item: dict[str, Any], table: str, key: dict[str, Any], entry: dict[str, Any], state: str
    ) -> None:
        self._journaled(
            item,
            table,
            key,
            entry,
            lambda append: self.store.append_history(table, key, entry, state, journal=append),
        )

    def _journaled(
        self,
        item: dict[str, Any],
        table: str,
        key: dict[str, Any],
        entry: dict[str, Any],
        write: Callable[[Any], Any],
    ) -> Any:
        """The action's write with its journal record (who, why, what, on which row), chained on the head read
        just before; a head that moved meanwhile is read again. The record pins the history line it appends."""
        if self.journal is None:
            return write(None)
        merchant = str(item.get("merchant") or SYSTEM_CHAIN)
        subject = str(item.get("id") or ref_key(key))
        ref = Ref(self.journal.logical.get(table, table), ref_key(key), {"history[]": entry})
        facts = {**entry, "item_kind": str(item.get("kind") or ""), "merchant": merchant}
        try:
            return self.journal.retrying(
                merchant,
                subject,
                kind=f"queue.{entry.get('action')}",
                at=str(entry["at"]),
                facts=facts,
                refs=[ref],
                write=write,
            )
        except JournalBusy:
            raise QueueError("the journal is busy: try again") from None

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
        items = self._cases([self._finish(i, now, over_s) for i in self._collect(now, counted)])
        wanted = parse_filter(filter) if isinstance(filter, str) or filter is None else filter
        items = [i for i in items if _matches(i, wanted)]
        return sorted(items, key=lambda i: (str(i["since"] or ""), i["id"]))  # oldest first, stable

    def get(self, item_id: str) -> dict[str, Any]:
        item_id = _legacy(item_id)
        for item in self.list():
            if item["id"] == item_id or item_id in _part_ids(item):
                source = self._source(item)
                rows = source if isinstance(source, list) else [source]
                for part in item.get("parts") or []:  # a case's history is every part's (R48)
                    if part["id"] != item["id"] and part.get("source_kind"):
                        more = self._source(part)
                        rows += more if isinstance(more, list) else [more]
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
        item = next(iter(self.list({"id": item_id})), None)  # the case, also when a part's id is named
        result = self._act(item_id, item, action, by, reason, fields)
        self.count_cleared([result])
        return result

    def resolve_diff(
        self, pk: str, sk: str, *, by: str, reason: str, ignore: bool = False, reverse: bool = False
    ) -> dict[str, Any]:
        """`tally recon resolve`'s door (R48): a recon difference is closed as its queue item, so when it is a
        part of a case (the payment, the poller's order, the refund task of the same order) the whole case
        closes with it, the difference itself first (with its reversing entry when `reverse`)."""
        return self.act(
            f"diff-{pk}/{sk}", "ignore" if ignore else "resolve", by=by, reason=reason, reverse=reverse
        )

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
        _check_code(item, action, fields)
        entry = {"at": iso_now(self.clock()), "by": by, "action": action, "why": reason}
        entry.update(
            {k: str(v) for k, v in fields.items() if v not in (None, "", False) and k not in SECRET_FIELDS}
        )
        try:
            if len(item.get("parts") or []) > 1:
                outcome = self._case(item, action, entry, fields, named=item_id)
            else:
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
        elif (action == "replay" and item["source_kind"] == "day") or (
            len(item.get("parts") or []) > 1 and action not in CLOSING
        ):  # the re-run may block the day again; a case keeps its other parts open
            after = next(iter(self.list({"id": item_id})), None)
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
        expect: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """The same action on every live item the filter selects; `dry_run` says what would change (counts and
        amounts in yuan) and changes nothing. Items whose kind does not offer the action are left alone.

        A bulk replay run (service/replay.py) passes `claim(item)` -> "act" | "skip" (done already, or taken by
        another process) | "stop" (paused: the rest is for the next call), and `after(item, result, error)`.
        `items`: what `list(filter)` answered already (a run's first call acts on the listing its plan counted:
        one listing, not two, and the plan is exactly the set the call walks).

        `expect` (R52): what the preview showed, `{"ids": [...]}` and/or `{"count": n, "amount_cent": c}`;
        when the set the filter selects now differs, nothing is done and SetChanged carries the new preview."""
        items = self.list(filter) if items is None else items
        refused: dict[str, str] = {}
        for i in items:
            if action in i["actions"]:
                try:
                    _check_code(i, action, fields)
                except QueueError as exc:
                    refused[i["id"]] = str(exc)
        fit = [i for i in items if action in i["actions"] and i["id"] not in refused]
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
            "ids": [i["id"] for i in fit],
            "errors": dict(refused),  # each item not done, with why
        }
        if expect is not None and not same_set(report, expect):
            raise SetChanged(report)
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

    # ---------------------------------------------------------------- a case: one decision for its parts

    def _case(
        self,
        case: dict[str, Any],
        action: str,
        entry: dict[str, Any],
        fields: dict[str, Any],
        named: str | None = None,
    ) -> str:
        """R48: one action on a case of several parts (items about the same merchant and order).

        The part the person named (`named`: a recon difference resolved with `--reverse` through `tally recon
        resolve`) takes the action with all its fields when it offers it; otherwise the first part that does.

        ack owns every part; replay, refund-outcome and abnormal-refund go to the parts that offer them; a
        closing action (resolve, ignore, close-task) is one decision: the part it fits is closed first (a
        close-task on the refund task), then every other part is settled with the same entry, so nothing of
        the case stays open for a second person to pay out again. A refund still waiting for its outcome is
        a part with its own decision: the case is not closed over it."""
        live = [p for p in case["parts"] if not p.get("linked")]
        if action not in CLOSING:
            targets = [p for p in live if action in p["actions"]]
            return "; ".join(
                f"{p['id']}: {getattr(self, '_' + p['source_kind'])(p, action, entry, fields)}"
                for p in targets
            )
        waiting = [p for p in live if p["kind"] == "refund"]
        if waiting:
            raise QueueError(
                f"{waiting[0]['id']} is a refund waiting for its outcome: record it first (refund-outcome), "
                "then close the case"
            )
        first = next(
            (p for p in live if p["id"] == named and action in p["actions"]),
            next(p for p in live if action in p["actions"]),
        )
        outcomes = [
            f"{first['id']}: {getattr(self, '_' + first['source_kind'])(first, action, entry, fields)}"
        ]
        settle = {**entry, "why": f"{entry['why']} (one case with {first['id']}, R48)"}
        for part in live:
            if part is first or (action == "refund-now" and part["kind"] == "refund-task"):
                continue  # a refund task's refund has its own outcome: shown on the case, not closed here
            verb = "ignore" if action == "ignore" else "resolve"
            try:
                done = getattr(self, "_" + part["source_kind"])(
                    part, verb, settle, {"code": fields.get("code")}
                )
            except (StaleItem, QueueError, LookupError, ValueError) as exc:
                done = f"left as it was ({exc})"  # closed meanwhile through another door
            outcomes.append(f"{part['id']}: {done}")
        return "; ".join(outcomes)

    # ---------------------------------------------------------------- per source: the action's one write

    def _payment(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        key, outcome = {"pk": item["source_key"]}, ""
        if action == "replay":
            return self._manual().replay("raw:" + item["source_key"], by=entry["by"], why=entry["why"])[
                "outcome"
            ]
        if action == "accept-amount":
            return self._accept_amount(item, entry)
        if action == "refund-now":
            outcome = self._refund_now(self._payment_task(item))
            action = "resolve"  # the payment's item closes: its money goes back through the refund
        if action == "ack":
            self._record(
                item,
                self.store.t.notify_raw,
                key,
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.PAYMENT_UNBOOKED,
            )
            return "acknowledged"
        self._record(
            item,
            self.store.t.notify_raw,
            key,
            entry,
            state=_closed_state(action),
            expect=Expect.PAYMENT_UNBOOKED,
            sets={"resolution": entry},
            remove=("pending_pk", "pending_at"),
        )
        return outcome or _closed_state(action).lower()

    def _kept(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        outcomes = []
        for pk in item["source_keys"]:
            if action == "replay" and item["kind"] == "event-generation-failed":
                outcomes.append(self._republish(pk, entry))
                continue
            if action == "replay":
                outcomes.append(
                    self._manual().replay("event:" + pk, by=entry["by"], why=entry["why"])["outcome"]
                )
                continue
            ack = action == "ack"
            self._record(
                item,
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

    def _republish(self, pk: str, entry: dict[str, Any]) -> str:
        """R20: the case's closing action: its row's events rebuilt and published again by the outbox's own
        function (a request on the OutboxDLQ); the item closes, and a republish that fails opens a new one."""
        if self.republish is None:
            raise QueueError("no outbox wired for republish")
        row = self.store.get(self.store.t.notify_event, {"pk": pk}) or {}
        try:
            outcome = str(self.republish().ask(f"evt-{pk}", row, entry["by"]))
        except LookupError as exc:
            raise QueueError(str(exc)) from None
        self.store.record(
            self.store.t.notify_event,
            {"pk": pk},
            entry,
            state=RESOLVED,
            owner=None,
            expect=Expect.KEPT_NOTIFICATION,
            sets={"resolution": entry},
            remove=("manual_kind",),
        )
        return outcome

    def _report(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        pk, sk = item["source_key"]
        ack = action == "ack"
        self._record(
            item,
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
            self._record(
                item,
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
                _applied, after = _built(self.refunds).apply_abnormal(
                    refund_no, route, card or None, by=entry["by"], reason=entry["why"]
                )
            except (LookupError, ValueError) as exc:
                raise QueueError(str(exc)) from None
            self._append_history(item, self.store.t.refunds, key, entry, RESOLVED)
            if after.get("abnormal_answer") == "unknown":
                return (
                    f"sent to the {route.replace('-', ' ')}, the channel's answer unknown (no answer in time): "
                    "tracked, the amount stays reserved; the refund query tells whether it took"
                )
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
        self._append_history(item, self.store.t.refunds, key, entry, RESOLVED)
        return f"{outcome} recorded ({'booked' if outcome == 'SUCCESS' else 'released'})"

    def _refund_now(self, task_pk: str) -> str:
        if self.refunds is None:
            raise QueueError("no refund service wired")
        try:
            _, refund_no = _built(self.refunds).refund_task_now(task_pk)
        except (LookupError, ValueError) as exc:
            raise QueueError(str(exc)) from None
        return f"refund {refund_no} sent to the channel: tracked to its outcome like any refund"

    def _payment_task(self, item: dict[str, Any]) -> str:
        """The refund task of an unbooked payment: the one it has (R17), or one opened now (same key rule)."""
        row = self.store.get(self.store.t.notify_raw, {"pk": item["source_key"]}) or {}
        if row.get("refund_task"):
            return str(row["refund_task"])
        if not row.get("out_trade_no") or not row.get("transaction_id"):
            raise QueueError(f"{item['id']}: no order or transaction id to refund against")
        order = self.store.get(self.store.t.orders, {"pk": f"{row['mchid']}#{row['out_trade_no']}"})
        if order is None:
            raise QueueError(
                f"{item['id']}: order {row['out_trade_no']} does not exist here: refund it by hand"
            )
        tenant = order.get("tenant") or row["mchid"]
        task = {
            "pk": f"{tenant}#{order['pk']}#{row['transaction_id']}",
            "tenant": tenant,
            "order_pk": order["pk"],
            "channel": row.get("channel"),
            "transaction_id": row["transaction_id"],
            "mchid": row["mchid"],
            "out_trade_no": row["out_trade_no"],
            "amount_cent": int(row["paid_cent"]),
            "total_cent": int(
                row.get("order_total_cent") or row["paid_cent"]
            ),  # what the channel's refund names
            "reason": f"refund-now by a person: {row.get('manual_reason') or 'not booked'}"[:200],
            "status": "OPEN",
            "created_at": iso_now(self.clock()),
        }
        self.store.open_task(item["source_key"], task)  # False: it exists already, and is the one refunded
        return str(task["pk"])

    def _accept_amount(self, item: dict[str, Any], entry: dict[str, Any]) -> str:
        """Book what the channel says was paid (an amount mismatch, R12): the order takes the channel's order
        amount (audited, the old one kept), then the payment goes through the product path again."""
        row = self.store.get(self.store.t.notify_raw, {"pk": item["source_key"]}) or {}
        order = self.store.get(self.store.t.orders, {"pk": f"{row.get('mchid')}#{row.get('out_trade_no')}"})
        if order is None or row.get("order_total_cent") is None:
            raise QueueError(f"{item['id']}: no order amount to accept (only an amount mismatch has one)")
        old, new = int(order["amount_cent"]), int(row["order_total_cent"])
        if old == new:
            raise QueueError(f"{item['id']}: the amounts agree ({format_cents(old)}): replay it instead")
        audit = {**entry, "from_cent": old, "to_cent": new}
        accepted = self._journaled(  # the order's history line pinned: `queue.accept-amount` on the order
            item,
            self.store.t.orders,
            {"pk": order["pk"]},
            audit,
            lambda append: self.store.accept_amount(order["pk"], old, new, audit, journal=append),
        )
        if not accepted:
            raise QueueError(
                f"order {order.get('out_trade_no')} is {order.get('status')} or changed meanwhile: "
                "its amount is not changed"
            )
        self._manual().replay("raw:" + item["source_key"], by=entry["by"], why=entry["why"])
        return (
            f"order amount {format_cents(old)} → {format_cents(new)} yuan (difference {format_cents(new - old)}); "
            f"the payment of {format_cents(int(row.get('paid_cent') or 0))} yuan is booked through the product path"
        )

    def _task(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        if action == "refund-now":
            outcome = self._refund_now(item["source_key"])
            self._append_history(item, self.store.t.refund_tasks, {"pk": item["source_key"]}, entry, RESOLVED)
            return outcome
        ack = action == "ack"
        if action == "close-task":
            code = str(fields.get("code") or "")
            if code not in ("refunded-at-channel", "booked-after-all"):
                raise QueueError("close-task needs --code refunded-at-channel or --code booked-after-all")
        self._record(
            item,
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
            self._record(
                item,
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
        self._record(
            item,
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
            self._record(
                item,
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

            self._record(
                item,
                self.store.t.orders,
                {"pk": pk},
                entry,
                state=RESOLVED,
                sets={"poll_pk": poll_pk(pk), "poll_due": entry["at"], "poll_errors": 0},
                expect=Expect.MANUAL_ORDER,
            )
            return "polled again"
        self._record(
            item,
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

    def _cases(self, items: List[dict[str, Any]]) -> List[dict[str, Any]]:
        """R48: the live items about one merchant's order become one case (see CASE_KINDS); every item gets the
        codes its closing actions accept."""
        groups: dict[tuple[str, str], List[dict[str, Any]]] = defaultdict(list)
        out = []
        for item in items:
            if item["kind"] in CASE_KINDS and item.get("order") and item.get("merchant"):
                groups[(str(item["merchant"]), str(item["order"]))].append(item)
            elif _day_money(item):  # a merchant-day's settlement legs: one gap in where its money landed
                groups[(str(item["merchant"]), f"day {item['bill_date']}")].append(item)
            else:
                out.append(_with_codes(item, [item]))
        for parts in groups.values():
            parts.sort(key=_lead_first)
            parts += self._linked_tasks(parts)
            out.append(_as_case(parts))
        return out

    def _linked_tasks(self, parts: List[dict[str, Any]]) -> List[dict[str, Any]]:
        """A refund task behind an unbooked payment that is not with a person (the product refunds it, or did):
        shown on the case with its state, and it takes `refunded-by-hand` off the case (R48: one payout)."""
        listed = {p["id"] for p in parts}
        linked: List[dict[str, Any]] = []
        for part in parts:
            task_pk = (part.get("row_refs") or {}).get("refund_task")
            if not task_pk or f"task-{task_pk}" in listed:
                continue
            row = self.store.get(self.store.t.refund_tasks, {"pk": task_pk}) or {}
            linked.append(
                {
                    "id": f"task-{task_pk}",
                    "kind": "refund-task",
                    "state": str(row.get("status") or "unknown"),
                    "linked": True,
                    "amount_cent": row.get("amount_cent"),
                    "amount": None
                    if row.get("amount_cent") is None
                    else format_cents(int(row["amount_cent"])),
                    "reason": "the product refunds this payment itself (refund task "
                    f"{row.get('status') or '?'}{', refund ' + str(row['refund_no']) if row.get('refund_no') else ''})",
                    "actions": [],
                    "since": row.get("created_at"),
                }
            )
        return linked

    def _collect(self, now: float, counted: bool = True) -> List[dict[str, Any]]:
        items = [self._payment_item(r) for r in self.store.unbooked_payments()]
        for kind in KEPT_KINDS:
            rows = self.store.kept_notifications(kind)
            if kind == "rejected":
                items += self._rejected_items(rows, counted)
            elif kind == "suspected_forgery":
                items += self._forgery_items(rows, counted)
            else:
                items += [self._kept_item(r) for r in rows]
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
            actions=("ack", "resolve", "ignore", "replay", "refund-now")
            + (("accept-amount",) if _amount_mismatch(row) else ()),
            row_refs={"refund_task": row["refund_task"]} if row.get("refund_task") else {},
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
            if kind in REPLAYABLE or kind == "event-generation-failed"  # its replay republishes (R20)
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
            refused = max(len(group), sum(refusals.get(pk, 0) for pk in aggregates[(channel, mchid, cause)]))
            item = _group_item(
                group,
                f"rejected-{channel}-{mchid}-{_slug(cause)}",
                "rejected",
                channel=channel,
                merchant=mchid,
                order=None,
                amount_cent=None,
                reason=f"{refused} notification(s) refused ({len(group)} kept): {plain(cause)}",
                actions=("ack", "resolve", "ignore", "replay"),
            )
            items.append(_grouped(item, group, refused))
        return items

    def _forgery_items(self, rows: List[dict[str, Any]], counted: bool = True) -> List[dict[str, Any]]:
        """Suspected forgeries (R39), one item per (channel, reporting merchant, cause) with the count and the
        merchant ids the reports claimed, both from the group's one counter row (service/refund_inbox.py
        park_forgery): a listing reads at most FORGERIES_KEPT rows and one counter per group (R40)."""
        groups: dict[tuple[str, str, str], List[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            groups[(str(row.get("channel")), str(row.get("mchid")), str(row.get("cause") or ""))].append(row)
        items = []
        for (channel, mchid, cause), group in groups.items():
            group.sort(key=lambda r: str(r.get("created_at")))
            first = group[0]
            counter_pk = f"forgery-count#{channel}#{mchid}#{cause}"
            counter = (
                self.store.get(self.store.t.notify_event, {"pk": counter_pk}) if cause and counted else None
            ) or {}
            reports = max(len(group), int(counter.get("rejections") or 0))
            ids = [str(i) for i in counter.get("claimed_ids") or []]
            one = len(group) == 1 and reports == 1
            item = _group_item(
                group,
                f"forgery-{channel}-{mchid}-{_slug(cause or FORGERY_KIND)}",
                FORGERY_KIND,
                channel=channel,
                merchant=mchid,
                order=(first.get("out_trade_no") or first.get("refund_no")) if one else None,
                amount_cent=first.get("amount_cent") if one else None,
                reason=f"{reports} report(s) signed by merchant {mchid} for money it does not own ({len(group)} "
                f"kept): {plain(cause or first.get('reason') or FORGERY_KIND)}"
                + (f"; claimed merchant ids: {', '.join(ids)}" if ids else ""),
                actions=("ack", "resolve", "ignore"),
            )
            items.append(_grouped(item, group, reports, ids))
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
            actions=("ack", "close-task", "refund-now", "resolve", "ignore"),
        )

    def _diff_item(self, row: dict[str, Any]) -> dict[str, Any]:
        amount = row.get("channel_amount_cent")
        amount = row.get("local_amount_cent") if amount is None else amount
        amount = row.get("gap_cent", amount)  # a settlement difference: the gap, not the channel's figure
        theirs, mine = row.get("channel_amount_cent"), row.get("local_amount_cent")
        if "gap_cent" not in row and row.get("cls") == "SETTLEMENT_DIFFERS" and None not in (theirs, mine):
            amount = abs(
                int(theirs or 0) - int(mine or 0)
            )  # a trade-bill leg: how far bill and ledger are apart
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
            cls=row.get("cls") or row.get("item"),
            bill_date=row.get("bill_date"),
            actions=("ack", "resolve", "ignore"),
            resolve_codes=row.get("codes"),  # a settlement gap names its own (domain/merchant_day.py)
        )

    def _day_item(self, row: dict[str, Any]) -> dict[str, Any]:
        volume = (row.get("block_code") or row.get("guard")) == "VOLUME_DROP"
        layout = row.get("block_code") == "LAYOUT_QUARANTINED"  # service/recon_layout.py: mapped, then re-run
        return _item(
            row,
            f"recon-{row['pk']}",
            "volume-drop" if volume else "bill-layout" if layout else "recon-blocked",
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


def _group_item(group: List[dict[str, Any]], item_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    """The item of a group of kept rows, oldest first: it stands on the oldest row and acts on every row."""
    first = group[0]
    keys = [r["pk"] for r in group]
    return _item(
        first, item_id, kind, "kept", first["pk"], keys=keys, since=first.get("created_at"), **fields
    )


def _grouped(
    item: dict[str, Any], group: List[dict[str, Any]], seen: int, ids: List[str] | None = None
) -> dict[str, Any]:
    """An item that stands for a group of kept rows (rejected, suspected forgeries): the count of what arrived,
    the rows kept, the group's state, owners and history."""
    owners = {str(r["q_owner"]) for r in group if r.get("q_owner")}
    item["count"] = seen
    item["kept"] = len(group)
    item["state"] = OPEN if OPEN in {r.get("q_state") or OPEN for r in group} else ACKNOWLEDGED
    item["owner"] = ", ".join(sorted(owners)) or None
    item["history"] = sorted((h for r in group for h in _history(r)), key=lambda h: h.get("at", ""))
    if ids is not None:
        item["ids"] = ids
    return item


def _amount_mismatch(row: dict[str, Any]) -> bool:
    """An unbooked payment whose only problem is the amount (R12): the channel's order amount differs from ours."""
    reason = str(row.get("manual_reason") or "")
    return reason.startswith("amount ") and ";" not in reason and row.get("order_total_cent") is not None


def _part_ids(item: dict[str, Any]) -> set[str]:
    return {p["id"] for p in item.get("parts") or []}


def _with_codes(item: dict[str, Any], parts: List[dict[str, Any]]) -> dict[str, Any]:
    """The codes each closing action of the item accepts (the console offers exactly these)."""
    codes: dict[str, List[str]] = {}
    if "resolve" in item["actions"]:
        resolve = [
            c
            for p in parts
            if not p.get("linked")
            for c in p.get("resolve_codes") or RESOLVE_CODES.get(p["kind"], ("other",))
        ]
        if any(p.get("linked") and p["state"] != "CLOSED" for p in parts):
            resolve = [c for c in resolve if c != "refunded-by-hand"]  # the product refunds it (R48)
        codes["resolve"] = list(dict.fromkeys(resolve))
    if "close-task" in item["actions"]:
        codes["close-task"] = list(TASK_CODES)
    item["codes"] = codes
    return item


def _lead_first(item: dict[str, Any]) -> tuple[str, bool, str]:
    """A case's parts, its lead first: the oldest; of a merchant-day's legs opened together, the settlement (the
    money that did not land) before its fee or refund legs."""
    leg = str(item["id"]).rsplit("/", 1)[-1]
    return (str(item["since"] or ""), not leg.startswith("SETTLEMENT#"), str(item["id"]))


def _day_money(item: dict[str, Any]) -> bool:
    """A settlement difference of a merchant-day (R45: trade bill or fund flow against the ledger, no order of its
    own): the legs of one day (settlement, fee, refund) are one case, as one missing credit moves more than one."""
    return (
        item["kind"] == "recon-diff"
        and item.get("cls") == "SETTLEMENT_DIFFERS"
        and not item.get("order")
        and bool(item.get("merchant"))
        and bool(item.get("bill_date"))
    )


def _as_case(parts: List[dict[str, Any]]) -> dict[str, Any]:
    """One case from its parts (oldest first): the oldest leads (its id is the case's), the actions are every
    live part's, the amount is the lead's (the same money, counted once)."""
    lead, live = parts[0], [p for p in parts if not p.get("linked")]
    if len(parts) == 1:
        return _with_codes(lead, parts)
    case = dict(lead)
    case["parts"] = parts
    case["kinds"] = sorted({p["kind"] for p in parts})
    case["actions"] = [a for a in ACTIONS if any(a in p["actions"] for p in live)]
    case["state"] = OPEN if any(p["state"] == OPEN for p in live) else ACKNOWLEDGED
    case["owner"] = ", ".join(sorted({str(p["owner"]) for p in live if p.get("owner")})) or None
    case["overdue"] = any(p.get("overdue") for p in live)
    case["history"] = sorted((h for p in live for h in p["history"]), key=lambda h: h.get("at", ""))
    others = "; ".join(f"{p['kind'].replace('-', ' ')}: {p['reason']}" for p in parts[1:])
    case["reason"] = f"{lead['reason']} (also {others})"
    for name in ("cls", "bill_date"):  # a case with a recon difference is found by its class and bill date
        case[name] = next((p[name] for p in parts if p.get(name)), None)
    return _with_codes(case, parts)


def _check_code(item: dict[str, Any], action: str, fields: dict[str, Any]) -> None:
    """A code the item's action does not accept is refused with the ones it does (the console's choices)."""
    code = str(fields.get("code") or "")
    accepted = (item.get("codes") or {}).get(action)
    if action == "close-task" and code not in TASK_CODES:
        raise QueueError(f"close-task needs --code {' or --code '.join(TASK_CODES)}")
    if code and accepted is not None and code not in accepted:
        raise QueueError(f"{item['id']}: {action} takes --code {', '.join(accepted)}; not {code!r}")
    if code and accepted is None and action not in ("resolve", "close-task"):
        raise QueueError(f"{action} takes no --code")


def _aggregate_pk(row: dict[str, Any]) -> str:
    """The aggregate row a kept rejected row was counted on (service/ingest.py `aggregate`): its own
    `aggregate_pk` when the index projects it, else rebuilt from the projected channel, merchant, cause (and
    the hour, for a row kept when every hour had its own counter: such a row has a lifetime)."""
    if row.get("aggregate_pk"):
        return str(row["aggregate_pk"])
    group = f"rejected-count#{row.get('channel')}#{row.get('mchid')}#{row.get('cause')}"
    if "expires_at" not in row:  # kept since groups are counted whole (no lifetime while open, R51)
        return group
    return f"{group}#{str(row.get('created_at') or '')[:13]}"  # kept when each hour had its own counter


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
    for part in (p.strip() for p in _filter_parts(text or "") if p.strip()):
        age = _AGE.match(part.replace(" ", ""))
        if age:
            op, n, unit = age.groups()
            wanted["age_gt" if op == ">" else "age_lt"] = int(n) * _UNITS[unit]
            continue
        name, eq, value = part.partition("=")
        names = (
            "kind",
            "merchant",
            "channel",
            "state",
            "owner",
            "id",
            "order",
            "since",
            "until",
            "cls",
            "bill_date",
        )
        if not eq or name.strip() not in names:
            raise QueueError(
                f"filter {part!r}: use kind=…, merchant=…, channel=…, state=…, owner=…, order=…, id=…, "
                "cls=…, bill_date=…, since=…, until=…, age>…, age<…"
            )
        if name.strip() in wanted:  # a value that smuggled a second "merchant=…" in must not win silently
            raise QueueError(f"filter names {name.strip()} twice: say it once")
        if name.strip() in ("since", "until"):
            wanted[name.strip()] = parse_bound(value.strip(), end=name.strip() == "until")
            continue
        wanted[name.strip()] = value.strip()
    return wanted


def filter_value(value: str) -> str:
    """`value` as filter text: "\\" and "," escaped, so a value holding "," or "=" stays one value."""
    return value.replace("\\", "\\\\").replace(",", "\\,")


def _filter_parts(text: str) -> list[str]:
    """The filter's comma-separated parts; "\\," is a comma inside a value, "\\\\" a backslash."""
    parts, current, chars = [], [], iter(text)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, "\\"))
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


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
        if name == "kind" and not any(
            k == value or k.startswith(value) for k in item.get("kinds") or [item["kind"]]
        ):
            return False
        if name == "state" and item["state"] != str(value).upper():
            return False
        if name == "id" and _legacy(str(value)) not in {item["id"], *_part_ids(item)}:
            return False
        if name in ("since", "until"):
            when = _parse_utc(item.get("since"))
            if when is None or (when < value if name == "since" else when >= value):
                return False
        if (
            name in ("merchant", "channel", "owner", "order", "cls", "bill_date")
            and str(item.get(name)) != value
        ):
            return False
        if name == "ids" and not ({item["id"], *_part_ids(item)} & set(value)):  # rows a person ticked
            return False
    return True
