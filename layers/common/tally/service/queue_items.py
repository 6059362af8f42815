"""Building work-queue items from the rows that need a person: one builder per source table's sparse index
(unbooked payments, kept notifications, refund reports, refunds, refund tasks, recon differences, days, orders)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from tally.domain.money import format_cents
from tally.service.queue_terms import ACKNOWLEDGED, FORGERY_KIND, KEPT_KINDS, LIVE, OPEN, REPLAYABLE
from tally.store.queue import QueueStore


class ItemsFromRows:
    """Every live item, read from its source rows (`collect`), in the one item shape `WorkQueue.list` shows."""

    def __init__(self, store: QueueStore):
        self.store = store

    def collect(self, now: float, counted: bool = True) -> list[dict[str, Any]]:
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

    def _rejected_items(self, rows: list[dict[str, Any]], counted: bool = True) -> list[dict[str, Any]]:
        """Rejected notifications, one item per (channel, merchant, cause) with a count (R40)."""
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
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

    def _forgery_items(self, rows: list[dict[str, Any]], counted: bool = True) -> list[dict[str, Any]]:
        """Suspected forgeries (R39), one item per (channel, reporting merchant, cause) with the count and the
        merchant ids the reports claimed, both from the group's one counter row (service/refund_inbox.py
        park_forgery): a listing reads at most FORGERIES_KEPT rows and one counter per group (R40)."""
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
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


def _group_item(group: list[dict[str, Any]], item_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    """The item of a group of kept rows, oldest first: it stands on the oldest row and acts on every row."""
    first = group[0]
    keys = [r["pk"] for r in group]
    return _item(
        first, item_id, kind, "kept", first["pk"], keys=keys, since=first.get("created_at"), **fields
    )


def _grouped(
    item: dict[str, Any], group: list[dict[str, Any]], seen: int, ids: list[str] | None = None
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


def _history(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Every audit entry the row holds, in one shape: at, by, action, why (recon's `note` included)."""
    out = []
    for h in row.get("history") or []:
        if isinstance(h, dict):
            out.append({**h, "why": h.get("why") or h.get("note") or ""})
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "-", text).strip("-").lower()[:40] or "unknown"


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
