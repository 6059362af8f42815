"""The typed records that cross the store boundary: an order, a raw payment notification, a refund.

They are TypedDicts, not classes: a row read from DynamoDB stays the plain dict every caller already indexes
(`order["pk"]`, `row.get("handled")`), and mypy checks the field names and types at each use. `total=False`:
a row written by an older version, or a projection of an index, may lack a field, so `.get()` stays the
way to read an optional one; the keys every row has are listed first in each record. Amounts are integer
cents (codec.py refuses floats). docs/contracts.md has the tables these rows live in.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast


class OrderRow(TypedDict, total=False):
    """orders: one per (merchant, out_trade_no), pk `mchid#out_trade_no` (service/orders.py writes it)."""

    pk: str
    mchid: str
    out_trade_no: str
    channel: str
    status: str  # domain.orders.Status value
    amount_cent: int
    currency: str
    version: int
    sp_mchid: str | None
    tenant: str
    description: str
    paid_cent: int
    refundable_cent: int
    transaction_id: str
    paid_at: str
    created_at: str
    updated_at: str
    upd_shard: str  # GSI by_updated, set with every updated_at (store/shards.py updated_shard)
    closed_at: str
    expire_at: str
    expire_minutes: int
    prepay: bool
    api: str  # "v2": queried with the WeChat Pay v2 API
    poll_pk: str
    poll_due: str
    poll_count: int
    manual_reason: str
    code_url: str
    qr_code: str
    prepay_error: str


class RawRow(TypedDict, total=False):
    """notify_raw: one per (channel, transaction_id), pk `channel#transaction_id` (service/ingest.py raw_row).
    `handled`: 0 = not yet applied, 1 = booked/applied, 2 = with a person (R9)."""

    pk: str
    channel: str
    transaction_id: str
    mchid: str
    out_trade_no: str
    order_pk: str
    trade_state: str
    order_total_cent: int
    paid_cent: int
    currency: str
    handled: int
    sp_mchid: str | None
    success_time: str | None
    source: str
    envelope_id: str
    body: str | None
    body_len: int
    body_sha256: str
    headers: dict[str, str] | None
    notify_api: str
    attempts: int
    notified_at: str
    pending_pk: str
    pending_at: str
    outcome: str
    handled_at: str
    manual_reason: str
    refund_task: str
    resolution: dict[str, Any]
    history: list[dict[str, Any]]


class RefundRow(TypedDict, total=False):
    """refunds: one per refund number, pk = refund_no (service/refunds.py builds it, store/refunds.py keeps it)."""

    pk: str
    refund_no: str
    channel: str
    mchid: str
    out_trade_no: str
    order_pk: str
    amount_cent: int
    status: str  # domain refund status value
    sp_mchid: str
    transaction_id: str | None
    total_cent: int
    currency: str
    reason: str
    hold: str  # store.refunds.HOLD_ORDER | HOLD_TASK
    hold_pk: str
    source: str
    refund_id: str
    created_at: str
    updated_at: str
    upd_shard: str  # GSI by_updated, set with every updated_at (store/shards.py updated_shard)
    poll_pk: str
    poll_due: str
    poll_attempts: int
    last_poll_note: str
    poll_errors: int  # polls that raised in a row (service/refunds.py, L3)
    manual_reason: str
    expire_at: str  # no outcome by then: EXPIRED (the poll)
    abnormal_route: str  # an ABNORMAL refund sent through apply-abnormal-refund (to the bank card or balance)
    abnormal_answer: str  # "taken", or "unknown": the call timed out, tracked as if taken (the query decides)
    reroute_since: int  # epoch s: an apply-abnormal-refund call is out (a claim; a person's outcome waits)
    reroute_by: str


def as_order(row: dict[str, Any] | None) -> OrderRow | None:
    """A decoded orders item as its record (no copy: the dict is the record)."""
    return cast("OrderRow | None", row)


def as_raw(row: dict[str, Any] | None) -> RawRow | None:
    return cast("RawRow | None", row)


def as_refund(row: dict[str, Any] | None) -> RefundRow | None:
    return cast("RefundRow | None", row)
