"""The pull side's reads and writes: the orders poll index and the raw rows' pending index.

Both indexes are sparse and write-sharded (docs/contracts.md):
- OrdersTable `by_poll`: `poll_pk = "poll#<shard>"` while the order waits for its next query,
  `"manual#<shard>"` once the poller handed it to a person; `poll_due` ISO UTC. The worker's
  transition REMOVEs both, so a paid or closed order leaves the index by itself.
- NotifyRawTable `by_pending`: `pending_pk = "<handled>#<shard>"`, `pending_at` ISO UTC.

Every read here is a Query on one of those partitions with a key condition on the sort key and a
Limit: never a Scan (R21). `items_read` counts what the reads returned (DynamoDB bills by that).
"""

from __future__ import annotations

from typing import Any

from tally.domain.orders import Status
from tally.store.codec import from_item, names_values, to_item
from tally.store.tables import PENDING_SHARDS, Tables, TransactionFailed, shard_of

POLL_SHARDS = 4
WAIT_PAY = Status.WAIT_PAY.value


def poll_pk(order_pk: str) -> str:
    return f"poll#{shard_of(order_pk, POLL_SHARDS)}"


def manual_pk(order_pk: str) -> str:
    return f"manual#{shard_of(order_pk, POLL_SHARDS)}"


class PollStore:
    def __init__(self, tables: Tables):
        self.t = tables
        self.items_read = 0

    # ------------------------------------------------------------------ reads

    def due(self, now_iso: str, limit: int) -> list[dict[str, Any]]:
        """The orders whose poll is due, oldest first: at most `limit` (per shard: its share)."""
        per_shard = max(1, -(-limit // POLL_SHARDS))
        found: list[dict[str, Any]] = []
        more: dict[str, dict[str, Any]] = {}  # shard → where its first page stopped
        for shard in range(POLL_SHARDS):
            items, last = self._page(f"poll#{shard}", now_iso, per_shard)
            found += items
            if last:
                more[f"poll#{shard}"] = last
        # Shards are uneven: top the batch up from the shards that had more, still never past `limit`.
        for partition, last in more.items():
            if len(found) >= limit:
                break
            items, _ = self._page(partition, now_iso, limit - len(found), last)
            found += items
        found.sort(key=lambda o: o["poll_due"])
        return found[:limit]

    def with_person(self, limit: int = 1000) -> list[dict[str, Any]]:
        """Orders the poller handed to a person (the manual partitions of the poll index)."""
        found: list[dict[str, Any]] = []
        for shard in range(POLL_SHARDS):
            found += self._query(f"manual#{shard}", "9999", limit)
        return found

    def _query(self, partition: str, up_to: str, limit: int) -> list[dict[str, Any]]:
        return self._page(partition, up_to, limit)[0]

    def _page(
        self, partition: str, up_to: str, limit: int, start: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        request: dict[str, Any] = {
            "TableName": self.t.orders,
            "IndexName": "by_poll",
            "Limit": limit,
            "ScanIndexForward": True,
            "KeyConditionExpression": "poll_pk = :p AND poll_due <= :up",
            "ExpressionAttributeValues": names_values(p=partition, up=up_to),
        }
        if start:
            request["ExclusiveStartKey"] = start
        answer = self.t.ddb.query(**request)
        items = answer.get("Items", [])
        self.items_read += len(items)
        return [from_item(i) for i in items], answer.get("LastEvaluatedKey")

    def get(self, pk: str) -> dict[str, Any] | None:
        self.items_read += 1
        return self.t.get(self.t.orders, pk)

    # ------------------------------------------------------------------ writes (all guarded by WAIT_PAY)

    def claim(self, order: dict[str, Any], next_due_iso: str, now_iso: str) -> int | None:
        """Advance the order's poll before asking the channel, so no other run asks at the same time.
        Returns the number of queries made so far (this one included), None if someone else moved it."""
        try:
            answer = self.t.ddb.update_item(
                TableName=self.t.orders,
                Key=to_item({"pk": order["pk"]}),
                UpdateExpression="SET poll_due = :next, last_query_at = :now ADD poll_count :one",
                ConditionExpression="poll_pk = :ppk AND poll_due = :old AND #st = :wait",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(
                    next=next_due_iso,
                    now=now_iso,
                    one=1,
                    ppk=order["poll_pk"],
                    old=order["poll_due"],
                    wait=WAIT_PAY,
                ),
                ReturnValues="UPDATED_NEW",
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return None
        return int(answer["Attributes"]["poll_count"]["N"])

    def touch_confirm(self, pk: str, now_iso: str, not_since_iso: str) -> bool:
        """The return page's rate limit: at most one channel query per order per interval."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.orders,
                Key=to_item({"pk": pk}),
                UpdateExpression="SET last_query_at = :now",
                ConditionExpression="#st = :wait AND (attribute_not_exists(last_query_at) OR last_query_at <= :since)",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(now=now_iso, since=not_since_iso, wait=WAIT_PAY),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def count_error(self, pk: str, word: str) -> int | None:
        """One more consecutive failed call; None if the order is no longer waiting."""
        try:
            answer = self.t.ddb.update_item(
                TableName=self.t.orders,
                Key=to_item({"pk": pk}),
                UpdateExpression="SET poll_last = :w ADD poll_errors :one",
                ConditionExpression="#st = :wait",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(one=1, w=word, wait=WAIT_PAY),
                ReturnValues="UPDATED_NEW",
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return None
        return int(answer["Attributes"]["poll_errors"]["N"])

    def note_answer(self, pk: str, word: str) -> None:
        """A definite answer: remember it and reset the consecutive-failure count (only while waiting)."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.orders,
                Key=to_item({"pk": pk}),
                UpdateExpression="SET poll_last = :w, poll_errors = :zero",
                ConditionExpression="#st = :wait",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(w=word, zero=0, wait=WAIT_PAY),
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return  # paid or closed meanwhile: nothing to remember (R24)

    def to_person(self, pk: str, reason: str, now_iso: str) -> bool:
        """Out of the poll partitions into the manual ones: the poller stops asking, a person looks."""
        return self._while_waiting(
            pk,
            "SET poll_pk = :mpk, poll_due = :now, manual_reason = :r, manual_at = :now",
            mpk=manual_pk(pk),
            now=now_iso,
            r=reason[:500],
        )

    def to_case(self, pk: str, reason: str, case_of: str, now_iso: str) -> bool:
        """Out of the poll index without an item of its own: the order's money is an open case already (its
        payment with a person, R48); the order row names that case (`case_of`, the raw payment's key)."""
        return self._while_waiting(
            pk,
            "SET case_of = :c, case_reason = :r, case_at = :now REMOVE poll_pk, poll_due",
            c=case_of,
            r=reason[:500],
            now=now_iso,
        )

    def _while_waiting(self, pk: str, update: str, **values: Any) -> bool:
        """One update of an order still WAIT_PAY; False when it is paid or closed meanwhile."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.orders,
                Key=to_item({"pk": pk}),
                UpdateExpression=update,
                ConditionExpression="#st = :wait",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(wait=WAIT_PAY, **values),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def close_locally(
        self,
        order: dict[str, Any],
        *,
        event: str,
        to: str,
        voucher: str,
        now_iso: str,
        source: str,
        word: str,
    ) -> bool:
        """The order's CLOSE-family transition without money: order compare-and-set + transition row, one
        transaction (R18, R19). False when the compare-and-set lost (someone moved the order: re-read)."""
        cas = {
            "TableName": self.t.orders,
            "Key": to_item({"pk": order["pk"]}),
            "UpdateExpression": "SET #st = :to, version = :next, updated_at = :now, closed_at = :now, "
            "poll_last = :w REMOVE poll_pk, poll_due",
            "ConditionExpression": "#st = :from AND version = :v",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": names_values(
                to=to,
                next=order.get("version", 0) + 1,
                now=now_iso,
                w=word,
                v=order.get("version", 0),
                **{"from": order["status"]},
            ),
        }
        row = {
            "pk": order["pk"],
            "sk": f"{event}#{voucher}",
            "event": event,
            "from_status": order["status"],
            "to_status": to,
            "at": now_iso,
            "source": source,
            "channel_word": word,
        }
        try:
            self.t.transact(
                [
                    {"Update": cas},
                    {
                        "Put": {
                            "TableName": self.t.transitions,
                            "Item": to_item(row),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        except TransactionFailed:
            return False
        return True


class PendingStore:
    """Raw rows by `handled` and age, through the `by_pending` index (R25, R37)."""

    def __init__(self, tables: Tables):
        self.t = tables
        self.items_read = 0

    def older_than(
        self, handled: int, before_iso: str, limit: int, swept_before_iso: str | None = None
    ) -> list[dict[str, Any]]:
        """Rows at `handled` whose pending_at is before `before_iso`, oldest first, at most `limit` per shard."""
        found: list[dict[str, Any]] = []
        for shard in range(PENDING_SHARDS):
            request: dict[str, Any] = {
                "TableName": self.t.notify_raw,
                "IndexName": "by_pending",
                "Limit": limit,
                "ScanIndexForward": True,
                "KeyConditionExpression": "pending_pk = :p AND pending_at <= :before",
                "ExpressionAttributeValues": names_values(p=f"{handled}#{shard}", before=before_iso),
            }
            if swept_before_iso is not None:
                request["FilterExpression"] = "attribute_not_exists(swept_at) OR swept_at <= :swept"
                request["ExpressionAttributeValues"].update(names_values(swept=swept_before_iso))
            answer = self.t.ddb.query(**request)
            self.items_read += int(answer.get("ScannedCount", len(answer.get("Items", []))))
            found += [from_item(i) for i in answer.get("Items", [])]
        found.sort(key=lambda r: r["pending_at"])
        return found

    def count_older_than(self, handled: int, before_iso: str) -> tuple[int, str | None]:
        """How many rows at `handled` are older than `before_iso`, and the oldest pending_at."""
        total, oldest = 0, None
        for shard in range(PENDING_SHARDS):
            partition = f"{handled}#{shard}"
            values = names_values(p=partition, before=before_iso)
            start: dict[str, Any] | None = None
            while True:
                request: dict[str, Any] = {
                    "TableName": self.t.notify_raw,
                    "IndexName": "by_pending",
                    "Select": "COUNT",
                    "KeyConditionExpression": "pending_pk = :p AND pending_at <= :before",
                    "ExpressionAttributeValues": values,
                }
                if start:
                    request["ExclusiveStartKey"] = start
                answer = self.t.ddb.query(**request)
                total += int(answer.get("Count", 0))
                self.items_read += int(answer.get("ScannedCount", 0))
                start = answer.get("LastEvaluatedKey")
                if not start:
                    break
            first = self.t.ddb.query(
                TableName=self.t.notify_raw,
                IndexName="by_pending",
                Limit=1,
                ScanIndexForward=True,
                KeyConditionExpression="pending_pk = :p AND pending_at <= :before",
                ExpressionAttributeValues=values,
                ProjectionExpression="pending_at",
            ).get("Items", [])
            if first:
                at = first[0]["pending_at"]["S"]
                oldest = at if oldest is None or at < oldest else oldest
        return total, oldest

    def mark_swept(self, key: str, now_iso: str) -> int | None:
        """Count one more re-queue of a row still at handled=0; None if it was applied meanwhile."""
        try:
            answer = self.t.ddb.update_item(
                TableName=self.t.notify_raw,
                Key=to_item({"pk": key}),
                UpdateExpression="SET swept_at = :now ADD sweeps :one",
                ConditionExpression="handled = :zero",
                ExpressionAttributeValues=names_values(now=now_iso, one=1, zero=0),
                ReturnValues="UPDATED_NEW",
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return None
        return int(answer["Attributes"]["sweeps"]["N"])
