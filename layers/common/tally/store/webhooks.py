"""The webhooks table and queue (docs/webhooks.md): endpoints, the event feed, deliveries and their attempts,
the pull cursors, and the FIFO delivery queue. The only code that knows their layout.

One table, `pk`/`sk`:
  endpoint#<id> / endpoint         an endpoint: mchid, url, events, status ACTIVE|PAUSED, secret_name
                                   (GSI endpoints_of_merchant: endpoint_mchid / created_at)
  event#<event id> / event         an event as published: type, detail, body (GSI by_feed: feed_pk = mchid /
                                   seq = "<published_at>#<event id>"; GSI events_of_order: order_pk / seq)
  event#<event id> / to#<endpoint> its delivery to one endpoint: status PENDING|DELIVERED|FAILED|HELD, attempts
  event#<event id> / to#<endpoint>#<n>  one attempt: http_status, latency_ms, snippet, error
                                   (GSI by_endpoint: log_endpoint / at)
  cursor#<principal>#<mchid> / cursor   where GET /events left off for that caller and merchant
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tally.store.codec import from_item, names_values, to_item

EVENT_SK = "event"
PENDING, DELIVERED, FAILED, HELD = "PENDING", "DELIVERED", "FAILED", "HELD"
ACTIVE, PAUSED = "ACTIVE", "PAUSED"
MAX_HIDE_S = 43200 - 300  # SQS's 12-hour visibility maximum, counted from the receive, less a margin


class WebhookStore:
    def __init__(self, ddb: Any, table: str):
        self.ddb = ddb  # boto3 dynamodb client (bootstrap builds it)
        self.table = table

    # ------------------------------------------------------------------ endpoints

    def put_endpoint(self, row: dict[str, Any]) -> None:
        item = {
            "pk": f"endpoint#{row['endpoint_id']}",
            "sk": "endpoint",
            "endpoint_mchid": row["mchid"],
            **row,
        }
        self.ddb.put_item(
            TableName=self.table, Item=to_item(item), ConditionExpression="attribute_not_exists(pk)"
        )

    def endpoint(self, endpoint_id: str) -> dict[str, Any] | None:
        return self._get(f"endpoint#{endpoint_id}", "endpoint")

    def endpoints_of(self, mchid: str) -> list[dict[str, Any]]:
        return self._query("endpoints_of_merchant", "endpoint_mchid", mchid)

    def delete_endpoint(self, endpoint_id: str) -> None:
        self.ddb.delete_item(
            TableName=self.table, Key=to_item({"pk": f"endpoint#{endpoint_id}", "sk": "endpoint"})
        )

    def set_endpoint_status(self, endpoint_id: str, status: str, now: str, reason: str = "") -> bool:
        """ACTIVE ⇄ PAUSED; True when this call changed it (a second pause of a paused endpoint is not news)."""
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=to_item({"pk": f"endpoint#{endpoint_id}", "sk": "endpoint"}),
                UpdateExpression="SET #s = :s, status_at = :t, status_reason = :r",
                ConditionExpression="attribute_exists(pk) AND #s <> :s",
                ExpressionAttributeNames={"#s": "status"},
                **_values(s=status, t=now, r=reason),
            )
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    # ------------------------------------------------------------------ the event feed

    def put_event(self, event_id: str, row: dict[str, Any]) -> dict[str, Any]:
        """Keep an event once (a republish or stream retry keeps the first row: its place in the feed stays);
        returns the row as stored."""
        return self._put_once({"pk": f"event#{event_id}", "sk": EVENT_SK, "event_id": event_id, **row})

    def event(self, event_id: str) -> dict[str, Any] | None:
        return self._get(f"event#{event_id}", EVENT_SK)

    def feed(self, mchid: str, after: str, before: str, limit: int) -> list[dict[str, Any]]:
        """A merchant's events with after < seq < before, oldest first, at most `limit`."""
        answer = self.ddb.query(
            TableName=self.table,
            IndexName="by_feed",
            KeyConditionExpression="feed_pk = :m AND seq BETWEEN :a AND :b",
            Limit=limit + 1,
            **_values(m=mchid, a=after + "\x00", b=before),
        )
        return [r for r in (from_item(i) for i in answer.get("Items", [])) if r["seq"] < before][:limit]

    def events_of_order(self, order_pk: str) -> list[dict[str, Any]]:
        return self._query("events_of_order", "order_pk", order_pk)

    # ------------------------------------------------------------------ deliveries

    def open_delivery(self, event_id: str, endpoint_id: str, now: str) -> dict[str, Any]:
        """The delivery row of (event, endpoint), created PENDING if new; returns it as stored."""
        return self._put_once(
            {
                "pk": f"event#{event_id}",
                "sk": f"to#{endpoint_id}",
                "event_id": event_id,
                "endpoint_id": endpoint_id,
                "status": PENDING,
                "attempts": 0,
                "created_at": now,
            }
        )

    def delivery(self, event_id: str, endpoint_id: str) -> dict[str, Any] | None:
        return self._get(f"event#{event_id}", f"to#{endpoint_id}")

    def record_attempt(self, event_id: str, endpoint_id: str, attempt: dict[str, Any], status: str) -> int:
        """Count one attempt on the delivery row (status after it) and keep it as its own log row; returns the
        attempt number. `first_at` is the first attempt's time: the retry window counts from it."""
        answer = self.ddb.update_item(
            TableName=self.table,
            Key=to_item({"pk": f"event#{event_id}", "sk": f"to#{endpoint_id}"}),
            UpdateExpression="SET #s = :s, attempts = if_not_exists(attempts, :z) + :one, last_at = :t, "
            "first_at = if_not_exists(first_at, :t), last_http_status = :h",
            ExpressionAttributeNames={"#s": "status"},
            ReturnValues="ALL_NEW",
            **_values(s=status, z=0, one=1, t=attempt["at"], h=attempt.get("http_status", 0)),
        )
        row = from_item(answer["Attributes"])
        n = int(row["attempts"])
        log = {
            "pk": f"event#{event_id}",
            "sk": f"to#{endpoint_id}#{n:04d}",
            "event_id": event_id,
            "endpoint_id": endpoint_id,
            "log_endpoint": endpoint_id,
            "attempt": n,
            "outcome": status,
            **attempt,
        }
        self.ddb.put_item(TableName=self.table, Item=to_item(log))
        return n

    def set_delivery_status(
        self, event_id: str, endpoint_id: str, status: str, now: str, *, restart: bool = False
    ) -> None:
        """`restart`: a resend, whose retry window starts at its own first attempt."""
        self.ddb.update_item(
            TableName=self.table,
            Key=to_item({"pk": f"event#{event_id}", "sk": f"to#{endpoint_id}"}),
            UpdateExpression="SET #s = :s, last_at = :t" + (" REMOVE first_at" if restart else ""),
            ExpressionAttributeNames={"#s": "status"},
            **_values(s=status, t=now),
        )

    def rows_of_event(self, event_id: str) -> list[dict[str, Any]]:
        """The event row, its delivery rows and their attempts (one Query)."""
        return self._query(None, "pk", f"event#{event_id}")

    def attempts_of_endpoint(self, endpoint_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The endpoint's latest attempts, newest first."""
        answer = self.ddb.query(
            TableName=self.table,
            IndexName="by_endpoint",
            KeyConditionExpression="log_endpoint = :e",
            ScanIndexForward=False,
            Limit=limit,
            **_values(e=endpoint_id),
        )
        return [from_item(i) for i in answer.get("Items", [])]

    # ------------------------------------------------------------------ pull cursors

    def cursor(self, principal: str, mchid: str) -> str:
        row = self._get(f"cursor#{principal}#{mchid}", "cursor")
        return str(row["seq"]) if row else ""

    def set_cursor(self, principal: str, mchid: str, seq: str, now: str) -> None:
        item = {"pk": f"cursor#{principal}#{mchid}", "sk": "cursor", "seq": seq, "updated_at": now}
        self.ddb.put_item(TableName=self.table, Item=to_item(item))

    # ------------------------------------------------------------------ plumbing

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.table, Key=to_item({"pk": pk, "sk": sk}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))

    def _query(self, index: str | None, name: str, value: str) -> list[dict[str, Any]]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": f"{name} = :v",
            **_values(v=value),
        }
        if index:
            request["IndexName"] = index
        return self._all(self.ddb.query, request)

    @staticmethod
    def _all(call: Any, request: dict[str, Any]) -> list[dict[str, Any]]:
        """Every page of a Query or Scan."""
        rows: list[dict[str, Any]] = []
        while True:
            answer = call(**request)
            rows += [from_item(i) for i in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                return rows
            request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def _put_once(self, item: dict[str, Any]) -> dict[str, Any]:
        """Write `item` unless its key exists; the row as stored either way."""
        try:
            self.ddb.put_item(
                TableName=self.table,
                Item=to_item(item),
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return item
        except self.ddb.exceptions.ConditionalCheckFailedException as exc:
            return from_item(exc.response.get("Item")) or item


class WebhookQueue:
    """The FIFO delivery queue: one message per (event, endpoint), grouped per endpoint and order."""

    def __init__(self, sqs: Any, url: str):
        self.sqs = sqs  # boto3 sqs client (bootstrap builds it)
        self.url = url

    def send(self, endpoint_id: str, event_id: str, group: str, *, again: str = "") -> None:
        """`again`: a resend's own token, so FIFO's 5-minute deduplication does not drop it."""
        dedup = hashlib.sha256(f"{endpoint_id}\n{event_id}\n{again}".encode()).hexdigest()
        self.sqs.send_message(
            QueueUrl=self.url,
            MessageBody=json.dumps({"endpoint_id": endpoint_id, "event_id": event_id}),
            MessageGroupId=group,
            MessageDeduplicationId=dedup,
        )

    def retry_after(self, receipt_handle: str, seconds: int) -> None:
        """Keep the message (and so its group: the order's later events wait behind it) for `seconds`. SQS counts
        its 12-hour maximum from the receive, so the longest step stays 5 minutes under it."""
        self.sqs.change_message_visibility(
            QueueUrl=self.url,
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=max(0, min(int(seconds), MAX_HIDE_S)),
        )


def _values(**values: Any) -> dict[str, Any]:
    return {"ExpressionAttributeValues": names_values(**values)}
