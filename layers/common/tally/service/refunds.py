"""Refunds that can never pay out twice (R26–R30): create, submit, apply outcomes, poll, work refund tasks.

1. create: ONE transaction reserves the amount on its hold and puts the refund PENDING (R26, R27).
2. submit: the channel is called outside any transaction (R28), always with the stored refund_no.
   Accepted → ACCEPTED; no answer / retryable → stays PENDING and poll_due retries with the SAME
   refund_no; a definitive refusal → FAIL (released); an unmapped answer → MANUAL.
3. outcomes only from the channel (R29): notifications (via refund_raw + the queue) and queries
   (poll_due) go through apply_notification: the refund's status CAS, the ledger entry or the
   release, and raw handled=1 commit in one transaction, so a release or a booking happens once.

The channel clients are per channel: `channels[channel](mchid) -> RefundChannel` (create/query).

`RefundService` is its use cases composed, one module each: refund_requests.py (create, submit),
refund_outcomes.py (a channel's report applied), refund_polling.py (the poller: abandoned holds, due refunds),
refund_tasks.py (refund tasks), refund_decisions.py (a person's outcome or reroute), all on refund_moves.py
(the state change and its transaction), refund_settlement.py (R43 figures) and refund_base.py (collaborators,
errors); the views (show, lists) are here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from tally.domain.refunds import ExceedsRefundable, RefundNotice, refund_raw_key
from tally.service.journal import DecisionJournal
from tally.service.refund_base import Busy as Busy
from tally.service.refund_base import InvalidRefund as InvalidRefund
from tally.service.refund_base import NotFound as NotFound
from tally.service.refund_base import RefundChannel as RefundChannel
from tally.service.refund_base import RefundConflict as RefundConflict
from tally.service.refund_base import public_refund
from tally.service.refund_decisions import RefundDecisions
from tally.service.refund_inbox import RefundInbox
from tally.service.refund_moves import RefundApplied as RefundApplied
from tally.service.refund_polling import POLL_MAX_ERRORS as POLL_MAX_ERRORS
from tally.service.refund_polling import RefundPolling
from tally.service.refund_requests import HOLD_ABANDONED_S as HOLD_ABANDONED_S
from tally.service.refund_requests import OUT_TRADE_NO as OUT_TRADE_NO
from tally.service.refund_requests import REFUND_NO as REFUND_NO
from tally.service.refund_requests import new_refund_no as new_refund_no
from tally.service.refund_requests import validate_refund_request as validate_refund_request
from tally.service.refund_tasks import RefundTasks
from tally.service.refund_tasks import task_refund_no as task_refund_no
from tally.store.refunds import RefundRawStore, RefundStore
from tally.store.tables import OrderStore, iso_now, order_key


class RefundService(RefundPolling, RefundTasks, RefundDecisions):
    """Refunds: requested (`create`), applied from the channel's reports (`apply_notification`), polled
    (`poll_due`), worked from refund tasks (`work_tasks`), decided by a person, and shown."""

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
