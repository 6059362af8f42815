"""What a WeChat Pay v3 payment or refund is worth to the merchant (R43): the channel's fields (JSON integers,
fen; docs/channel-spec.md §1.7, §1.8) into domain/settlement.py's `Settlement` / `Refund`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tally.channels.wechatpay_v3.channel import CHANNEL
from tally.domain.money import MAX_CENT, format_cents
from tally.domain.settlement import (
    CASH,
    NOCASH,
    Promotion,
    Refund,
    Settlement,
    SettlementError,
    fen_field,
    notice_fields,
    plain_payment_fields,
    refund_without_settlement_figure,
)


def wechat_v3_notice_fields(
    amount: Mapping[str, Any], promotion_detail: Iterable[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """`notice_fields(wechat_v3_payment, amount, promotion_detail)`, the same dict; a payment without
    promotions whose `payer_total` is its `total` (JSON integers in 0..MAX_CENT: nearly every callback) is
    answered by `plain_payment_fields`, anything else by the full build and its checks (R43)."""
    if not promotion_detail and type(amount) is dict:
        total, payer = amount.get("total"), amount.get("payer_total")
        if type(total) is int and type(payer) is int and payer == total and 0 <= total <= MAX_CENT:
            return {"settlement": plain_payment_fields(total), "settlement_error": None}
    return notice_fields(wechat_v3_payment, amount, promotion_detail)


def wechat_v3_payment(
    amount: Mapping[str, Any], promotion_detail: Iterable[Mapping[str, Any]] | None = None
) -> Settlement:
    """A v3 payment (notification resource or order query): `amount{total, payer_total}` and the optional
    `promotion_detail[]{coupon_id, type CASH|NOCASH, amount, wechatpay_contribute, merchant_contribute,
    other_contribute}`. 用户实付 = 订单金额 − Σ 代金券, 应结订单金额 = 订单金额 − Σ NOCASH."""
    total = fen_field(amount, "total")
    payer = fen_field(amount, "payer_total")
    promotions = tuple(_v3_promotion(p) for p in promotion_detail) if promotion_detail else ()
    coupons = sum(p.amount_cent for p in promotions) if promotions else 0
    if not promotions and payer != total:
        raise SettlementError(
            f"payer_total {format_cents(payer)} != total {format_cents(total)} but no promotion_detail: "
            "cannot tell CASH from NOCASH, so the settlement amount is unknown (query the order)"
        )
    if total - payer != coupons:
        raise SettlementError(
            f"promotions {format_cents(coupons)} != total {format_cents(total)} − payer_total {format_cents(payer)}"
        )
    nocash = sum(p.amount_cent for p in promotions if p.type == NOCASH) if promotions else 0
    return Settlement(CHANNEL.route, total, payer, total - nocash, promotions)


def _v3_promotion(p: Mapping[str, Any]) -> Promotion:
    kind = p.get("type")
    if kind not in (CASH, NOCASH):
        raise SettlementError(
            f"promotion {p.get('coupon_id', '?')}: type {kind!r} is neither CASH nor NOCASH"
        )
    amount = fen_field(p, "amount")
    parts = ("merchant_contribute", "wechatpay_contribute", "other_contribute")
    merchant, channel, other = (fen_field(p, k) if k in p else 0 for k in parts)
    if any(k in p for k in parts) and merchant + channel + other != amount:
        raise SettlementError(
            f"promotion {p.get('coupon_id', '?')}: merchant {format_cents(merchant)} + wechatpay "
            f"{format_cents(channel)} + other {format_cents(other)} != amount {format_cents(amount)}"
        )
    return Promotion(str(p.get("coupon_id", "")), kind, amount, merchant, channel, other)


def wechat_v3_refund(amount: Mapping[str, Any], payment: Settlement | None = None) -> Refund:
    """A v3 refund: `amount{total, refund, payer_total, payer_refund, settlement_refund, settlement_total,
    discount_refund, refund_fee}` (the notification carries only the first four). Without `settlement_refund`
    the settlement refund is the refund only if the payment had no NOCASH promotion (`settlement_total` ==
    `total`, or the booked payment says so); otherwise the refund must be queried."""
    refund = fen_field(amount, "refund")
    total = fen_field(amount, "total") if "total" in amount else None
    payer_refund = fen_field(amount, "payer_refund") if "payer_refund" in amount else None
    discount = fen_field(amount, "discount_refund") if "discount_refund" in amount else None
    if discount is None and payer_refund is not None:
        if payer_refund > refund:
            raise SettlementError(
                f"payer_refund {format_cents(payer_refund)} > refund {format_cents(refund)}"
            )
        discount = refund - payer_refund
    if "settlement_refund" in amount:
        settlement = fen_field(amount, "settlement_refund")
    else:
        settlement = refund_without_settlement_figure(
            refund,
            total,
            fen_field(amount, "settlement_total") if "settlement_total" in amount else None,
            payment,
        )
    fee = fen_field(amount, "refund_fee") if "refund_fee" in amount else None
    return Refund(CHANNEL.route, refund, settlement, payer_refund, discount, total, fee)


# A refund notification carries only total, refund, payer_total and payer_refund: these figures are kept on the
# raw row as the refund's *basis*, so the apply step can build the refund again with the booked payment.
V3_REFUND_FIELDS = (
    "total",
    "refund",
    "payer_total",
    "payer_refund",
    "settlement_refund",
    "settlement_total",
    "discount_refund",
    "refund_fee",
)


def v3_refund_basis(amount: Mapping[str, Any]) -> dict[str, Any]:
    """A v3 refund resource's `amount` (notification or query answer), bounded to the builder's fields, integer
    fen only (it is stored on the raw row: a float or a string there would be refused by the builder anyway)."""
    kept = {k: amount.get(k) for k in V3_REFUND_FIELDS}
    return {
        "builder": CHANNEL.route,
        "amount": {k: v for k, v in kept.items() if isinstance(v, int) and not isinstance(v, bool)},
    }


def refund_from_basis(basis: Mapping[str, Any], payment: Settlement | None) -> Refund:
    return wechat_v3_refund(basis["amount"], payment)
