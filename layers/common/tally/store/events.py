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


class StreamGone(Exception):
    """The stream no longer holds the records (trimmed after 24 hours, or the stream was replaced)."""


class StreamRecords:
    """DynamoDB Streams read back by sequence number: the records of a batch Lambda parked in the OutboxDLQ."""

    def __init__(self, client: Any):
        self.client = client  # boto3 dynamodbstreams client

    def between(self, stream_arn: str, shard_id: str, start: str, end: str) -> list[dict[str, Any]]:
        """The records from `start` to `end` (both included), in stream order, as Lambda hands them over."""
        errors = ("TrimmedDataAccessException", "ResourceNotFoundException", "ExpiredIteratorException")
        try:
            iterator = self.client.get_shard_iterator(
                StreamArn=stream_arn,
                ShardId=shard_id,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                SequenceNumber=start,
            )["ShardIterator"]
            found: list[dict[str, Any]] = []
            while iterator:
                answer = self.client.get_records(ShardIterator=iterator, Limit=1000)
                records = answer.get("Records", [])
                for record in records:
                    if int(record["dynamodb"]["SequenceNumber"]) > int(end):
                        return found
                    record["eventSourceARN"] = stream_arn
                    found.append(record)
                if not records:
                    return found
                iterator = answer.get("NextShardIterator")
            return found
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in errors:
                raise StreamGone(str(exc)) from exc
            raise


class RepairQueue:
    """The OutboxDLQ as a queue of requests too: a case's closing action asks the parked-records function to
    republish a row's events, so whoever closes the case needs no right to publish on the bus."""

    def __init__(self, client: Any, url: str):
        self.client = client  # boto3 sqs client
        self.url = url

    def send(self, body: dict[str, Any]) -> None:
        self.client.send_message(QueueUrl=self.url, MessageBody=json.dumps(body, ensure_ascii=False))
