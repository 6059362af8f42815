"""Refunds that can never pay out twice (R26–R30): create, submit, apply outcomes, poll, work refund tasks.

1. create: ONE transaction reserves the amount on its hold and puts the refund PENDING (R26, R27).
2. submit: the channel is called outside any transaction (R28), always with the stored refund_no.
   Accepted → ACCEPTED; no answer / retryable → stays PENDING and poll_due retries with the SAME
   refund_no; a definitive refusal → FAIL (released); an unmapped answer → MANUAL.
3. outcomes only from the channel (R29): notifications (via refund_raw + the queue) and queries
   (poll_due) go through apply_notification: the refund's status CAS, the ledger entry or the
   release, and raw handled=1 commit in one transaction, so a release or a booking happens once.

The channel clients are per channel: `channels[channel](mchid) -> RefundChannel` (create/query).
"""

from __future__ import annotations

import hashlib
import random
import re
import secrets
import string
import time
from collections import Counter
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Protocol

from tally import errors
from tally.channels.refunds import refund_event_of
from tally.channels.settlement import refund_fields
from tally.domain.booking_day import booking_day_refusal
from tally.domain.journal import Head
from tally.domain.money import MAX_CENT, yuan_text
from tally.domain.notifications import is_merchant_id
from tally.domain.refunds import (
    IN_FLIGHT,
    AnswerKind,
    ChannelAnswer,
    Decision,
    Effect,
    ExceedsRefundable,
    RefundEvent,
    RefundNotice,
    RefundStatus,
    Verdict,
    check_cumulative,
    check_reserve,
    mismatches,
    refund_raw_key,
    tenant_mismatch,
    transit,
)
from tally.domain.settlement import settlement_of_entry
from tally.observability import M, count, logger
from tally.service.apply import RetryLater, bill_date
from tally.service.journal import DecisionJournal
from tally.service.refund_inbox import RefundInbox, notice_from_raw, park_forgery
from tally.store.records import RefundRow, as_refund
from tally.store.refunds import (
    HOLD_ORDER,
    HOLD_TASK,
    HoldRefused,
    RefundRawStore,
    RefundStore,
    TransactionFailed,
    legacy_free,
    open_holds,
    poll_pk,
    refund_key,
    refund_no_held,
)
from tally.store.shards import updated_shard
from tally.store.tables import OrderStore, iso_now, order_key

REFUND_NO = re.compile(r"^[0-9A-Za-z_\-|*@]{6,64}$")  # WeChat out_refund_no charset (§2.3)
OUT_TRADE_NO = re.compile(r"^[0-9A-Za-z_\-*]{6,32}$")
BACKOFF_S = (60, 60, 120, 300, 900, 1800, 3600)  # between polls of one refund; then hourly until expiry
CAS_ROUNDS = 4
POLL_MAX_ERRORS = 5  # polls of one refund that raised in a row before a person looks (L3, like F1's orders)
# a hold older than this is abandoned (its create call crashed or timed out): well above the refunds
# function's 15 s timeout, so a live create call always lands its answer first
HOLD_ABANDONED_S = 120


class RefundChannel(Protocol):
    def create(self, refund: dict[str, Any]) -> ChannelAnswer: ...

    def query(self, refund: dict[str, Any]) -> ChannelAnswer: ...


class InvalidRefund(errors.InvalidRequest, ValueError):
    """The request is wrong (HTTP 400)."""


REROUTE_CLAIM_S = 300  # an apply-abnormal-refund call holds the refund this long at most (then it died)


class RefundConflict(errors.Conflict, ValueError):
    """409: the refund cannot be made as asked (refund_no reused for other terms, spent, order not paid)."""


class NotFound(errors.NotFound, LookupError):
    pass


class Busy(errors.Busy, RuntimeError):
    """Contention did not settle: retry with the same refund_no (HTTP 503)."""


class RefundApplied(str, Enum):
    APPLIED = "APPLIED"
    DUPLICATE = "DUPLICATE"
    ILLEGAL = "ILLEGAL"
    MANUAL = "MANUAL"
    ALREADY_HANDLED = "ALREADY_HANDLED"
    FORGED = "FORGED"  # the report names a refund of another tenant / provider / order: parked (R39)


def new_refund_no(now_s: float) -> str:
    """R + UTC time + 12 random characters: unique without a lookup, sortable by creation (R26)."""
    alphabet = string.ascii_uppercase + string.digits
    return (
        "R"
        + time.strftime("%Y%m%d%H%M%S", time.gmtime(now_s))
        + "".join(secrets.choice(alphabet) for _ in range(12))
    )


def task_refund_no(task_pk: str) -> str:
    """Derived from the task, so working a task again can never start a second refund (R26)."""
    return "RT" + hashlib.sha256(task_pk.encode()).hexdigest()[:30].upper()


class RefundService:
    def __init__(
        self,
        store: RefundStore,
        raw: RefundRawStore,
        orders: OrderStore,
        inbox: RefundInbox,
        channels: Mapping[str, Callable[[str], RefundChannel]],
        *,
        clock: Callable[[], float] = time.time,
        task_policy: str = "manual",
        expiry_s: int = 7 * 86400,
        not_found_attempts: int = 5,
        journal: DecisionJournal | None = None,
    ):
        if task_policy not in ("auto", "manual"):
            raise ValueError("REFUND_TASK_POLICY must be auto or manual")
        self.store = store
        self.raw = raw
        self.orders = orders
        self.inbox = inbox
        self.channels = channels
        self.clock = clock
        self.task_policy = task_policy
        self.expiry_s = expiry_s
        self.not_found_attempts = not_found_attempts
        self.journal = journal  # issue #36: a refund's state change is journaled in its transaction

    # ================================================================== create (R26, R27, R28)

    def create(self, request: Any) -> tuple[dict[str, Any], bool]:
        """Returns (the refund, created). An existing refund_no answers the existing refund."""
        spec = validate_refund_request(request)
        if spec["refund_no"]:
            return self._create_named(spec)
        return self._create_generated(spec), True

    def _create_generated(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Two AWS calls around the channel call, for the number we generate (R26):

        1. one UpdateItem on the order reserves the amount (R27), records the refund as an open hold on
           the order and returns the order: the read and the reservation are the same request;
        2. the channel call, outside any transaction (R28);
        3. one transaction puts the refund row as the channel's answer left it and closes the hold.
        A crash between 1 and 3 leaves the hold: the poller turns it into a PENDING refund after
        HOLD_ABANDONED_S (`_materialise`), which re-sends the same refund_no to the channel (R26)."""
        now_s = self.clock()
        refund_no = new_refund_no(now_s)
        hold = {
            "amount_cent": spec["amount_cent"],
            "reason": spec["reason"],
            "created_at": iso_now(now_s),
            "abandoned_at": iso_now(now_s + HOLD_ABANDONED_S),
        }
        order_pk = order_key(spec["mchid"], spec["out_trade_no"])
        try:
            order = self.store.reserve_and_hold(order_pk, refund_no, hold, hold["abandoned_at"])
        except HoldRefused as exc:
            if exc.order is None:
                raise NotFound(
                    f"no order {spec['mchid']}/{spec['out_trade_no']}", code="order_not_found"
                ) from None
            refuse_unrefundable(exc.order, spec["amount_cent"])
            raise Busy(f"refund {refund_no}: the number is taken on this order, retry") from None
        row = self._new_row(
            refund_no, order, spec["amount_cent"], spec["reason"], HOLD_ORDER, order_pk, "api"
        )
        count(M.REFUND_CREATED, channel=row.get("channel"), merchant=row.get("mchid"))
        logger.info(
            "refund reserved",
            extra={"refund_no": refund_no, "order": order_pk, "amount_cent": row["amount_cent"]},
        )
        try:
            channel = self._channel(order["channel"], order["mchid"])
        except (NotFound, RefundConflict) as exc:
            self._land(
                row, None, f"no channel client: {exc}"
            )  # the refund is stored FAIL, the amount given back
            raise
        return public_refund(self._land(row, channel.create(dict(row))))

    def _land(self, row: RefundRow, answer: ChannelAnswer | None, refusal: str = "") -> RefundRow:
        """The refund row as the channel's answer leaves it + the hold closed, in one transaction.
        `answer` None: the channel was never called (`refusal` says why): FAIL, reservation given back."""
        label, event, reason, refund_id = (
            self._read_answer(row, answer) if answer else ("NOT_SENT", RefundEvent.FAIL, refusal, None)
        )
        now_s = self.clock()
        if (
            event is None
        ):  # sent, outcome unknown: stored PENDING, re-sent by the poll with the same refund_no
            landed = row.copy()
            landed["poll_attempts"] = 1
            landed["poll_due"] = iso_now(now_s + BACKOFF_S[1])
            landed["last_poll_note"] = f"create: {reason}"[:300]
            to, effect = RefundStatus.PENDING, Effect.NONE
        else:
            decision = transit(RefundStatus.PENDING, event)
            assert decision.new_status is not None  # every create answer is an edge out of PENDING
            to, effect = decision.new_status, decision.effect
            landed = self.store.landed(
                row, to.value, iso_now(now_s), **landing(to, event, reason, refund_id, None, now_s)
            )
        release = row["amount_cent"] if effect is Effect.RELEASE else 0
        items = [
            self.store.put_new(landed),
            self.store.close_hold(row["order_pk"], row["refund_no"], release, iso_now(now_s)),
        ]
        for _ in range(CAS_ROUNDS):
            # an answer that moves money (a FAIL gives the reservation back) is journaled: its head read is the
            # one call more; ACCEPTED / PENDING move none and read no head (the create's budget, docs/audit.md)
            journaled = (
                self._journal_items(
                    None, row, items, RefundStatus.PENDING, to, event, effect, iso_now(now_s), "api"
                )
                if event is not None
                else []
            )
            try:
                self.store.transact(items + journaled)
                break
            except TransactionFailed as exc:
                if exc.conflict and not exc.failed:
                    continue  # another refund's write on the same order at the same instant: again
                if journaled and all(i >= len(items) for i in exc.failed):
                    continue  # only the chain head moved: read it again
                return self._landed_meanwhile(row, answer)
        else:  # the hold stays: the poller stores it PENDING once abandoned and re-sends the same number
            raise Busy(
                f"refund {row['refund_no']}: contention on the order; it is reserved and will be re-sent"
            )
        self._count_answer(row, label, reason)
        if to is not RefundStatus.PENDING:
            self._count_transition(row, to, effect, reason)
        return landed

    def _landed_meanwhile(self, row: RefundRow, answer: ChannelAnswer | None) -> RefundRow:
        """The hold was closed by someone else: the poller took it for abandoned (this call outlived
        HOLD_ABANDONED_S) and stored the refund PENDING; the answer applies to that row like any other."""
        logger.warning(
            "refund hold was materialised before the create answer landed",
            extra={"refund_no": row["refund_no"], "refund_key": row["pk"]},
        )
        existing = self.store.get(row["pk"])
        if existing is None or existing.get("order_pk") != row["order_pk"] or answer is None:
            raise RuntimeError(
                f"refund {row['refund_no']}: hold closed by someone else and no row of ours; "
                "left for the retry and the DLQ alarm"
            )
        return self._after_create(existing, answer)[1]

    def _materialise(self, order: dict[str, Any], refund_no: str, hold: dict[str, Any]) -> str:
        """An abandoned hold (create crashed or timed out between reserving and storing the answer): the
        refund becomes PENDING and due now, so the poll re-sends the same refund_no (R26); the channel
        answers the refund it already took, or takes it now."""
        now_s = self.clock()
        row = self._new_row(
            refund_no, order, int(hold["amount_cent"]), hold.get("reason", ""), HOLD_ORDER, order["pk"], "api"
        )
        row["created_at"] = hold["created_at"]
        row["poll_due"] = iso_now(now_s)
        row["last_poll_note"] = "recovered abandoned hold"
        try:
            self.store.transact(
                [self.store.put_new(row), self.store.close_hold(order["pk"], refund_no, 0, iso_now(now_s))]
            )
        except TransactionFailed as exc:
            if exc.conflict and not exc.failed:
                return "CONFLICT"  # the hold stays open and due: the next run takes it
            return "LANDED_MEANWHILE"  # the create call stored its answer after all
        count(M.REFUND_HOLD_RECOVERED, channel=row.get("channel"), merchant=row.get("mchid"))
        logger.warning(
            "abandoned refund hold stored PENDING: the poll re-sends it with the same refund_no",
            extra={"refund_no": refund_no, "order": order["pk"]},
        )
        return "RECOVERED"

    def sweep_holds(self, limit: int = 50) -> dict[str, int]:
        """Orders on the hold index whose due time passed: abandoned holds → PENDING refunds; an order
        with no open hold leaves the index; younger holds are looked at again when they would be abandoned."""
        now_s = self.clock()
        done: Counter[str] = Counter()
        now = iso_now(now_s)
        for order in self.store.holds_due(now, limit):
            young = []
            for refund_no, hold in open_holds(order).items():
                if hold["abandoned_at"] <= now:
                    done[self._materialise(order, refund_no, hold)] += 1
                else:
                    young.append(hold["abandoned_at"])
            if young:
                self.store.hold_due_later(order["pk"], min(young))
            else:
                self.store.clear_hold_index(order["pk"])  # bookkeeping: not counted
        return dict(done)

    def _create_named(self, spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The caller's own refund_no: three AWS calls. The number must be checked unused across ALL of
        the merchant's orders before the channel sees it (it is the channel's refund key too, R30), so the
        refund row is put in the reserving transaction, which needs the order read first. The key is the
        merchant's (`refund_key`): another merchant's same number is another row; the transaction also
        checks that no row stored before the keys were scoped holds this merchant's number (`legacy_free`)."""
        order = self.orders.get(spec["mchid"], spec["out_trade_no"])
        if order is None:
            raise NotFound(f"no order {spec['mchid']}/{spec['out_trade_no']}", code="order_not_found")
        refund_no = spec["refund_no"]
        try:  # an early answer; the guard that counts is the transaction below
            refuse_unrefundable(order, spec["amount_cent"])
        except (RefundConflict, ExceedsRefundable):
            # a retry of a refund that took what was left must still answer that refund (read on this path only)
            existing = self.store.find(order["mchid"], refund_no)
            if existing is not None:
                return self._same_refund(existing, order["pk"], spec["amount_cent"]), False
            raise
        channel = self._channel(order["channel"], order["mchid"])  # unknown merchant: refuse before reserving
        row = self._new_row(
            refund_no, order, spec["amount_cent"], spec["reason"], HOLD_ORDER, order["pk"], "api"
        )
        for _ in range(CAS_ROUNDS):
            try:
                self.store.transact(
                    [
                        self.store.reserve_on_order(order["pk"], row["amount_cent"], row["created_at"]),
                        self.store.put_new(row),
                        legacy_free(self.store.t.refunds, order["mchid"], refund_no),
                    ]
                )
                break
            except TransactionFailed as exc:
                if 1 in exc.failed or 2 in exc.failed:  # the merchant's number exists (a retry, a lost race)
                    hit = 1 if 1 in exc.failed else 2
                    existing = (
                        as_refund(exc.items[hit]) or self.store.find(order["mchid"], refund_no) or RefundRow()
                    )
                    return self._same_refund(existing, order["pk"], spec["amount_cent"]), False
                if 0 in exc.failed:
                    existing = self.store.find(order["mchid"], refund_no)  # a racing retry of ours?
                    if existing is not None:
                        return self._same_refund(existing, order["pk"], spec["amount_cent"]), False
                    refuse_unrefundable(
                        exc.items[0] or self.orders.get(spec["mchid"], spec["out_trade_no"]) or {},
                        spec["amount_cent"],
                    )
                if not exc.conflict:
                    raise
        else:
            raise Busy(f"refund {refund_no}: contention on the order, retry with the same refund_no")
        count(M.REFUND_CREATED, channel=row.get("channel"), merchant=row.get("mchid"))
        logger.info(
            "refund reserved",
            extra={"refund_no": refund_no, "order": order["pk"], "amount_cent": row["amount_cent"]},
        )
        return public_refund(self._submit(row, channel)), True

    def _same_refund(self, existing: Mapping[str, Any], order_pk: str, amount_cent: int) -> dict[str, Any]:
        if existing.get("mchid") != order_pk.split("#", 1)[0]:
            # never reached since keys are scoped per merchant (`find`, `legacy_free`); kept as the guard
            # that no message names another tenant's refund (R39)
            raise RefundConflict(
                f"refund_no {existing.get('refund_no')} cannot be used: choose another refund_no"
            )
        if existing.get("order_pk") != order_pk or existing.get("amount_cent") != amount_cent:
            term = "out_trade_no" if existing.get("order_pk") != order_pk else "amount_cent"
            raise RefundConflict(
                f"refund_no {existing.get('refund_no')} already exists for order "
                f"{existing.get('out_trade_no')} amount {yuan_text(int(existing.get('amount_cent') or 0))}: "
                "use a new refund_no",
                code="refund_terms_differ",
                fields=[errors.field_error(term, "differs", f"{term} differs from the stored refund")],
            )
        if existing.get("status") == RefundStatus.FAIL.value:
            raise RefundConflict(
                f"refund_no {existing.get('refund_no')} failed ({existing.get('fail_reason', '')}); "
                "a failed refund_no is spent: retry with a new refund_no",
                code="refund_no_spent",
            )
        return public_refund(existing)

    def _new_row(
        self,
        refund_no: str,
        order: Mapping[str, Any],
        amount: int,
        reason: str,
        hold: str,
        hold_pk: str,
        source: str,
        transaction_id: str | None = None,
    ) -> RefundRow:
        now_s = self.clock()
        now = iso_now(now_s)
        return {
            "pk": refund_key(order["mchid"], refund_no),
            "refund_no": refund_no,
            "channel": order["channel"],
            "mchid": order["mchid"],
            "sp_mchid": order.get("sp_mchid") or "",  # "" = direct; the tenant check compares it (R39)
            "out_trade_no": order["out_trade_no"],
            "order_pk": order["pk"],
            "transaction_id": transaction_id or order.get("transaction_id"),
            "amount_cent": amount,
            "total_cent": int(order["amount_cent"]),
            "currency": order.get("currency", "CNY"),
            "reason": reason,
            "status": RefundStatus.PENDING.value,
            "hold": hold,
            "hold_pk": hold_pk,
            "source": source,
            "created_at": now,
            "updated_at": now,
            "upd_shard": updated_shard(refund_key(order["mchid"], refund_no)),  # GSI by_updated (--since)
            "expire_at": iso_now(now_s + self.expiry_s),
            # a crash before the channel call leaves PENDING: poll_due retries it, same refund_no (R26)
            "poll_pk": poll_pk(refund_key(order["mchid"], refund_no)),
            "poll_due": iso_now(now_s + BACKOFF_S[0]),
            "poll_attempts": 0,
        }

    def _channel(self, channel: str, mchid: str) -> RefundChannel:
        factory = self.channels.get(channel)
        if factory is None:
            raise RefundConflict(f"refunds on channel {channel!r} are not wired yet")
        try:
            return factory(mchid)
        except LookupError as exc:
            raise NotFound(f"merchant {mchid} on {channel}: {exc}", code="merchant_not_found") from None

    # ================================================================== submit: outside any transaction (R28)

    def _submit(self, row: RefundRow, channel: RefundChannel) -> RefundRow:
        """The refund as it stands after the channel's answer (no read: the transition knows it)."""
        return self._after_create(row, channel.create(dict(row)))[1]

    def _read_answer(
        self, row: RefundRow, answer: ChannelAnswer
    ) -> tuple[str, RefundEvent | None, str, str | None]:
        """A create answer → (label, event on the refund or None = outcome unknown, reason, channel refund id)."""
        if answer.kind is AnswerKind.ACCEPTED:
            if answer.refund_cent is not None and answer.refund_cent != row["amount_cent"]:
                return (
                    "MISMATCH",
                    RefundEvent.MISMATCH,
                    f"channel accepted {yuan_text(answer.refund_cent)}, we asked {yuan_text(int(row['amount_cent']))}",
                    answer.refund_id,
                )
            return (
                "ACCEPTED",
                RefundEvent.ACCEPT,
                "",
                answer.refund_id,
            )  # not success: that comes only later (R29)
        if answer.kind is AnswerKind.REJECTED:
            return "REJECTED", RefundEvent.FAIL, f"rejected by the channel: {answer.message}"[:300], None
        if answer.kind is AnswerKind.RETRY:
            return "RETRY", None, answer.message, None
        return "UNKNOWN", RefundEvent.UNKNOWN, f"unmapped create answer {answer.code}: {answer.message}", None

    def _count_answer(self, row: RefundRow, label: str, reason: str) -> None:
        if label == "ACCEPTED":
            count(M.REFUND_ACCEPTED, channel=row.get("channel"), merchant=row.get("mchid"))
        elif label == "RETRY":
            count(M.REFUND_CHANNEL_RETRY, channel=row.get("channel"), merchant=row.get("mchid"))
            logger.warning(
                "refund sent, outcome unknown: retried later with the same refund_no",
                extra={"refund_no": row["refund_no"], "refund_key": row["pk"], "error": reason},
            )

    def _after_create(self, row: RefundRow, answer: ChannelAnswer) -> tuple[str, RefundRow]:
        """`row` was just written or read by this call: it stands in for the first read; the CAS guards it."""
        label, event, reason, refund_id = self._read_answer(row, answer)
        if event is None:
            self._count_answer(row, label, reason)
            return label, self._reschedule(row, f"create: {reason}")
        outcome, after = self._transition(row["pk"], event, refund_id=refund_id, known=row, reason=reason)
        if outcome is RefundApplied.APPLIED or outcome is RefundApplied.MANUAL:
            self._count_answer(row, label, reason)
        return label, after

    # ================================================================== outcomes (R29)

    def apply_notification(self, raw_key: str, status: str) -> RefundApplied:
        """The worker's entry: a stored refund report (notification or query) → the refund."""
        raw = self.raw.get(raw_key, status)
        if raw is None:
            raise RetryLater(f"refund raw row {raw_key}/{status} not found")
        if raw.get("handled") != 0:
            return RefundApplied.ALREADY_HANDLED
        notice = notice_from_raw(raw, refund_event_of)
        # the reporting tenant's own number only (R39): another merchant's same refund_no is not this refund
        refund = self.store.find(notice.mchid, notice.refund_no)
        now = iso_now(self.clock())
        if refund is None and self._held(notice):
            raise RetryLater(f"refund {notice.refund_no} is reserved, its create answer not stored yet")
        if refund is None or refund.get("channel") != notice.channel:
            attempts = self.raw.count_attempt(raw_key, status)
            if attempts < self.not_found_attempts:
                raise RetryLater(f"refund {notice.refund_no} not found (attempt {attempts})")
            # money went back for a refund we never made (e.g. by hand on the merchant platform): a person
            self.raw.mark(
                raw_key, status, 2, f"refund {notice.refund_no} not found after {attempts} attempts", now
            )
            count(M.REFUND_MANUAL, channel=notice.channel, merchant=notice.mchid)
            count(M.REFUND_REPORT_MANUAL, channel=notice.channel, merchant=notice.mchid)
            logger.error("refund report for an unknown refund_no", extra={"refund_raw_key": raw_key})
            return RefundApplied.MANUAL
        forged = tenant_mismatch(notice, refund, self._refund_sp(refund))
        if forged is not None:
            return self._park(raw, notice, refund, *forged)
        problems = mismatches(notice, refund)
        if notice.cumulative_cent is not None and not problems:
            problems = self._cumulative_problems(notice.cumulative_cent, refund)
        raw_ref = (raw_key, status)
        if problems:
            return self._event(
                refund["pk"],
                RefundEvent.MISMATCH,
                raw=raw_ref,
                raw_handled=2,
                refund_id=notice.refund_id,
                reason="; ".join(problems),
                source=notice.source,
            )
        if notice.event is None:
            return self._event(
                refund["pk"],
                RefundEvent.UNKNOWN,
                raw=raw_ref,
                raw_handled=2,
                refund_id=notice.refund_id,
                reason=f"unknown refund status {notice.status!r}",
                source=notice.source,
            )
        return self._event(
            refund["pk"],
            notice.event,
            raw=raw_ref,
            refund_id=notice.refund_id,
            success_time=notice.success_time,
            source=notice.source,
            reason=f"channel says {notice.status}",
            notice=notice,
        )

    # ------------------------------------------------------------------ the settlement refund (R43)

    def settlement_of(
        self, refund: RefundRow, notice: RefundNotice | None
    ) -> tuple[dict[str, int] | None, str | None]:
        """The REFUND entry's settlement figures, or (None, why): the report's own (a query answer, a v2
        notification); else the report's basis rebuilt with the booked payment's Settlement (a v3 notification
        of a payment without NOCASH coupons); else, once, the channel's refund query (it states
        settlement_refund / refund_detail_item_list). Unknown after that: booked UNKNOWN with a queue item."""
        if notice is not None and notice.settlement is not None:
            return notice.settlement, None
        payment = settlement_of_entry(self.store.payment_entry(refund))
        basis = notice.settlement_basis if notice is not None else None
        built = refund_fields(basis, payment, int(refund["amount_cent"]))
        if built["settlement"] is not None:
            return built["settlement"], None
        reason = str(built["settlement_error"])
        if notice is None or notice.source != "query":
            asked, why = self._ask_settlement(refund, payment)
            if asked is not None:
                return asked, None
            reason = f"{reason}; the refund query: {why}"
        return None, reason[:300]

    def _ask_settlement(self, refund: RefundRow, payment: Any) -> tuple[dict[str, int] | None, str]:
        """One refund query for the figures a report lacked; any failure leaves the refund UNKNOWN (the money
        is booked either way: the figure is for reconciliation, never a reason to hold the booking)."""
        try:
            answer = self._channel(refund["channel"], refund["mchid"]).query(dict(refund))
        except Exception as exc:  # noqa: BLE001 - a missing figure must not stop the booking
            return None, f"{type(exc).__name__}: {str(exc)[:160]}"
        found = answer.notice
        if answer.kind is not AnswerKind.OUTCOME or answer.event is not RefundEvent.SUCCEED or found is None:
            return None, f"answered {answer.kind.value} {answer.code or ''} {answer.message or ''}".strip()[
                :200
            ]
        if found.refund_cent is not None and found.refund_cent != int(refund["amount_cent"]):
            return (
                None,
                f"it states {yuan_text(found.refund_cent)}, the refund is {yuan_text(int(refund['amount_cent']))}",
            )
        if found.settlement is not None:
            return found.settlement, ""
        built = refund_fields(found.settlement_basis, payment, int(refund["amount_cent"]))
        return built["settlement"], str(built["settlement_error"] or "")

    def _refund_sp(self, refund: RefundRow) -> str | None:
        """The refund's service provider / ISV app: on the row since issue #15, else on its order."""
        if "sp_mchid" in refund:
            return refund.get("sp_mchid") or None
        order = self.orders.get(refund["mchid"], refund["out_trade_no"]) or {}
        return order.get("sp_mchid") or None

    def _park(
        self, raw: dict[str, Any], notice: RefundNotice, refund: RefundRow, cause: str, reason: str
    ) -> RefundApplied:
        """R39: the report is parked as a suspected forgery; the refund, its hold and the ledger are
        untouched (it stays on the poll index, so the channel's own answer still settles it). The raw
        row — under the reporting tenant's own key — is closed with the reason."""
        now_s = self.clock()
        park_forgery(
            self.inbox.events,
            now_s,
            channel=notice.channel,
            mchid=notice.mchid,
            cause=cause,
            reason=reason,
            body=raw.get("body"),
            refund_no=notice.refund_no,
            out_trade_no=notice.out_trade_no,
            amount_cent=notice.refund_cent if notice.refund_cent is not None else notice.cumulative_cent,
            url_merchant=notice.sp_mchid,
            key=f"{raw['pk']}|{raw['sk']}",
        )
        self.raw.mark(raw["pk"], raw["sk"], 2, f"suspected forgery ({cause}): {reason}", iso_now(now_s))
        return RefundApplied.FORGED

    def _held(self, notice: RefundNotice) -> bool:
        """A report that overtook its own create call: the order still holds the refund (the create call
        stores it, or the poller does once the hold is abandoned), so it is not counted as unknown."""
        order = self.orders.get(notice.mchid, notice.out_trade_no) or {}
        return order.get("channel") == notice.channel and refund_no_held(order, notice.refund_no)

    def _cumulative_problems(self, cumulative_cent: int, refund: RefundRow) -> list[str]:
        """Alipay reports the trade's cumulative refunded total: checked against the order's books."""
        order = self.orders.get(refund["mchid"], refund["out_trade_no"]) or {}
        held_on_task = int(refund["amount_cent"]) if refund.get("hold") == HOLD_TASK else 0
        return check_cumulative(
            cumulative_cent,
            int(refund["amount_cent"]),
            int(order.get("paid_cent") or 0),
            int(order.get("refundable_cent") or 0),
            held_on_task,
        )

    def _event(self, key: str, event: RefundEvent, **how: Any) -> RefundApplied:
        return self._transition(key, event, **how)[0]

    def _transition(
        self,
        key: str,
        event: RefundEvent,
        *,
        raw: tuple[str, str] | None = None,
        raw_handled: int = 1,
        refund_id: str | None = None,
        success_time: str | None = None,
        reason: str = "",
        source: str = "api",
        known: RefundRow | None = None,
        extra: dict[str, Any] | None = None,
        notice: RefundNotice | None = None,
    ) -> tuple[RefundApplied, RefundRow]:
        """Read → decide (pure transit) → one transaction; a lost status CAS re-reads and decides again.
        `known` (the row just written by this call) stands in for the first read: the CAS still guards it.
        `key` is the refund row's key (`refund_key`, or a legacy row's refund_no).
        Returns the outcome and the refund as it stands afterwards. `notice`: the report that booked it (R43:
        its settlement figures, `settlement_of`)."""
        settled: dict[str, tuple[dict[str, int] | None, str | None]] = {}  # worked out once per call
        for round_no in range(CAS_ROUNDS):
            refund, head = self._read_refund(key, known if round_no == 0 else None)
            if refund is None:
                raise RetryLater(f"refund {key} vanished")
            refund_no = refund["refund_no"]
            status = RefundStatus(refund["status"])
            decision = transit(status, event)
            now_s = self.clock()
            now = iso_now(now_s)
            claim_live = self._person_claim(refund, source, event, now_s)
            if decision.effect is Effect.BOOK and not source.startswith("person:"):
                refusal = booking_day_refusal(success_time, now_s)
                if refusal is not None:  # R50: a person, never booked where no reconciliation will look
                    count(
                        M.REFUND_DAY_OUT_OF_WINDOW,
                        channel=refund.get("channel"),
                        merchant=refund.get("mchid"),
                    )
                    event, raw_handled, reason = RefundEvent.MISMATCH, 2, f"not booked: {refusal}"
                    decision = transit(status, event)
                    if (
                        decision.verdict is Verdict.DUPLICATE and raw
                    ):  # already with a person: this report too
                        self.raw.mark(*raw, 2, reason[:200], now)
                        count(
                            M.REFUND_REPORT_MANUAL,
                            channel=refund.get("channel"),
                            merchant=refund.get("mchid"),
                        )
                        return RefundApplied.MANUAL, refund
            if decision.verdict is not Verdict.OK:
                answer = self._answer_unmoved(
                    key, refund, status, decision, event, raw, refund_id, reason, now
                )
                return answer, refund
            to = decision.new_status
            assert to is not None
            how = {**landing(to, event, reason, refund_id, success_time, now_s), **(extra or {})}
            items = [self.store.move(key, status.value, to.value, now, unclaimed_since=claim_live, **how)]
            figures: dict[str, int] | None = None
            if decision.effect is Effect.BOOK:
                if refund["pk"] not in settled:
                    settled[refund["pk"]] = self.settlement_of(refund, notice)
                figures, unknown_why = settled[refund["pk"]]
                items += self._booking_items(
                    refund, refund_id, success_time, source, now_s, now, figures, unknown_why
                )
            elif decision.effect is Effect.RELEASE:
                items.append(self.store.release_on_hold(refund, now, reason or event.value))
            journaled = self._journal_items(
                head, refund, items, status, to, event, decision.effect, now, source
            )
            items += journaled
            if raw:
                items.append(self.raw.handled(*raw, raw_handled, f"{to.value} ({reason})"[:200], now))
            try:
                self.store.transact(items)
            except TransactionFailed as exc:
                if raw and len(items) - 1 in exc.failed:
                    return RefundApplied.ALREADY_HANDLED, refund  # another worker applied this very report
                first_journal = len(items) - len(journaled) - (1 if raw else 0)
                journal_items = range(first_journal, first_journal + len(journaled))
                move = f"refund {refund_no} {status.value}->{to.value}"
                _decide_again_or_raise(exc, journal_items, round_no, move)
                continue  # the refund (or the journal's chain head) moved under us: re-read, decide again
            self._count_transition(refund, to, decision.effect, reason)
            if decision.effect is Effect.BOOK and figures is None:
                count(M.SETTLEMENT_UNKNOWN, channel=refund.get("channel"), merchant=refund.get("mchid"))
                logger.error(
                    "refund booked with its settlement refund unknown: queue item created",
                    extra={"refund_no": refund_no, "reason": settled[refund["pk"]][1]},
                )
            if raw and raw_handled == 2:
                count(M.REFUND_REPORT_MANUAL, channel=refund.get("channel"), merchant=refund.get("mchid"))
            after = self.store.landed(refund, to.value, now, **how)  # what store.move wrote
            return (RefundApplied.MANUAL if to is RefundStatus.MANUAL else RefundApplied.APPLIED), after
        raise RetryLater(f"refund {key} kept changing under us")

    @staticmethod
    def _person_claim(refund: RefundRow, source: str, event: RefundEvent, now_s: float) -> int | None:
        """A person's move is refused while the refund is being rerouted (the channel's answer decides); it
        moves only a refund no reroute claimed since the returned time (None: not a person's move)."""
        if not source.startswith("person:") or event is RefundEvent.REROUTE:
            return None
        claim_live = int(now_s) - REROUTE_CLAIM_S
        if int(refund.get("reroute_since") or 0) >= claim_live:
            raise RefundConflict(
                f"refund {refund['refund_no']} is being sent to another account by {refund.get('reroute_by')} "
                "right now: the channel's answer decides; look again in a minute"
            )
        return claim_live

    def _answer_unmoved(
        self,
        key: str,
        refund: RefundRow,
        status: RefundStatus,
        decision: Decision,
        event: RefundEvent,
        raw: tuple[str, str] | None,
        refund_id: str | None,
        reason: str,
        now: str,
    ) -> RefundApplied:
        """A report that moves nothing: a duplicate (its refund id kept if new) or one contradicting an applied
        outcome (ILLEGAL: a person looks). Its raw row is marked either way."""
        channel, merchant = refund.get("channel"), refund.get("mchid")
        if decision.verdict is Verdict.DUPLICATE:
            if refund_id and not refund.get("refund_id"):
                self.store.set_fields(key, status.value, refund_id=refund_id)
            if raw:
                self.raw.mark(*raw, 1, "DUPLICATE", now)
            count(M.REFUND_DUPLICATE, channel=channel, merchant=merchant)
            return RefundApplied.DUPLICATE
        if raw:
            self.raw.mark(*raw, 2, f"ILLEGAL {decision.reason}: {reason}", now)
            count(M.REFUND_REPORT_MANUAL, channel=channel, merchant=merchant)
        count(M.REFUND_MANUAL, channel=channel, merchant=merchant)
        logger.error(
            "refund report contradicts an applied outcome: a person must look",
            extra={"refund_no": refund["refund_no"], "status": status.value, "event": event.value},
        )
        return RefundApplied.ILLEGAL

    def _booking_items(
        self,
        refund: RefundRow,
        refund_id: str | None,
        success_time: str | None,
        source: str,
        now_s: float,
        now: str,
        figures: dict[str, int] | None,
        unknown_why: str | None,
    ) -> list[Any]:
        """What a booking writes beside the move: the ledger entry on its bill day, the hold booked, and, when
        the settlement refund is unknown, its queue item in the same transaction (R43)."""
        items = [
            self.store.ledger_entry(
                refund,
                refund_id,
                bill_date(success_time, now_s),
                success_time,
                source,
                now,
                settlement=figures,
            ),
            self.store.book_on_hold(refund, now),
        ]
        if figures is None:
            items.append(self.store.settlement_unknown(refund, unknown_why or "", now))
        return items

    def _read_refund(self, key: str, known: RefundRow | None) -> tuple[RefundRow | None, Head | None]:
        """The refund (or `known`) and, with a journal, its chain's head: one BatchGetItem when the key names
        its merchant (`mchid#refund_no`); a legacy key reads the head on its own. A `known` row (the create's
        own answer) reads no head here: `_journal_items` reads it only when money moves (the create's budget)."""
        if self.journal is None or known is not None:
            return (known if known is not None else self.store.get(key)), None
        if "#" in key:
            row, head = self.journal.read(self.store.t.refunds, {"pk": key}, key.split("#", 1)[0], key)
            return as_refund(row), head
        refund = self.store.get(key)
        return refund, (None if refund is None else self._head(refund))

    def _head(self, refund: RefundRow) -> Head:
        assert self.journal is not None
        return self.journal.store.head(self.journal.chain(str(refund["mchid"]), str(refund["pk"])))

    def _journal_items(
        self,
        head: Head | None,
        refund: RefundRow,
        items: list[dict[str, Any]],
        status: RefundStatus,
        to: RefundStatus,
        event: RefundEvent,
        effect: Effect,
        now: str,
        source: str,
    ) -> list[dict[str, Any]]:
        if self.journal is None:
            return []
        if head is None:  # the create's own answer (`known`): journaled when it books or releases money
            if effect is Effect.NONE:
                return []
            head = self._head(refund)
        append = self.journal.append(
            head,
            kind=f"refund.{to.value.lower()}",
            subject=str(refund["pk"]),
            at=now,
            facts={
                "refund_no": refund["refund_no"],
                "order_pk": refund["order_pk"],
                "amount_cent": int(refund["amount_cent"]),
                "channel": refund.get("channel"),
                "from_status": status.value,
                "to_status": to.value,
                "event": event.value,
                "effect": effect.value,
                "source": source,
            },
        )
        return append(items)

    def _count_transition(self, refund: RefundRow, to: RefundStatus, effect: Effect, reason: str) -> None:
        extra = {
            "refund_no": refund["refund_no"],
            "order": refund["order_pk"],
            "amount_cent": refund["amount_cent"],
            "to": to.value,
            "reason": reason,
        }
        if effect is Effect.BOOK:
            count(M.REFUND_SUCCEEDED, channel=refund.get("channel"), merchant=refund.get("mchid"))
            logger.info("refund booked", extra=extra)
        elif effect is Effect.RELEASE:
            count(M.REFUND_FAILED, channel=refund.get("channel"), merchant=refund.get("mchid"))
            if refund["hold"] == HOLD_TASK:
                count(M.REFUND_TASK_MANUAL, channel=refund.get("channel"), merchant=refund.get("mchid"))
            logger.warning("refund failed; reservation released", extra=extra)
        elif to is RefundStatus.MANUAL:
            count(M.REFUND_MANUAL, channel=refund.get("channel"), merchant=refund.get("mchid"))
            logger.error("refund sent to a person", extra=extra)

    # ================================================================== the poller's entries (R21, R29)

    def poll_due(self, limit: int = 50) -> dict[str, int]:
        """Abandoned holds first (they become PENDING, due now); then refunds PENDING (retry the create, same
        refund_no) or ACCEPTED (query) that are due, from the sparse poll index in bounded batches; backoff
        between polls; past expiry → a person."""
        done: Counter[str] = Counter({f"HOLD_{k}": n for k, n in self.sweep_holds(limit).items()})
        now_s = self.clock()
        for row in self.store.due(iso_now(now_s), limit):
            try:
                done[self._poll_one(row, now_s)] += 1
            except RetryLater as exc:
                done["RETRY_LATER"] += 1
                logger.info("refund poll deferred", extra={"refund_no": row["refund_no"], "reason": str(exc)})
            except Exception as exc:  # noqa: BLE001 - one refund must not stop the others (L3); counted, alarmed
                count(M.REFUND_POLL_FAILED, channel=row.get("channel"), merchant=row.get("mchid"))
                logger.exception("polling a refund failed", extra={"refund_no": row["refund_no"]})
                done[self._failed_safely(row, f"polling raised {type(exc).__name__}: {str(exc)[:200]}")] += 1
        return dict(done)

    def _failed_safely(self, row: RefundRow, note: str, label: str = "FAILED") -> str:
        """A refund whose poll raises (an answer the client chokes on, a bug, L3) or that has no channel client
        (the merchant's credentials gone, L4) is rescheduled like a failed call; POLL_MAX_ERRORS in a row and
        it goes to a person (MANUAL, R38), as F1 does for orders, instead of being polled and left without an
        item until its expiry. Returns PERSON or `label`."""
        errors = int(row.get("poll_errors") or 0) + 1
        try:
            if errors >= POLL_MAX_ERRORS:
                self._event(row["pk"], RefundEvent.UNKNOWN, reason=f"{note} ({errors} times in a row)")
                return "PERSON"
            self._reschedule(row, note, poll_errors=errors)
        except Exception:  # noqa: BLE001 - the store failed too: still due, RefundPollFailed already counted
            logger.exception("counting a failed refund poll failed", extra={"refund_no": row["refund_no"]})
        return label

    def _poll_one(self, row: RefundRow, now_s: float) -> str:
        if iso_now(now_s) >= row["expire_at"]:
            count(M.REFUND_EXPIRED, channel=row.get("channel"), merchant=row.get("mchid"))
            self._event(row["pk"], RefundEvent.EXPIRE, reason=f"no outcome by {row['expire_at']}")
            return "EXPIRED"
        try:
            channel = self._channel(row["channel"], row["mchid"])
        except (NotFound, RefundConflict) as exc:  # the merchant's credentials gone: loud, then a person (L4)
            count(M.REFUND_NO_CHANNEL, channel=row.get("channel"), merchant=row.get("mchid"))
            logger.warning(
                "refund poll: no channel client", extra={"refund_no": row["refund_no"], "why": str(exc)}
            )
            return self._failed_safely(row, f"no channel client: {str(exc)[:200]}", "NO_CHANNEL")
        if row["status"] == RefundStatus.PENDING.value:
            return self._after_create(row, channel.create(dict(row)))[0]
        answer = channel.query(dict(row))
        if answer.kind is AnswerKind.OUTCOME and answer.event is not None and answer.notice is not None:
            existing = self.inbox.record(answer.notice)  # same key as a notification would have (R7, R23)
            if existing is not None and existing.get("handled") in (1, 2):
                self._reschedule(row, f"query {answer.code}: report already handled")
                return "SEEN"
            return self.apply_notification(answer.notice.raw_key, answer.notice.status).value
        if answer.kind is AnswerKind.UNKNOWN:
            self._event(row["pk"], RefundEvent.UNKNOWN, reason=f"query: {answer.message}")
            return "UNKNOWN"
        if answer.kind is not AnswerKind.OUTCOME:
            count(M.REFUND_QUERY_FAILED, channel=row.get("channel"), merchant=row.get("mchid"))
        self._reschedule(row, f"query {answer.kind.value} {answer.code} {answer.message}".strip())
        return "PROCESSING" if answer.kind is AnswerKind.OUTCOME else answer.kind.value

    def _reschedule(self, row: RefundRow, note: str, poll_errors: int = 0) -> RefundRow:
        """The next poll, backed off; returns the row as it now stands (no read). `poll_errors`: polls that
        raised in a row (any answer resets it, L3)."""
        attempts = int(row.get("poll_attempts") or 0) + 1
        delay = BACKOFF_S[min(attempts, len(BACKOFF_S) - 1)]
        after = row.copy()
        after["poll_attempts"] = attempts
        after["poll_due"] = iso_now(self.clock() + delay)
        after["last_poll_note"] = note[:300]
        errors = {"poll_errors": poll_errors} if poll_errors or row.get("poll_errors") else {}
        if errors:
            after["poll_errors"] = poll_errors
        self.store.set_fields(
            row["pk"],
            row["status"],
            poll_attempts=attempts,
            poll_due=after["poll_due"],
            last_poll_note=after["last_poll_note"],
            **errors,
        )
        return after

    def work_tasks(self, limit: int = 20) -> dict[str, int]:
        """Refund tasks from ILLEGAL payments (R17): auto → refunded here; manual → a person. Each task
        ends DONE or MANUAL once: every step is conditional on the task's own status."""
        done: Counter[str] = Counter()
        now = iso_now(self.clock())
        for task in self.store.open_tasks(limit):
            if self.task_policy == "manual":
                if self.store.task_to_person(
                    task["pk"], "REFUND_TASK_POLICY=manual: a person refunds it", now
                ):
                    count(M.REFUND_TASK_MANUAL, channel=task.get("channel"), merchant=task.get("mchid"))
                    done["MANUAL"] += 1
                continue
            done[self._refund_task(task)] += 1
        return dict(done)

    def refund_task_now(self, task_pk: str) -> tuple[str, str]:
        """A person's "refund this payment now" on a refund task (OPEN or with a person): the same refund the
        task worker starts (the task's own refund number, reserved on the task once, R26-R30), now.
        Returns (outcome, refund_no); a task that has left OPEN/MANUAL (refunding, closed) is refused."""
        task = self.store.task(task_pk)
        if task is None:
            raise NotFound(f"no refund task {task_pk}")
        if task.get("status") not in ("OPEN", "MANUAL"):
            raise RefundConflict(
                f"refund task {task_pk} is {task.get('status')}"
                + (f" (refund {task['refund_no']})" if task.get("refund_no") else "")
                + ": its money is not refunded a second time"
            )
        outcome = self._refund_task(task)
        if outcome not in ("REFUNDING",):
            raise RefundConflict(f"refund task {task_pk}: {outcome.lower().replace('_', ' ')}, nothing sent")
        refund_no = task_refund_no(task_pk)
        after = self.store.find(task["mchid"], refund_no) or {}
        if after.get("status") == RefundStatus.FAIL.value:  # refused at once: the task is with a person again
            raise RefundConflict(f"the channel refused refund {refund_no}: {after.get('fail_reason') or '-'}")
        return outcome, refund_no

    def _refund_task(self, task: dict[str, Any]) -> str:
        """The ILLEGAL payment was never booked, so it is not in the order's refundable_cent: this refund
        reserves on the task itself (OPEN → REFUNDING, the whole task amount, once) instead."""
        now = iso_now(self.clock())
        order = self.orders.get(task["mchid"], task["out_trade_no"])
        if order is None:
            self.store.task_to_person(task["pk"], "order not found", now)
            count(M.REFUND_TASK_MANUAL, channel=task.get("channel"), merchant=task.get("mchid"))
            return "MANUAL"
        try:
            channel = self._channel(task.get("channel") or order["channel"], task["mchid"])
        except (NotFound, RefundConflict) as exc:
            self.store.task_to_person(task["pk"], f"cannot refund automatically: {exc}", now)
            count(M.REFUND_TASK_MANUAL, channel=task.get("channel"), merchant=task.get("mchid"))
            return "MANUAL"
        refund_no = task_refund_no(task["pk"])
        row = self._new_row(
            refund_no,
            order,
            int(task["amount_cent"]),
            f"refund of a payment that could not be booked ({task.get('reason', '')})"[:80],
            HOLD_TASK,
            task["pk"],
            "task",
            transaction_id=task["transaction_id"],
        )
        if (
            task.get("total_cent") is not None
        ):  # the channel's order amount of that payment (an amount mismatch)
            row["total_cent"] = int(task["total_cent"])
        try:
            self.store.transact(
                [self.store.reserve_on_task(task["pk"], refund_no, now), self.store.put_new(row)]
            )
        except TransactionFailed as exc:
            if exc.failed:
                return "ALREADY_STARTED"  # the task left OPEN or its refund exists: nothing to do twice
            raise Busy(f"task {task['pk']}: contention") from None
        count(M.REFUND_CREATED, channel=row.get("channel"), merchant=row.get("mchid"))
        self._submit(row, channel)
        return "REFUNDING"

    def record_outcome(
        self, key: str, succeeded: bool, *, by: str, reason: str
    ) -> tuple[RefundApplied, RefundRow]:
        """A person found the outcome on the merchant platform (the work queue's refund-outcome): the same
        state machine books it (SUCCESS, a ledger entry) or releases it (FAIL), once: the status CAS.
        `key`: the refund row's key (the queue item's source key)."""
        event = RefundEvent.SUCCEED if succeeded else RefundEvent.FAIL
        return self._transition(key, event, reason=f"recorded by {by}: {reason}", source=f"person:{by}")

    def apply_abnormal(
        self, key: str, route: str, card: dict[str, str] | None = None, *, by: str, reason: str
    ) -> tuple[RefundApplied, RefundRow]:
        """`key`: the refund row's key (the queue item's source key).

        A person sends an ABNORMAL refund to another account (WeChat v3 apply-abnormal-refund): once the
        channel takes it, the refund is ACCEPTED again (MANUAL --REROUTE-->), back in the poll index with a
        fresh expiry, and the same state machine books it when the notification or the query says SUCCESS.
        The reservation stays held throughout. A refusal changes nothing and says why (the item stays open).

        While the call waits for the channel the refund is claimed (`reroute_since`): another person's recorded
        outcome is refused until the answer is in, so a reroute the channel takes is never reported as sent for a
        refund that was released meanwhile. No answer (a timeout) is not "did not take": the refund is tracked
        as if taken (`abnormal_answer` "unknown"), still reserved, and the query says whether it took."""
        row = self.store.get(key)
        if row is None:
            raise NotFound(f"no refund {key}")
        if row["status"] != RefundStatus.MANUAL.value or not str(row.get("manual_reason") or "").startswith(
            RefundEvent.ABNORMAL.value
        ):
            raise RefundConflict(
                f"refund {row['refund_no']} is {row['status']} ({row.get('manual_reason') or '-'}): only a refund the "
                "channel reported ABNORMAL can be sent through apply-abnormal-refund"
            )
        channel = self._channel(row["channel"], row["mchid"])
        apply = getattr(channel, "apply_abnormal", None)
        if apply is None:
            raise RefundConflict(f"{type(channel).__name__} has no abnormal-refund API: settle it by hand")
        now_s = self.clock()
        if not self.store.claim_reroute(key, by, int(now_s), int(now_s) - REROUTE_CLAIM_S):
            raise RefundConflict(
                f"refund {row['refund_no']} changed or is being sent elsewhere by another person: look at it again"
            )
        try:
            # the record it would change names its provider: the channel refuses credentials other than those (R39)
            answer = apply({**row, "sp_mchid": self._refund_sp(row) or ""}, route, card)
        except BaseException:  # refused before sending (route, card, provider): nobody is rerouting it
            self.store.release_reroute(key)
            raise
        if answer.kind not in (AnswerKind.ACCEPTED, AnswerKind.RETRY):
            self.store.release_reroute(key)
            raise RefundConflict(
                f"the channel did not take refund {row['refund_no']} to {route} ({answer.kind.value} {answer.code}): "
                f"{answer.message}; it stays with a person"
            )
        # taken, or no answer (a timeout: it may have been taken): tracked like any refund from here on, the
        # amount still reserved; the refund query tells whether it took (ABNORMAL again: back to a person)
        unknown = answer.kind is AnswerKind.RETRY
        applied, after = self._transition(
            key,
            RefundEvent.REROUTE,
            refund_id=answer.refund_id,
            reason=f"apply-abnormal-refund {route} by {by}"
            + (f", answer unknown ({answer.message}): tracked" if unknown else "")
            + f": {reason}",
            source=f"person:{by}",
            extra={
                "expire_at": iso_now(now_s + self.expiry_s),
                "poll_attempts": 0,
                "abnormal_route": route,
                "abnormal_answer": "unknown" if unknown else "taken",
            },
        )
        if applied is not RefundApplied.APPLIED:  # moved under a claim that had gone stale: a person
            count(M.REFUND_MANUAL, channel=row.get("channel"), merchant=row.get("mchid"))
            logger.error(
                "abnormal refund rerouted at the channel but the refund had moved meanwhile",
                extra={"refund_no": row["refund_no"], "status": after.get("status"), "route": route},
            )
            raise RefundConflict(
                f"the channel {'may have taken' if unknown else 'took'} refund {row['refund_no']} to {route}, but "
                f"it was recorded {after.get('status')} meanwhile: its money may go out twice; settle it by hand"
            )
        return applied, after

    # ================================================================== views

    def show(self, refund_no: str, mchid: str | None = None) -> dict[str, Any]:
        """With `mchid` (every merchant-facing door): the merchant's own refund number only, another tenant's
        same number is another refund (R39). Without (an operator): the one refund with that number, found
        through the `by_refund_no` index; several merchants using it → give the merchant."""
        if mchid is not None:
            row = self.store.find(mchid, refund_no)
        else:
            rows = self.store.by_number(refund_no)
            if len(rows) > 1:
                raise NotFound(
                    f"refund_no {refund_no} is used by several merchants: give the merchant (mchid)",
                    code="refund_not_found",
                )
            row = rows[0] if rows else None
        if row is None:
            raise NotFound(
                f"no refund {refund_no}" + (f" for merchant {mchid}" if mchid else ""),
                code="refund_not_found",
            )
        view = public_refund(row)
        view["reports"] = [
            {
                k: r.get(k)
                for k in (
                    "sk",
                    "source",
                    "refund_id",
                    "refund_cent",
                    "cumulative_cent",
                    "handled",
                    "outcome",
                    "notified_at",
                )
            }
            for r in self.raw.for_refund(refund_raw_key(row["channel"], row["mchid"], row["refund_no"]))
        ]
        return view

    def for_order(self, mchid: str, out_trade_no: str) -> list[dict[str, Any]]:
        return [public_refund(r) for r in self.store.for_order(order_key(mchid, out_trade_no))]

    def manual(self, limit: int = 100) -> list[dict[str, Any]]:
        return [public_refund(r) for r in self.store.manual(limit)]

    def due(self, limit: int = 100) -> list[dict[str, Any]]:
        return [public_refund(r) for r in self.store.due(iso_now(self.clock()), limit)]

    def of_day(self, day: str, *, state: str = "", merchant: str = "") -> list[dict[str, Any]]:
        """Every refund that changed on `day` (Asia/Shanghai), in every state (PENDING … SUCCESS, FAIL, CLOSED,
        MANUAL), newest change first, narrowed to a state and a merchant when asked: what the Refunds page and
        `tally refund list --day` show."""
        since, until = day_window(day)
        rows = [
            public_refund(r)
            for r in self.store.changed(since, until)
            if (not state or r.get("status") == state) and (not merchant or r.get("mchid") == merchant)
        ]
        return sorted(rows, key=lambda r: str(r.get("updated_at") or ""), reverse=True)


def landing(
    to: RefundStatus,
    event: RefundEvent,
    reason: str,
    refund_id: str | None,
    success_time: str | None,
    now_s: float,
) -> dict[str, Any]:
    """The fields a refund entering `to` gets (store.move / store.landed keyword arguments)."""
    fields: dict[str, Any] = {"refund_id": refund_id or None}
    if to is RefundStatus.SUCCESS:
        fields["success_time"] = success_time
    if to is RefundStatus.FAIL:
        fields["fail_reason"] = reason[:300] or event.value
    return {
        "poll_due": iso_now(now_s + BACKOFF_S[0]) if to is RefundStatus.ACCEPTED else None,
        "manual_reason": f"{event.value}: {reason}" if to is RefundStatus.MANUAL else None,
        **fields,
    }


def refuse_unrefundable(order: Mapping[str, Any], amount_cent: int) -> None:
    """409 for an order that is not paid, 422 (ExceedsRefundable, counted) above what is left (R27)."""
    if order.get("status") != "PAID":
        raise RefundConflict(
            f"order {order.get('out_trade_no')} is {order.get('status')}: only a paid order is refunded",
            code="order_not_paid",
        )
    try:
        check_reserve(int(order.get("refundable_cent") or 0), amount_cent)
    except ExceedsRefundable:
        count(M.REFUND_EXCEEDS, channel=order.get("channel"), merchant=order.get("mchid"))
        raise


def public_refund(row: Mapping[str, Any]) -> dict[str, Any]:
    hidden = {"pk", "poll_pk"}
    view = {k: v for k, v in row.items() if k not in hidden}
    view["in_flight"] = row.get("status") in {s.value for s in IN_FLIGHT}
    return view


def validate_refund_request(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRefund("body must be a JSON object")
    mchid = body.get("mchid")
    if not is_merchant_id(mchid):
        raise InvalidRefund("mchid must be the merchant number (digits)")
    out_trade_no = body.get("out_trade_no")
    if not isinstance(out_trade_no, str) or not OUT_TRADE_NO.match(out_trade_no):
        raise InvalidRefund("out_trade_no must be 6-32 characters of [0-9A-Za-z_-*]")
    amount = body.get("amount_cent")
    if isinstance(amount, bool) or not isinstance(amount, int) or not 1 <= amount <= MAX_CENT:
        raise InvalidRefund(
            f"amount_cent must be an integer number of cents from 1 to {MAX_CENT} (no decimals, no strings)"
        )
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 80:
        raise InvalidRefund("reason must be text of at most 80 characters (shown to the payer)")
    refund_no = body.get("refund_no")
    if refund_no is not None and (not isinstance(refund_no, str) or not REFUND_NO.match(refund_no)):
        raise InvalidRefund("refund_no must be 6-64 characters of [0-9A-Za-z_-|*@]")
    return {
        "mchid": mchid,
        "out_trade_no": out_trade_no,
        "amount_cent": amount,
        "reason": reason,
        "refund_no": refund_no,
    }


__all__ = [
    "RefundService",
    "RefundNotice",
    "ExceedsRefundable",
    "RefundConflict",
    "InvalidRefund",
    "NotFound",
    "Busy",
    "RefundApplied",
    "new_refund_no",
    "task_refund_no",
    "validate_refund_request",
]


def day_window(day: str) -> tuple[str, str]:
    """[start, end) of a day in Asia/Shanghai as the ISO UTC times rows are stamped with (`iso_now`)."""
    from datetime import UTC, datetime, timedelta

    from tally.domain.clock import CHINA

    start = datetime.fromisoformat(day).replace(tzinfo=CHINA)
    return tuple(  # type: ignore[return-value]
        (start + timedelta(days=n)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z") for n in (0, 1)
    )


def _decide_again_or_raise(exc: TransactionFailed, journal_items: range, round_no: int, move: str) -> None:
    """A refund's transaction refused: when the refund row (item 0) or the journal's chain head moved under
    it, return after a short jittered pause if the chain is shared, so the caller re-reads and decides
    again; any other condition (the hold, the ledger) is left for the retry and the DLQ alarm."""
    if 0 in exc.failed or exc.conflict or any(i in journal_items for i in exc.failed):
        if journal_items:  # the chain head is shared: a short jittered pause first
            time.sleep(random.uniform(0, 0.02 * (round_no + 1)))
        return
    raise RuntimeError(
        f"{move}: hold or ledger condition failed ({exc.failed}); left for the retry and the DLQ alarm"
    ) from None
