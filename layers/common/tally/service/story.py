"""The order story (issue #14): one timeline, in time order, of everything Tally knows about one order.

Read-only (R42): Query and GetItem only, never the channel. Plain dicts, so the CLI prints them and the
console renders the same data as HTML: every time is ISO 8601 in Asia/Shanghai (`at`, plus `at_utc` as
stored, for sorting and machines); every amount is integer cents (`amount_cent`) with the yuan string
next to it (`amount_yuan`). docs/story.md has the sources, the indexes they are read through, and what is
not stored (repeated deliveries of a stored row, every poll answer but the last).

    StoryService(...).story(mchid, out_trade_no, raw=False) -> {
        "order": {... the order's fields, amounts also in yuan ...},
        "summary": {"status", "amount_cent", "amount_yuan", "paid_*", "refunded_*", "refundable_*",
                    "open_items": int, "deliveries": int, "ledger_net_cent", "ledger_net_yuan",
                    "ledger_net_basis"},
        "entries": [{"at", "at_utc", "kind", "title", "ref", "amount_cent", "amount_yuan", "state",
                     "needs_person": bool, "detail": {...}}, ...],   # oldest first
        "not_stored": [str, ...],                                     # what the story cannot show, and why
    }

`kind` is one of KINDS. With raw=True a delivery's detail carries its raw body and verify headers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tally import errors
from tally.domain.clock import CHINA
from tally.domain.events import events_for_change
from tally.domain.merchant_day import count_diffs, day_state, merchant_day
from tally.domain.money import format_cents
from tally.domain.refunds import refund_raw_key
from tally.store.refunds import open_holds
from tally.store.tables import order_key

KINDS = (
    "order",  # created, prepay, expiry
    "delivery",  # a callback or poll answer stored as a raw row; in-between events; refund reports are below
    "poll",  # the poller's last word on the order (poll_count, poll_last)
    "transition",  # the order's state machine edges (transitions table)
    "ledger",  # PAYMENT / REFUND / REVERSAL entries
    "refund",  # refund rows and refund holds
    "refund_report",  # the channel's refund notifications / query answers (refund_raw)
    "outbox",  # downstream events the outbox publishes for this order (derived: stable ids, R20)
    "recon",  # reconciliation: the day's verdict and this order's differences
    "queue",  # a person's queue: items opened, actions and resolutions (history / resolution attributes)
    "webhook",  # each attempt to deliver the order's events to a merchant endpoint (docs/webhooks.md)
)

HANDLED = {0: "waiting to be applied", 1: "applied", 2: "with a person"}
NOT_STORED = [
    "Repeated deliveries of a callback already stored are not kept per order: a duplicate costs one "
    "conditional put (R9, the notify budget of 1 AWS call); they are counted by the metric NotifyDuplicate "
    "per channel and merchant.",
    "Only the poller's last answer is kept on the order (poll_last, poll_count, last_query_at); a paid "
    "answer is stored as a delivery with source=query.",
    "Callbacks rejected for their signature or quarantined before their order could be read name no "
    "verified order: see `tally manual list` (kinds rejected / quarantined).",
    "Outbox events are derived from the rows' states with the outbox's own function (stable ids); the bus "
    "keeps no per-order record to read back.",
]


class NotFound(errors.NotFound, LookupError):
    pass


def china_time(value: Any) -> str | None:
    """A stored time (ISO UTC `...Z`, or a channel's `+08:00` time) → ISO in Asia/Shanghai, milliseconds."""
    moment = _instant(value)
    return None if moment is None else moment.astimezone(CHINA).isoformat(timespec="milliseconds")


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def money(cents: Any) -> dict[str, Any]:
    if cents is None:
        return {"amount_cent": None, "amount_yuan": None}
    return {"amount_cent": int(cents), "amount_yuan": format_cents(int(cents))}


def with_yuan(row: dict[str, Any]) -> dict[str, Any]:
    """Every `*_cent` integer field also as `*_yuan` (two decimals), cents kept for machines."""
    out = dict(row)
    for k, v in row.items():
        if k.endswith("_cent") and isinstance(v, int) and not isinstance(v, bool):
            out[k[: -len("_cent")] + "_yuan"] = format_cents(v)
    return out


class StoryService:
    webhooks: Any = None  # service.webhooks.DeliveryLog, set by bootstrap: the order's webhook deliveries

    def __init__(
        self, orders: Any, raw: Any, events: Any, refunds: Any, refund_raw: Any, ledger: Any, recon: Any
    ):
        self.orders = orders  # store.tables.OrderStore
        self.raw = raw  # store.tables.RawStore
        self.events = events  # store.tables.EventStore
        self.refunds = refunds  # store.refunds.RefundStore
        self.refund_raw = refund_raw  # store.refunds.RefundRawStore
        self.ledger = ledger  # store.recon.LedgerView
        self.recon = recon  # store.recon.ReconStore

    def find(self, text: str, merchants: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """The orders a number names, across `merchants` (the (channel, mchid) pairs the person may see): a
        channel transaction id, a refund number, the channel's refund id or an out_trade_no. GetItem and
        Query only (R21, R42): per merchant its order and its raw payment row, then the refunds' two indexes.
        Each match: {found_as, channel, mchid, out_trade_no, refund_no?}, one per order."""
        text = text.strip()
        if not text or len(text) > 64 or any(c in text for c in "#/ "):
            return []
        visible = {m for _, m in merchants}
        found: dict[tuple[str, str], dict[str, Any]] = {}

        def add(found_as: str, channel: Any, mchid: Any, out_trade_no: Any, **more: Any) -> None:
            if mchid in visible and out_trade_no:
                key = (str(mchid), str(out_trade_no))
                found.setdefault(
                    key,
                    {
                        "found_as": found_as,
                        "channel": channel,
                        "mchid": key[0],
                        "out_trade_no": key[1],
                        **more,
                    },
                )

        for channel, mchid in merchants:
            order = self.orders.get(mchid, text)
            if order is not None:
                add("out_trade_no", order.get("channel") or channel, mchid, text)
            for name in dict.fromkeys((channel, channel.split("_")[0])):  # wechatpay_v2 payments: wechatpay#…
                row = self.raw.get(f"{name}#{mchid}#{text}")
                if row is not None:
                    add("transaction id", name, row.get("mchid"), row.get("out_trade_no"))
        for row in self.refunds.by_number(text):
            add(
                "refund number", row.get("channel"), row.get("mchid"), row.get("out_trade_no"), refund_no=text
            )
        for row in self.refunds.by_channel_id(text):
            add(
                "refund id",
                row.get("channel"),
                row.get("mchid"),
                row.get("out_trade_no"),
                refund_no=row.get("refund_no"),
            )
        return list(found.values())

    def story(self, mchid: str, out_trade_no: str, *, raw: bool = False) -> dict[str, Any]:
        order = self.orders.get(mchid, out_trade_no)
        if order is None:
            raise NotFound(f"no order {mchid}/{out_trade_no}")
        pk = order.get("pk") or order_key(mchid, out_trade_no)
        entries: list[dict[str, Any]] = []
        entries += self._order_entries(order)
        raw_rows = self.raw.for_order_full(pk)
        entries += self._deliveries(raw_rows, raw)
        entries += self._in_between(self.events.for_order(pk), raw)
        entries += self._transitions(self.orders.transitions(pk))
        refunds = self.refunds.for_order(pk)
        entries += self._refunds(order, refunds, raw)
        ledger_rows = self._ledger_rows(order, raw_rows, refunds)
        entries += [self._ledger_entry(r) for r in ledger_rows]
        entries += self._outbox(order, refunds)
        entries += self._webhook_attempts(mchid, out_trade_no)
        entries += self._recon(order, ledger_rows, raw_rows, refunds)
        entries.sort(key=_sort_key)
        for e in entries:
            e.pop("_order", None)
        # the order's money through the one merchant-day arithmetic (R49): what the channel settles, reversals
        # signed as what they correct; fees are a merchant-day's (`tally ledger day`), not shown per order
        money = merchant_day(
            str(order.get("channel") or ""), mchid, "", (r for r in ledger_rows if r.get("kind") != "FEE")
        )
        summary = {
            "status": order.get("status"),
            **_pair("amount", order.get("amount_cent")),
            **_pair("paid", order.get("paid_cent", 0)),
            **_pair("refunded", order.get("refunded_cent", 0)),
            **_pair("refundable", order.get("refundable_cent", 0)),
            **_pair("ledger_net", money.net_cent),
            "ledger_net_basis": "settled amounts less refunds, with reversals; before fees (R49)",
            "currency": order.get("currency", "CNY"),
            "deliveries": sum(1 for e in entries if e["kind"] == "delivery"),
            "open_items": sum(1 for e in entries if e["needs_person"]),
        }
        return {
            "order": _public_order(order),
            "summary": summary,
            "entries": entries,
            "not_stored": list(NOT_STORED),
        }

    # ------------------------------------------------------------------ sources

    def _order_entries(self, order: dict[str, Any]) -> list[dict[str, Any]]:
        out = [
            _entry(
                order.get("created_at"),
                "order",
                f"order created: {format_cents(int(order.get('amount_cent', 0)))} {order.get('currency', 'CNY')}"
                f" on {order.get('channel')}",
                order.get("pk"),
                amount=order.get("amount_cent"),
                state=order.get("status"),
                detail={k: order.get(k) for k in ("description", "expire_at", "tenant", "sp_mchid", "api")},
            )
        ]
        if order.get("code_url") or order.get("qr_code"):
            out.append(
                _entry(
                    order.get("created_at"),
                    "order",
                    "prepay: the channel returned the QR content",
                    order.get("pk"),
                    detail={"code_url": order.get("code_url"), "qr_code": order.get("qr_code")},
                    order_=1,
                )
            )
        if order.get("prepay_error"):
            out.append(
                _entry(
                    order.get("created_at"),
                    "order",
                    f"prepay failed: {order['prepay_error']}",
                    order.get("pk"),
                    state="PREPAY_FAILED",
                    order_=1,
                )
            )
        if order.get("poll_count") or order.get("last_query_at"):
            errors = int(order.get("poll_errors") or 0)
            out.append(
                _entry(
                    order.get("last_query_at") or order.get("poll_due"),
                    "poll",
                    f"the channel was asked about the order (poller: {int(order.get('poll_count') or 0)} poll(s));"
                    f" last answer {order.get('poll_last') or '-'}"
                    + (f"; {errors} failed call(s) in a row" if errors else ""),
                    order.get("pk"),
                    state=order.get("poll_last"),
                    detail={
                        k: order.get(k)
                        for k in ("poll_count", "poll_last", "poll_errors", "last_query_at", "poll_due")
                    },
                )
            )
        if str(order.get("poll_pk", "")).startswith("manual#"):
            out.append(
                _entry(
                    order.get("manual_at") or order.get("poll_due"),
                    "queue",
                    f"the poller handed the order to a person: {order.get('manual_reason') or '-'}",
                    order.get("pk"),
                    state=order.get("q_state") or "OPEN",
                    needs_person=_still_open(order),
                )
            )
        for item in order.get("history") or []:
            out.append(_history_entry(item, order.get("pk"), "order"))
        for refund_no, hold in sorted(open_holds(order).items()):
            out.append(
                _entry(
                    hold.get("created_at"),
                    "refund",
                    f"refund {refund_no} reserved {format_cents(int(hold.get('amount_cent', 0)))}: the create "
                    "answer is not stored yet (the poller stores it if abandoned)",
                    refund_no,
                    amount=hold.get("amount_cent"),
                    state="RESERVED",
                    detail=dict(hold),
                )
            )
        return out

    def _deliveries(self, rows: list[dict[str, Any]], raw: bool) -> list[dict[str, Any]]:
        out = []
        for r in sorted(rows, key=lambda r: str(r.get("notified_at"))):
            handled = int(r.get("handled", 0))
            verdict = r.get("outcome") or r.get("manual_reason") or HANDLED.get(handled, "?")
            source = r.get("source", "notify")
            what = (
                "poll answer" if source == "query" else "recon recovery" if source == "recon" else "callback"
            )
            detail = {
                k: r.get(k)
                for k in (
                    "transaction_id",
                    "trade_state",
                    "order_total_cent",
                    "paid_cent",
                    "currency",
                    "success_time",
                    "handled",
                    "handled_at",
                    "outcome",
                    "manual_reason",
                    "attempts",
                    "sweeps",
                    "envelope_id",
                    "notify_api",
                )
                if r.get(k) is not None
            }
            detail = with_yuan(detail)
            if raw:
                detail["body"] = r.get("body")
                detail["headers"] = r.get("headers")
            out.append(
                _entry(
                    r.get("notified_at"),
                    "delivery",
                    f"{what} via {source}: {r.get('trade_state')} paid {format_cents(int(r.get('paid_cent', 0)))}"
                    f" of {format_cents(int(r.get('order_total_cent', 0)))}; {HANDLED.get(handled, '?')} ({verdict})",
                    r.get("pk"),
                    amount=r.get("paid_cent"),
                    state="DUPLICATE"
                    if handled == 1 and r.get("outcome") == "DUPLICATE"
                    else {0: "PENDING", 1: "ACCEPTED", 2: "MANUAL"}.get(handled, str(handled)),
                    needs_person=handled == 2 and _still_open(r),
                    detail=detail,
                )
            )
            out += [_history_entry(h, r.get("pk"), "delivery") for h in r.get("history") or []]
            if r.get(
                "refund_task"
            ):  # money on an order that cannot take it (R17): the task the worker opened
                out += self._refund_task(str(r["refund_task"]))
        return out

    def _refund_task(self, task_pk: str) -> list[dict[str, Any]]:
        task = self.refunds.task(task_pk)
        if task is None:
            return []
        status = task.get("status")
        out = [
            _entry(
                task.get("created_at"),
                "refund",
                f"refund task for {task.get('transaction_id')}: {format_cents(int(task.get('amount_cent', 0)))} "
                f"to give back ({task.get('reason')}); {status}",
                task_pk,
                amount=task.get("amount_cent"),
                state=f"TASK_{status}",
                # OPEN / REFUNDING: the refund service is on it; DONE: paid back
                needs_person=status == "MANUAL" and _still_open(task),
                detail={
                    k: task.get(k) for k in ("reason", "status", "refund_no", "manual_reason") if task.get(k)
                },
            )
        ]
        return out + [_history_entry(h, task_pk, "refund task") for h in task.get("history") or []]

    def _in_between(self, rows: list[dict[str, Any]], raw: bool) -> list[dict[str, Any]]:
        out = []
        for e in rows:
            detail = {
                k: e.get(k) for k in ("kind", "trade_state", "channel", "reason") if e.get(k) is not None
            }
            if raw:
                detail["body"] = e.get("body")
                detail["headers"] = e.get("headers")
            out.append(
                _entry(
                    e.get("created_at"),
                    "delivery",
                    f"callback {e.get('trade_state') or e.get('kind')}: in between, nothing to book (R8)",
                    e.get("pk"),
                    state=str(e.get("kind", "")).upper(),
                    detail=detail,
                )
            )
            out += [_history_entry(h, e.get("pk"), "delivery") for h in e.get("history") or []]
        return out

    def _transitions(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            _entry(
                t.get("at"),
                "transition",
                f"{t.get('from_status')} --{t.get('event')}--> {t.get('to_status')} ({t.get('source')})",
                t.get("sk"),
                state=t.get("to_status"),
                detail={k: t.get(k) for k in ("event", "from_status", "to_status", "raw_key", "source")},
            )
            for t in rows
        ]

    def _refunds(
        self, order: dict[str, Any], refunds: list[dict[str, Any]], raw: bool
    ) -> list[dict[str, Any]]:
        out = []
        for f in refunds:
            no = f.get("refund_no") or f.get("pk")
            status = f.get("status")
            out.append(
                _entry(
                    f.get("created_at"),
                    "refund",
                    f"refund {no} created: {format_cents(int(f.get('amount_cent', 0)))} "
                    f"({f.get('reason') or 'no reason given'})",
                    no,
                    amount=f.get("amount_cent"),
                    state="PENDING",
                    detail={k: f.get(k) for k in ("reason", "hold", "expire_at", "source") if f.get(k)},
                )
            )
            if status != "PENDING":
                why = f.get("fail_reason") or (f.get("manual_reason") if status == "MANUAL" else "") or ""
                out.append(
                    _entry(
                        f.get("updated_at") or f.get("created_at"),
                        "refund",
                        f"refund {no} is {status}" + (f": {why}" if why else ""),
                        no,
                        amount=f.get("amount_cent"),
                        state=status,
                        needs_person=status == "MANUAL" and _still_open(f),
                        detail={
                            k: f.get(k) for k in ("refund_id", "success_time", "fail_reason") if f.get(k)
                        },
                    )
                )
            out += [_history_entry(h, no, "refund") for h in f.get("history") or []]
            channel = f.get("channel") or order.get("channel")
            raw_key = refund_raw_key(str(channel), str(f.get("mchid") or order.get("mchid")), str(no))
            for rep in self.refund_raw.for_refund(raw_key):  # scoped per merchant (R39)
                handled = int(rep.get("handled", 0))
                detail = with_yuan(
                    {
                        k: rep.get(k)
                        for k in (
                            "source",
                            "refund_id",
                            "refund_cent",
                            "cumulative_cent",
                            "handled",
                            "outcome",
                        )
                        if rep.get(k) is not None
                    }
                )
                if raw:
                    detail["body"] = rep.get("body")
                    detail["headers"] = rep.get("headers")
                out.append(
                    _entry(
                        rep.get("notified_at"),
                        "refund_report",
                        f"channel reports refund {no} {rep.get('sk')} via {rep.get('source', 'notify')}; "
                        f"{HANDLED.get(handled, '?')}"
                        + (f" ({rep['outcome']})" if rep.get("outcome") else ""),
                        f"{raw_key}#{rep.get('sk')}",
                        amount=rep.get("refund_cent"),
                        state=rep.get("sk"),
                        needs_person=handled == 2 and _still_open(rep),
                        detail=detail,
                    )
                )
        return out

    def _ledger_rows(
        self, order: dict[str, Any], raw_rows: list[dict[str, Any]], refunds: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Payment entries share the raw row's key; refund entries are `channel#<refund pk>`; reversals are
        `<key>#REVERSAL#<day>` on the same bill_date: one GetItem per key, one Query per entry for reversals."""
        keys = [r["pk"] for r in raw_rows]
        keys += [
            f"{f.get('channel') or order.get('channel')}#{f['pk']}" for f in refunds
        ]  # refund_ledger_key
        found: dict[str, dict[str, Any]] = {}
        for key in dict.fromkeys(keys):
            entry = self.ledger.get(key)
            if entry is None:
                continue
            for row in (
                self.ledger.entry_and_reversals(key, entry.get("bill_date", ""))
                if entry.get("bill_date")
                else [entry]
            ):
                found[row["pk"]] = row
        return sorted(found.values(), key=lambda r: str(r.get("booked_at")))

    def _ledger_entry(self, r: dict[str, Any]) -> dict[str, Any]:
        kind = r.get("kind", "PAYMENT")
        signed = _signed(r)
        return _entry(
            r.get("booked_at"),
            "ledger",
            f"ledger {kind} {format_cents(signed)} booked for bill date {r.get('bill_date')} ({r.get('source')})"
            + (f": {r['reason']}" if r.get("reason") else ""),
            r.get("pk"),
            amount=signed,
            state=kind,
            detail=with_yuan(
                {
                    k: r.get(k)
                    for k in (
                        "kind",
                        "amount_cent",
                        "order_total_cent",
                        "bill_date",
                        "success_time",
                        "transaction_id",
                        "refund_no",
                        "refund_id",
                        "reverses",
                        "diff",
                        "source",
                    )
                    if r.get(k) is not None
                }
            ),
        )

    def _outbox(self, order: dict[str, Any], refunds: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for event in events_for_change(None, order):
            at = order.get("paid_at") if event.detail_type == "OrderPaid" else order.get("updated_at")
            out.append(
                _entry(
                    at or order.get("updated_at"),
                    "outbox",
                    f"event {event.detail_type} (id {event.event_id})",
                    event.event_id,
                    state=event.detail_type,
                    detail={"derived": True, "detail_type": event.detail_type},
                )
            )
        for f in refunds:
            for event in events_for_change(None, f):
                out.append(
                    _entry(
                        f.get("updated_at"),
                        "outbox",
                        f"event {event.detail_type} (id {event.event_id})",
                        event.event_id,
                        state=event.detail_type,
                        detail={"derived": True, "detail_type": event.detail_type},
                    )
                )
        return out

    def _webhook_attempts(self, mchid: str, out_trade_no: str) -> list[dict[str, Any]]:
        out = []
        for event in self.webhooks.order(mchid, out_trade_no) if self.webhooks is not None else []:
            for d in event["deliveries"]:
                stuck = d["status"] in (
                    "FAILED",
                    "HELD",
                )  # a paused endpoint: a person resends (a case is open)
                if not d["attempts"]:
                    title = f"webhook {event['type']} to {d['endpoint_id']}: {d['status']}"
                    out.append(
                        _entry(
                            event["published_at"],
                            "webhook",
                            title,
                            event["event_id"],
                            state=d["status"],
                            needs_person=stuck,
                            detail={"endpoint_id": d["endpoint_id"]},
                        )
                    )
                for a in d["attempts"]:
                    title = (
                        f"webhook {event['type']} to {d['endpoint_id']}, attempt {a['attempt']}: "
                        f"HTTP {a['http_status'] or 'no answer'} in {a['latency_ms']} ms"
                    )
                    out.append(
                        _entry(
                            a["at"],
                            "webhook",
                            title,
                            event["event_id"],
                            state=a["outcome"],
                            needs_person=stuck and a is d["attempts"][-1],
                            detail={"endpoint_id": d["endpoint_id"], "snippet": a["snippet"]},
                        )
                    )
        return out

    def _recon(
        self,
        order: dict[str, Any],
        ledger_rows: list[dict[str, Any]],
        raw_rows: list[dict[str, Any]],
        refunds: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """The days this order's money belongs to: each day's latest run verdict and this order's diffs
        (one Query for runs, one for diffs per day; a diff matches by ledger key, transaction or refund no)."""
        from tally.store.recon import recon_pk

        days = {
            (r.get("channel") or order.get("channel"), r.get("mchid") or order.get("mchid"), r["bill_date"])
            for r in ledger_rows
            if r.get("bill_date")
        }
        for r in raw_rows:  # a payment the channel has and we did not book yet: its success day
            if r.get("success_time") and (day := china_time(r["success_time"])):
                days.add((r.get("channel"), order.get("mchid"), day[:10]))
        # a payment we never heard of (recon's CHANNEL_ONLY, the classic lost callback) is on the day it was
        # paid: between the order's creation and its expiry (Asia/Shanghai), at most a few days
        for bound in (order.get("created_at"), order.get("expire_at")):
            if day := china_time(bound):
                days.add((order.get("channel"), order.get("mchid"), day[:10]))
        mine = {r["pk"] for r in ledger_rows} | {r["pk"] for r in raw_rows}
        tids = {r.get("transaction_id") for r in raw_rows if r.get("transaction_id")}
        tids.add(order.get("transaction_id"))
        refund_nos = {f.get("refund_no") or f.get("pk") for f in refunds}
        booked = {
            (r.get("channel") or order.get("channel"), r["bill_date"])
            for r in ledger_rows
            if r.get("bill_date")
        }
        out = []
        for channel, mchid, day in sorted(days):
            pk = recon_pk(str(channel), str(mchid), day)
            runs = self.recon.run_rows(pk)
            diffs = self.recon.diffs_of(pk)
            about = [d for d in diffs if _about(d, mine, tids, refund_nos, order)]
            if runs and ((channel, day) in booked or about):  # only a day this order's money is on (#30)
                latest = next((r for r in runs if r.get("leg") != "fundflow"), runs[0])
                state, words = day_state(latest.get("status"), count_diffs(diffs))
                out.append(
                    _entry(
                        latest.get("finished_at") or latest.get("started_at"),
                        "recon",
                        f"recon {day} ({channel} {mchid}): {words or state} - {latest.get('reason', '')}",
                        pk,
                        state=state,
                        detail={k: latest.get(k) for k in ("sk", "pass", "status", "guard", "open_diffs")},
                    )
                )
            for d in about:
                is_open = d.get("handle_status") == "OPEN"
                out.append(
                    _entry(
                        d.get("opened_at"),
                        "recon",
                        f"recon difference {d.get('cls')} {d.get('item')}: channel "
                        f"{_yuan(d.get('channel_amount_cent'))} / ours {_yuan(d.get('local_amount_cent'))}"
                        f" - {d.get('detail', '')} [{d.get('handle_status')}]",
                        f"{pk}/{d.get('sk')}",
                        amount=d.get("channel_amount_cent"),
                        state=d.get("handle_status"),
                        needs_person=is_open,
                        detail=with_yuan(
                            {
                                k: d.get(k)
                                for k in (
                                    "cls",
                                    "item",
                                    "key",
                                    "channel_amount_cent",
                                    "local_amount_cent",
                                    "recovery",
                                )
                                if d.get(k) is not None
                            }
                        ),
                    )
                )
                out += [
                    _history_entry(h, f"{pk}/{d.get('sk')}", "recon diff")
                    for h in d.get("history") or []
                    if h.get("action") != "OPENED"
                ]
        return out


# ---------------------------------------------------------------------- helpers


def _entry(
    at: Any,
    kind: str,
    title: str,
    ref: Any,
    *,
    amount: Any = None,
    state: Any = None,
    needs_person: bool = False,
    detail: dict[str, Any] | None = None,
    order_: int = 0,
) -> dict[str, Any]:
    return {
        "at": china_time(at),
        "at_utc": at if isinstance(at, str) else None,
        "kind": kind,
        "title": title,
        "ref": ref,
        **money(amount),
        "state": state,
        "needs_person": needs_person,
        "detail": detail or {},
        "_order": order_,
    }


def _history_entry(item: dict[str, Any], ref: Any, on: str) -> dict[str, Any]:
    why = item.get("why") or item.get("note") or ""
    extra = {k: v for k, v in item.items() if k not in ("at", "by", "action", "why", "note")}
    return _entry(
        item.get("at"),
        "queue",
        f"{on} {ref}: {item.get('action')} by {item.get('by')}" + (f" - {why}" if why else ""),
        ref,
        amount=item.get("amount_cent"),
        state=item.get("action"),
        detail={"by": item.get("by"), "why": why, **extra},
    )


KIND_ORDER = {k: i for i, k in enumerate(KINDS)}


def _sort_key(e: dict[str, Any]) -> tuple:
    moment = _instant(e.get("at_utc")) or _instant(e.get("at"))
    stamp = moment.timestamp() if moment else float("inf")  # undated last
    return (stamp, e.get("_order", 0), KIND_ORDER.get(e["kind"], 99))


CLOSED_STATES = ("RESOLVED", "IGNORED")  # the work queue's end states, kept on the source row (R41)


def _still_open(row: dict[str, Any]) -> bool:
    """A row that needs a person until the queue closed it (`q_state`) or a resolution was recorded."""
    return row.get("q_state") not in CLOSED_STATES and not row.get("resolution")


def _signed(r: dict[str, Any]) -> int:
    """Money into the merchant's account: payments +, refunds -, reversals as signed."""
    amount = int(r.get("amount_cent", 0))
    return -amount if r.get("kind") == "REFUND" else amount


def _pair(name: str, cents: Any) -> dict[str, Any]:
    value = int(cents or 0)
    return {f"{name}_cent": value, f"{name}_yuan": format_cents(value)}


def _yuan(cents: Any) -> str:
    return "-" if cents is None else format_cents(int(cents))


def _public_order(order: dict[str, Any]) -> dict[str, Any]:
    hidden = {"pk", "version", "poll_pk", "hold_pk", "hold_due", "holds_open", "history"}
    view = {k: v for k, v in order.items() if k not in hidden and not k.startswith("hold#")}
    view = with_yuan(view)
    for k in ("created_at", "expire_at", "paid_at", "updated_at", "last_query_at", "poll_due"):
        if view.get(k):
            view[k] = china_time(view[k])
    return view


def _about(
    d: dict[str, Any], mine: set[str], tids: set[Any], refund_nos: set[Any], order: dict[str, Any]
) -> bool:
    """A recon difference about this order: its ledger key, its transaction (not a refund's), one of its
    refunds, or its out_trade_no."""
    return bool(
        d.get("key") in mine
        or (d.get("transaction_id") and d.get("transaction_id") in tids and d.get("item") != "REFUND")
        or (d.get("refund_no") and d.get("refund_no") in refund_nos)
        or d.get("out_trade_no") == order.get("out_trade_no")
    )
