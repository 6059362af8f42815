"""The outbox (R20): committed changes, read from DynamoDB Streams, become events on the bus.

Publishing from the stream (not after the commit) means a crash between commit and publish
loses nothing: the stream holds the change until the publish succeeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tally.domain.events import DownstreamEvent, events_for_change
from tally.observability import M, count, logger
from tally.store.events import EventBus, stream_images

if TYPE_CHECKING:
    from tally.store.changes import ChangedRows


class PublishFailed(Exception):
    pass


class OutboxService:
    def __init__(self, bus: EventBus):
        self.bus = bus

    def publish_record(self, record: dict[str, Any]) -> list[DownstreamEvent]:
        """One stream record → its events on the bus. Raises PublishFailed so the record is retried."""
        return self._publish(events_for_change(*stream_images(record)))

    def publish_current(self, row: dict[str, Any]) -> list[DownstreamEvent]:
        """A row's events rebuilt from its current state by the stream's own builder, as if it had just been
        committed: the same stable ids, so a consumer that already has one drops it (docs/events.md)."""
        return self._publish(events_for_change(None, row))

    def _publish(self, found: list[DownstreamEvent]) -> list[DownstreamEvent]:
        if not found:
            return []
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
