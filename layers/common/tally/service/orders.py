"""Orders: register (and optionally prepay) an order; show an order with its whole story."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tally import errors
from tally.channels import registry as channel_registry
from tally.domain.money import MAX_CENT
from tally.domain.notifications import is_merchant_id
from tally.domain.orders import Status
from tally.domain.poll import FIRST_QUERY_AFTER_S
from tally.errors import NotFound  # callers import it from here too
from tally.observability import M, count, logger
from tally.service.merchants import (
    MerchantDirectory,
    MerchantNotReady,
    UnknownMerchant,
    not_ready_reason,
)
from tally.store.polling import poll_pk
from tally.store.refunds import HOLD_PREFIX, open_holds
from tally.store.tables import OrderStore, RawStore, iso_now, order_key

OUT_TRADE_NO = re.compile(r"^[0-9A-Za-z_\-*]{6,32}$")
CURRENCY = re.compile(r"^[A-Z]{3}$")
CHANNELS = tuple(c.order_word for c in channel_registry.all_channels())  # request field `channel`
DEFAULT_CHANNEL = channel_registry.default().order_word  # "wechatpay"


class InvalidOrder(errors.InvalidRequest, ValueError):
    """The request is wrong; the message says how (HTTP 400)."""


class OrderConflict(errors.Conflict, ValueError):
    """The out_trade_no exists with different terms (HTTP 409, `order_terms_differ`, the term as the field)."""

    code = "order_terms_differ"

    def __init__(self, message: str, term: str = ""):
        differs = (
            [errors.field_error(term, "differs", f"{term} differs from the stored order")] if term else []
        )
        super().__init__(message, fields=differs)
        self.term = term


class PrepayFailed(errors.ChannelError, RuntimeError):
    """The order is stored, the channel's prepay failed: HTTP 502 with the stored order."""

    code = "prepay_failed"
    http_status = 502

    def __init__(self, order: dict[str, Any], error: str):
        super().__init__(f"prepay failed: {error}")
        self.order = order

    def details(self) -> dict[str, Any]:
        return {"order": self.order}


class OrderService:
    def __init__(
        self,
        orders: OrderStore,
        raw: RawStore,
        merchants: MerchantDirectory,
        *,
        clock: Callable[[], float] = time.time,
        confirm: Callable[[Mapping[str, Any]], bool] | None = None,
    ):
        self.orders = orders
        self.raw = raw
        self.merchants = merchants
        self.clock = clock
        self.confirm = confirm  # the return page's one channel query (PollService.confirm)

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.register(request)[0]

    def register(self, request: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The order as stored, and whether this call created it (an identical re-registration is a retry: the
        existing order, created False, whatever its state; other terms are a 409 naming the term)."""
        if isinstance(request, dict) and request.get("combine") is True:
            return self.create_combine(request)
        spec = validate_order_request(request)
        channel = channel_registry.by_order_word(spec["channel"])
        assert channel is not None  # validate_order_request took only registered words
        try:
            merchant = channel.merchant(self.merchants, spec["mchid"])
        except UnknownMerchant:
            raise NotFound(
                f"{spec['channel']} merchant {spec['mchid']} is not configured (tally merchant add)",
                code="merchant_not_found",
            ) from None
        not_ready = not_ready_reason(merchant.row)
        if not_ready:  # R47: credentials that fail the live check take no order
            raise MerchantNotReady(
                f"{spec['channel']} merchant {spec['mchid']} is not ready: {not_ready} "
                "(then `tally merchant check --live`)"
            )
        if channel.currencies is not None and spec["currency"] not in channel.currencies:
            raise InvalidOrder(
                f"{channel.label} orders are in {', '.join(channel.currencies)}",
                fields=[
                    errors.field_error(
                        "currency", "not_allowed", f"{channel.label} takes {', '.join(channel.currencies)}"
                    )
                ],
            )
        refusal = channel.order_refusal(merchant, spec["prepay"])
        if refusal:  # e.g. a WeChat v2 prepay needs the merchant's appid
            raise InvalidOrder(refusal)
        now = self.clock()
        row = {
            "pk": order_key(spec["mchid"], spec["out_trade_no"]),
            "mchid": spec["mchid"],
            "out_trade_no": spec["out_trade_no"],
            # v2 and v3 report the same WeChat transactions: one stored channel for both (channels/registry.py)
            "channel": channel.stored,
            "sp_mchid": getattr(merchant, "sp_mchid", None),  # service-provider mode (R11)
            "tenant": merchant.row.get("tenant") or spec["mchid"],
            "status": Status.WAIT_PAY.value,
            "amount_cent": spec["amount_cent"],
            "currency": spec["currency"],
            "description": spec["description"],
            "paid_cent": 0,
            "refundable_cent": 0,
            "version": 0,
            "created_at": iso_now(now),
            "expire_at": iso_now(now + spec["expire_minutes"] * 60),
            "expire_minutes": spec["expire_minutes"],  # a term: re-registering compares it
            "prepay": spec["prepay"],
            # the poll index (R21): pending from birth; the first query 30 s after creation
            "poll_pk": poll_pk(order_key(spec["mchid"], spec["out_trade_no"])),
            "poll_due": iso_now(now + FIRST_QUERY_AFTER_S),
            "poll_count": 0,
        }
        if channel.api:
            row["api"] = channel.api  # the poller queries it with the v2 API (pull.py), not v3
        existing = self.orders.create(row)
        if existing is not None:
            differs = registered_differently(existing, row)
            if differs:
                raise OrderConflict(
                    f"order {spec['out_trade_no']} exists with another {differs}: "
                    "re-register with the same terms, or use a new out_trade_no",
                    differs,
                )
            row = dict(existing)
        if (
            spec["prepay"]
            and not (row.get("code_url") or row.get("qr_code"))
            and row["status"] == Status.WAIT_PAY.value
        ):
            prepaid = channel_registry.for_order(row) or channel  # the stored row's (a retry keeps its own)
            try:
                qr = prepaid.prepay(
                    self.merchants,
                    merchant,
                    row,
                    expire_minutes=spec["expire_minutes"],
                    expire_s=now + spec["expire_minutes"] * 60,
                )
            except errors.ChannelError as exc:
                raise self._prepay_failed(row, f"{prepaid.name} prepay failed", exc) from None
            self.orders.set_fields(row["pk"], **qr)
            row = {**row, **qr}
        return public_order(row), existing is None

    def create_combine(self, request: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """A WeChat Pay v3 combine order (合单): each sub-order is registered as an ordinary order of its own
        merchant (every check and term of `create`, idempotent the same way), marked with its combine number;
        then one combine prepay for all of them. The combine merchant (`mchid`) is a direct merchant whose
        sub-orders are all its own, or a service provider whose sub-orders belong to its sub-merchants (R11):
        a sub-order of any other merchant is refused before anything is stored."""
        spec = validate_combine_request(request)
        combine_no, top_id = spec["combine_out_trade_no"], spec["mchid"]
        payments = channel_registry.default().combine()
        if payments is None:
            raise InvalidOrder("no channel takes combine orders")
        top = payments.combine_merchant(self.merchants, top_id, [sub["mchid"] for sub in spec["sub_orders"]])
        created = False
        for sub in spec["sub_orders"]:
            created = self.register({**sub, "prepay": False})[1] or created
        rows: list[dict[str, Any]] = []
        for sub in spec["sub_orders"]:
            stored = self.orders.get(sub["mchid"], sub["out_trade_no"])
            assert stored is not None  # just created or found with the same terms
            row: dict[str, Any] = dict(stored)
            if row.get("combine_out_trade_no") not in (None, combine_no):
                raise OrderConflict(
                    f"order {sub['out_trade_no']} belongs to combine order {row['combine_out_trade_no']}",
                    "combine_out_trade_no",
                )
            if row.get("combine_out_trade_no") is None:
                marks = {"combine_out_trade_no": combine_no, "combine_mchid": top_id}
                self.orders.set_fields(row["pk"], **marks)
                row = {**row, **marks}
            rows.append(row)
        code_url = next((r["code_url"] for r in rows if r.get("code_url")), None)
        if spec["prepay"] and code_url is None and all(r["status"] == Status.WAIT_PAY.value for r in rows):
            try:
                qr = payments.combine_prepay(
                    self.merchants,
                    top,
                    combine_no,
                    [{**sub, "attach": sub["out_trade_no"]} for sub in spec["sub_orders"]],
                    expire_s=self.clock() + spec["expire_minutes"] * 60,
                )
            except errors.ChannelError as exc:
                count(M.PREPAY_FAILED)
                logger.warning("combine prepay failed", extra={"combine": combine_no, "error": str(exc)})
                for row in rows:
                    self.orders.set_fields(row["pk"], prepay_error=str(exc)[:500])
                raise PrepayFailed(combined_view(top_id, combine_no, rows, None), str(exc)) from None
            for row in rows:
                self.orders.set_fields(row["pk"], **qr)
            code_url = qr["code_url"]
            rows = [{**row, **qr} for row in rows]
        return combined_view(top_id, combine_no, rows, code_url), created

    def _prepay_failed(self, row: dict[str, Any], what: str, exc: Exception) -> PrepayFailed:
        """Counted, logged and kept on the order row (the caller answers the error; no money moved yet)."""
        count(M.PREPAY_FAILED)
        logger.warning(what, extra={"order": row["pk"], "error": str(exc)})
        self.orders.set_fields(row["pk"], prepay_error=str(exc)[:500])
        return PrepayFailed(public_order(row), str(exc))

    def show(self, mchid: str, out_trade_no: str, *, ask_channel: bool = False) -> dict[str, Any]:
        """The order, its transitions and raw rows. Read-only unless `ask_channel` (R42): only the merchant's
        return page (GET /orders/{mchid}/{no}, R24) and `tally order show --ask-channel` ask the channel once
        about an unpaid order (rate-limited by PollService.confirm), which may book or close it."""
        order = self.orders.get(mchid, out_trade_no)
        if order is None:
            raise NotFound(f"no order {mchid}/{out_trade_no}", code="order_not_found")
        if (
            ask_channel
            and self.confirm is not None
            and order.get("status") == Status.WAIT_PAY.value
            and self.confirm(order)
        ):
            order = self.orders.get(mchid, out_trade_no) or order  # booked or closed just now
        view = public_order(order)
        view["transitions"] = [
            {k: t.get(k) for k in ("at", "event", "from_status", "to_status", "raw_key", "source")}
            for t in self.orders.transitions(order["pk"])
        ]
        view["raw"] = [
            {
                k: r.get(k)
                for k in (
                    "pk",
                    "source",
                    "trade_state",
                    "order_total_cent",
                    "paid_cent",
                    "handled",
                    "outcome",
                    "manual_reason",
                    "notified_at",
                    "attempts",
                )
            }
            for r in self.raw.for_order(order["pk"])
        ]
        return view


def public_order(row: Mapping[str, Any]) -> dict[str, Any]:
    """The order without index bookkeeping; refunds reserved but not yet stored show as `refund_holds`."""
    hidden = {"pk", "version", "poll_pk", "poll_due", "hold_pk", "hold_due", "holds_open"}
    view = {k: v for k, v in row.items() if k not in hidden and not k.startswith(HOLD_PREFIX)}
    holds = open_holds(row)
    if holds:
        view["refund_holds"] = {no: int(h["amount_cent"]) for no, h in holds.items()}
    return view


def combined_view(
    mchid: str, combine_out_trade_no: str, rows: Sequence[Mapping[str, Any]], code_url: str | None
) -> dict[str, Any]:
    return {
        "combine": True,
        "mchid": mchid,
        "combine_out_trade_no": combine_out_trade_no,
        "code_url": code_url,
        "amount_cent": sum(int(r["amount_cent"]) for r in rows),
        "sub_orders": [public_order(r) for r in rows],
    }


TERMS = ("channel", "amount_cent", "currency", "description", "expire_minutes", "prepay")


def registered_differently(existing: Mapping[str, Any], row: Mapping[str, Any]) -> str:
    """The first term in which a re-registration differs from the stored order ("" = the same order, a
    retry). A term the stored row predates (older rows have no expire_minutes) is not compared."""
    for term in TERMS:
        if term in existing and existing[term] != row[term]:
            return term
    return ""


def validate_order_request(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidOrder("body must be a JSON object")
    mchid = body.get("mchid")
    if not is_merchant_id(mchid):
        raise InvalidOrder("mchid must be the merchant number (digits)")
    out_trade_no = body.get("out_trade_no")
    if not isinstance(out_trade_no, str) or not OUT_TRADE_NO.match(out_trade_no):
        raise InvalidOrder("out_trade_no must be 6-32 characters of [0-9A-Za-z_-*]")
    amount = body.get("amount_cent")
    if isinstance(amount, bool) or not isinstance(amount, int) or not 1 <= amount <= MAX_CENT:
        raise InvalidOrder(
            f"amount_cent must be an integer number of cents from 1 to {MAX_CENT} (no decimals, no strings)"
        )
    currency = body.get("currency", "CNY")
    if not isinstance(currency, str) or not CURRENCY.match(currency):
        raise InvalidOrder("currency must be a 3-letter ISO code such as CNY")
    description = body.get("description", "")
    if not isinstance(description, str) or not 1 <= len(description) <= 127:
        raise InvalidOrder("description must be 1-127 characters")
    expire = body.get("expire_minutes", 120)
    if isinstance(expire, bool) or not isinstance(expire, int) or not 1 <= expire <= 7 * 24 * 60:
        raise InvalidOrder("expire_minutes must be an integer from 1 to 10080")
    prepay = body.get("prepay", True)
    if not isinstance(prepay, bool):
        raise InvalidOrder("prepay must be true or false")
    channel = body.get("channel", DEFAULT_CHANNEL)
    if channel not in CHANNELS:
        raise InvalidOrder(f"channel must be one of {', '.join(CHANNELS)}")
    return {
        "mchid": mchid,
        "out_trade_no": out_trade_no,
        "amount_cent": amount,
        "currency": currency,
        "description": description,
        "expire_minutes": expire,
        "prepay": prepay,
        "channel": channel,
    }


MAX_COMBINE_SUB_ORDERS = 10  # what Tally offers (the channel takes up to 50): a bound on one request's cost


def validate_combine_request(body: dict[str, Any]) -> dict[str, Any]:
    """`{"combine": true, "mchid", "combine_out_trade_no", "description"?, "expire_minutes"?, "prepay"?,
    "sub_orders": [{"mchid"?, "out_trade_no", "amount_cent", "description"?}]}`: each sub-order is checked as
    an order of its own (validate_order_request); `mchid` of a sub-order defaults to the combine merchant."""
    top = validate_order_request(
        {
            **{k: v for k, v in body.items() if k in ("mchid", "description", "expire_minutes", "prepay")},
            "out_trade_no": body.get("combine_out_trade_no"),
            "amount_cent": 1,
            "description": body.get("description") or "combine",
        }
    )
    if body.get("channel", DEFAULT_CHANNEL) != DEFAULT_CHANNEL:
        raise InvalidOrder("combine orders are WeChat Pay v3 orders (channel wechatpay)")
    subs = body.get("sub_orders")
    if not isinstance(subs, list) or not 1 <= len(subs) <= MAX_COMBINE_SUB_ORDERS:
        raise InvalidOrder(f"sub_orders must be a list of 1 to {MAX_COMBINE_SUB_ORDERS} orders")
    checked = []
    for sub in subs:
        if not isinstance(sub, dict):
            raise InvalidOrder("each sub-order must be a JSON object")
        spec = validate_order_request(
            {
                "mchid": sub.get("mchid", top["mchid"]),
                "out_trade_no": sub.get("out_trade_no"),
                "amount_cent": sub.get("amount_cent"),
                "currency": sub.get("currency", "CNY"),
                "description": sub.get("description") or top["description"],
                "expire_minutes": top["expire_minutes"],
                "prepay": False,
            }
        )
        checked.append({k: v for k, v in spec.items() if k != "prepay"})
    if len({(s["mchid"], s["out_trade_no"]) for s in checked}) != len(checked):
        raise InvalidOrder("sub-orders must have distinct out_trade_no")
    if top["out_trade_no"] in {s["out_trade_no"] for s in checked if s["mchid"] == top["mchid"]}:
        raise InvalidOrder("combine_out_trade_no must differ from the sub-orders' out_trade_no")
    return {
        "mchid": top["mchid"],
        "combine_out_trade_no": top["out_trade_no"],
        "expire_minutes": top["expire_minutes"],
        "prepay": top["prepay"],
        "sub_orders": checked,
    }
