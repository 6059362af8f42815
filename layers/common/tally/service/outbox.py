"""The outbox (R20): committed changes, read from DynamoDB Streams, become events on the bus.

Publishing from the stream (not after the commit) means a crash between commit and publish
loses nothing: the stream holds the change until the publish succeeds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tally.domain.events import (
    DownstreamEvent,
    ParkedBatch,
    events_for_change,
    generation_failed,
    parked_batch,
    republish_target,
)
from tally.observability import M, count, logger
from tally.store.events import EventBus, RepairQueue, StreamGone, StreamRecords, stream_images
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
        self,
        old: dict[str, Any] | None,
        new: dict[str, Any] | None,
        record: dict[str, Any],
        exc: Exception,
        why: str = "produced no event",
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
                refund_no=event.detail.get("refund_no"),
                reason=f"a committed change {why} ({event.detail['error']}): fix the cause, then `replay` "
                "republishes its events from the row",
            )
        return event

    def publish_failed(self, record: dict[str, Any], exc: Exception) -> DownstreamEvent:
        """A record whose events could not be published after the stream's retries and one more attempt: an
        EventGenerationFailed event and a case (the case first: the bus may be what is failing)."""
        old, new = stream_images(record)
        why = "was not published after its retries"
        try:
            events_for_change(old, new)
        except Exception as build:  # noqa: BLE001 - the same case as when the stream first met it (one, not two)
            exc, why = build, "produced no event"
        event = self._generation_failed(old, new, record, exc, why=why)
        try:
            self._publish([event])
        except Exception as again:  # noqa: BLE001 - the case is written and the metric counted: a person knows
            logger.error(
                "EventGenerationFailed not published either; the case stands",
                extra={"event_id": event.event_id, "error": str(again)[:300]},
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


class ParkedRecords:
    """The OutboxDLQ's consumer. Lambda parks a stream batch there after its retries (`DDBStreamBatchInfo`: where
    the records are); each record of the batch gets one more attempt (the records parked beside the failing one
    were never wrong), and a record that still fails becomes an EventGenerationFailed event and a case. The same
    queue carries a case's closing action (`republish`): the row's events rebuilt and published again."""

    def __init__(self, stream: StreamRecords, outbox: OutboxService, republisher: Republisher):
        self.stream = stream
        self.outbox = outbox
        self.republisher = republisher

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        if "republish" in message:
            return self._republish(message)
        batch = parked_batch(message)
        if batch is None:
            return self._range_case(None, f"an OutboxDLQ message Tally cannot read: {str(message)[:200]}")
        try:
            records = self.stream.between(batch.stream_arn, batch.shard_id, batch.start, batch.end)
        except StreamGone as exc:
            return self._range_case(batch, f"the stream no longer holds the parked records ({exc})")
        published, failed = 0, []
        for record in records:
            try:
                self.outbox.publish_record(record)
                published += 1
            except Exception as exc:  # noqa: BLE001 - becomes an event, a case and an alarmed metric
                failed.append(self.outbox.publish_failed(record, exc).event_id)
        logger.info(
            "parked stream records handled",
            extra={"shard": batch.shard_id, "records": len(records), "published": published, "cases": failed},
        )
        return {"records": len(records), "published": published, "cases": failed}

    def _range_case(self, batch: ParkedBatch | None, why: str) -> dict[str, Any]:
        """Records Tally cannot read back: one case from the time the first arrived; its closing action
        republishes every order and refund changed since (consumers drop what they have by its stable id)."""
        count(M.EVENT_GENERATION_FAILED)
        first = (batch.first_at if batch else "") or iso_now(time.time() - 24 * 3600)
        key = (
            f"EventGenerationFailed:parked:{batch.shard_id}:{batch.start}"
            if batch
            else f"EventGenerationFailed:parked:{first}"
        )
        logger.error("parked stream records not readable", extra={"case": key, "why": why[:300]})
        if self.outbox.cases is not None:
            self.outbox.cases.put(
                key,
                "event_generation_failed",
                time.time(),
                manual_kind="event_generation_failed",
                republish_since=first,  # to now: a row changed again since still gets its current event
                reason=f"{why}: `replay` republishes every order and refund changed since {first}",
            )
        return {"records": 0, "published": 0, "cases": [key]}

    def _republish(self, message: dict[str, Any]) -> dict[str, Any]:
        target, case = message["republish"], str(message.get("case") or "")
        target = target if isinstance(target, dict) else {}  # a malformed request fails below: a case
        try:
            if "order" in target:
                events = self.republisher.order(*target["order"])
            elif "refund" in target:
                events = self.republisher.refund(target["refund"])
            else:
                events = self.republisher.since(target["since"], target.get("until"))["events"]
        except Exception as exc:  # noqa: BLE001 - the request failed: a case again, never a silent gap
            return self._request_failed(case, target, exc)
        logger.info("case republished", extra={"case": case, "events": events})
        return {"case": case, "events": events}

    def _request_failed(self, case: str, target: dict[str, Any], exc: Exception) -> dict[str, Any]:
        count(M.EVENT_GENERATION_FAILED)
        key = f"EventGenerationFailed:republish:{case}:{int(time.time())}"
        logger.error("republish failed", extra={"case": case, "error": str(exc)[:300]})
        if self.outbox.cases is not None:
            order = target.get("order") or [None, None]
            self.outbox.cases.put(
                key,
                "event_generation_failed",
                time.time(),
                manual_kind="event_generation_failed",
                mchid=order[0],
                out_trade_no=order[1],
                refund_no=target.get("refund"),
                republish_since=target.get("since"),
                republish_until=target.get("until"),
                reason=f"republishing for {case or 'a case'} failed ({type(exc).__name__}: {str(exc)[:200]}): "
                "fix the cause, then `replay` again",
            )
        return {"case": case, "events": [], "failed": key}


class RepublishRequests:
    """A case's closing action (service/queue.py): the request goes to the OutboxDLQ's consumer, which alone
    publishes; the events are rebuilt from the row, never from what the case says."""

    def __init__(self, queue: RepairQueue):
        self.queue = queue

    def ask(self, case: str, row: dict[str, Any], by: str) -> str:
        target = republish_target(row)
        if not target:
            raise LookupError(f"{case} names no order, refund or window to republish")
        self.queue.send({"republish": target, "case": case, "by": by})
        logger.info("republish requested", extra={"case": case, "target": target, "by": by})
        if "order" in target:
            return "republish requested: order " + "/".join(target["order"])
        if "refund" in target:
            return f"republish requested: refund {target['refund']}"
        return f"republish requested: every order and refund changed since {target['since']}"


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
