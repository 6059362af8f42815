"""What a payment or a refund is worth to the merchant (R43): pure, integer cents, no I/O.

A channel reports up to four figures for one payment, and reconciliation has to use the right one:

- the **order amount** (订单金额: v3 `amount.total`, v2 `total_fee`, Alipay `total_amount`);
- what the **payer** paid (v3 `amount.payer_total`, v2 `cash_fee`, Alipay `buyer_pay_amount`);
- the **settlement amount**, what the channel owes the merchant for it (应结订单金额 = 订单金额 − 免充值
  (NOCASH) 代金券金额: v3 total − Σ NOCASH promotions, v2 `settlement_total_fee`, Alipay `receipt_amount`);
- the **promotion split**: each coupon's type (CASH = 预充值, money flows to the merchant; NOCASH = 免充值,
  the merchant gives the amount up) and who funded it (merchant, channel, other, or not stated).

WeChat's trade bill compares 应结订单金额, so a ledger that books `payer_total` differs on every CASH coupon.
Each channel's builders (channels/<name>/settlement.py; field names in docs/channel-spec.md §1.7, §1.8, §4,
§5, §6; sources with URLs in docs/settlement.md) turn its parsed fields into one `Settlement` / `Refund` with
the field readers at the end of this module, and refuse input whose figures contradict each other
(`SettlementError`): a contradiction is for a person, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tally.domain.money import MAX_CENT, MoneyError, format_cents, received_cents, yuan_to_cents

CASH = "CASH"  # 充值型 / 预充值代金券: the coupon's amount is paid to the merchant (settled)
NOCASH = "NOCASH"  # 免充值型代金券: the merchant gives the amount up (not settled)

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
            bounded(getattr(self, name), f"promotion {self.id or '?'} {name}")
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
        bounded(self.total_cent, "total_cent")
        bounded(self.payer_cent, "payer_cent")
        bounded(self.settlement_cent, "settlement_cent")
        bounded(self.point_cent, "point_cent")
        if self.invoice_cent is not None:
            bounded(self.invoice_cent, "invoice_cent")
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
        bounded(self.refund_cent, "refund_cent")
        bounded(self.settlement_refund_cent, "settlement_refund_cent")
        _not_above(self.settlement_refund_cent, self.refund_cent, "settlement refund", "the refund")
        if self.payer_refund_cent is not None:
            bounded(self.payer_refund_cent, "payer_refund_cent")
            _not_above(self.payer_refund_cent, self.refund_cent, "payer refund", "the refund")
        if self.discount_refund_cent is not None:
            bounded(self.discount_refund_cent, "discount_refund_cent")
            if self.payer_refund_cent is not None and (
                self.payer_refund_cent + self.discount_refund_cent != self.refund_cent
            ):
                raise SettlementError(
                    f"payer refund {format_cents(self.payer_refund_cent)} + discount refund "
                    f"{format_cents(self.discount_refund_cent)} != refund {format_cents(self.refund_cent)}"
                )
        if self.total_cent is not None:
            bounded(self.total_cent, "total_cent")
            _not_above(self.refund_cent, self.total_cent, "refund", "the order amount")
        if self.fee_refund_cent is not None:
            bounded(self.fee_refund_cent, "fee_refund_cent")

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


# ---------------------------------------------------------------- refunds rebuilt with their payment (R43)
# A refund report does not always carry its settlement refund (a v3 notification: total, refund, payer_total,
# payer_refund only; an Alipay notification: the trade's cumulative refund_fee only). The report's figures are
# kept as a *basis* (the builder's inputs, channel words as data) on the raw row, so the apply step can build
# the refund again with the booked payment's Settlement, and `tally ledger backfill-settlement` can later
# (channels/settlement.py asks the channel that wrote the basis; this module knows none).


def refund_without_basis(payment: Settlement | None, refund_cent: int) -> Refund:
    """A refund whose report states no figures of its own (a refund a person recorded, an entry booked before
    R43): only `refund_cent` is known, and its settlement refund is the refund when the payment had no NOCASH /
    merchant discount (settlement = total), else unknown (SettlementError)."""
    bounded(refund_cent, "refund_cent")
    settlement = refund_without_settlement_figure(refund_cent, None, None, payment)
    plain = payment is not None and payment.discount_cent == 0
    channel = payment.channel if payment is not None else ""
    total = payment.total_cent if payment is not None else None
    return Refund(
        channel, refund_cent, settlement, refund_cent if plain else None, 0 if plain else None, total
    )


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


# ---------------------------------------------------------------- field readers for the channels' builders
# (channels/<name>/settlement.py): a reported figure, bounded, or a SettlementError that names it


def refund_without_settlement_figure(
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


def bounded(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettlementError(f"{name} must be integer cents, got {type(value).__name__}")
    if not 0 <= value <= MAX_CENT:
        raise SettlementError(f"{name} {value} is outside 0..{MAX_CENT} cents")


def _not_above(value: int, limit: int, what: str, than: str) -> None:
    if value > limit:
        raise SettlementError(f"{what} {format_cents(value)} exceeds {than} {format_cents(limit)}")


def fen_field(obj: Mapping[str, Any], key: str) -> int:
    if key not in obj:
        raise SettlementError(f"missing {key}")
    try:
        value = received_cents(obj[key])
    except MoneyError as exc:
        raise SettlementError(f"{key}: {exc}") from None
    bounded(value, key)
    return value


def fen_string(fields: Mapping[str, str], key: str) -> int:
    text = fields.get(key)
    if text is None or text == "":
        raise SettlementError(f"missing {key}")
    if not isinstance(text, str) or not _FEN.match(text.strip()):
        raise SettlementError(f"{key}: not a whole number of fen: {text!r}")
    value = int(text.strip())
    bounded(value, key)
    return value


def yuan_field(obj: Mapping[str, Any], key: str) -> int:
    if obj.get(key) in (None, ""):
        raise SettlementError(f"missing {key}")
    return yuan_string(obj[key], key)


def yuan_string(text: Any, name: str) -> int:
    if not isinstance(text, str):
        raise SettlementError(f"{name}: a yuan amount is a string, got {type(text).__name__}")
    try:
        value = yuan_to_cents(text)
    except MoneyError as exc:
        raise SettlementError(f"{name}: {exc}") from None
    if value < 0:
        raise SettlementError(f"{name}: a reported amount is never negative: {text!r}")
    bounded(value, name)
    return value


def first_of(obj: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if obj.get(key) not in (None, ""):
            return obj[key]
    return None
