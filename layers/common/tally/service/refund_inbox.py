"""Refund notifications in: store the raw report keyed (channel#refund_no, status), then enqueue (R7, R30).

Channel-neutral: each channel's ingest verifies and parses, then hands a RefundNotice here. Lean imports:
this runs inside the notify function, on the channel's 5 s clock (R10).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tally.domain.refunds import RefundNotice
from tally.observability import M, count, logger
from tally.store.refunds import RefundQueue, RefundRawStore
from tally.store.tables import iso_now


def raw_row(
    notice: RefundNotice,
    now_s: float,
    *,
    body: str | None = None,
    headers: dict[str, str] | None = None,
    envelope_id: str = "",
) -> dict[str, Any]:
    now = iso_now(now_s)
    return {
        "pk": notice.raw_key,
        "sk": notice.status,
        "channel": notice.channel,
        "refund_no": notice.refund_no,
        "refund_id": notice.refund_id,
        "refund_status": notice.status,
        "mchid": notice.mchid,
        "sp_mchid": notice.sp_mchid,
        "out_trade_no": notice.out_trade_no,
        "transaction_id": notice.transaction_id,
        "refund_cent": notice.refund_cent,
        "total_cent": notice.total_cent,
        "success_time": notice.success_time,
        "cumulative_cent": notice.cumulative_cent,
        "source": notice.source,
        "envelope_id": envelope_id or None,
        "body": body,
        "headers": headers or None,
        "handled": 0,
        "attempts": 0,
        "notified_at": now,
    }


def notice_from_raw(row: dict[str, Any], event_of: Callable[[str, str], Any]) -> RefundNotice:
    return RefundNotice(
        channel=row["channel"],
        refund_no=row["refund_no"],
        refund_id=row["refund_id"],
        status=row["refund_status"],
        event=event_of(row["channel"], row["refund_status"]),
        mchid=row["mchid"],
        sp_mchid=row.get("sp_mchid"),
        out_trade_no=row["out_trade_no"],
        transaction_id=row.get("transaction_id") or "",
        refund_cent=_int_or_none(row.get("refund_cent")),
        total_cent=int(row["total_cent"]),
        success_time=row.get("success_time"),
        source=row.get("source", "notify"),
        cumulative_cent=_int_or_none(row.get("cumulative_cent")),
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


class RefundInbox:
    def __init__(self, raw: RefundRawStore, queue: RefundQueue, *, clock: Callable[[], float] = time.time):
        self.raw = raw
        self.queue = queue
        self.clock = clock

    def record(
        self,
        notice: RefundNotice,
        *,
        body: str | None = None,
        headers: dict[str, str] | None = None,
        envelope_id: str = "",
    ) -> dict[str, Any] | None:
        """The conditional put (R7). Returns None when new, else the row already there."""
        return self.raw.put_new(
            raw_row(notice, self.clock(), body=body, headers=headers, envelope_id=envelope_id)
        )

    def accept(self, notice: RefundNotice, *, body: str, headers: dict[str, str], envelope_id: str) -> bool:
        """Store and enqueue. True = answer the channel success; False = answer failure so it retries."""
        existing = self.record(notice, body=body, headers=headers, envelope_id=envelope_id)
        if existing is not None and existing.get("handled") in (1, 2):
            count(M.REFUND_NOTIFY_DUPLICATE, channel=notice.channel, merchant=notice.mchid)
            return True  # already applied or with a person (R9)
        try:
            self.queue.send(notice.raw_key, notice.status)
        except Exception as exc:  # noqa: BLE001 - any enqueue failure: the channel must retry
            count(M.ENQUEUE_FAILED, channel=notice.channel, merchant=notice.mchid)
            logger.error(
                "refund notification enqueue failed; answering failure so the channel retries",
                extra={"refund_raw_key": notice.raw_key, "status": notice.status, "error": str(exc)},
            )
            return False
        count(
            M.REFUND_NOTIFY_DUPLICATE if existing else M.REFUND_NOTIFY_ACCEPTED,
            channel=notice.channel,
            merchant=notice.mchid,
        )
        return True
