"""Reading the work queue: the live items (`list`), one item by id with its rows and history (`get`), the
morning numbers and the poller's gauge; the items about one merchant's order are grouped into one case (R48)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tally.domain.money import format_cents
from tally.observability import M, count
from tally.service.queue_filter import _matches, parse_filter
from tally.service.queue_items import ItemsFromRows, _history
from tally.service.queue_terms import (
    ACKNOWLEDGED,
    ACTIONS,
    CASE_KINDS,
    DAY_S,
    KINDS,
    OPEN,
    RESOLVE_CODES,
    TASK_CODES,
    QueueError,
    _legacy,
    _part_ids,
)
from tally.store.queue import QueueStore

List = list  # QueueReading.list shadows the builtin inside the class body


class QueueReading:
    """What the CLI, the console and the poller read: every answer is computed from the same `list()`."""

    def __init__(self, store: QueueStore, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock
        self.from_rows = ItemsFromRows(store)

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
        items = self._cases([self._finish(i, now, over_s) for i in self.from_rows.collect(now, counted)])
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


def _key(k: Any) -> dict[str, Any]:
    return {"pk": k[0], "sk": k[1]} if isinstance(k, tuple) else {"pk": k}


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
