"""Channel-neutral facts a verified notification (or query answer) carries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from tally.domain.money import yuan_text
from tally.domain.orders import Event, Status

_MERCHANT_ID = re.compile(r"[0-9]{1,32}")  # WeChat's mchid / sub_mchid, Alipay's app_id: ASCII digits


def is_merchant_id(value: object) -> bool:
    """A merchant id as every channel spells one: 1-32 ASCII digits. Anything else (a comma, an "=", a
    full-width digit) is refused where it comes in, so it never becomes a key, a queue filter or a file name."""
    return isinstance(value, str) and _MERCHANT_ID.fullmatch(value) is not None


@dataclass(frozen=True, init=False)
class PaymentNotice:
    channel: str
    transaction_id: str
    out_trade_no: str
    mchid: str  # the merchant that owns the order (the sub-merchant in partner mode)
    sp_mchid: str | None
    trade_state: str  # the channel's own word, kept verbatim
    order_total_cent: int  # what the entry check compares (R13)
    paid_cent: int  # what the channel received and what is booked (R13)
    currency: str
    success_time: str | None
    source: str = "notify"  # or "query" (R23)
    # R43: the channel's settlement figures (`Settlement.entry_fields()`, flat integer cents) or, when the
    # figures contradict each other, why not (`settlement_error`): booked UNKNOWN and sent to a person.
    settlement: dict[str, int] | None = None
    settlement_error: str | None = None

    def __init__(
        self,
        channel: str,
        transaction_id: str,
        out_trade_no: str,
        mchid: str,
        sp_mchid: str | None,
        trade_state: str,
        order_total_cent: int,
        paid_cent: int,
        currency: str,
        success_time: str | None,
        source: str = "notify",
        settlement: dict[str, int] | None = None,
        settlement_error: str | None = None,
    ) -> None:
        """The fields above, in their order: one dict update, where the frozen dataclass's own __init__ sets each
        field through object.__setattr__ (~2× the cost on every callback, issue #20). Still frozen, compared,
        replaced and turned into a dict as a dataclass (tests/unit/test_notify_hot_path.py)."""
        self.__dict__.update(
            {
                "channel": channel,
                "transaction_id": transaction_id,
                "out_trade_no": out_trade_no,
                "mchid": mchid,
                "sp_mchid": sp_mchid,
                "trade_state": trade_state,
                "order_total_cent": order_total_cent,
                "paid_cent": paid_cent,
                "currency": currency,
                "success_time": success_time,
                "source": source,
                "settlement": settlement,
                "settlement_error": settlement_error,
            }
        )

    @property
    def raw_key(self) -> str:
        """`channel#mchid#transaction_id` (R7, R39): the notification, its query answer and its ledger entry
        share it, so they dedupe; scoped by the order's merchant, so a tenant that reports another tenant's
        transaction id first (signing with its own keys) takes a key of its own, never the genuine one's."""
        return f"{self.channel}#{self.mchid}#{self.transaction_id}"

    def as_message(self) -> dict[str, object]:
        """A shallow dict (every field is a str/int/None): dataclasses.asdict deep-copies, ~150 µs."""
        return self.__dict__.copy()


class Outcome(str, Enum):
    """What a channel's state means for us; mapped by one explicit table per channel."""

    PAID = "PAID"
    CLOSED = "CLOSED"
    REVOKED = "REVOKED"
    PAY_ERROR = "PAY_ERROR"
    IN_BETWEEN = "IN_BETWEEN"  # not paid yet: an event row, never a raw payment row (R8)


EVENT_OF_OUTCOME: dict[Outcome, Event] = {
    Outcome.PAID: Event.PAY,
    Outcome.CLOSED: Event.CLOSE,
    Outcome.REVOKED: Event.REVOKE,
    Outcome.PAY_ERROR: Event.PAY_ERROR,
}


@dataclass(frozen=True)
class OrderFacts:
    """What the entry check needs to know about our order."""

    mchid: str
    sp_mchid: str | None
    currency: str
    amount_cent: int
    status: Status
    transaction_id: str | None
    channel: str | None = None  # the channel the order was created for (None: not recorded)


def mismatches(notice: PaymentNotice, order: OrderFacts) -> list[str]:
    """Certain differences between a notification and our order (R12). Empty means it matches."""
    found = []
    if order.channel and notice.channel != order.channel:
        found.append(f"channel {notice.channel} != order's {order.channel}")
    if notice.mchid != order.mchid:
        found.append(f"merchant {notice.mchid} != order's {order.mchid}")
    if (order.sp_mchid or None) != (notice.sp_mchid or None):
        found.append(f"service provider {notice.sp_mchid} != order's {order.sp_mchid}")
    if notice.currency != order.currency:
        found.append(f"currency {notice.currency} != order's {order.currency}")
    if notice.order_total_cent != order.amount_cent:
        found.append(f"amount {yuan_text(notice.order_total_cent)} ≠ order's {yuan_text(order.amount_cent)}")
    if notice.paid_cent > notice.order_total_cent or notice.paid_cent < 0:
        found.append(f"paid {yuan_text(notice.paid_cent)} outside 0.00..{yuan_text(notice.order_total_cent)}")
    return found
