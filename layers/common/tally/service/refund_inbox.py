"""Refund notifications in: store the raw report keyed (channel#refund_no, status), then enqueue (R7, R30).

Channel-neutral: each channel's ingest verifies and parses, then hands a RefundNotice here. Lean imports:
this runs inside the notify function, on the channel's 5 s clock (R10).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tally.observability import M, count, logger
from tally.store.tables import iso_now

if TYPE_CHECKING:  # imported where a refund report is handled: ingest imports this module for
    from tally.domain.refunds import RefundNotice  # body_evidence / park_forgery, and a payment
    from tally.store.refunds import RefundQueue, RefundRawStore  # callback's cold start needs no refund code


def raw_row(
    notice: RefundNotice,
    now_s: float,
    *,
    body: str | None = None,
    headers: dict[str, str] | None = None,
    envelope_id: str = "",
) -> dict[str, Any]:
    from tally.store.refunds import refund_pending_pk

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
        "settlement": notice.settlement,  # R43: the refund's settlement figures, or why not (+ the basis)
        "settlement_error": notice.settlement_error,
        "settlement_basis": notice.settlement_basis,
        "envelope_id": envelope_id or None,
        "body": body,
        "headers": headers or None,
        "handled": 0,
        "attempts": 0,
        "notified_at": now,
        "pending_pk": refund_pending_pk(notice.raw_key),  # the sweeper's index until applied (L2)
    }


def notice_from_raw(row: dict[str, Any], event_of: Callable[[str, str], Any]) -> RefundNotice:
    from tally.domain.refunds import RefundNotice

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
        settlement={k: int(v) for k, v in row["settlement"].items()} if row.get("settlement") else None,
        settlement_error=row.get("settlement_error"),
        settlement_basis=row.get("settlement_basis") or None,
    )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


BODY_PREFIX_BYTES = 4096  # what is kept of an unauthenticated or forged body (R40): enough to recognise it
FORGERY = "suspected_forgery"
FORGERIES_KEPT = 20  # open suspected-forgery rows per (channel, reporting merchant, cause); the rest counted
FORGERY_IDS_NAMED = 50  # distinct claimed merchant ids a forgery group's counter row names; the rest counted


def body_evidence(body: bytes | str | None) -> dict[str, Any]:
    """A bounded record of a body (R40): its first 4 KB (decoded for a person), its length and SHA-256."""
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else (body or b"")
    return {
        "body_prefix": data[:BODY_PREFIX_BYTES].decode("utf-8", "replace"),
        "body_len": len(data),
        "body_sha256": hashlib.sha256(data).hexdigest(),
    }


def park_forgery(
    events: Any,
    now_s: float,
    *,
    channel: str,
    mchid: str,
    cause: str,
    reason: str,
    body: bytes | str | None,
    refund_no: str | None = None,
    out_trade_no: str | None = None,
    amount_cent: int | None = None,
    url_merchant: str | None = None,
    key: str = "",
) -> str:
    """R39: a signed report that does not belong to the tenant it names. It becomes a queue item
    (`manual_kind=suspected_forgery`, its own key in notify_event: never the raw key the genuine report
    needs), counts ReportForged (alarmed), and changes nothing else. The same report twice is one row.

    It is filed under the merchant that reported it (the one whose keys verified it: `url_merchant`, else
    `mchid`), never under the merchant it names (`claimed_mchid`), and bounded like rejections (R40): per
    reporting merchant and cause one counter row (the count, and the first FORGERY_IDS_NAMED claimed ids), at
    most FORGERIES_KEPT open rows; the rest are counted. The work queue shows the group as one item (R40)."""
    evidence = body_evidence(body)
    reporter = (url_merchant or mchid)[:32]
    digest = hashlib.sha256(f"{key}|{evidence['body_sha256']}".encode()).hexdigest()[:32]
    event_id = f"forgery#{channel}#{reporter}#{digest}"
    if events is not None:
        group = f"forgery-count#{channel}#{reporter}#{cause}"
        _seen, slot = events.count_rejection(
            group,
            now_s,
            pool="other",
            cap=FORGERIES_KEPT,
            kind="forgery_count",
            channel=channel,
            mchid=reporter,
            cause=cause,
        )
        events.note_id(group, mchid[:32], cap=FORGERY_IDS_NAMED)  # the ids the one queue item names
        if slot:
            kept = {"aggregate_pk": group, "slot_pool": "other"}
            written = events.put(
                event_id,
                FORGERY,
                now_s,
                manual_kind=FORGERY,
                channel=channel,
                mchid=reporter,
                claimed_mchid=mchid[:32],
                url_merchant=(url_merchant or "")[:32] or None,
                refund_no=(refund_no or "")[:64] or None,
                out_trade_no=(out_trade_no or "")[:64] or None,
                amount_cent=amount_cent,
                cause=cause,
                reason=reason[:300],
                **kept,
                **evidence,
            )
            if written is None:  # the same report is kept already: the slot goes back
                events.release_slot(kept)
    count(M.REPORT_FORGED, channel=channel, merchant=reporter)
    logger.error(
        "suspected forgery parked: nothing of the tenant it names changed",
        extra={"event_id": event_id, "cause": cause, "mchid": mchid[:32], "refund_no": refund_no},
    )
    return event_id


class RefundInbox:
    def __init__(
        self,
        raw: RefundRawStore,
        queue: RefundQueue,
        *,
        clock: Callable[[], float] = time.time,
        events: Any = None,
    ):
        self.raw = raw
        self.queue = queue
        self.clock = clock
        self.events = events  # notify_event: where suspected forgeries are parked (R39)

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
