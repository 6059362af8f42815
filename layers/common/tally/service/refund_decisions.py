"""A person's decision on a refund a channel left open: the outcome found on the merchant platform, or an
ABNORMAL refund sent to another account (apply-abnormal-refund)."""

from __future__ import annotations

from tally.domain.refunds import AnswerKind, RefundEvent, RefundStatus
from tally.observability import M, count, logger
from tally.service.refund_base import NotFound, RefundConflict
from tally.service.refund_moves import REROUTE_CLAIM_S, RefundApplied, RefundMoves
from tally.store.records import RefundRow
from tally.store.tables import iso_now


class RefundDecisions(RefundMoves):
    """`record_outcome` and `apply_abnormal`: a person's moves (the work queue's refund actions)."""

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
