"""The pull path for what reconciliation finds missing (the classic 掉单, R36 → R23).

A payment the channel's bill has and our ledger does not is queried at the channel with the merchant's own
credentials, and a paid answer becomes a raw row (source="recon") that goes through the same enqueue →
worker → one-transaction path as a callback (same idempotency key: channel#transaction_id). The poller
has the same shape (Alipay: alipay.trade.query by trade_no, booking receipt_amount).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tally import errors
from tally.channels import registry as channel_registry
from tally.domain.notifications import Outcome
from tally.observability import M, count, logger
from tally.service.ingest import raw_row
from tally.store.tables import ApplyQueue, RawStore

QUEUED = "QUEUED"  # a raw row was written (or was still pending) and enqueued for the worker
ALREADY_HANDLED = "ALREADY_HANDLED"  # the raw row exists at handled 1/2: booked or with a person
NOT_PAID = "NOT_PAID"
QUERY_FAILED = "QUERY_FAILED"
UNSUPPORTED = "UNSUPPORTED"


class QueryAndApply:
    """`recover(channel, mchid, transaction_id) -> outcome` (one of the constants above, with a reason)."""

    def __init__(
        self, merchants: Any, raw: RawStore, queue: ApplyQueue, *, clock: Callable[[], float] = time.time
    ):
        self.merchants = merchants
        self.raw = raw
        self.queue = queue
        self.clock = clock

    def recover(self, channel: str, mchid: str, transaction_id: str) -> str:
        owner = channel_registry.by_stored(channel)
        if owner is None:
            return f"{UNSUPPORTED}: no query client for {channel}"
        try:
            notice, body = owner.paid_by_transaction(self.merchants, mchid, transaction_id)
        except (errors.ChannelError, errors.ParseError, LookupError) as exc:
            count(M.RECON_RECOVER_FAILED, channel=channel, merchant=mchid)
            logger.error(
                "recon: query of a channel-only payment failed",
                extra={"mchid": mchid, "transaction_id": transaction_id, "error": str(exc)},
            )
            return f"{QUERY_FAILED}: {exc}"
        if (
            owner.outcome_of(notice.trade_state) is not Outcome.PAID
            or notice.transaction_id != transaction_id
        ):
            return f"{NOT_PAID}: channel says {notice.trade_state}"
        return self._apply(notice, body)

    def _apply(self, notice: Any, body: bytes) -> str:
        """The raw row (source="recon") and the enqueue: the same worker path as a callback."""
        row = raw_row(notice, self.clock(), body=body, headers=None)
        existing = self.raw.put_new(row)
        if existing is not None and existing.get("handled") in (1, 2):
            return f"{ALREADY_HANDLED}: raw row handled={existing.get('handled')}"
        self.queue.send(row["pk"])
        count(M.RECON_RECOVER_QUEUED, channel=notice.channel, merchant=notice.mchid)
        logger.info("recon: channel-only payment queued for apply", extra={"raw_key": row["pk"]})
        return QUEUED
