"""The local SQS event source mapping: long-poll a queue, call the worker handler with an SQS event.

As on AWS with `FunctionResponseTypes: [ReportBatchItemFailures]`: messages listed in
`batchItemFailures` stay on the queue and come back after their visibility timeout (shortened to
`retry_visibility_s` here, for speed), the others are deleted; a handler exception, or a failure
entry naming no message of the batch, fails the whole batch. The queue's own RedrivePolicy moves a
message to the DLQ after maxReceiveCount receives (moto implements that).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tally_local.resources import LambdaContext

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]


class SqsPump:
    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handler: Handler,
        *,
        function_name: str = "WorkerFunction",
        timeout_s: int = 30,
        memory_mb: int = 128,
        batch_size: int = 10,
        wait_time_s: int = 1,
        retry_visibility_s: int | None = 2,  # None: leave a kept message as the handler set it
        gate: Any = None,
    ):
        self.sqs = sqs
        self.gate = gate  # an AckFirst: wait while the front door has requests in flight (ackfirst.py)
        self.queue_url = queue_url
        self.handler = handler
        self.function_name = function_name
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.batch_size, self.wait_time_s = batch_size, wait_time_s
        self.retry_visibility_s = retry_visibility_s
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.region = self.queue_arn.split(":")[3]
        self._stopping = threading.Event()
        self._busy = threading.Event()  # a batch is being handled or settled
        self._batches = 0  # batches started, written by the pump thread only
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SqsPump:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"pump-{self.function_name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Finish the batch in flight, then return (at most one long poll plus one invocation)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self._thread = None

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until the queue is empty (nothing visible, in flight or delayed) and no batch runs.

        The queue must be seen empty twice in a row with no batch in between: SQS counts visible and
        invisible messages at slightly different instants, so a message whose visibility ends in
        between is in neither count.
        """
        deadline = time.monotonic() + timeout
        empty_after: int | None = None  # the batch count when the queue was last seen empty
        while time.monotonic() < deadline:
            batches = self._batches
            if self._busy.is_set() or not self._queue_is_empty():
                empty_after = None
            elif empty_after == batches:
                return True
            else:
                empty_after = batches
            time.sleep(0.05)
        return False

    def _queue_is_empty(self) -> bool:
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=names)[
            "Attributes"
        ]
        return all(int(attributes.get(name, 0)) == 0 for name in names)

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self.gate is not None:
                self.gate.wait_turn(self._stopping)
            try:
                messages = self._receive()
            except (BotoCoreError, ClientError) as error:
                log.warning("pump: receive from %s failed: %s", self.queue_url, error)
                self._stopping.wait(1.0)
                continue
            if not messages:
                continue
            try:
                self.process(messages)
            except (BotoCoreError, ClientError) as error:
                log.warning(
                    "pump: settling a batch failed (it comes back after its visibility timeout): %s", error
                )

    def _receive(self) -> list[dict[str, Any]]:
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=self.wait_time_s,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return response.get("Messages", [])

    def process(self, messages: list[dict[str, Any]]) -> set[str]:
        """Invoke the handler with one batch and settle it; returns the ids that failed.

        Received messages stay invisible until settled, so `drain` cannot see an empty queue while
        a batch is in the handler; `_busy` covers the moment between settling and returning.
        """
        self._busy.set()
        self._batches += 1
        try:
            failed = self._invoke(messages)
            self._settle(messages, failed)
            return failed
        finally:
            self._busy.clear()

    def _invoke(self, messages: list[dict[str, Any]]) -> set[str]:
        ids = {message["MessageId"] for message in messages}
        context = LambdaContext(self.function_name, self.timeout_s, self.memory_mb, self.region)
        try:
            result = self.handler(self.event_for(messages), context)
        except Exception:  # noqa: BLE001 - a handler exception fails the whole batch, as on Lambda
            log.error(
                "%s raised; the whole batch will be retried:\n%s", self.function_name, traceback.format_exc()
            )
            return ids
        return _failed_ids(result, ids, self.function_name)

    def _settle(self, messages: list[dict[str, Any]], failed: set[str]) -> None:
        done = [m for m in messages if m["MessageId"] not in failed]
        retry = [m for m in messages if m["MessageId"] in failed]
        for batch in _chunks(done, 10):
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
            )
        for batch in _chunks(retry if self.retry_visibility_s is not None else [], 10):
            self.sqs.change_message_visibility_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {
                        "Id": str(i),
                        "ReceiptHandle": m["ReceiptHandle"],
                        "VisibilityTimeout": self.retry_visibility_s,
                    }
                    for i, m in enumerate(batch)
                ],
            )

    # ------------------------------------------------------------------ the event

    def event_for(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"Records": [self._record(message) for message in messages]}

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        body = message["Body"]
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": body,
            "attributes": dict(message.get("Attributes", {})),
            "messageAttributes": {
                name: _lambda_message_attribute(value)
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message.get("MD5OfBody") or hashlib.md5(body.encode()).hexdigest(),  # noqa: S324
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.region,
        }


def _failed_ids(result: Any, ids: set[str], function_name: str) -> set[str]:
    """Lambda's rules for a partial batch response."""
    if not isinstance(result, dict) or not result.get("batchItemFailures"):
        return set()
    failed = set()
    for item in result["batchItemFailures"]:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if identifier not in ids:
            log.error("%s reported failure %r naming no message of the batch: all fail", function_name, item)
            return ids
        failed.add(identifier)
    return failed


def _lambda_message_attribute(value: dict[str, Any]) -> dict[str, Any]:
    """SQS API attribute shape → the Lambda event's camelCase shape."""
    converted: dict[str, Any] = {
        "stringListValues": value.get("StringListValues", []),
        "binaryListValues": [
            base64.b64encode(item).decode("ascii") for item in value.get("BinaryListValues", [])
        ],
        "dataType": value["DataType"],
    }
    if "StringValue" in value:
        converted["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        converted["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
    return converted


def _chunks(items: list[dict[str, Any]], size: int) -> Iterable[list[dict[str, Any]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
