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

`WorkQueue` (here) reads through QueueReading and acts; each other use of the queue has its module:
    queue_terms.py    states, kinds, ids, actions and their codes, QueueError
    queue_filter.py   the filter a person types, parsed and matched
    queue_items.py    building items from the rows behind them (one builder per source)
    queue_reading.py  list, get, morning, publish; an order's items grouped into one case (QueueReading)
    queue_writes.py   an action's one write on an item's source row (SourceWrites)
    queue_journal.py  each such write journaled with who and why (ItemJournal)
    queue.py          act on one item or one case, bulk on a selection, the day counters (WorkQueue)
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tally.domain.money import format_cents
from tally.observability import M, count, logger
from tally.service.queue_filter import filter_value, parse_bound, parse_filter
from tally.service.queue_items import _slug, plain
from tally.service.queue_reading import QueueReading
from tally.service.queue_terms import (
    ACKNOWLEDGED,
    ACTIONS,
    CLOSING,
    IGNORED,
    KINDS,
    PREFIXES,
    RESOLVED,
    SECRET_FIELDS,
    QueueError,
    _check_code,
    _closed_state,
    _legacy,
)
from tally.service.queue_writes import SourceWrites
from tally.store.queue import QueueStore, StaleItem
from tally.store.tables import iso_now

__all__ = [  # what callers import from here (the CLI, the console, replay, incidents, tests)
    "KINDS",
    "QueueError",
    "SetChanged",
    "WorkQueue",
    "_slug",
    "filter_value",
    "parse_bound",
    "parse_filter",
    "plain",
    "same_set",
]


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


class WorkQueue(QueueReading):
    """The work queue (R41): reading it (QueueReading) and acting on it, one item, one case or a selection."""

    def __init__(self, store: QueueStore, *, clock: Callable[[], float] = time.time, **wiring: Any):
        """`wiring`: what an action goes through (manual, refunds, recon, republish, journal: SourceWrites)."""
        super().__init__(store, clock)
        self.writes = SourceWrites(store, clock=clock, **wiring)

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
                outcome = self.writes.write(item, action, entry, fields)
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
        items: list[dict[str, Any]] | None = None,
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

    def count_cleared(self, results: list[dict[str, Any]]) -> None:
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
            return "; ".join(f"{p['id']}: {self.writes.write(p, action, entry, fields)}" for p in targets)
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
        outcomes = [f"{first['id']}: {self.writes.write(first, action, entry, fields)}"]
        settle = {**entry, "why": f"{entry['why']} (one case with {first['id']}, R48)"}
        for part in live:
            if part is first or (action == "refund-now" and part["kind"] == "refund-task"):
                continue  # a refund task's refund has its own outcome: shown on the case, not closed here
            verb = "ignore" if action == "ignore" else "resolve"
            try:
                done = self.writes.write(part, verb, settle, {"code": fields.get("code")})
            except (StaleItem, QueueError, LookupError, ValueError) as exc:
                done = f"left as it was ({exc})"  # closed meanwhile through another door
            outcomes.append(f"{part['id']}: {done}")
        return "; ".join(outcomes)


def _china_day(iso: Any) -> str:
    """The Asia/Shanghai date of an ISO UTC time ('' when there is none)."""
    from tally.domain.clock import CHINA

    if not isinstance(iso, str) or not iso:
        return ""
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(CHINA).date().isoformat()
    except ValueError:
        return ""
