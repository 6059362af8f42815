"""Apply a stored raw notification to its order (R11–R19): the worker's use case."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any

from tally import errors
from tally.channels import outcome_of
from tally.domain.booking_day import booking_day_refusal
from tally.domain.clock import CHINA  # the channels' day cut (R34)
from tally.domain.journal import Head
from tally.domain.notifications import EVENT_OF_OUTCOME, OrderFacts, Outcome, PaymentNotice, mismatches
from tally.domain.orders import Event, Status, Verdict, transit
from tally.observability import M, count, logger
from tally.service.ingest import notice_from_raw
from tally.service.journal import DecisionJournal
from tally.store import payments
from tally.store.journal import JOURNAL
from tally.store.payments import PaymentStore
from tally.store.records import OrderRow, as_order
from tally.store.tables import OrderStore, RawStore, TransactionFailed, iso_now, order_key

CAS_ROUNDS = 3
JOURNAL_ROUNDS = (
    12  # a journal chain head taken by a concurrent booking (issue #36): read again after a jitter
)
JOURNAL_JITTER_S = 0.02


class _HeadMoved:
    """`_try_apply`'s answer when only the journal's chain head moved: the decision stands, read and try again."""


class PaymentApplied(str, Enum):
    BOOKED = "BOOKED"  # ledger entry + transition + handled=1
    TRANSITIONED = "TRANSITIONED"  # a non-money event applied (e.g. closed)
    DUPLICATE = "DUPLICATE"
    MANUAL = "MANUAL"  # handled=2: a person must look
    ALREADY_HANDLED = "ALREADY_HANDLED"


RetryLater = errors.RetryLater  # one class for "not yet": the worker leaves the message for SQS's redelivery


class ApplyService:
    def __init__(
        self,
        book: PaymentStore,
        raw: RawStore,
        orders: OrderStore,
        *,
        clock: Callable[[], float] = time.time,
        max_not_found_attempts: int = 4,
        synthetic_mchid: str | None = None,
        journal: DecisionJournal | None = None,
    ):
        """`synthetic_mchid`: the heartbeat's merchant (service/heartbeat.py): its money is booked like any, but
        what would go to a person (a second payment, a mismatch) is closed as synthetic instead (R54)."""
        self.book = book
        self.raw = raw
        self.orders = orders
        self.clock = clock
        self.max_not_found_attempts = max_not_found_attempts
        self.synthetic_mchid = synthetic_mchid
        self.journal = (
            journal  # issue #36: the booking's record rides in its transaction (service/journal.py)
        )

    def apply(self, raw_key: str, carried: dict[str, Any] | None = None) -> PaymentApplied:
        """Apply the raw row `raw_key`. `carried` is the notice the message carries (what the raw row
        holds): it saves reading the row; the transaction's `handled = 0` condition still guards it."""
        notice = self._notice(raw_key, carried)
        if notice is None:
            return PaymentApplied.ALREADY_HANDLED
        outcome = outcome_of(notice.channel, notice.trade_state)
        if outcome is None or outcome is Outcome.IN_BETWEEN:
            # read before any row is read: no chain head at hand, so not journaled (one call, docs/audit.md)
            parked = self._to_person(notice, f"unknown state {notice.trade_state!r}", M.APPLY_UNKNOWN_STATE)
            assert isinstance(parked, PaymentApplied)  # no head: never _HeadMoved
            return parked
        event = EVENT_OF_OUTCOME[outcome]
        lost = lost_head = 0
        while lost < CAS_ROUNDS and lost_head < JOURNAL_ROUNDS:
            result = self._try_apply(notice, event)
            if isinstance(result, PaymentApplied):
                return result
            if result is _HeadMoved:  # contention on the chain head, not on the order: back off a little
                lost_head += 1
                time.sleep(random.uniform(0, JOURNAL_JITTER_S * lost_head))
            else:
                lost += 1
        count(M.APPLY_RETRY, channel=notice.channel, merchant=notice.mchid)
        raise RetryLater(f"order of {raw_key} kept changing under us")

    def _notice(self, raw_key: str, carried: dict[str, Any] | None) -> PaymentNotice | None:
        if carried is not None:
            notice = PaymentNotice(**carried)
            if notice.raw_key != raw_key:
                raise ValueError(f"message for {raw_key} carries a notice for {notice.raw_key}")
            return notice
        row = self.raw.get(raw_key)
        if row is None:
            raise RetryLater(f"raw row {raw_key} not found")
        return notice_from_raw(row) if row.get("handled") == 0 else None

    def _try_apply(self, notice: PaymentNotice, event: Event) -> PaymentApplied | type[_HeadMoved] | None:
        """One read-decide-write round; None means the CAS was lost and we must re-read (R19)."""
        order, head = self._read_order(notice)  # tenant-safe key (R11)
        if order is None:
            return self._not_found(notice, head)
        facts = order_facts(order)
        problems = mismatches(notice, facts)
        if problems:
            return self._to_person(notice, "; ".join(problems), M.APPLY_MISMATCH, head)
        decision = transit(facts.status, event, notice.transaction_id, facts.transaction_id)
        if decision.verdict is Verdict.DUPLICATE:
            return self._duplicate(notice)
        # R50, before any path that moves money (booked, or a refund task for money paid after close or twice):
        # a report on a day no reconciliation will look at again, or on a future one, goes to a person
        if event is Event.PAY and notice.source != "recon":  # recon's own finding is on the day it looks at
            refusal = booking_day_refusal(notice.success_time, self.clock())
            if refusal is not None:
                return self._to_person(notice, f"not booked: {refusal}", M.APPLY_OUT_OF_WINDOW, head)
        if decision.verdict is Verdict.ILLEGAL:
            if decision.needs_refund_task:
                return self._illegal_money_in(notice, order, decision.reason, head)
            return self._to_person(notice, f"illegal transition: {decision.reason}", M.APPLY_ILLEGAL, head)
        assert decision.new_status is not None
        return self._commit(notice, order, event, decision.new_status, head)

    def _read_order(self, notice: PaymentNotice) -> tuple[OrderRow | None, Head | None]:
        """The order, and with a journal its chain's head in the same call (no extra AWS call, issue #36)."""
        if self.journal is None:
            return self.orders.get(notice.mchid, notice.out_trade_no), None
        pk = order_key(notice.mchid, notice.out_trade_no)
        row, head = self.journal.read(self.book.t.orders, {"pk": pk}, notice.mchid, pk)
        return as_order(row), head

    # ---------------------------------------------------------------- the one transaction (R18)

    def _commit(
        self, notice: PaymentNotice, order: OrderRow, event: Event, to: Status, head: Head | None = None
    ) -> PaymentApplied | type[_HeadMoved] | None:
        now = iso_now(self.clock())
        money_in = event is Event.PAY
        append = None
        if self.journal is not None and head is not None:
            append = self.journal.append(
                head,
                kind="payment.booked" if money_in else f"order.{event.value.lower()}",
                subject=order["pk"],
                at=now,
                facts=journal_facts(notice, order, event, to),
            )
        try:
            self.book.book(
                notice,
                order,
                event,
                to,
                now,
                bill_date=bill_date(notice.success_time, self.clock()),
                **({"journal": append} if append is not None else {}),
            )
        except TransactionFailed as exc:
            if exc.conflict and not exc.failed:  # contention: read again and decide again
                return _HeadMoved if append is not None else None
            if set(exc.failed) == {JOURNAL}:
                return _HeadMoved  # only the chain head moved (another booking's record): read again
            return self._after_cancel(notice, exc.failed)
        if money_in:
            count(M.APPLY_BOOKED, channel=notice.channel, merchant=notice.mchid)
            if notice.settlement is None:  # booked UNKNOWN with its queue item (store/payments.py, R43)
                count(M.SETTLEMENT_UNKNOWN, channel=notice.channel, merchant=notice.mchid)
                logger.error(
                    "payment booked with its settlement amount unknown: queue item created",
                    extra={"raw_key": notice.raw_key, "reason": notice.settlement_error},
                )
            logger.info(
                "payment booked",
                extra={"raw_key": notice.raw_key, "order": order["pk"], "paid_cent": notice.paid_cent},
            )
            return PaymentApplied.BOOKED
        return PaymentApplied.TRANSITIONED

    def _after_cancel(self, notice: PaymentNotice, failed: list[int]) -> PaymentApplied | None:
        """Decide by *which* condition failed (store/payments.py: order, transition, raw, ledger)."""
        if payments.RAW in failed:
            return PaymentApplied.ALREADY_HANDLED  # another worker finished this raw row
        if payments.SETTLEMENT_ITEM in failed:  # written with the entry: the same voucher was booked (R17)
            return self._duplicate(notice)
        if payments.TRANSITION in failed or payments.LEDGER in failed:
            return self._duplicate(notice)  # the same voucher was already applied (R17)
        if payments.ORDER in failed or JOURNAL in failed:
            return None  # lost a compare-and-set (the order, or the journal's chain head): re-read, decide again (R19)
        raise RetryLater(f"transaction for {notice.raw_key} cancelled without a failed condition")

    # ---------------------------------------------------------------- the paths that do not book

    def _duplicate(self, notice: PaymentNotice) -> PaymentApplied:
        self.raw.mark_handled(notice.raw_key, "DUPLICATE", iso_now(self.clock()))
        count(M.APPLY_DUPLICATE, channel=notice.channel, merchant=notice.mchid)
        return PaymentApplied.DUPLICATE

    def _not_found(
        self, notice: PaymentNotice, head: Head | None = None
    ) -> PaymentApplied | type[_HeadMoved]:
        attempts = self.raw.count_attempt(notice.raw_key)
        if attempts >= self.max_not_found_attempts:
            return self._to_person(
                notice, f"order not found after {attempts} attempts", M.APPLY_ORDER_NOT_FOUND, head
            )
        count(M.APPLY_RETRY, channel=notice.channel, merchant=notice.mchid)
        raise RetryLater(f"order {notice.mchid}#{notice.out_trade_no} not found (attempt {attempts})")

    def _synthetic(self, notice: PaymentNotice, reason: str) -> PaymentApplied:
        """R54: the heartbeat's own money never opens an item or a refund task: the raw row is closed with the
        reason, counted (HeartbeatDiscarded); the heartbeat's age alarm watches whether beats are booked."""
        self.raw.mark_handled(notice.raw_key, f"SYNTHETIC {reason}"[:200], iso_now(self.clock()))
        count(M.HEARTBEAT_DISCARDED)
        logger.warning("heartbeat payment not booked", extra={"raw_key": notice.raw_key, "reason": reason})
        return PaymentApplied.DUPLICATE

    def _illegal_money_in(
        self, notice: PaymentNotice, order: OrderRow, reason: str, head: Head | None = None
    ) -> PaymentApplied | type[_HeadMoved]:
        """R17: money arrived that must not be booked: handled=2 plus a refund task, inserted once; with a
        journal its record (`payment.illegal`, pinning the task) rides in the same transaction."""
        if notice.mchid == self.synthetic_mchid:
            return self._synthetic(notice, f"ILLEGAL {reason}")
        now = iso_now(self.clock())
        append = self._parked_record(notice, head, "payment.illegal", f"ILLEGAL {reason}", now)
        try:
            self.book.park_illegal(
                notice, order, reason, now, **({"journal": append} if append is not None else {})
            )
        except TransactionFailed as exc:
            if payments.PARKED_RAW in exc.failed:
                return PaymentApplied.ALREADY_HANDLED
            if payments.REFUND_TASK not in exc.failed:  # only the chain head moved: read again
                return _HeadMoved
            parked = self._park(notice, f"ILLEGAL {reason} (refund task existed)", now, head)
            if parked is not None:
                return parked
        count(M.APPLY_ILLEGAL, channel=notice.channel, merchant=notice.mchid)
        count(M.REFUND_TASK_CREATED, channel=notice.channel, merchant=notice.mchid)
        count(M.APPLY_MANUAL, channel=notice.channel, merchant=notice.mchid)
        logger.error(
            "money arrived on an order that cannot take it: refund task created",
            extra={"raw_key": notice.raw_key, "order": order["pk"], "reason": reason},
        )
        return PaymentApplied.MANUAL

    def _to_person(
        self, notice: PaymentNotice, reason: str, metric: str, head: Head | None = None
    ) -> PaymentApplied | type[_HeadMoved]:
        """handled=2 and an alarm. With the chain head read beside the order (every path after `_read_order`),
        the raw row's UpdateItem becomes one transaction with its `payment.parked` record: still one call."""
        if notice.mchid == self.synthetic_mchid:
            return self._synthetic(notice, reason)
        parked = self._park(notice, reason, iso_now(self.clock()), head)
        if parked is not None:
            return parked
        count(metric, channel=notice.channel, merchant=notice.mchid)
        count(M.APPLY_MANUAL, channel=notice.channel, merchant=notice.mchid)
        logger.error(
            "notification sent to the manual queue", extra={"raw_key": notice.raw_key, "reason": reason}
        )
        return PaymentApplied.MANUAL

    def _park(
        self, notice: PaymentNotice, reason: str, now: str, head: Head | None
    ) -> PaymentApplied | type[_HeadMoved] | None:
        """The raw row to a person (handled 0 → 2), journaled when the head is at hand; None: parked now."""
        append = self._parked_record(notice, head, "payment.parked", reason, now)
        if append is None:
            return (
                None
                if self.raw.send_to_person(notice.raw_key, reason, now)
                else PaymentApplied.ALREADY_HANDLED
            )
        try:
            self.book.park(notice.raw_key, reason, now, append)
        except TransactionFailed as exc:
            if payments.PARKED_RAW in exc.failed:
                return PaymentApplied.ALREADY_HANDLED
            return _HeadMoved  # the chain head moved (or a conflict on it): read again, decide again
        return None

    def _parked_record(
        self, notice: PaymentNotice, head: Head | None, kind: str, reason: str, now: str
    ) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None:
        """The journal items of money that is not booked but waits for a person: the raw key in its facts
        (the seal keeps that raw body as evidence), the refund task pinned where one is put (R17)."""
        if self.journal is None or head is None:
            return None
        return self.journal.append(
            head,
            kind=kind,
            subject=order_key(notice.mchid, notice.out_trade_no),
            at=now,
            facts={
                "channel": notice.channel,
                "transaction_id": notice.transaction_id,
                "raw_key": notice.raw_key,
                "paid_cent": notice.paid_cent,
                "currency": notice.currency,
                "trade_state": notice.trade_state,
                "source": notice.source,
                "reason": reason[:500],
            },
        )


def journal_facts(notice: PaymentNotice, order: OrderRow, event: Event, to: Status) -> dict[str, Any]:
    """What a booking's journal record says beside the rows it pins (issue #36)."""
    return {
        "event": event.value,
        "from_status": order["status"],
        "to_status": to.value,
        "order_version": int(order.get("version", 0)) + 1,
        "channel": notice.channel,
        "transaction_id": notice.transaction_id,
        "raw_key": notice.raw_key,
        "paid_cent": notice.paid_cent,
        "currency": notice.currency,
        "source": notice.source,
    }


def order_facts(order: OrderRow) -> OrderFacts:
    return OrderFacts(
        mchid=order["mchid"],
        sp_mchid=order.get("sp_mchid"),
        currency=order["currency"],
        amount_cent=int(order["amount_cent"]),
        status=Status(order["status"]),
        transaction_id=order.get("transaction_id"),
        channel=order.get("channel"),
    )


def bill_date(success_time: str | None, now_s: float) -> str:
    """The channel's day (Asia/Shanghai) of the success time; the server clock never decides (R34)."""
    if success_time:
        try:
            return datetime.fromisoformat(success_time).astimezone(CHINA).date().isoformat()
        except ValueError:
            logger.warning(
                "unparseable success_time; bill date from clock", extra={"success_time": success_time}
            )
    return datetime.fromtimestamp(now_s, CHINA).date().isoformat()
