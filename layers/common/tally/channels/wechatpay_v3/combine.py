"""WeChat Pay v3 combine payments (合单支付): one payment of several sub-orders, each its own transaction.

    prepay   POST /v3/combine-transactions/native   combine_appid, combine_mchid, combine_out_trade_no,
             sub_orders[{mchid, (sub_mchid,) attach, amount{total_amount, currency}, out_trade_no, description}],
             notify_url, time_expire → code_url
    notify   TRANSACTION.SUCCESS with a resource carrying combine_out_trade_no and sub_orders[], each with its own
             transaction_id, trade_state, amount{total_amount, payer_amount, currency}
    query    GET /v3/combine-transactions/out-trade-no/{combine_out_trade_no}: the same shape as the resource
    close    POST /v3/combine-transactions/out-trade-no/{combine_out_trade_no}/close  combine_appid,
             sub_orders[{mchid, out_trade_no, (sub_mchid)}] → 204. A combine order's sub-orders can only be closed
             so (never with the single-order close); the poller closes each expired sub-order through it (R21)

Partner mode: combine_mchid and every sub_orders[].mchid are the service provider's number; the order's
merchant is sub_orders[].sub_mchid (R11). Each sub-order becomes one ordinary PaymentNotice keyed by its own
transaction_id (R7), so the raw rows, the booking, the refunds and recon see nothing special.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tally.channels.wechatpay_v3 import wire as wx
from tally.domain.money import MoneyError, cents, received_cents
from tally.domain.notifications import PaymentNotice

PREPAY_PATH = "/v3/combine-transactions/native"
QUERY_PATH = "/v3/combine-transactions/out-trade-no/"
MAX_SUB_ORDERS = 50  # the channel's own limit per combine order; a body naming more is not WeChat's


def close_path(combine_out_trade_no: str) -> str:
    return QUERY_PATH + quote(combine_out_trade_no, safe="") + "/close"


def is_combine(resource: dict[str, Any]) -> bool:
    return "combine_out_trade_no" in resource


def sub_notices(resource: dict[str, Any], source: str = "notify") -> tuple[str, str, list[PaymentNotice]]:
    """(combine_mchid, combine_out_trade_no, one notice per sub-order). DecryptError if the shape is wrong."""
    try:
        combine_mchid = _text(resource["combine_mchid"])
        combine_no = _text(resource["combine_out_trade_no"])
        subs = resource["sub_orders"]
        if not isinstance(subs, list) or not 1 <= len(subs) <= MAX_SUB_ORDERS:
            raise TypeError(f"sub_orders must be a list of 1..{MAX_SUB_ORDERS} sub-orders")
        return combine_mchid, combine_no, [_sub_notice(sub, source) for sub in subs]
    except (KeyError, TypeError, AttributeError, MoneyError) as exc:
        raise wx.DecryptError(f"combine resource lacks or mistypes {exc}") from None


def _sub_notice(sub: dict[str, Any], source: str) -> PaymentNotice:
    partner = "sub_mchid" in sub
    amount = sub["amount"]
    total = received_cents(amount["total_amount"])
    transaction_id = sub.get("transaction_id") or ""
    success_time = sub.get("success_time")
    if not isinstance(transaction_id, str) or not isinstance(success_time, (str, type(None))):
        raise TypeError("transaction_id and success_time must be strings")
    return PaymentNotice(
        channel=wx.STORED,
        transaction_id=transaction_id,
        out_trade_no=_text(sub["out_trade_no"]),
        mchid=_text(sub["sub_mchid"] if partner else sub["mchid"]),
        sp_mchid=_text(sub["mchid"]) if partner else None,
        trade_state=_text(sub["trade_state"]),
        order_total_cent=total,
        paid_cent=received_cents(amount.get("payer_amount", total)),
        currency=_text(amount.get("currency") or "CNY"),
        success_time=success_time,
        source=source,
    )


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value


def native_prepay(
    client: wx.WeChatPayClient,
    *,
    combine_appid: str,
    combine_out_trade_no: str,
    sub_orders: list[dict[str, Any]],
    notify_url: str,
    time_expire: str | None = None,
) -> str:
    """`sub_orders`: [{mchid (the order's merchant), out_trade_no, amount_cent, currency, description,
    attach}]; with `partner` the signer (these credentials) is the provider and each mchid a sub-merchant."""
    partner_of = client.creds.mchid
    body: dict[str, Any] = {
        "combine_appid": combine_appid,
        "combine_mchid": partner_of,
        "combine_out_trade_no": combine_out_trade_no,
        "sub_orders": [
            {
                "mchid": partner_of,
                **({"sub_mchid": sub["mchid"]} if sub["mchid"] != partner_of else {}),
                "attach": sub.get("attach") or sub["out_trade_no"],
                "amount": {
                    "total_amount": cents(sub["amount_cent"]),
                    "currency": sub.get("currency") or "CNY",
                },
                "out_trade_no": sub["out_trade_no"],
                "description": sub["description"],
            }
            for sub in sub_orders
        ],
        "notify_url": notify_url,
    }
    if time_expire:
        body["time_expire"] = time_expire
    answer = client.request("POST", PREPAY_PATH, body)
    code_url = answer.get("code_url") if isinstance(answer, dict) else None
    if not code_url:
        raise wx.WeChatCallError("combine native prepay answered without code_url")
    return str(code_url)


def query(client: wx.WeChatPayClient, combine_out_trade_no: str) -> wx.Response:
    return client.exchange("GET", QUERY_PATH + quote(combine_out_trade_no, safe=""), None)


def close_list(resource: dict[str, Any]) -> list[dict[str, str]]:
    """The sub-orders a combine close names, read from the combine query answer (signed by WeChat):
    [{mchid, out_trade_no, (sub_mchid)}]. DecryptError if the answer lacks or mistypes them."""
    try:
        subs = resource["sub_orders"]
        if not isinstance(subs, list) or not 1 <= len(subs) <= MAX_SUB_ORDERS:
            raise TypeError(f"sub_orders must be a list of 1..{MAX_SUB_ORDERS} sub-orders")
        return [
            {
                "mchid": _text(sub["mchid"]),
                "out_trade_no": _text(sub["out_trade_no"]),
                **({"sub_mchid": _text(sub["sub_mchid"])} if "sub_mchid" in sub else {}),
            }
            for sub in subs
        ]
    except (KeyError, TypeError, AttributeError) as exc:
        raise wx.DecryptError(f"combine answer lacks or mistypes {exc}") from None


def close(
    client: wx.WeChatPayClient,
    combine_out_trade_no: str,
    *,
    combine_appid: str,
    sub_orders: list[dict[str, str]],
) -> wx.Response:
    """Close a combine order's sub-orders at the channel: 204 = closed now; errors (ORDER_PAID, ORDER_CLOSED,
    …) raise ChannelError, mapped by wire.CLOSE_ANSWER like a single close's."""
    body = {"combine_appid": combine_appid, "sub_orders": sub_orders}
    return client.exchange("POST", close_path(combine_out_trade_no), body)
