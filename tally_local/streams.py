"""The local DynamoDB Streams event source mapping, and a downstream consumer that prints events.

StreamPump reads a table's stream (moto implements DynamoDB Streams) and calls the function with
stream batches, as Lambda does with `FunctionResponseTypes: [ReportBatchItemFailures]`: on a
failure it resumes from the first failed record; after `MaximumRetryAttempts` retries it sends the
event source's `OnFailure` destination what Lambda sends (`on_failure_message`: where the batch is,
not its records) and moves on past the batch. DownstreamPrinter subscribes an SQS queue to the
event bus (local wiring only) and prints each event, so `make run` shows what consumers receive.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tally_local.resources import LambdaContext

log = logging.getLogger(__name__)


class StreamPump:
    def __init__(
        self,
        ddb: Any,
        streams: Any,
        table: str,
        handler: Any,
        *,
        function_name: str,
        timeout_s: int = 30,
        poll_s: float = 0.2,
        batch_size: int = 50,
        shards_every_s: float = 5.0,
        gate: Any = None,
        max_retries: int = -1,  # the mapping's MaximumRetryAttempts (-1: retried until it succeeds)
        on_failure: Callable[[dict[str, Any]], Any] | None = None,  # sends to the OnFailure destination
    ):
        self.streams = streams
        self.max_retries, self.on_failure = max_retries, on_failure
        self._attempts: dict[str, int] = {}  # first record of a failing batch -> invocations so far
        self.gate = gate  # an AckFirst: wait while the front door has requests in flight (ackfirst.py)
        self.handler = handler
        self.function_name, self.timeout_s = function_name, timeout_s
        self.poll_s, self.batch_size = poll_s, batch_size
        self.stream_arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        self.region = self.stream_arn.split(":")[3]
        self.shards_every_s = shards_every_s  # shards change in hours; records arrive in milliseconds
        self._shards: list[str] = []
        self._shards_read_at = float("-inf")
        self._iterators: dict[str, str] = {}
        self._pending: dict[str, list[dict[str, Any]]] = {}  # records read but not yet handled
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StreamPump:
        self._thread = threading.Thread(target=self._run, name=f"stream-{self.function_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            if self.gate is not None:
                self.gate.wait_turn(self._stopping)
            try:
                self.poll_once()
            except (BotoCoreError, ClientError):
                if self._stopping.is_set():
                    return  # the stack is stopping: moto may be gone already, nothing to retry
                log.exception("stream pump %s: reading the stream failed; retrying", self.function_name)

    def poll_once(self) -> int:
        """Read new records from every shard and hand them to the function; returns records handled."""
        handled = 0
        for shard_id in self._shard_ids():
            pending = self._pending.setdefault(shard_id, [])
            pending += self._read(shard_id)
            while pending:
                batch = pending[: self.batch_size]
                failed = self._invoke(batch)
                done = (
                    batch
                    if failed is None
                    else batch[: [r["dynamodb"]["SequenceNumber"] for r in batch].index(failed)]
                )
                del pending[: len(done)]
                handled += len(done)
                rest = batch[len(done) :]  # what Lambda retries: the batch from the failed record on
                if failed is not None and self._give_up(shard_id, rest):
                    del pending[: len(rest)]  # parked: Lambda moves past the batch
                    continue
                if failed is not None:
                    break  # retry from the failed record on the next poll
        return handled

    def _give_up(self, shard_id: str, batch: list[dict[str, Any]]) -> bool:
        """Lambda's retries are spent: the batch (from the failed record) goes to the OnFailure destination."""
        first = batch[0]["dynamodb"]["SequenceNumber"]
        self._attempts[first] = self._attempts.get(first, 0) + 1
        if self.max_retries < 0 or self.on_failure is None or self._attempts[first] <= self.max_retries:
            return False
        del self._attempts[first]
        self.on_failure(on_failure_message(batch, shard_id, self.stream_arn, self.function_name, self.region))
        log.error(
            "%s gave up on a stream batch after %d retries: parked", self.function_name, self.max_retries
        )
        return True

    def _shard_ids(self) -> list[str]:
        """The stream's shards, listed again every `shards_every_s`: a DescribeStream per poll was half
        of the pump's AWS calls (5 a second, idle or not) for a list that changes every few hours."""
        now = time.monotonic()
        if now - self._shards_read_at >= self.shards_every_s:
            description = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
            self._shards = [shard["ShardId"] for shard in description["Shards"]]
            self._shards_read_at = now
        return self._shards

    def _read(self, shard_id: str) -> list[dict[str, Any]]:
        iterator = (
            self._iterators.get(shard_id)
            or self.streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )
        answer = self.streams.get_records(ShardIterator=iterator, Limit=1000)
        self._iterators[shard_id] = answer.get("NextShardIterator") or iterator
        for record in answer["Records"]:
            record["eventSourceARN"] = self.stream_arn
        return answer["Records"]

    def _invoke(self, batch: list[dict[str, Any]]) -> str | None:
        """The first failed sequence number, or None when the whole batch succeeded."""
        try:
            result = self.handler({"Records": batch}, LambdaContext(self.function_name, self.timeout_s)) or {}
        except Exception:  # noqa: BLE001 - like Lambda: the whole batch is retried
            log.exception("%s failed on a stream batch; it will be retried", self.function_name)
            return batch[0]["dynamodb"]["SequenceNumber"]
        failures = [f["itemIdentifier"] for f in result.get("batchItemFailures", [])]
        return failures[0] if failures else None


def on_failure_message(
    batch: list[dict[str, Any]], shard_id: str, stream_arn: str, function_name: str, region: str
) -> dict[str, Any]:
    """What Lambda sends a DynamoDB event source's on-failure destination when a batch's retries are spent."""

    def arrival(record: dict[str, Any]) -> str:
        at = record["dynamodb"].get("ApproximateCreationDateTime")
        at = at.timestamp() if hasattr(at, "timestamp") else float(at or time.time())
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))

    return {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": f"arn:aws:lambda:{region}:123456789012:function:{function_name}",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 1,
        },
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": ""},
        "version": "1.0",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": batch[0]["dynamodb"]["SequenceNumber"],
            "endSequenceNumber": batch[-1]["dynamodb"]["SequenceNumber"],
            "approximateArrivalOfFirstRecord": arrival(batch[0]),
            "approximateArrivalOfLastRecord": arrival(batch[-1]),
            "batchSize": len(batch),
            "streamArn": stream_arn,
        },
    }


class DownstreamPrinter:
    """A stand-in downstream consumer: bus → (rule) → SQS queue → printed, deduplicated by event_id."""

    def __init__(self, events: Any, sqs: Any, bus_name: str, *, out=print, gate: Any = None):
        self.sqs = sqs
        self.gate = gate  # an AckFirst (ackfirst.py)
        self.out = out
        self.seen: set[str] = set()
        self.received: list[dict[str, Any]] = []
        self.queue_url = sqs.create_queue(QueueName=f"{bus_name}-local-consumer")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        events.put_rule(
            Name="local-consumer", EventBusName=bus_name, EventPattern=json.dumps({"source": ["tally"]})
        )
        events.put_targets(
            Rule="local-consumer", EventBusName=bus_name, Targets=[{"Id": "printer", "Arn": arn}]
        )
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> DownstreamPrinter:
        self._thread = threading.Thread(target=self._run, name="downstream-printer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self.gate is not None:
                self.gate.wait_turn(self._stopping)
            try:
                self.poll_once(wait_s=1)
            except (BotoCoreError, ClientError):
                if self._stopping.is_set():
                    return  # the stack is stopping: moto may be gone already, nothing to retry
                log.exception("downstream printer: polling failed; retrying")

    def poll_once(self, wait_s: int = 0) -> None:
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s
        ).get("Messages", [])
        for message in messages:
            event = json.loads(message["Body"])
            event_id = event["detail"].get("event_id", event["id"])
            if event_id not in self.seen:  # R20: a consumer drops the second copy by its stable id
                self.seen.add(event_id)
                self.received.append(event)
                self.out(
                    f"downstream event {event['detail-type']}: {json.dumps(event['detail'], ensure_ascii=False)}"
                )
        if messages:  # one call per batch, not per event
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": message["ReceiptHandle"]}
                    for i, message in enumerate(messages)
                ],
            )
