"""The poller's refund work (R21, R29): abandoned holds stored PENDING, then each due refund re-sent (PENDING,
same refund_no) or queried (ACCEPTED), backed off, and handed to a person past its expiry or after repeated errors."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tally.domain.refunds import AnswerKind, RefundEvent, RefundStatus
from tally.observability import M, count, logger
from tally.service.apply import RetryLater
from tally.service.refund_base import NotFound, RefundConflict
from tally.service.refund_outcomes import RefundOutcomes
from tally.service.refund_requests import RefundRequests
from tally.store.records import RefundRow
from tally.store.refunds import HOLD_ORDER, TransactionFailed, open_holds
from tally.store.tables import iso_now

POLL_MAX_ERRORS = 5  # polls of one refund that raised in a row before a person looks (L3, like F1's orders)


class RefundPolling(RefundRequests, RefundOutcomes):
    """`poll_due` and `sweep_holds`: the poller's entries."""

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
