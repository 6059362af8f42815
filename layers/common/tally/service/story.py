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
        "entries": [{"at", "at_utc", "kind", "title", "says": {"text", "params"}, "ref", "amount_cent",
                     "amount_yuan", "state", "needs_person": bool, "detail": {...}}, ...],   # oldest first
        "not_stored": [str, ...],                  # what the story cannot show, and why (English msgids)
    }

`kind` is one of KINDS; `says` is the line as a template and its raw parameters, `title` its English reading
(service/story_entries.py). With raw=True a delivery's detail carries its raw body and verify headers. This module
tells the order's own rows, deliveries and transitions; story_refunds.py, story_books.py (ledger, recon days) and
story_downstream.py (outbox, webhooks) tell the rest, story_entries.py shapes every line, story_find.py finds it.
"""

from __future__ import annotations

from typing import Any

from tally.domain.clock import CHINA as CHINA  # the story's zone, read from here by its tests
from tally.domain.merchant_day import merchant_day
from tally.domain.money import format_cents
from tally.errors import NotFound  # callers import it from here too
from tally.i18n import N_
from tally.service.story_books import BooksChapter
from tally.service.story_downstream import outbox_entries, webhook_entries
from tally.service.story_entries import china_time as china_time  # the CLI prints times with it
from tally.service.story_entries import (
    entry,
    history_entry,
    instant,
    still_open,
    stored_fields,
    with_raw,
    with_yuan,
)
from tally.service.story_find import OrderFinder
from tally.service.story_refunds import RefundChapter
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

NOT_STORED = [  # English msgids: the CLI and the console translate them where they show them
    N_(
        "Repeated deliveries of a callback already stored are not kept per order: a duplicate costs one "
        "conditional put (R9, the notify budget of 1 AWS call); they are counted by the metric NotifyDuplicate "
        "per channel and merchant."
    ),
    N_(
        "Only the poller's last answer is kept on the order (poll_last, poll_count, last_query_at); a paid "
        "answer is stored as a delivery with source=query."
    ),
    N_(
        "Callbacks rejected for their signature or quarantined before their order could be read name no "
        "verified order: see `tally manual list` (kinds rejected / quarantined)."
    ),
    N_(
        "Outbox events are derived from the rows' states with the outbox's own function (stable ids); the bus "
        "keeps no per-order record to read back."
    ),
]


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
        self.finder = OrderFinder(orders, raw, refunds)
        self.refund_chapter = RefundChapter(refunds, refund_raw)
        self.books = BooksChapter(ledger, recon)

    def find(self, text: str, merchants: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """The orders a number names (service/story_find.py)."""
        return self.finder.find(text, merchants)

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
        entries += self.refund_chapter.entries(order, refunds, raw)
        ledger_rows = self.books.ledger_rows(order, raw_rows, refunds)
        entries += [self.books.ledger_entry(r) for r in ledger_rows]
        entries += outbox_entries(order, refunds)
        entries += webhook_entries(self.webhooks, mchid, out_trade_no)
        entries += self.books.recon_days(order, ledger_rows, raw_rows, refunds)
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
            entry(
                order.get("created_at"),
                "order",
                N_("order created: %(amount_cent)s on %(channel)s"),
                order.get("pk"),
                params={"amount_cent": order.get("amount_cent"), "channel": order.get("channel")},
                amount=order.get("amount_cent"),
                state=order.get("status"),
                detail={k: order.get(k) for k in ("description", "expire_at", "tenant", "sp_mchid", "api")},
            )
        ]
        if order.get("code_url") or order.get("qr_code"):
            out.append(
                entry(
                    order.get("created_at"),
                    "order",
                    N_("prepay: the channel returned the QR content"),
                    order.get("pk"),
                    detail={"code_url": order.get("code_url"), "qr_code": order.get("qr_code")},
                    order_=1,
                )
            )
        if order.get("prepay_error"):
            out.append(
                entry(
                    order.get("created_at"),
                    "order",
                    N_("prepay failed: %(error)s"),
                    order.get("pk"),
                    params={"error": order["prepay_error"]},
                    state="PREPAY_FAILED",
                    order_=1,
                )
            )
        if order.get("poll_count") or order.get("last_query_at"):
            errors = int(order.get("poll_errors") or 0)
            out.append(
                entry(
                    order.get("last_query_at") or order.get("poll_due"),
                    "poll",
                    N_(
                        "the channel was asked about the order (poller: %(polls)s poll(s)); last answer "
                        "%(poll_last)s; %(errors)s failed call(s) in a row"
                    )
                    if errors
                    else N_(
                        "the channel was asked about the order (poller: %(polls)s poll(s)); last answer %(poll_last)s"
                    ),
                    order.get("pk"),
                    params={
                        "polls": int(order.get("poll_count") or 0),
                        "poll_last": order.get("poll_last"),
                        "errors": errors,
                    },
                    state=order.get("poll_last"),
                    detail={
                        k: order.get(k)
                        for k in ("poll_count", "poll_last", "poll_errors", "last_query_at", "poll_due")
                    },
                )
            )
        if str(order.get("poll_pk", "")).startswith("manual#"):
            out.append(
                entry(
                    order.get("manual_at") or order.get("poll_due"),
                    "queue",
                    N_("the poller handed the order to a person: %(reason)s"),
                    order.get("pk"),
                    params={"reason": order.get("manual_reason")},
                    state=order.get("q_state") or "OPEN",
                    needs_person=still_open(order),
                )
            )
        for item in order.get("history") or []:
            out.append(history_entry(item, order.get("pk"), "order"))
        for refund_no, hold in sorted(open_holds(order).items()):
            out.append(
                entry(
                    hold.get("created_at"),
                    "refund",
                    N_(
                        "refund %(refund_no)s reserved %(amount_cent)s: the create answer is not stored yet "
                        "(the poller stores it if abandoned)"
                    ),
                    refund_no,
                    params={"refund_no": refund_no, "amount_cent": hold.get("amount_cent")},
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
            verdict = r.get("outcome") or r.get("manual_reason")
            detail = with_raw(
                stored_fields(
                    r,
                    (
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
                    ),
                ),
                r,
                raw,
            )
            out.append(
                entry(
                    r.get("notified_at"),
                    "delivery",
                    N_(
                        "%(source)s: %(trade_state)s, %(paid_cent)s of %(total_cent)s; %(handled)s (%(outcome)s)"
                    )
                    if verdict
                    else N_("%(source)s: %(trade_state)s, %(paid_cent)s of %(total_cent)s; %(handled)s"),
                    r.get("pk"),
                    params={
                        "source": r.get("source", "notify"),
                        "trade_state": r.get("trade_state"),
                        "paid_cent": r.get("paid_cent", 0),
                        "total_cent": r.get("order_total_cent", 0),
                        "handled": handled,
                        "outcome": verdict,
                    },
                    amount=r.get("paid_cent"),
                    state="DUPLICATE"
                    if handled == 1 and r.get("outcome") == "DUPLICATE"
                    else {0: "PENDING", 1: "ACCEPTED", 2: "MANUAL"}.get(handled, str(handled)),
                    needs_person=handled == 2 and still_open(r),
                    detail=detail,
                )
            )
            out += [history_entry(h, r.get("pk"), "delivery") for h in r.get("history") or []]
            if r.get(
                "refund_task"
            ):  # money on an order that cannot take it (R17): the task the worker opened
                out += self.refund_chapter.task(str(r["refund_task"]))
        return out

    def _in_between(self, rows: list[dict[str, Any]], raw: bool) -> list[dict[str, Any]]:
        out = []
        for e in rows:
            detail = {
                k: e.get(k) for k in ("kind", "trade_state", "channel", "reason") if e.get(k) is not None
            }
            with_raw(detail, e, raw)
            out.append(
                entry(
                    e.get("created_at"),
                    "delivery",
                    N_("callback %(trade_state)s: in between, nothing to book (R8)"),
                    e.get("pk"),
                    params={"trade_state": e.get("trade_state") or e.get("kind")},
                    state=str(e.get("kind", "")).upper(),
                    detail=detail,
                )
            )
            out += [history_entry(h, e.get("pk"), "delivery") for h in e.get("history") or []]
        return out

    def _transitions(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            entry(
                t.get("at"),
                "transition",
                N_("%(from_status)s → %(to_status)s (%(event)s, %(source)s)"),
                t.get("sk"),
                params={k: t.get(k) for k in ("from_status", "to_status", "event", "source")},
                state=t.get("to_status"),
                detail={k: t.get(k) for k in ("event", "from_status", "to_status", "raw_key", "source")},
            )
            for t in rows
        ]


KIND_ORDER = {k: i for i, k in enumerate(KINDS)}


def _sort_key(e: dict[str, Any]) -> tuple:
    moment = instant(e.get("at_utc")) or instant(e.get("at"))
    stamp = moment.timestamp() if moment else float("inf")  # undated last
    return (stamp, e.get("_order", 0), KIND_ORDER.get(e["kind"], 99))


def _pair(name: str, cents: Any) -> dict[str, Any]:
    value = int(cents or 0)
    return {f"{name}_cent": value, f"{name}_yuan": format_cents(value)}


def _public_order(order: dict[str, Any]) -> dict[str, Any]:
    hidden = {"pk", "version", "poll_pk", "hold_pk", "hold_due", "holds_open", "history"}
    view = {k: v for k, v in order.items() if k not in hidden and not k.startswith("hold#")}
    view = with_yuan(view)
    for k in ("created_at", "expire_at", "paid_at", "updated_at", "last_query_at", "poll_due"):
        if view.get(k):
            view[k] = china_time(view[k])
    return view
