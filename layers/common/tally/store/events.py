"""EventBridge: the outbox's bus (service/outbox.py) and its archive replay, plus the DynamoDB stream record
format the outbox reads. The only code that calls EventBridge."""

from __future__ import annotations

import json
from typing import Any

from tally.domain.events import SOURCE, DownstreamEvent
from tally.store.codec import from_item


def stream_images(record: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(old, new) row images of one DynamoDB stream record, decoded (None where the record has none)."""
    images = record.get("dynamodb", {})
    return from_item(images.get("OldImage")), from_item(images.get("NewImage"))


class EventBus:
    def __init__(self, client: Any, bus_name: str):
        self.client = client  # boto3 events client (bootstrap builds it)
        self.bus_name = bus_name

    def put(self, events: list[DownstreamEvent]) -> int:
        """One PutEvents of `events` (source SOURCE, detail as JSON); returns how many the bus did not accept."""
        answer = self.client.put_events(
            Entries=[
                {
                    "Source": SOURCE,
                    "DetailType": e.detail_type,
                    "Detail": json.dumps(e.detail, ensure_ascii=False),
                    "EventBusName": self.bus_name,
                }
                for e in events
            ]
        )
        return int(answer.get("FailedEntryCount") or 0)

    def replay(self, name: str, archive_arn: str, since: Any, until: Any) -> dict[str, Any]:
        """EventBridge StartReplay of the archive's [since, until) back into this bus."""
        bus_arn = self.client.describe_event_bus(Name=self.bus_name)["Arn"]
        answer: dict[str, Any] = self.client.start_replay(
            ReplayName=name,
            EventSourceArn=archive_arn,
            EventStartTime=since,
            EventEndTime=until,
            Destination={"Arn": bus_arn},
        )
        return answer

    def replay_status(self, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.client.describe_replay(ReplayName=name)
        return answer
