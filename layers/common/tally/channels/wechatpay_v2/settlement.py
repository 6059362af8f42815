"""What a WeChat Pay v2 payment or refund is worth to the merchant (R43): the channel's fields (XML strings of
fen; docs/channel-spec.md §4) into domain/settlement.py's `Settlement` / `Refund`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tally.channels.wechatpay_v2.channel import CHANNEL
from tally.domain.money import format_cents
from tally.domain.settlement import (
    CASH,
    NOCASH,
    Promotion,
    Refund,
    Settlement,
    SettlementError,
    fen_string,
    refund_without_settlement_figure,
)


def wechat_v2_payment(fields: Mapping[str, str]) -> Settlement:
    """A v2 payment notification / order query: `total_fee, settlement_total_fee (only when a 免充值 coupon was
    used), cash_fee, coupon_fee, coupon_count, coupon_type_$n (CASH | NO_CASH), coupon_id_$n, coupon_fee_$n`.
    现金支付金额 = 订单金额 − 代金券金额; 应结订单金额 = 订单金额 − 非充值代金券金额. v2 names no funder: a NO_CASH
    coupon is the merchant's own (免充值: the merchant receives less); a CASH coupon's funder is not stated."""
    total = fen_string(fields, "total_fee")
    payer = fen_string(fields, "cash_fee")
    count = fen_string(fields, "coupon_count") if fields.get("coupon_count") else 0
    if count > 100:
        raise SettlementError(f"coupon_count {count} is implausible (bounded: hostile input costs nothing)")
    stated_settlement = (
        fen_string(fields, "settlement_total_fee") if fields.get("settlement_total_fee") else None
    )
    promotions = []
    for n in range(count):
        fee = fen_string(fields, f"coupon_fee_{n}")
        kind = fields.get(f"coupon_type_{n}", "")
        if kind == "NO_CASH":
            kind = NOCASH
        elif kind == "" and stated_settlement is None:
            kind = CASH  # settlement_total_fee is only sent when a 免充值 coupon was used: all are CASH
        elif kind != CASH:
            raise SettlementError(f"coupon_type_{n} {kind!r} is neither CASH nor NO_CASH")
        merchant = fee if kind == NOCASH else 0
        promotions.append(Promotion(fields.get(f"coupon_id_{n}", ""), kind, fee, merchant))
    coupons = sum(p.amount_cent for p in promotions)
    coupon_fee = fen_string(fields, "coupon_fee") if fields.get("coupon_fee") else coupons
    if coupon_fee != coupons:
        raise SettlementError(
            f"coupon_fee {format_cents(coupon_fee)} != Σ coupon_fee_$n {format_cents(coupons)}"
        )
    if total - payer != coupon_fee:
        raise SettlementError(
            f"cash_fee {format_cents(payer)} != total_fee {format_cents(total)} − coupon_fee {format_cents(coupon_fee)}"
        )
    nocash = sum(p.amount_cent for p in promotions if p.type == NOCASH)
    settlement = total - nocash
    if stated_settlement is not None and stated_settlement != settlement:
        raise SettlementError(
            f"settlement_total_fee {format_cents(stated_settlement)} != total_fee {format_cents(total)} − "
            f"NO_CASH coupons {format_cents(nocash)}"
        )
    return Settlement(CHANNEL.route, total, payer, settlement, tuple(promotions))


def wechat_v2_refund(fields: Mapping[str, str], payment: Settlement | None = None) -> Refund:
    """A v2 refund (notification req_info or refund query): `refund_fee, settlement_refund_fee, total_fee,
    settlement_total_fee`, and from the query `cash_refund_fee, coupon_refund_fee`. 应结退款金额 =
    申请退款金额 − 非充值代金券退款金额; absent, it equals the refund only when the payment had no 免充值 coupon."""
    refund = fen_string(fields, "refund_fee")
    total = fen_string(fields, "total_fee") if fields.get("total_fee") else None
    if fields.get("settlement_refund_fee"):
        settlement = fen_string(fields, "settlement_refund_fee")
    else:
        settlement_total = (
            fen_string(fields, "settlement_total_fee") if fields.get("settlement_total_fee") else None
        )
        # settlement_total_fee is only sent when a 免充值 coupon was used: absent with total_fee present = none used
        if settlement_total is None and total is not None:
            settlement_total = total
        settlement = refund_without_settlement_figure(refund, total, settlement_total, payment)
    payer = fen_string(fields, "cash_refund_fee") if fields.get("cash_refund_fee") else None
    discount = fen_string(fields, "coupon_refund_fee") if fields.get("coupon_refund_fee") else None
    if payer is not None and discount is None:
        discount = refund - payer
    if payer is None and discount is not None:
        payer = refund - discount
    if payer is None and payment is not None and payment.discount_cent == 0:
        payer, discount = refund, 0
    return Refund(CHANNEL.route, refund, settlement, payer, discount, total)


# The refund's figures kept on the raw row as its *basis* (domain/settlement.py), rebuilt with the payment.
V2_REFUND_FIELDS = (
    "refund_fee",
    "settlement_refund_fee",
    "total_fee",
    "settlement_total_fee",
    "cash_refund_fee",
    "coupon_refund_fee",
)


def v2_refund_basis(fields: Mapping[str, str]) -> dict[str, Any]:
    """A v2 refund's fields (req_info, or one `_$n` entry of a refund query with its suffix dropped)."""
    kept = {k: fields.get(k) for k in V2_REFUND_FIELDS}
    return {
        "builder": CHANNEL.route,
        "fields": {k: v[:20] for k, v in kept.items() if isinstance(v, str) and v},
    }


def refund_from_basis(basis: Mapping[str, Any], payment: Settlement | None) -> Refund:
    return wechat_v2_refund(basis["fields"], payment)
