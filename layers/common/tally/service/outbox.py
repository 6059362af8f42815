"""The outbox (R20): committed changes, read from DynamoDB Streams, become events on the bus.

Publishing from the stream (not after the commit) means a crash between commit and publish
loses nothing: the stream holds the change until the publish succeeds.
"""

from __future__ import annotations

import json
from typing import Any

from tally.domain.events import SOURCE, DownstreamEvent, events_for_change
from tally.observability import M, count, logger
from tally.store.codec import from_item


class PublishFailed(Exception):
    pass


class OutboxService:
    def __init__(self, events_client: Any, bus_name: str):
        self.events = events_client
        self.bus_name = bus_name

    def publish_record(self, record: dict[str, Any]) -> list[DownstreamEvent]:
        """One stream record → its events on the bus. Raises PublishFailed so the record is retried."""
        images = record.get("dynamodb", {})
        found = events_for_change(from_item(images.get("OldImage")), from_item(images.get("NewImage")))
        if not found:
            return []
        answer = self.events.put_events(
            Entries=[
                {
                    "Source": SOURCE,
                    "DetailType": e.detail_type,
                    "Detail": json.dumps(e.detail, ensure_ascii=False),
                    "EventBusName": self.bus_name,
                }
                for e in found
            ]
        )
        if answer.get("FailedEntryCount"):
            count(M.OUTBOX_FAILED)
            raise PublishFailed(
                f"{answer['FailedEntryCount']} of {len(found)} events not accepted by the bus"
            )
        for event in found:
            count(M.OUTBOX_PUBLISHED)
            logger.info("downstream event published", extra={"event_id": event.event_id})
        return found
