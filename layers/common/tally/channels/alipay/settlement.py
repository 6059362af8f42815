"""What an Alipay payment or refund is worth to the merchant (R43): the channel's fields (yuan strings;
docs/channel-spec.md §5, §6) into domain/settlement.py's `Settlement` / `Refund`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tally.channels.alipay.channel import CHANNEL
from tally.domain.money import format_cents
from tally.domain.settlement import (
    Promotion,
    Refund,
    Settlement,
    SettlementError,
    first_of,
    yuan_field,
    yuan_string,
)

# fund channels (fund_bill_list[].fund_channel) that are the merchant's own discount: no money moves.
MERCHANT_FUNDED_CHANNELS = frozenset({"MDISCOUNT", "MCOUPON"})


def alipay_payment(fields: Mapping[str, Any]) -> Settlement:
    """An Alipay payment (async notification or alipay.trade.query): `total_amount, receipt_amount (商家实收:
    the settlement amount), buyer_pay_amount, invoice_amount, point_amount, fund_bill_list, voucher_detail_list`
    (the lists are JSON strings in notifications, camelCase inside; lists of objects in query answers).
    Σ fund_bill_list = total_amount; each voucher's amount = merchant_contribute + other_contribute."""
    total = yuan_field(fields, "total_amount")
    receipt = yuan_field(fields, "receipt_amount")
    payer = yuan_field(fields, "buyer_pay_amount")
    point = yuan_field(fields, "point_amount") if fields.get("point_amount") else 0
    invoice = yuan_field(fields, "invoice_amount") if fields.get("invoice_amount") else None
    funds = _bounded_list(fields.get("fund_bill_list"), "fund_bill_list")
    if funds:
        paid = sum(yuan_field(f, "amount") for f in funds)
        if paid != total:
            raise SettlementError(
                f"Σ fund_bill_list {format_cents(paid)} != total_amount {format_cents(total)}"
            )
    vouchers = tuple(
        _alipay_voucher(v) for v in _bounded_list(fields.get("voucher_detail_list"), "voucher_detail_list")
    )
    if not vouchers and funds:
        merchant = sum(
            yuan_field(f, "amount")
            for f in funds
            if first_of(f, "fund_channel", "fundChannel") in MERCHANT_FUNDED_CHANNELS
        )
        if merchant:
            vouchers = (Promotion("fund_bill_list", "MERCHANT_FUND_CHANNEL", merchant, merchant),)
    return Settlement(CHANNEL.route, total, payer, receipt, vouchers, point, invoice)


def _alipay_voucher(v: Mapping[str, Any]) -> Promotion:
    vid = str(first_of(v, "id", "voucherId", "voucher_id") or "")
    amount = yuan_field(v, "amount")
    merchant_text = first_of(v, "merchant_contribute", "merchantContribute")
    other_text = first_of(v, "other_contribute", "otherContribute")
    merchant = yuan_string(merchant_text, f"voucher {vid} merchant_contribute") if merchant_text else 0
    other = yuan_string(other_text, f"voucher {vid} other_contribute") if other_text else 0
    if (merchant_text or other_text) and merchant + other != amount:
        raise SettlementError(
            f"voucher {vid}: merchant {format_cents(merchant)} + other {format_cents(other)} != amount "
            f"{format_cents(amount)}"
        )
    return Promotion(vid, str(v.get("type", "")), amount, merchant, 0, other)


def alipay_refund(
    refund_amount: str,
    *,
    send_back_fee: str | None = None,
    refund_detail_item_list: Any = None,
    payment: Settlement | None = None,
) -> Refund:
    """An Alipay refund (alipay.trade.refund / fastpay.refund.query): `refund_amount` (this refund, not the
    cumulative `refund_fee`), `send_back_fee` (what went back to the buyer), `refund_detail_item_list[]{fund_channel,
    amount}`. The settlement refund (商家实收退款) is the refund less the merchant-funded channels (MDISCOUNT,
    MCOUPON); without the list it equals the refund only when the payment had no discount."""
    refund = yuan_string(refund_amount, "refund_amount")
    payer = yuan_string(send_back_fee, "send_back_fee") if send_back_fee else None
    items = _bounded_list(refund_detail_item_list, "refund_detail_item_list")
    if items:
        listed = sum(yuan_field(i, "amount") for i in items)
        if listed != refund:
            raise SettlementError(
                f"Σ refund_detail_item_list {format_cents(listed)} != refund {format_cents(refund)}"
            )
        merchant = sum(
            yuan_field(i, "amount")
            for i in items
            if first_of(i, "fund_channel", "fundChannel") in MERCHANT_FUNDED_CHANNELS
        )
        settlement = refund - merchant
    elif payment is not None and payment.settlement_cent == payment.total_cent:
        settlement = refund
    else:
        raise SettlementError(
            "an Alipay refund without refund_detail_item_list of a payment with (or of unknown) discount: the "
            "settlement refund is unknown (query with query_options refund_detail_item_list)"
        )
    if payer is None and payment is not None and payment.discount_cent == 0:
        payer = refund
    discount = refund - payer if payer is not None else None
    total = payment.total_cent if payment is not None else None
    return Refund(CHANNEL.route, refund, settlement, payer, discount, total)


def alipay_refund_basis(
    refund_amount: str, send_back_fee: str | None = None, refund_detail_item_list: Any = None
) -> dict[str, Any]:
    """An Alipay refund query answer (`refund_amount`, `send_back_fee`, `refund_detail_item_list`): the list is
    kept as `[{fund_channel, amount}]` strings only (it is stored on the raw row; hostile extras cost nothing)."""
    items: Any = refund_detail_item_list or None
    if isinstance(items, str) and len(items) <= 65_536:
        try:
            items = json.loads(items)
        except ValueError:
            pass
    if isinstance(items, list):
        items = [
            {
                "fund_channel": str(first_of(i, "fund_channel", "fundChannel") or ""),
                "amount": i["amount"] if isinstance(i.get("amount"), str) else "",
            }
            for i in items[:101]
            if isinstance(i, Mapping)
        ]
    elif items is not None:
        items = str(items)[:1000]  # not a list: kept so the builder says why
    return {
        "builder": CHANNEL.route,
        "refund_amount": str(refund_amount),
        "send_back_fee": send_back_fee if isinstance(send_back_fee, str) and send_back_fee else None,
        "refund_detail_item_list": items or None,
    }


def refund_from_basis(basis: Mapping[str, Any], payment: Settlement | None) -> Refund:
    return alipay_refund(
        basis["refund_amount"],
        send_back_fee=basis.get("send_back_fee"),
        refund_detail_item_list=basis.get("refund_detail_item_list"),
        payment=payment,
    )


def _bounded_list(value: Any, name: str) -> list[Mapping[str, Any]]:
    """A JSON string (notifications) or a list (query answers); bounded."""
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        if len(value) > 65_536:
            raise SettlementError(f"{name}: {len(value)} characters is implausible")
        try:
            value = json.loads(value)
        except ValueError:
            raise SettlementError(f"{name}: not JSON") from None
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value) or len(value) > 100:
        raise SettlementError(f"{name}: not a list of at most 100 objects")
    return value
