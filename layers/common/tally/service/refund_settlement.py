"""The settlement figures of a booked refund's REFUND entry (R43): the report's own, rebuilt from the booked
payment, or asked of the channel once."""

from __future__ import annotations

from typing import Any

from tally.channels.settlement import refund_fields
from tally.domain.money import yuan_text
from tally.domain.refunds import AnswerKind, RefundEvent, RefundNotice
from tally.domain.settlement import settlement_of_entry
from tally.service.refund_base import RefundServiceBase
from tally.store.records import RefundRow


class RefundSettlement(RefundServiceBase):
    """`settlement_of`: the figures a refund's booking writes (`RefundMoves._transition` asks)."""

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
