"""Requesting a refund (R26-R28): validate the request, reserve the amount, call the channel outside any
transaction and store the refund as its answer leaves it."""

from __future__ import annotations

import re
import secrets
import string
import time
from collections.abc import Mapping
from typing import Any

from tally import errors
from tally.domain.money import MAX_CENT, yuan_text
from tally.domain.notifications import is_merchant_id
from tally.domain.refunds import (
    AnswerKind,
    ChannelAnswer,
    Effect,
    ExceedsRefundable,
    RefundEvent,
    RefundStatus,
    check_reserve,
    transit,
)
from tally.observability import M, count, logger
from tally.service.refund_base import (
    Busy,
    InvalidRefund,
    NotFound,
    RefundChannel,
    RefundConflict,
    public_refund,
)
from tally.service.refund_moves import BACKOFF_S, CAS_ROUNDS, RefundApplied, RefundMoves, landing
from tally.store.records import RefundRow, as_refund
from tally.store.refunds import HOLD_ORDER, HoldRefused, TransactionFailed, legacy_free, poll_pk, refund_key
from tally.store.shards import updated_shard
from tally.store.tables import iso_now, order_key

REFUND_NO = re.compile(r"^[0-9A-Za-z_\-|*@]{6,64}$")  # WeChat out_refund_no charset (§2.3)
OUT_TRADE_NO = re.compile(r"^[0-9A-Za-z_\-*]{6,32}$")
# a hold older than this is abandoned (its create call crashed or timed out): well above the refunds
# function's 15 s timeout, so a live create call always lands its answer first
HOLD_ABANDONED_S = 120


def new_refund_no(now_s: float) -> str:
    """R + UTC time + 12 random characters: unique without a lookup, sortable by creation (R26)."""
    alphabet = string.ascii_uppercase + string.digits
    return (
        "R"
        + time.strftime("%Y%m%d%H%M%S", time.gmtime(now_s))
        + "".join(secrets.choice(alphabet) for _ in range(12))
    )


class RefundRequests(RefundMoves):
    """`create`: a merchant's refund request, with its own refund_no or ours (R26-R28)."""

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
