"""Refunds, pure: the refund state machine, the guard arithmetic and what a channel's answer means (R26–R30).

A refund is created PENDING together with its reservation (R26, R27), then the channel is called
outside any transaction (R28). Its acceptance makes it ACCEPTED; only a notification or a query
moves it to SUCCESS or FAIL (R29). SUCCESS books the reserved amount (a ledger entry), FAIL gives
it back, and both happen once because they ride on the refund's own status change.

    PENDING --ACCEPT--> ACCEPTED
    PENDING | ACCEPTED | MANUAL --SUCCEED--> SUCCESS   (effect BOOK)
    PENDING | ACCEPTED | MANUAL --FAIL-->    FAIL      (effect RELEASE)
    PENDING | ACCEPTED --ABNORMAL | EXPIRE | MISMATCH | UNKNOWN--> MANUAL (a person; the reservation stays held)
    MANUAL --REROUTE--> ACCEPTED   (apply-abnormal-refund taken by the channel: polled again, still held)

A FAILed refund_no is spent: a new attempt needs a new refund_no (R29, R30).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tally import errors
from tally.domain.money import yuan_text


class RefundStatus(str, Enum):
    PENDING = "PENDING"  # reserved and stored; the channel has not (knowingly) accepted it yet
    ACCEPTED = "ACCEPTED"  # the channel took it; the outcome is still open (R29)
    SUCCESS = "SUCCESS"  # money went back to the payer: booked in the ledger
    FAIL = "FAIL"  # definitively not refunded: reservation released; refund_no spent
    MANUAL = "MANUAL"  # a person must look (ABNORMAL, no outcome before expiry, mismatch)


class RefundEvent(str, Enum):
    ACCEPT = "ACCEPT"  # the channel's create answer said it took the refund
    SUCCEED = "SUCCEED"  # notification / query: SUCCESS
    FAIL = "FAIL"  # notification / query: CLOSED; or the create call was definitively rejected
    ABNORMAL = "ABNORMAL"  # notification / query: ABNORMAL (e.g. frozen bank card)
    EXPIRE = "EXPIRE"  # polled until expiry without an outcome
    MISMATCH = "MISMATCH"  # the channel reports other facts (amount, merchant, order) than ours
    UNKNOWN = "UNKNOWN"  # the channel answered something no table maps (R22)
    REROUTE = "REROUTE"  # a person sent an ABNORMAL refund elsewhere (apply-abnormal-refund) and it was taken


class Effect(str, Enum):
    NONE = "NONE"
    BOOK = "BOOK"  # the reservation becomes a refund ledger entry
    RELEASE = "RELEASE"  # the reservation goes back to what may still be refunded


class Verdict(str, Enum):
    OK = "OK"
    DUPLICATE = "DUPLICATE"  # already there: nothing to write
    ILLEGAL = "ILLEGAL"  # the channel contradicts an outcome we already applied: a person


IN_FLIGHT = frozenset(
    {RefundStatus.PENDING, RefundStatus.ACCEPTED, RefundStatus.MANUAL}
)  # amount still reserved
POLLED = frozenset({RefundStatus.PENDING, RefundStatus.ACCEPTED})  # in the sparse poll index
TERMINAL = frozenset({RefundStatus.SUCCESS, RefundStatus.FAIL})

_OPEN = (RefundStatus.PENDING, RefundStatus.ACCEPTED, RefundStatus.MANUAL)
TRANSIT: dict[tuple[RefundStatus, RefundEvent], tuple[RefundStatus, Effect]] = {
    (RefundStatus.PENDING, RefundEvent.ACCEPT): (RefundStatus.ACCEPTED, Effect.NONE),
    (RefundStatus.MANUAL, RefundEvent.REROUTE): (RefundStatus.ACCEPTED, Effect.NONE),
    **{(s, RefundEvent.SUCCEED): (RefundStatus.SUCCESS, Effect.BOOK) for s in _OPEN},
    **{(s, RefundEvent.FAIL): (RefundStatus.FAIL, Effect.RELEASE) for s in _OPEN},
    **{
        (s, e): (RefundStatus.MANUAL, Effect.NONE)
        for s in (RefundStatus.PENDING, RefundStatus.ACCEPTED)
        for e in (RefundEvent.ABNORMAL, RefundEvent.EXPIRE, RefundEvent.MISMATCH, RefundEvent.UNKNOWN)
    },
}

# Events that change nothing when they meet these statuses (late or repeated news).
_DUPLICATE: frozenset[tuple[RefundStatus, RefundEvent]] = frozenset(
    {
        (RefundStatus.ACCEPTED, RefundEvent.ACCEPT),
        (RefundStatus.SUCCESS, RefundEvent.SUCCEED),
        (RefundStatus.FAIL, RefundEvent.FAIL),
    }
    # the create call answered after the outcome was already applied (notification first)
    | {(s, RefundEvent.ACCEPT) for s in (RefundStatus.SUCCESS, RefundStatus.FAIL, RefundStatus.MANUAL)}
    | {
        (RefundStatus.MANUAL, e)
        for e in (RefundEvent.ABNORMAL, RefundEvent.EXPIRE, RefundEvent.MISMATCH, RefundEvent.UNKNOWN)
    }
)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    new_status: RefundStatus | None = None
    effect: Effect = Effect.NONE
    reason: str = ""


def transit(status: RefundStatus, event: RefundEvent) -> Decision:
    found = TRANSIT.get((status, event))
    if found is not None:
        return Decision(Verdict.OK, found[0], found[1])
    if (status, event) in _DUPLICATE:
        return Decision(Verdict.DUPLICATE, status)
    return Decision(Verdict.ILLEGAL, None, Effect.NONE, f"no edge {status.value} --{event.value}-->")


# ---------------------------------------------------------------- the guard (R27)


class ExceedsRefundable(errors.Conflict, ValueError):
    code = "exceeds_refundable"

    def __init__(self, amount_cent: int, refundable_cent: int):
        super().__init__(
            f"amount {yuan_text(amount_cent)} exceeds refundable {yuan_text(refundable_cent)}",
            fields=[errors.field_error("amount_cent", "exceeds_refundable", "more than is left to refund")],
        )
        self.amount_cent = amount_cent
        self.refundable_cent = refundable_cent

    def details(self) -> dict[str, Any]:
        return {"refundable_cent": self.refundable_cent, "amount_cent": self.amount_cent}


def check_reserve(refundable_cent: int, amount_cent: int) -> int:
    """refunded + in flight + this ≤ paid, kept as one number: `refundable = paid − refunded − in flight`.

    Returns the refundable amount after the reservation. DynamoDB cannot add inside a condition, so the
    store runs exactly this as `SET refundable_cent = refundable_cent - :x` under `refundable_cent >= :x`.
    """
    if isinstance(amount_cent, bool) or not isinstance(amount_cent, int) or amount_cent <= 0:
        raise ValueError("a refund amount is a positive integer number of cents")
    if amount_cent > refundable_cent:
        raise ExceedsRefundable(amount_cent, refundable_cent)
    return refundable_cent - amount_cent


@dataclass
class RefundBook:
    """One payment's refunds in memory: the arithmetic every store must reproduce (property tests)."""

    paid_cent: int
    refundable_cent: int = -1
    refunds: dict[str, tuple[int, RefundStatus]] = field(default_factory=dict)
    booked_cent: int = 0

    def __post_init__(self) -> None:
        if self.refundable_cent < 0:
            self.refundable_cent = self.paid_cent

    def request(self, refund_no: str, amount_cent: int) -> RefundStatus:
        """Create-or-return (R26): an existing refund_no never reserves twice."""
        if refund_no in self.refunds:
            return self.refunds[refund_no][1]
        self.refundable_cent = check_reserve(self.refundable_cent, amount_cent)
        self.refunds[refund_no] = (amount_cent, RefundStatus.PENDING)
        return RefundStatus.PENDING

    def apply(self, refund_no: str, event: RefundEvent) -> Decision:
        amount, status = self.refunds[refund_no]
        decision = transit(status, event)
        if decision.verdict is Verdict.OK:
            assert decision.new_status is not None
            if decision.effect is Effect.BOOK:
                self.booked_cent += amount
            elif decision.effect is Effect.RELEASE:
                self.refundable_cent += amount
            self.refunds[refund_no] = (amount, decision.new_status)
        return decision

    @property
    def reserved_cent(self) -> int:
        return sum(a for a, s in self.refunds.values() if s in IN_FLIGHT)


# ---------------------------------------------------------------- what the channel said


class AnswerKind(str, Enum):
    ACCEPTED = "ACCEPTED"  # create: the channel took the refund (whatever status it shows, R29)
    OUTCOME = "OUTCOME"  # query / notification: a refund status (see `status`)
    RETRY = "RETRY"  # no answer, an unverified answer, or a retryable error: same refund_no later
    REJECTED = "REJECTED"  # create: a verified, definitive refusal; the refund never existed at the channel
    NOT_FOUND = "NOT_FOUND"  # query: the channel does not know this refund_no (not "closed", R22)
    UNKNOWN = "UNKNOWN"  # an answer no table maps: a person


@dataclass(frozen=True)
class ChannelAnswer:
    kind: AnswerKind
    event: RefundEvent | None = None  # for OUTCOME: SUCCEED / FAIL / ABNORMAL; None = still processing
    refund_id: str | None = None
    refund_cent: int | None = None
    success_time: str | None = None
    code: str = ""
    message: str = ""
    notice: RefundNotice | None = None  # query answers: the full report, stored like a notification


@dataclass(frozen=True)
class RefundNotice:
    """A verified refund notification (or query answer), channel-neutral (R7, R30)."""

    channel: str
    refund_no: str  # WeChat out_refund_no = Alipay out_request_no: one column (R30)
    refund_id: str  # the channel's id: for reconciliation, never for dedupe (R30)
    status: str  # the channel's word, verbatim (SUCCESS / CLOSED / ABNORMAL)
    event: RefundEvent | None  # None = a status no table maps: a person
    mchid: str
    sp_mchid: str | None
    out_trade_no: str
    transaction_id: str
    refund_cent: int | None  # this refund's amount; None when the channel reports only a cumulative total
    total_cent: int
    success_time: str | None
    source: str = "notify"
    # Alipay's refund notification reports `refund_fee` = everything refunded on the trade so far (§5.1):
    # checked against the order's refunds by check_cumulative, never against this refund alone.
    cumulative_cent: int | None = None
    # R43: the refund's settlement figures (`Refund.entry_fields()`) or why they could not be built from the
    # report alone (`settlement_error`), and the report's figures as the builder takes them (`settlement_basis`,
    # domain/settlement.py), so the apply step can build them again with the booked payment's Settlement.
    settlement: dict[str, int] | None = None
    settlement_error: str | None = None
    settlement_basis: dict[str, Any] | None = None

    @property
    def raw_key(self) -> str:
        """Scoped per merchant (R39): a report one tenant signs can never take the key of another
        tenant's report, whatever refund number it names."""
        return refund_raw_key(self.channel, self.mchid, self.refund_no)


def refund_raw_key(channel: str, mchid: str, refund_no: str) -> str:
    return f"{channel}#{mchid}#{refund_no}"


def tenant_mismatch(
    notice: RefundNotice, refund: Mapping[str, object], refund_sp_mchid: str | None
) -> tuple[str, str] | None:
    """(cause, reason) when a report does not belong to the refund it names (R39): another merchant, another
    service provider / ISV app, another order. Such a report is parked as a suspected forgery and changes
    nothing; an amount difference on the refund's own report is `mismatches` (a person, R29)."""
    if notice.mchid != refund.get("mchid"):
        return (
            "merchant_mismatch",
            f"report for merchant {notice.mchid} names a refund number it does not own",
        )
    if (notice.sp_mchid or None) != (refund_sp_mchid or None):
        return (
            "provider_mismatch",
            f"report through provider {notice.sp_mchid or '(none)'}, the refund's is {refund_sp_mchid or '(none)'}",
        )
    if notice.out_trade_no != refund.get("out_trade_no"):
        return "order_mismatch", f"report names order {notice.out_trade_no[:64]}, not the refund's order"
    return None


def _yuan_of(value: object) -> str:
    """A stored amount (integer cents) for a message; anything else as it is."""
    return yuan_text(value) if isinstance(value, int) and not isinstance(value, bool) else repr(value)


def mismatches(notice: RefundNotice, refund: Mapping[str, object]) -> list[str]:
    """Certain differences between what the channel reports and our refund row."""
    found = []
    if notice.mchid != refund.get("mchid"):
        found.append(f"merchant {notice.mchid} != refund's {refund.get('mchid')}")
    if notice.out_trade_no != refund.get("out_trade_no"):
        found.append(f"out_trade_no {notice.out_trade_no} != refund's {refund.get('out_trade_no')}")
    if notice.refund_cent is not None and notice.refund_cent != refund.get("amount_cent"):
        found.append(
            f"refund amount {yuan_text(notice.refund_cent)} ≠ ours {_yuan_of(refund.get('amount_cent'))}"
        )
    if notice.refund_cent is None and notice.cumulative_cent is None:
        found.append("the report carries no refund amount at all")
    return found


def check_cumulative(
    cumulative_cent: int,
    refund_amount_cent: int,
    order_paid_cent: int,
    order_refundable_cent: int,
    extra_held_cent: int = 0,
) -> list[str]:
    """A cumulative refunded total (Alipay `refund_fee`) against our books for the order (R27, R29).

    Notifications of several refunds of one trade may arrive in any order, so the channel's total when
    this refund succeeded lies between this refund's own amount and everything we have booked or still
    hold for the order (paid − refundable = refunded + in flight, this refund included). Outside those
    bounds the channel refunded money we do not know of (by hand?) or another amount: a person.
    `extra_held_cent`: a refund held on a refund task, which the order's refundable does not count."""
    upper = order_paid_cent - order_refundable_cent + extra_held_cent
    if cumulative_cent < refund_amount_cent:
        return [
            f"channel's cumulative refunded {yuan_text(cumulative_cent)} < this refund's {yuan_text(refund_amount_cent)}"
        ]
    if cumulative_cent > upper:
        return [
            f"channel's cumulative refunded {yuan_text(cumulative_cent)} > ours booked + in flight {yuan_text(upper)}"
        ]
    return []
