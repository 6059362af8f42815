"""The order state machine: one explicit transit table (R16, R17, R19, R24).

transit() answers OK (with the new status), DUPLICATE (this voucher was already applied) or
ILLEGAL (the order has no such edge: the money arrived but must not be booked).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    WAIT_PAY = "WAIT_PAY"
    PAID = "PAID"
    CLOSED = "CLOSED"
    PAY_FAILED = "PAY_FAILED"


class Event(str, Enum):
    PAY = "PAY"  # the channel took the money
    CLOSE = "CLOSE"  # closed unpaid (timeout / merchant close)
    REVOKE = "REVOKE"  # MICROPAY revoked
    PAY_ERROR = "PAY_ERROR"  # MICROPAY failed


class Verdict(str, Enum):
    OK = "OK"
    DUPLICATE = "DUPLICATE"
    ILLEGAL = "ILLEGAL"


TRANSIT: dict[tuple[Status, Event], Status] = {
    (Status.WAIT_PAY, Event.PAY): Status.PAID,
    (Status.WAIT_PAY, Event.CLOSE): Status.CLOSED,
    (Status.WAIT_PAY, Event.REVOKE): Status.CLOSED,
    (Status.WAIT_PAY, Event.PAY_ERROR): Status.PAY_FAILED,
    # A failed MICROPAY attempt can still be paid on a later attempt.
    (Status.PAY_FAILED, Event.PAY): Status.PAID,
    (Status.PAY_FAILED, Event.CLOSE): Status.CLOSED,
}

# Events that bring money in: an ILLEGAL one needs a refund task (R17).
MONEY_IN = frozenset({Event.PAY})


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    new_status: Status | None = None
    reason: str = ""

    @property
    def needs_refund_task(self) -> bool:
        return self.verdict is Verdict.ILLEGAL and self.reason.startswith("money-in")


def transit(status: Status, event: Event, voucher: str, applied_voucher: str | None) -> Decision:
    """Decide what `event` (identified by `voucher`, e.g. a transaction id) does to an order.

    `applied_voucher` is the voucher that moved the order into its current status, if any.
    """
    if applied_voucher is not None and applied_voucher == voucher and _lands_in(event, status):
        return Decision(Verdict.DUPLICATE, status, "voucher already applied")
    target = TRANSIT.get((status, event))
    if target is not None:
        return Decision(Verdict.OK, target)
    if event in MONEY_IN:
        kind = "double payment" if status is Status.PAID else f"paid while {status.value}"
        return Decision(Verdict.ILLEGAL, None, f"money-in: {kind}")
    # A paid order never moves back because an older snapshot says unpaid (R24).
    return Decision(Verdict.ILLEGAL, None, f"no edge {status.value} --{event.value}-->")


def _lands_in(event: Event, status: Status) -> bool:
    return any(ev is event and to is status for (_, ev), to in TRANSIT.items())
