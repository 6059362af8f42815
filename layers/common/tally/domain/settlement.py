"""What a payment or a refund is worth to the merchant, per channel (R43): pure, integer cents, no I/O.

A channel reports up to four figures for one payment, and reconciliation has to use the right one:

- the **order amount** (订单金额: v3 `amount.total`, v2 `total_fee`, Alipay `total_amount`);
- what the **payer** paid (v3 `amount.payer_total`, v2 `cash_fee`, Alipay `buyer_pay_amount`);
- the **settlement amount**, what the channel owes the merchant for it (应结订单金额 = 订单金额 − 免充值
  (NOCASH) 代金券金额: v3 total − Σ NOCASH promotions, v2 `settlement_total_fee`, Alipay `receipt_amount`);
- the **promotion split**: each coupon's type (CASH = 预充值, money flows to the merchant; NOCASH = 免充值,
  the merchant gives the amount up) and who funded it (merchant, channel, other, or not stated).

WeChat's trade bill compares 应结订单金额, so a ledger that books `payer_total` differs on every CASH coupon.
The builders below turn each channel's parsed fields (exact names: docs/channel-spec.md §1.7, §1.8, §4,
§5, §6; sources with URLs in docs/settlement.md) into one `Settlement` / `Refund`, and refuse input whose
figures contradict each other (`SettlementError`): a contradiction is for a person, never a guess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tally.domain.money import MAX_CENT, MoneyError, format_cents, received_cents, yuan_to_cents

WECHATPAY = "wechatpay"  # API v3
WECHATPAY_V2 = "wechatpay-v2"
ALIPAY = "alipay"

CASH = "CASH"  # 充值型 / 预充值代金券: the coupon's amount is paid to the merchant (settled)
NOCASH = "NOCASH"  # 免充值型代金券: the merchant gives the amount up (not settled)

# Alipay fund channels (fund_bill_list[].fund_channel) that are the merchant's own discount: no money moves.
ALIPAY_MERCHANT_FUNDED_CHANNELS = frozenset({"MDISCOUNT", "MCOUPON"})

_FEN = re.compile(r"^\d{1,12}$", re.ASCII)


class SettlementError(ValueError):
    """The channel's figures for one payment or refund contradict each other, or one is missing."""


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Promotion:
    """One coupon / voucher as the channel reports it, in cents. `type` is the channel's word: CASH or NOCASH on
    WeChat Pay, e.g. ALIPAY_FIX_VOUCHER on Alipay. What no funder field covers is `unattributed_cent`."""

    id: str
    type: str
    amount_cent: int
    merchant_cent: int = 0
    channel_cent: int = 0  # WeChat Pay's wechatpay_contribute
    other_cent: int = 0

    def __post_init__(self) -> None:
        for name in ("amount_cent", "merchant_cent", "channel_cent", "other_cent"):
            _bounded(getattr(self, name), f"promotion {self.id or '?'} {name}")
        funded = self.merchant_cent + self.channel_cent + self.other_cent
        if funded > self.amount_cent:
            raise SettlementError(
                f"promotion {self.id or '?'}: contributions {format_cents(funded)} exceed its amount "
                f"{format_cents(self.amount_cent)}"
            )

    @property
    def unattributed_cent(self) -> int:
        return self.amount_cent - self.merchant_cent - self.channel_cent - self.other_cent


@dataclass(frozen=True, slots=True)
class Settlement:
    """One payment's figures (R43). Invariants (checked): 0 ≤ payer ≤ total, 0 ≤ settlement ≤ total,
    payer + point ≤ total, invoice ≤ total."""

    channel: str
    total_cent: int  # order amount
    payer_cent: int  # what the payer paid
    settlement_cent: int  # what the channel settles to the merchant
    promotions: tuple[Promotion, ...] = ()
    point_cent: int = 0  # Alipay 集分宝 (points), part of the discount the payer did not pay in money
    invoice_cent: int | None = None  # Alipay invoice_amount (可开票金额), kept as reported

    def __post_init__(self) -> None:
        _bounded(self.total_cent, "total_cent")
        _bounded(self.payer_cent, "payer_cent")
        _bounded(self.settlement_cent, "settlement_cent")
        _bounded(self.point_cent, "point_cent")
        if self.invoice_cent is not None:
            _bounded(self.invoice_cent, "invoice_cent")
            _not_above(self.invoice_cent, self.total_cent, "invoice amount", "the order amount")
        _not_above(self.payer_cent, self.total_cent, "payer amount", "the order amount")
        _not_above(self.settlement_cent, self.total_cent, "settlement amount", "the order amount")
        _not_above(
            self.payer_cent + self.point_cent, self.total_cent, "payer amount + points", "the order amount"
        )
        promoted = sum(p.amount_cent for p in self.promotions) if self.promotions else 0
        _not_above(promoted, self.discount_cent, "promotions", "the discount (order − payer − points)")

    # the split, derived (so it is never stored inconsistently)
    @property
    def discount_cent(self) -> int:
        """What the payer did not pay in money or points."""
        return self.total_cent - self.payer_cent - self.point_cent

    @property
    def cash_promotion_cent(self) -> int:
        return sum(p.amount_cent for p in self.promotions if p.type == CASH)

    @property
    def nocash_promotion_cent(self) -> int:
        return sum(p.amount_cent for p in self.promotions if p.type == NOCASH)

    @property
    def merchant_funded_cent(self) -> int:
        return sum(p.merchant_cent for p in self.promotions)

    @property
    def channel_funded_cent(self) -> int:
        return sum(p.channel_cent for p in self.promotions)

    @property
    def other_funded_cent(self) -> int:
        return sum(p.other_cent for p in self.promotions)

    @property
    def unattributed_cent(self) -> int:
        """Discount no funder field accounts for (v2 CASH coupons; Alipay discounts without a voucher list)."""
        return (
            self.discount_cent - self.merchant_funded_cent - self.channel_funded_cent - self.other_funded_cent
        )

    def entry_fields(self) -> dict[str, int]:
        """The figures a ledger entry keeps (R43), flat integer cents (docs/settlement.md, wiring plan): the
        properties' values, summed in one pass over the promotions (this runs on every callback, issue #20)."""
        cash = nocash = merchant = channel = other = 0
        for p in self.promotions:
            if p.type == CASH:
                cash += p.amount_cent
            elif p.type == NOCASH:
                nocash += p.amount_cent
            merchant += p.merchant_cent
            channel += p.channel_cent
            other += p.other_cent
        fields = {
            "total_cent": self.total_cent,
            "payer_cent": self.payer_cent,
            "settlement_cent": self.settlement_cent,
            "cash_promotion_cent": cash,
            "nocash_promotion_cent": nocash,
            "merchant_funded_cent": merchant,
            "channel_funded_cent": channel,
            "other_funded_cent": other,
            "unattributed_cent": self.total_cent
            - self.payer_cent
            - self.point_cent
            - merchant
            - channel
            - other,
            "point_cent": self.point_cent,
        }
        if self.invoice_cent is not None:
            fields["invoice_cent"] = self.invoice_cent
        return fields


@dataclass(frozen=True, slots=True)
class Refund:
    """One refund's figures (R43). `payer_refund_cent` / `discount_refund_cent` are None when the channel's
    message does not say (a v2 refund notification, an Alipay refund without send_back_fee): ask the refund
    query. The settlement refund is never None: it is what reconciliation matches."""

    channel: str
    refund_cent: int  # the refund's amount (v3 refund, v2 refund_fee, Alipay refund_amount)
    settlement_refund_cent: (
        int  # 应结退款金额 = refund − NOCASH coupon refund (v3 settlement_refund, v2 …_fee)
    )
    payer_refund_cent: int | None = None  # back to the payer in money (v3 payer_refund)
    discount_refund_cent: int | None = None  # the coupons' share (v3 discount_refund = refund − payer_refund)
    total_cent: int | None = None  # the order amount, when the message carries it
    fee_refund_cent: int | None = None  # fee given back with the refund (v3 amount.refund_fee), if stated

    def __post_init__(self) -> None:
        _bounded(self.refund_cent, "refund_cent")
        _bounded(self.settlement_refund_cent, "settlement_refund_cent")
        _not_above(self.settlement_refund_cent, self.refund_cent, "settlement refund", "the refund")
        if self.payer_refund_cent is not None:
            _bounded(self.payer_refund_cent, "payer_refund_cent")
            _not_above(self.payer_refund_cent, self.refund_cent, "payer refund", "the refund")
        if self.discount_refund_cent is not None:
            _bounded(self.discount_refund_cent, "discount_refund_cent")
            if self.payer_refund_cent is not None and (
                self.payer_refund_cent + self.discount_refund_cent != self.refund_cent
            ):
                raise SettlementError(
                    f"payer refund {format_cents(self.payer_refund_cent)} + discount refund "
                    f"{format_cents(self.discount_refund_cent)} != refund {format_cents(self.refund_cent)}"
                )
        if self.total_cent is not None:
            _bounded(self.total_cent, "total_cent")
            _not_above(self.refund_cent, self.total_cent, "refund", "the order amount")
        if self.fee_refund_cent is not None:
            _bounded(self.fee_refund_cent, "fee_refund_cent")

    def entry_fields(self) -> dict[str, int]:
        fields = {"refund_cent": self.refund_cent, "settlement_refund_cent": self.settlement_refund_cent}
        for name in ("payer_refund_cent", "discount_refund_cent", "total_cent", "fee_refund_cent"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = value
        return fields


def notice_fields(build: Any, *args: Any) -> dict[str, Any]:
    """The two PaymentNotice fields a channel parser sets (R43): `settlement` (the entry fields) or
    `settlement_error` (why the figures cannot be settled; the payment is still booked, UNKNOWN)."""
    try:
        return {"settlement": build(*args).entry_fields(), "settlement_error": None}
    except SettlementError as exc:
        return {"settlement": None, "settlement_error": str(exc)[:300]}
    except (MoneyError, TypeError, ValueError, KeyError, AttributeError) as exc:
        return {"settlement": None, "settlement_error": f"{type(exc).__name__}: {str(exc)[:280]}"}


def plain_payment_fields(total_cent: int) -> dict[str, int]:
    """`Settlement(channel, total, total, total).entry_fields()` without building the Settlement: a payment with
    no promotion whose payer paid the whole order amount (settlement = payer = total, nothing discounted), for a
    `total_cent` already known to be integer cents in 0..MAX_CENT. Every such Settlement passes its checks, so
    there is nothing to check; the notify hot path's common case (issue #20, tests/unit/test_notify_hot_path.py)."""
    return {
        "total_cent": total_cent,
        "payer_cent": total_cent,
        "settlement_cent": total_cent,
        "cash_promotion_cent": 0,
        "nocash_promotion_cent": 0,
        "merchant_funded_cent": 0,
        "channel_funded_cent": 0,
        "other_funded_cent": 0,
        "unattributed_cent": 0,
        "point_cent": 0,
    }


# ---------------------------------------------------------------- WeChat Pay API v3 (JSON integers, fen)


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
    total = _fen(amount, "total")
    payer = _fen(amount, "payer_total")
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
    return Settlement(WECHATPAY, total, payer, total - nocash, promotions)


def _v3_promotion(p: Mapping[str, Any]) -> Promotion:
    kind = p.get("type")
    if kind not in (CASH, NOCASH):
        raise SettlementError(
            f"promotion {p.get('coupon_id', '?')}: type {kind!r} is neither CASH nor NOCASH"
        )
    amount = _fen(p, "amount")
    parts = ("merchant_contribute", "wechatpay_contribute", "other_contribute")
    merchant, channel, other = (_fen(p, k) if k in p else 0 for k in parts)
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
    refund = _fen(amount, "refund")
    total = _fen(amount, "total") if "total" in amount else None
    payer_refund = _fen(amount, "payer_refund") if "payer_refund" in amount else None
    discount = _fen(amount, "discount_refund") if "discount_refund" in amount else None
    if discount is None and payer_refund is not None:
        if payer_refund > refund:
            raise SettlementError(
                f"payer_refund {format_cents(payer_refund)} > refund {format_cents(refund)}"
            )
        discount = refund - payer_refund
    if "settlement_refund" in amount:
        settlement = _fen(amount, "settlement_refund")
    else:
        settlement = _refund_without_settlement_figure(
            refund, total, _fen(amount, "settlement_total") if "settlement_total" in amount else None, payment
        )
    fee = _fen(amount, "refund_fee") if "refund_fee" in amount else None
    return Refund(WECHATPAY, refund, settlement, payer_refund, discount, total, fee)


def _refund_without_settlement_figure(
    refund: int, total: int | None, settlement_total: int | None, payment: Settlement | None
) -> int:
    if settlement_total is not None and total is not None and settlement_total == total:
        return refund
    if (
        payment is not None
        and payment.nocash_promotion_cent == 0
        and payment.settlement_cent == payment.total_cent
    ):
        return refund
    raise SettlementError(
        "the refund states no settlement refund and its payment had (or may have had) NOCASH promotions: "
        "the settlement refund is unknown (query the refund)"
    )


# ---------------------------------------------------------------- WeChat Pay API v2 (XML strings of fen)


def wechat_v2_payment(fields: Mapping[str, str]) -> Settlement:
    """A v2 payment notification / order query: `total_fee, settlement_total_fee (only when a 免充值 coupon was
    used), cash_fee, coupon_fee, coupon_count, coupon_type_$n (CASH | NO_CASH), coupon_id_$n, coupon_fee_$n`.
    现金支付金额 = 订单金额 − 代金券金额; 应结订单金额 = 订单金额 − 非充值代金券金额. v2 names no funder: a NO_CASH
    coupon is the merchant's own (免充值: the merchant receives less); a CASH coupon's funder is not stated."""
    total = _fen_text(fields, "total_fee")
    payer = _fen_text(fields, "cash_fee")
    count = _fen_text(fields, "coupon_count") if fields.get("coupon_count") else 0
    if count > 100:
        raise SettlementError(f"coupon_count {count} is implausible (bounded: hostile input costs nothing)")
    stated_settlement = (
        _fen_text(fields, "settlement_total_fee") if fields.get("settlement_total_fee") else None
    )
    promotions = []
    for n in range(count):
        fee = _fen_text(fields, f"coupon_fee_{n}")
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
    coupon_fee = _fen_text(fields, "coupon_fee") if fields.get("coupon_fee") else coupons
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
    return Settlement(WECHATPAY_V2, total, payer, settlement, tuple(promotions))


def wechat_v2_refund(fields: Mapping[str, str], payment: Settlement | None = None) -> Refund:
    """A v2 refund (notification req_info or refund query): `refund_fee, settlement_refund_fee, total_fee,
    settlement_total_fee`, and from the query `cash_refund_fee, coupon_refund_fee`. 应结退款金额 =
    申请退款金额 − 非充值代金券退款金额; absent, it equals the refund only when the payment had no 免充值 coupon."""
    refund = _fen_text(fields, "refund_fee")
    total = _fen_text(fields, "total_fee") if fields.get("total_fee") else None
    if fields.get("settlement_refund_fee"):
        settlement = _fen_text(fields, "settlement_refund_fee")
    else:
        settlement_total = (
            _fen_text(fields, "settlement_total_fee") if fields.get("settlement_total_fee") else None
        )
        # settlement_total_fee is only sent when a 免充值 coupon was used: absent with total_fee present = none used
        if settlement_total is None and total is not None:
            settlement_total = total
        settlement = _refund_without_settlement_figure(refund, total, settlement_total, payment)
    payer = _fen_text(fields, "cash_refund_fee") if fields.get("cash_refund_fee") else None
    discount = _fen_text(fields, "coupon_refund_fee") if fields.get("coupon_refund_fee") else None
    if payer is not None and discount is None:
        discount = refund - payer
    if payer is None and discount is not None:
        payer = refund - discount
    if payer is None and payment is not None and payment.discount_cent == 0:
        payer, discount = refund, 0
    return Refund(WECHATPAY_V2, refund, settlement, payer, discount, total)


# ---------------------------------------------------------------- Alipay (yuan strings)


def alipay_payment(fields: Mapping[str, Any]) -> Settlement:
    """An Alipay payment (async notification or alipay.trade.query): `total_amount, receipt_amount (商家实收:
    the settlement amount), buyer_pay_amount, invoice_amount, point_amount, fund_bill_list, voucher_detail_list`
    (the lists are JSON strings in notifications, camelCase inside; lists of objects in query answers).
    Σ fund_bill_list = total_amount; each voucher's amount = merchant_contribute + other_contribute."""
    total = _yuan(fields, "total_amount")
    receipt = _yuan(fields, "receipt_amount")
    payer = _yuan(fields, "buyer_pay_amount")
    point = _yuan(fields, "point_amount") if fields.get("point_amount") else 0
    invoice = _yuan(fields, "invoice_amount") if fields.get("invoice_amount") else None
    funds = _alipay_list(fields.get("fund_bill_list"), "fund_bill_list")
    if funds:
        paid = sum(_yuan(f, "amount") for f in funds)
        if paid != total:
            raise SettlementError(
                f"Σ fund_bill_list {format_cents(paid)} != total_amount {format_cents(total)}"
            )
    vouchers = tuple(
        _alipay_voucher(v) for v in _alipay_list(fields.get("voucher_detail_list"), "voucher_detail_list")
    )
    if not vouchers and funds:
        merchant = sum(
            _yuan(f, "amount")
            for f in funds
            if _first(f, "fund_channel", "fundChannel") in ALIPAY_MERCHANT_FUNDED_CHANNELS
        )
        if merchant:
            vouchers = (Promotion("fund_bill_list", "MERCHANT_FUND_CHANNEL", merchant, merchant),)
    return Settlement(ALIPAY, total, payer, receipt, vouchers, point, invoice)


def _alipay_voucher(v: Mapping[str, Any]) -> Promotion:
    vid = str(_first(v, "id", "voucherId", "voucher_id") or "")
    amount = _yuan(v, "amount")
    merchant_text = _first(v, "merchant_contribute", "merchantContribute")
    other_text = _first(v, "other_contribute", "otherContribute")
    merchant = _yuan_text(merchant_text, f"voucher {vid} merchant_contribute") if merchant_text else 0
    other = _yuan_text(other_text, f"voucher {vid} other_contribute") if other_text else 0
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
    refund = _yuan_text(refund_amount, "refund_amount")
    payer = _yuan_text(send_back_fee, "send_back_fee") if send_back_fee else None
    items = _alipay_list(refund_detail_item_list, "refund_detail_item_list")
    if items:
        listed = sum(_yuan(i, "amount") for i in items)
        if listed != refund:
            raise SettlementError(
                f"Σ refund_detail_item_list {format_cents(listed)} != refund {format_cents(refund)}"
            )
        merchant = sum(
            _yuan(i, "amount")
            for i in items
            if _first(i, "fund_channel", "fundChannel") in ALIPAY_MERCHANT_FUNDED_CHANNELS
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
    return Refund(ALIPAY, refund, settlement, payer, discount, total)


# ---------------------------------------------------------------- refunds rebuilt with their payment (R43)
# A refund report does not always carry its settlement refund (a v3 notification: total, refund, payer_total,
# payer_refund only; an Alipay notification: the trade's cumulative refund_fee only). The report's figures are
# kept as a *basis* (the builder's inputs, channel words as data) on the raw row, so the apply step can build
# the refund again with the booked payment's Settlement, and `tally ledger backfill-settlement` can later.

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
V2_REFUND_FIELDS = (
    "refund_fee",
    "settlement_refund_fee",
    "total_fee",
    "settlement_total_fee",
    "cash_refund_fee",
    "coupon_refund_fee",
)


def v3_refund_basis(amount: Mapping[str, Any]) -> dict[str, Any]:
    """A v3 refund resource's `amount` (notification or query answer), bounded to the builder's fields, integer
    fen only (it is stored on the raw row: a float or a string there would be refused by the builder anyway)."""
    kept = {k: amount.get(k) for k in V3_REFUND_FIELDS}
    return {
        "builder": WECHATPAY,
        "amount": {k: v for k, v in kept.items() if isinstance(v, int) and not isinstance(v, bool)},
    }


def v2_refund_basis(fields: Mapping[str, str]) -> dict[str, Any]:
    """A v2 refund's fields (req_info, or one `_$n` entry of a refund query with its suffix dropped)."""
    kept = {k: fields.get(k) for k in V2_REFUND_FIELDS}
    return {
        "builder": WECHATPAY_V2,
        "fields": {k: v[:20] for k, v in kept.items() if isinstance(v, str) and v},
    }


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
                "fund_channel": str(_first(i, "fund_channel", "fundChannel") or ""),
                "amount": i["amount"] if isinstance(i.get("amount"), str) else "",
            }
            for i in items[:101]
            if isinstance(i, Mapping)
        ]
    elif items is not None:
        items = str(items)[:1000]  # not a list: kept so the builder says why
    return {
        "builder": ALIPAY,
        "refund_amount": str(refund_amount),
        "send_back_fee": send_back_fee if isinstance(send_back_fee, str) and send_back_fee else None,
        "refund_detail_item_list": items or None,
    }


def build_refund(
    basis: Mapping[str, Any] | None, payment: Settlement | None = None, refund_cent: int | None = None
) -> Refund:
    """The refund's figures from its report's basis and (when known) the payment's Settlement. Without a basis
    (a report that states no figures of its own, a refund a person recorded, an entry booked before R43) only
    `refund_cent` is known: its settlement refund is the refund when the payment had no NOCASH / merchant
    discount (settlement = total), else unknown (SettlementError)."""
    builder = (basis or {}).get("builder")
    if basis is not None and builder == WECHATPAY:
        return wechat_v3_refund(basis["amount"], payment)
    if basis is not None and builder == WECHATPAY_V2:
        return wechat_v2_refund(basis["fields"], payment)
    if basis is not None and builder == ALIPAY:
        return alipay_refund(
            basis["refund_amount"],
            send_back_fee=basis.get("send_back_fee"),
            refund_detail_item_list=basis.get("refund_detail_item_list"),
            payment=payment,
        )
    if basis is not None:
        raise SettlementError(f"unknown refund basis {builder!r}")
    if refund_cent is None:
        raise SettlementError("the report states no refund figures of its own")
    _bounded(refund_cent, "refund_cent")
    settlement = _refund_without_settlement_figure(refund_cent, None, None, payment)
    plain = payment is not None and payment.discount_cent == 0
    channel = payment.channel if payment is not None else ""
    total = payment.total_cent if payment is not None else None
    return Refund(
        channel, refund_cent, settlement, refund_cent if plain else None, 0 if plain else None, total
    )


def refund_fields(
    basis: Mapping[str, Any] | None, payment: Settlement | None = None, refund_cent: int | None = None
) -> dict[str, Any]:
    """`notice_fields` for a refund: {"settlement": Refund.entry_fields() | None, "settlement_error": …}."""
    return notice_fields(build_refund, basis, payment, refund_cent)


def settlement_of_entry(entry: Mapping[str, Any] | None) -> Settlement | None:
    """A booked PAYMENT entry's figures as a Settlement again (what a refund of it needs: total, payer,
    settlement, the CASH / NOCASH split, points). An entry booked before R43 without a discount (amount_cent ==
    order_total_cent: the payer paid the whole order) settles in full; any other legacy or UNKNOWN entry: None."""
    if not entry:
        return None
    channel = str(entry.get("channel") or "")
    try:
        if entry.get("settlement_cent") is not None:
            promotions = tuple(
                Promotion(f"entry:{kind}", kind, int(entry.get(name) or 0))
                for kind, name in ((CASH, "cash_promotion_cent"), (NOCASH, "nocash_promotion_cent"))
                if int(entry.get(name) or 0)
            )
            return Settlement(
                channel,
                int(entry["total_cent"]),
                int(entry["payer_cent"]),
                int(entry["settlement_cent"]),
                promotions,
                int(entry.get("point_cent") or 0),
            )
        if entry.get("settlement_state") == "UNKNOWN" or entry.get("order_total_cent") is None:
            return None
        total, paid = int(entry["order_total_cent"]), int(entry["amount_cent"])
        return Settlement(channel, total, total, total) if total == paid else None
    except (SettlementError, KeyError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------- helpers


def _bounded(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettlementError(f"{name} must be integer cents, got {type(value).__name__}")
    if not 0 <= value <= MAX_CENT:
        raise SettlementError(f"{name} {value} is outside 0..{MAX_CENT} cents")


def _not_above(value: int, limit: int, what: str, than: str) -> None:
    if value > limit:
        raise SettlementError(f"{what} {format_cents(value)} exceeds {than} {format_cents(limit)}")


def _fen(obj: Mapping[str, Any], key: str) -> int:
    if key not in obj:
        raise SettlementError(f"missing {key}")
    try:
        value = received_cents(obj[key])
    except MoneyError as exc:
        raise SettlementError(f"{key}: {exc}") from None
    _bounded(value, key)
    return value


def _fen_text(fields: Mapping[str, str], key: str) -> int:
    text = fields.get(key)
    if text is None or text == "":
        raise SettlementError(f"missing {key}")
    if not isinstance(text, str) or not _FEN.match(text.strip()):
        raise SettlementError(f"{key}: not a whole number of fen: {text!r}")
    value = int(text.strip())
    _bounded(value, key)
    return value


def _yuan(obj: Mapping[str, Any], key: str) -> int:
    if obj.get(key) in (None, ""):
        raise SettlementError(f"missing {key}")
    return _yuan_text(obj[key], key)


def _yuan_text(text: Any, name: str) -> int:
    if not isinstance(text, str):
        raise SettlementError(f"{name}: a yuan amount is a string, got {type(text).__name__}")
    try:
        value = yuan_to_cents(text)
    except MoneyError as exc:
        raise SettlementError(f"{name}: {exc}") from None
    if value < 0:
        raise SettlementError(f"{name}: a reported amount is never negative: {text!r}")
    _bounded(value, name)
    return value


def _first(obj: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if obj.get(key) not in (None, ""):
            return obj[key]
    return None


def _alipay_list(value: Any, name: str) -> list[Mapping[str, Any]]:
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
