"""A channel's report of a refund's outcome (a notification, or a query answer stored like one) applied to the
refund once (R29), or parked as a suspected forgery (R39)."""

from __future__ import annotations

from typing import Any

from tally.channels.refunds import refund_event_of
from tally.domain.refunds import RefundEvent, RefundNotice, check_cumulative, mismatches, tenant_mismatch
from tally.observability import M, count, logger
from tally.service.apply import RetryLater
from tally.service.refund_inbox import notice_from_raw, park_forgery
from tally.service.refund_moves import RefundApplied, RefundMoves
from tally.store.records import RefundRow
from tally.store.refunds import HOLD_TASK, refund_no_held
from tally.store.tables import iso_now


class RefundOutcomes(RefundMoves):
    """`apply_notification`: the worker's entry for a stored refund report (notification or query)."""

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
        if problems or notice.event is None:
            event, reason = (
                (RefundEvent.MISMATCH, "; ".join(problems))
                if problems
                else (RefundEvent.UNKNOWN, f"unknown refund status {notice.status!r}")
            )
            return self._event(
                refund["pk"],
                event,
                raw=raw_ref,
                raw_handled=2,
                refund_id=notice.refund_id,
                reason=reason,
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
