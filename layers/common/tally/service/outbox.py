"""The outbox (R20): committed changes, read from DynamoDB Streams, become events on the bus.

Publishing from the stream (not after the commit) means a crash between commit and publish
loses nothing: the stream holds the change until the publish succeeds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tally.domain.events import DownstreamEvent, events_for_change, generation_failed
from tally.observability import M, count, logger
from tally.store.events import EventBus, stream_images
from tally.store.tables import iso_now

if TYPE_CHECKING:
    from tally.service.webhooks import WebhookFanout
    from tally.store.changes import ChangedRows
    from tally.store.tables import EventStore


class PublishFailed(Exception):
    pass


class OutboxService:
    def __init__(self, bus: EventBus, webhooks: WebhookFanout | None = None, cases: EventStore | None = None):
        self.bus = bus
        self.webhooks = webhooks  # the feed and the merchants' endpoints (docs/webhooks.md)
        self.cases = cases  # the work queue: a change whose event could not be built

    def publish_record(self, record: dict[str, Any]) -> list[DownstreamEvent]:
        """One stream record → its events on the bus. Raises PublishFailed so the record is retried. A change
        whose event cannot be built becomes an EventGenerationFailed event and a case, never a silent gap."""
        old, new = stream_images(record)
        try:
            found = events_for_change(old, new)
        except Exception as exc:  # noqa: BLE001 - becomes an event, a case and an alarmed metric
            found = [self._generation_failed(old, new, record, exc)]
        return self._publish(found)

    def _generation_failed(
        self, old: dict[str, Any] | None, new: dict[str, Any] | None, record: dict[str, Any], exc: Exception
    ) -> DownstreamEvent:
        sequence = str(record.get("dynamodb", {}).get("SequenceNumber", ""))
        event = generation_failed(old, new, sequence, f"{type(exc).__name__}: {exc}", iso_now())
        count(M.EVENT_GENERATION_FAILED)
        logger.error("event generation failed", extra={"event_id": event.event_id, "error": str(exc)[:300]})
        if self.cases is not None:
            self.cases.put(
                event.event_id,
                "event_generation_failed",
                time.time(),
                manual_kind="event_generation_failed",
                mchid=event.detail.get("mchid"),
                out_trade_no=event.detail.get("out_trade_no"),
                reason=f"a committed change produced no event ({event.detail['error']}): fix the row or the "
                "builder, then `tally outbox republish` it",
            )
        return event

    def publish_current(self, row: dict[str, Any]) -> list[DownstreamEvent]:
        """A row's events rebuilt from its current state by the stream's own builder, as if it had just been
        committed: the same stable ids, so a consumer that already has one drops it (docs/events.md)."""
        return self._publish(events_for_change(None, row))

    def _publish(self, found: list[DownstreamEvent]) -> list[DownstreamEvent]:
        if not found:
            return []
        if self.webhooks is not None:  # first: the feed and the endpoints do not depend on the bus being up
            self.webhooks.publish(found)  # raises: the record is retried (every id is stable)
        failed = self.bus.put(found)
        if failed:
            count(M.OUTBOX_FAILED)
            raise PublishFailed(f"{failed} of {len(found)} events not accepted by the bus")
        for event in found:
            count(M.OUTBOX_PUBLISHED)
            logger.info("downstream event published", extra={"event_id": event.event_id})
        return found


class Republisher:
    """`tally outbox republish`: events lost after the stream gave up (OutboxDLQ holds only shard pointers into
    a stream that keeps records 24 h) are rebuilt from the rows, which are the truth."""

    def __init__(self, rows: ChangedRows, outbox: OutboxService):
        self.rows = rows
        self.outbox = outbox

    def order(self, mchid: str, out_trade_no: str) -> list[str]:
        row = self.rows.order(mchid, out_trade_no)
        if row is None:
            raise LookupError(f"no order {mchid}/{out_trade_no}")
        return [e.event_id for e in self.outbox.publish_current(row)]

    def refund(self, refund_no: str) -> list[str]:
        row = self.rows.refund(refund_no)
        if row is None:
            raise LookupError(f"no refund {refund_no}")
        return [e.event_id for e in self.outbox.publish_current(row)]

    def since(self, iso: str, until: str | None = None) -> dict[str, Any]:
        """Every order and refund changed in [iso, until): those in a final state get their event again."""
        published, rows = [], 0
        for row in self.rows.since(iso, until):
            rows += 1
            published += [e.event_id for e in self.outbox.publish_current(row)]
        logger.info(
            "outbox republished", extra={"since": iso, "until": until, "rows": rows, "events": len(published)}
        )
        return {"rows": rows, "events": published}


class EventReplay:
    """`tally events replay`: the bus's archive (template.yaml EventArchive) sent back through the bus
    (EventBridge StartReplay). Consumers drop what they already have by `event_id`."""

    def __init__(self, bus: EventBus, archive_arn: str):
        self.bus = bus
        self.archive_arn = archive_arn

    def start(self, name: str, since: Any, until: Any) -> dict[str, Any]:
        if not self.archive_arn:
            raise LookupError("no event archive configured (stack output EventArchiveArn)")
        if until <= since:
            raise ValueError("--until must be after --since")
        answer = self.bus.replay(name, self.archive_arn, since, until)
        logger.info("event replay started", extra={"replay": name, "state": answer.get("State")})
        return {"replay": name, "state": answer.get("State"), "arn": answer.get("ReplayArn")}

    def status(self, name: str) -> dict[str, Any]:
        answer = self.bus.replay_status(name)
        return {k: answer.get(k) for k in ("ReplayName", "State", "StateReason", "EventLastReplayedTime")}
