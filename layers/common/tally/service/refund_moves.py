"""A refund's state change, the one way its status moves: read, decide (the domain's `transit`), one transaction
with the booking or the release, the journal entry and the report's handled mark; and the next poll."""

from __future__ import annotations

import random
import time
from enum import Enum
from typing import Any

from tally.domain.booking_day import booking_day_refusal
from tally.domain.journal import Head
from tally.domain.refunds import Decision, Effect, RefundEvent, RefundNotice, RefundStatus, Verdict, transit
from tally.observability import M, count, logger
from tally.service.apply import RetryLater, bill_date
from tally.service.refund_base import RefundConflict
from tally.service.refund_settlement import RefundSettlement
from tally.store.records import RefundRow, as_refund
from tally.store.refunds import HOLD_TASK, TransactionFailed
from tally.store.tables import iso_now

BACKOFF_S = (60, 60, 120, 300, 900, 1800, 3600)  # between polls of one refund; then hourly until expiry
CAS_ROUNDS = 4
REROUTE_CLAIM_S = 300  # an apply-abnormal-refund call holds the refund this long at most (then it died)


class RefundApplied(str, Enum):
    APPLIED = "APPLIED"
    DUPLICATE = "DUPLICATE"
    ILLEGAL = "ILLEGAL"
    MANUAL = "MANUAL"
    ALREADY_HANDLED = "ALREADY_HANDLED"
    FORGED = "FORGED"  # the report names a refund of another tenant / provider / order: parked (R39)


class RefundMoves(RefundSettlement):
    """Every use case moves a refund through `_transition` (or `_event`), and polls it later with `_reschedule`."""

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
