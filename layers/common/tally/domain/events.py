"""Downstream events (R20): which committed change means which event, with a stable id.

The same change always yields the same event id, so a consumer that sees an event twice (stream
retries, replays) drops the second by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCE = "tally"


@dataclass(frozen=True)
class DownstreamEvent:
    event_id: str
    detail_type: str  # OrderPaid | OrderClosed | RefundSucceeded | RefundFailed | EventGenerationFailed
    detail: dict[str, Any]


ORDER_FIELDS = ("mchid", "sp_mchid", "out_trade_no", "channel", "tenant", "amount_cent", "currency")


def events_for_change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[DownstreamEvent]:
    """Events for one committed row change (an order or a refund)."""
    if new is None or (old or {}).get("status") == new.get("status"):
        return []
    if "refund_no" in new:
        return _refund_events(new)
    return _order_events(new)


def _order_events(order: dict[str, Any]) -> list[DownstreamEvent]:
    base = {k: order.get(k) for k in ORDER_FIELDS}
    if order["status"] == "PAID":
        event_id = f"OrderPaid:{order['pk']}:{order['transaction_id']}"
        detail = {
            **base,
            "transaction_id": order["transaction_id"],
            "paid_cent": order.get("paid_cent"),
            "paid_at": order.get("paid_at"),
        }
        return [DownstreamEvent(event_id, "OrderPaid", {"event_id": event_id, **detail})]
    if order["status"] == "CLOSED":
        event_id = f"OrderClosed:{order['pk']}"
        return [
            DownstreamEvent(
                event_id, "OrderClosed", {"event_id": event_id, **base, "closed_at": order.get("updated_at")}
            )
        ]
    return []


def _refund_events(refund: dict[str, Any]) -> list[DownstreamEvent]:
    kinds = {"SUCCESS": "RefundSucceeded", "FAIL": "RefundFailed", "CLOSED": "RefundFailed"}
    kind = kinds.get(refund["status"])
    if kind is None:
        return []
    # the row's key: `mchid#refund_no` (two merchants may use one refund_no); a legacy row's is its refund_no,
    # so its events keep the id they were first published with
    event_id = f"{kind}:{refund.get('pk') or refund['refund_no']}"
    keep = ("refund_no", "refund_id", "channel", "mchid", "out_trade_no", "amount_cent", "status")
    return [DownstreamEvent(event_id, kind, {"event_id": event_id, **{k: refund.get(k) for k in keep}})]


def generation_failed(
    old: dict[str, Any] | None, new: dict[str, Any] | None, sequence: str, error: str, at: str
) -> DownstreamEvent:
    """The event that says a change's event could not be built (docs/webhooks.md): the row's ids, never its
    money fields (they may be what is broken); stable per stream record, so a retry repeats the same id."""
    row = new or old or {}
    keep = ("mchid", "out_trade_no", "refund_no", "status")
    event_id = f"EventGenerationFailed:{row.get('pk', '?')}:{sequence}"
    detail = {"event_id": event_id, **{k: row.get(k) for k in keep}, "error": error[:300], "occurred_at": at}
    return DownstreamEvent(event_id, "EventGenerationFailed", detail)


@dataclass(frozen=True)
class ParkedBatch:
    """What Lambda's on-failure destination says about a stream batch it gave up on (OutboxDLQ): where the
    records are, never the records themselves (the stream keeps them 24 hours)."""

    stream_arn: str
    shard_id: str
    start: str  # the first and last sequence numbers of the batch, both included
    end: str
    first_at: str  # ISO times the first and last records reached the stream
    last_at: str


def parked_batch(message: dict[str, Any]) -> ParkedBatch | None:
    """The batch an on-failure record names (`DDBStreamBatchInfo`), or None when the message is not one."""
    info = message.get("DDBStreamBatchInfo")
    if not isinstance(info, dict):
        return None
    try:
        return ParkedBatch(
            str(info["streamArn"]),
            str(info["shardId"]),
            str(info["startSequenceNumber"]),
            str(info["endSequenceNumber"]),
            str(info.get("approximateArrivalOfFirstRecord") or ""),
            str(info.get("approximateArrivalOfLastRecord") or ""),
        )
    except KeyError:
        return None


def republish_target(row: dict[str, Any]) -> dict[str, Any]:
    """What a case's closing action republishes from the rows (the truth): one refund, one order, or every
    order and refund changed in a window (a batch whose records the stream no longer held)."""
    if row.get("republish_since"):
        return {"since": row["republish_since"], "until": row.get("republish_until") or None}
    if row.get("refund_no"):
        key = f"{row['mchid']}#{row['refund_no']}" if row.get("mchid") else str(row["refund_no"])
        return {"refund": key}
    if row.get("mchid") and row.get("out_trade_no"):
        return {"order": [row["mchid"], row["out_trade_no"]]}
    return {}
