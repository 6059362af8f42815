"""Repositories over the DynamoDB tables (docs/contracts.md has the key schemas)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.records import OrderRow, RawRow, as_order, as_raw

PRINCIPAL_PREFIX = "principal#"  # merchants-table rows that register a caller (R53), beside the merchant rows
PENDING_SHARDS = 4  # write-sharded sparse GSI: no hot partition under a burst of callbacks


_last_second: tuple[int, str] = (-1, "")  # strftime once per second, not per call (the notify path)


def iso_now(clock_s: float | None = None) -> str:
    """`clock_s` (default: now) as UTC ISO 8601 with milliseconds, "2026-12-02T01:02:03.456Z": one clock read
    at most, the seconds formatted once per second, the milliseconds looked up."""
    global _last_second
    t = time.time() if clock_s is None else clock_s
    cached = _last_second
    if int(t) != cached[0] or t < 0:
        cached = _last_second = (int(t), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)))
    return cached[1] + _MILLIS[int((t % 1) * 1000)]  # t % 1 is in [0, 1) for any float t: 0..999


_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))  # ".000Z" .. ".999Z": formatting :03d costs ~2× a lookup


def shard_of(key: str, shards: int = PENDING_SHARDS) -> int:
    # the first 4 bytes of the SHA-256, big-endian: the same number as int(hexdigest()[:8], 16)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % shards


def pending_pk(handled: int, key: str) -> str:
    return f"{handled}#{shard_of(key)}"


def order_key(mchid: str, out_trade_no: str) -> str:
    return f"{mchid}#{out_trade_no}"


def event_key(kind: str, channel: str, mchid: str, rest: str) -> str:
    """A notify_event row's key, scoped by kind, channel and merchant (L1, R39): one tenant's report can never
    take the key of another tenant's item, nor a quarantined row the key of the same envelope's later reading.
    Rows written before keep their old keys: every reader finds them by an index (docs/contracts.md)."""
    return f"{kind}#{channel}#{mchid}#{rest}"


# what makes two kept rows the same event (a redelivery), rather than two items that met on one key; the
# signature headers are not in it: a channel's retry of one notification signs it again
_SAME_EVENT: tuple[str, ...] = ("kind", "channel", "mchid", "out_trade_no", "trade_state", "refund_no")
_SAME_EVENT += ("amount_cent", "body", "body_sha256", "reason")


class TransactionFailed(Exception):
    """THE exception for a cancelled DynamoDB transaction (TransactionCanceledException), raised by every store
    method that writes one: `failed` lists the items whose condition failed (ConditionalCheckFailed), in the
    order the method documents; `conflict` = contention (TransactionConflict); `items` = the ALL_OLD images
    where DynamoDB returned them (else {})."""

    def __init__(self, failed: list[int], conflict: bool, items: list[dict[str, Any]]):
        super().__init__(f"transaction cancelled (failed conditions {failed}, conflict={conflict})")
        self.failed = failed
        self.conflict = conflict
        self.items = items


def transact(ddb: Any, items: list[dict[str, Any]]) -> None:
    """One TransactWriteItems; a cancellation becomes TransactionFailed (the only place that reads reasons)."""
    try:
        ddb.transact_write_items(TransactItems=items)
    except ddb.exceptions.TransactionCanceledException as exc:
        reasons = exc.response.get("CancellationReasons", [])
        failed = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
        conflict = any(r.get("Code") == "TransactionConflict" for r in reasons)
        images = [from_item(r.get("Item")) or {} for r in reasons]
        raise TransactionFailed(failed, conflict, images) from None


@dataclass
class Tables:
    """Table names plus the low-level client (boto3's, honouring AWS_ENDPOINT_URL)."""

    ddb: Any
    notify_raw: str
    notify_event: str
    orders: str
    transitions: str
    ledger: str
    refund_tasks: str
    merchants: str

    def get(self, table: str, pk: str, **key: str) -> dict[str, Any] | None:
        item_key = to_item({"pk": pk, **key})
        answer = self.ddb.get_item(TableName=table, Key=item_key, ConsistentRead=True)
        return from_item(answer.get("Item"))

    def transact(self, items: list[dict[str, Any]]) -> None:
        transact(self.ddb, items)

    def query_pk(self, table: str, pk: str) -> list[dict[str, Any]]:
        answer = self.ddb.query(
            TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues=names_values(pk=pk)
        )
        return [from_item(item) for item in answer.get("Items", [])]


class RawStore:
    """notify_raw: one row per (channel, transaction_id), written before any business apply (R7)."""

    def __init__(self, tables: Tables):
        self.t = tables

    def put_new(self, row: dict[str, Any]) -> RawRow | None:
        """Conditional put. Returns None when new, or the existing row (one call either way)."""
        try:
            self.t.ddb.put_item(
                TableName=self.t.notify_raw,
                Item=to_item(row),
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return None
        except self.t.ddb.exceptions.ConditionalCheckFailedException as exc:
            return as_raw(from_item(exc.response.get("Item"))) or self.get(row["pk"])

    def get(self, key: str) -> RawRow | None:
        return as_raw(self.t.get(self.t.notify_raw, key))

    def send_to_person(self, key: str, reason: str, now: str) -> bool:
        """handled 0 → 2 with the reason; False if the row was already handled."""
        try:
            self.t.ddb.update_item(**self.person_update(key, reason, now))
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def person_update(self, key: str, reason: str, now: str) -> dict[str, Any]:
        """handled 0 → 2 with the reason, onto the pending index; also usable inside a transaction (the parked
        payment's journal record rides in it)."""
        return {
            "TableName": self.t.notify_raw,
            "Key": to_item({"pk": key}),
            "UpdateExpression": "SET handled = :two, manual_reason = :r, handled_at = :now, "
            "pending_pk = :ppk, pending_at = :now",
            "ConditionExpression": "handled = :zero",
            "ExpressionAttributeValues": names_values(
                two=2, zero=0, r=reason, now=now, ppk=pending_pk(2, key)
            ),
        }

    def mark_handled(self, key: str, outcome: str, now: str) -> bool:
        try:
            self.t.ddb.update_item(**self.handled_update(key, outcome, now))
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def handled_update(self, key: str, outcome: str, now: str) -> dict[str, Any]:
        """handled 0 → 1, out of the pending index; also usable inside a transaction (R18)."""
        return {
            "TableName": self.t.notify_raw,
            "Key": to_item({"pk": key}),
            "UpdateExpression": "SET handled = :one, outcome = :o, handled_at = :now REMOVE pending_pk, pending_at",
            "ConditionExpression": "handled = :zero",
            "ExpressionAttributeValues": names_values(one=1, zero=0, o=outcome, now=now),
        }

    def count_attempt(self, key: str) -> int:
        answer = self.t.ddb.update_item(
            TableName=self.t.notify_raw,
            Key=to_item({"pk": key}),
            UpdateExpression="ADD attempts :one",
            ExpressionAttributeValues=names_values(one=1),
            ReturnValues="UPDATED_NEW",
        )
        return int(answer["Attributes"]["attempts"]["N"])

    def for_order_full(self, order_pk: str) -> list[RawRow]:
        """Every raw row of one order in full (body, headers, history): the index projects only the summary,
        so one consistent GetItem per row follows (an order has one row per transaction: a handful)."""
        return [row for r in self.for_order(order_pk) if (row := self.get(r["pk"])) is not None]

    def for_order(self, order_pk: str) -> list[dict[str, Any]]:
        answer = self.t.ddb.query(
            TableName=self.t.notify_raw,
            IndexName="by_order",
            KeyConditionExpression="order_pk = :o",
            ExpressionAttributeValues=names_values(o=order_pk),
        )
        return [from_item(item) for item in answer.get("Items", [])]


class EventStore:
    """notify_event: in-between states (R8) and quarantined notifications (R5)."""

    def __init__(self, tables: Tables, ttl_days: int = 30):
        self.t = tables
        self.ttl_days = ttl_days

    def put(
        self, event_id: str, kind: str, now_s: float, *, ttl_days: int | None = None, **fields: Any
    ) -> str | None:
        """Conditional put; returns the key written, or None when the same event is already kept. A row for a
        person (`manual_kind`) that meets a different row on its key is kept under a key of its own
        (`{event_id}#{content digest}`, `collided_with`): a person's item is never dropped (L1)."""
        days = self.ttl_days if ttl_days is None else ttl_days
        row = {"pk": event_id, "kind": kind, "created_at": iso_now(now_s), **fields}
        if not fields.get("manual_kind"):  # R51: a person's item has no lifetime until it is closed
            row["expires_at"] = int(now_s) + days * 86400
        if kind == "in_between" and fields.get("mchid") and fields.get("out_trade_no"):
            # the sparse by_order index (the order story): only verified events that name their order
            row.setdefault("order_pk", order_key(str(fields["mchid"]), str(fields["out_trade_no"])))
        kept = self._put_new(row)
        if kept is None:
            return event_id
        if not fields.get("manual_kind"):
            return None  # an in-between event again: the first row already tells the story
        if all(kept.get(k) == row.get(k) for k in _SAME_EVENT):
            return None  # the same event delivered again
        content = json.dumps({k: row.get(k) for k in _SAME_EVENT}, sort_keys=True, default=str)
        row["pk"] = f"{event_id}#{hashlib.sha256(content.encode()).hexdigest()[:16]}"
        row["collided_with"] = event_id
        return row["pk"] if self._put_new(row) is None else None  # None: this very item was kept before

    def _put_new(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """None when written; else the row already under that key."""
        try:
            self.t.ddb.put_item(
                TableName=self.t.notify_event,
                Item=to_item(row),
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return None
        except self.t.ddb.exceptions.ConditionalCheckFailedException as exc:
            return from_item(exc.response.get("Item")) or self.t.get(self.t.notify_event, row["pk"]) or {}

    def for_order(self, order_pk: str) -> list[dict[str, Any]]:
        """The in-between events (R8) of one order, oldest first (GSI by_order; sparse)."""
        answer = self.t.ddb.query(
            TableName=self.t.notify_event,
            IndexName="by_order",
            KeyConditionExpression="order_pk = :o",
            ExpressionAttributeValues=names_values(o=order_pk),
        )
        return [from_item(item) for item in answer.get("Items", [])]

    def count_rejection(
        self, pk: str, now_s: float, *, pool: str, cap: int, kind: str = "rejected_count", **fields: Any
    ) -> tuple[int, bool]:
        """One rejection of a (channel, merchant, cause) group counted on the group's one aggregate row (R40),
        and, while fewer than `cap` of its `pool`'s kept rows are open, a slot taken for keeping the body.
        Returns (rejections so far, slot taken). Two small updates at most: what an unauthenticated request
        costs. The row has no lifetime while rows it counts are open (R51); slots come back as they close."""
        sets = {"kind": kind, "last_at": iso_now(now_s), **fields}
        answer = self.t.ddb.update_item(
            TableName=self.t.notify_event,
            Key=to_item({"pk": pk}),
            UpdateExpression="ADD rejections :one SET first_at = if_not_exists(first_at, :first), "
            + ", ".join(f"#{k} = :{k}" for k in sets)
            + " REMOVE expires_at",
            ExpressionAttributeNames={f"#{k}": k for k in sets},
            ExpressionAttributeValues=names_values(one=1, first=iso_now(now_s), **sets),
            ReturnValues="UPDATED_NEW",
        )
        seen = int(answer["Attributes"]["rejections"]["N"])
        try:
            self.t.ddb.update_item(
                TableName=self.t.notify_event,
                Key=to_item({"pk": pk}),
                UpdateExpression="ADD #slot :one",
                ConditionExpression="attribute_not_exists(#slot) OR #slot < :cap",
                ExpressionAttributeNames={"#slot": slot_name(pool)},
                ExpressionAttributeValues=names_values(one=1, cap=cap),
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return seen, False
        return seen, True

    # ---- the heartbeat's echo (service/heartbeat.py): one row per notify route and merchant, no TTL
    def echo_asked(self, route: str, mchid: str, now_s: float) -> None:
        """The heartbeat asked the channel for an echo to /notify/`route`/`mchid`: `asked_s`, and `waiting_since`
        unless an earlier ask is still unanswered (a missing echo's age counts from its first ask)."""
        self._echo_update(
            route,
            mchid,
            "SET #k = :kind, asked_s = :now, waiting_since = if_not_exists(waiting_since, :now)",
            now_s,
        )

    def echo_arrived(self, route: str, mchid: str, now_s: float) -> None:
        """A verified echo callback (WeChat's SECURITY_ECHO) arrived on /notify/`route`/`mchid`: nothing waits."""
        self._echo_update(
            route,
            mchid,
            "SET #k = :kind, arrived_s = :now, arrived_at = :at ADD echoes :one REMOVE waiting_since",
            now_s,
        )

    def echo_row(self, route: str, mchid: str) -> dict[str, Any] | None:
        return self.t.get(self.t.notify_event, echo_key(route, mchid))

    def _echo_update(self, route: str, mchid: str, expression: str, now_s: float) -> None:
        values = {"kind": ECHO_KIND, "now": int(now_s)}
        if ":at" in expression:
            values |= {"at": iso_now(now_s), "one": 1}
        self.t.ddb.update_item(
            TableName=self.t.notify_event,
            Key=to_item({"pk": echo_key(route, mchid)}),
            UpdateExpression=expression,
            ExpressionAttributeNames={"#k": "kind"},
            ExpressionAttributeValues=names_values(**values),
        )

    def note_id(self, pk: str, value: str, *, cap: int, field: str = "claimed_ids") -> None:
        """`value` added to the aggregate row's list `field`, at most `cap` distinct values (the rest are only
        counted): what an aggregated item names without reading the rows it counts. One small update, a no-op
        once the value is there or the list is full."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.notify_event,
                Key=to_item({"pk": pk}),
                UpdateExpression="SET #f = list_append(if_not_exists(#f, :empty), :one)",
                ConditionExpression="attribute_not_exists(#f) OR (size(#f) < :cap AND NOT contains(#f, :v))",
                ExpressionAttributeNames={"#f": field},
                ExpressionAttributeValues=names_values(empty=[], one=[value], cap=cap, v=value),
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            pass  # named already, or the list is full

    def release_slot(self, row: dict[str, Any]) -> None:
        """A kept rejected row closed (or never written): its pool's slot on the group row is free again."""
        release_slot(self.t.ddb, self.t.notify_event, row)


ECHO_KIND = "echo"


def echo_key(route: str, mchid: str) -> str:
    """The heartbeat's echo row of (notify route, merchant): written only for a verified callback or a configured
    heartbeat merchant, so there are as many as configured merchants."""
    return f"echo#{route}#{mchid[:32]}"


def slot_name(pool: str) -> str:
    return f"kept_{pool}"


def release_slot(ddb: Any, table: str, row: dict[str, Any]) -> None:
    """Give back the slot a kept rejected row took on its group row (`aggregate_pk`, `slot_pool`); rows kept
    before slots existed took none."""
    if not row.get("slot_pool") or not row.get("aggregate_pk"):
        return
    try:
        ddb.update_item(
            TableName=table,
            Key=to_item({"pk": row["aggregate_pk"]}),
            UpdateExpression="ADD #slot :minus",
            ConditionExpression="#slot > :zero",
            ExpressionAttributeNames={"#slot": slot_name(str(row["slot_pool"]))},
            ExpressionAttributeValues=names_values(minus=-1, zero=0),
        )
    except ddb.exceptions.ConditionalCheckFailedException:
        pass  # already given back


CLOSED_KEPT_DAYS = 30  # a closed item's row is kept this long after it was closed (R51), then TTL removes it


def closed_expiry(closed_at: str) -> int:
    """`expires_at` of an item closed at `closed_at` (UTC ISO 8601): its lifetime starts now (R51)."""
    when = datetime.fromisoformat(closed_at.replace("Z", "+00:00"))
    return int(when.timestamp()) + CLOSED_KEPT_DAYS * 86400


class OrderStore:
    def __init__(self, tables: Tables):
        self.t = tables

    def get(self, mchid: str, out_trade_no: str) -> OrderRow | None:
        return as_order(self.t.get(self.t.orders, order_key(mchid, out_trade_no)))

    def create(self, row: dict[str, Any]) -> OrderRow | None:
        """Insert; returns the existing order instead when the key is taken."""
        try:
            self.t.ddb.put_item(
                TableName=self.t.orders,
                Item=to_item(row),
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return None
        except self.t.ddb.exceptions.ConditionalCheckFailedException as exc:
            return as_order(from_item(exc.response.get("Item")) or self.t.get(self.t.orders, row["pk"]))

    def set_fields(self, pk: str, **fields: Any) -> None:
        sets = ", ".join(f"{name} = :{name}" for name in fields)
        self.t.ddb.update_item(
            TableName=self.t.orders,
            Key=to_item({"pk": pk}),
            UpdateExpression=f"SET {sets}",
            ExpressionAttributeValues=names_values(**fields),
        )

    def transitions(self, pk: str) -> list[dict[str, Any]]:
        return self.t.query_pk(self.t.transitions, pk)


class MerchantStore:
    def __init__(self, tables: Tables):
        self.t = tables

    def get(self, channel: str, merchant_id: str) -> dict[str, Any] | None:
        return self.t.get(self.t.merchants, f"{channel}#{merchant_id}")

    def put(self, row: dict[str, Any]) -> None:
        """A merchant row, written whole; a display name given before (`--name`) is kept when it carries none."""
        self.t.ddb.put_item(**self.row_put(row)["Put"])

    def row_put(self, row: dict[str, Any]) -> dict[str, Any]:
        """`put` as a transaction item (the display name kept the same way)."""
        if not row.get("display_name") and row.get("pk"):
            kept = (self.t.get(self.t.merchants, str(row["pk"])) or {}).get("display_name")
            if kept:
                row = {**row, "display_name": kept}
        return {"Put": {"TableName": self.t.merchants, "Item": to_item(row)}}

    def transact(self, items: list[dict[str, Any]]) -> None:
        self.t.transact(items)

    def set_readiness(
        self, channel: str, merchant_id: str, *, ready: bool, reason: str, checked_at: str
    ) -> bool | None:
        """R47: record the live check's verdict on the merchant row; returns the previous `ready` (None: never
        checked). An absent row is not created (ConditionalCheckFailed propagates)."""
        answer = self.t.ddb.update_item(
            TableName=self.t.merchants,
            Key=to_item({"pk": f"{channel}#{merchant_id}"}),
            UpdateExpression="SET ready = :ready, ready_reason = :reason, checked_at = :at",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=names_values(ready=ready, reason=reason, at=checked_at),
            ReturnValues="ALL_OLD",
        )
        before = from_item(answer.get("Attributes") or {}).get("ready")
        return None if before is None else bool(before)

    # R53: the IAM principals allowed to act for merchants, one row each in the same small table
    def principal(self, arn: str) -> dict[str, Any] | None:
        return self.t.get(self.t.merchants, PRINCIPAL_PREFIX + arn)

    def put_principal(self, arn: str, merchants: list[str], *, by: str, at: str) -> None:
        self.t.ddb.put_item(**self.principal_put(arn, merchants, by=by, at=at)["Put"])

    def principal_put(self, arn: str, merchants: list[str], *, by: str, at: str) -> dict[str, Any]:
        row = {"pk": PRINCIPAL_PREFIX + arn, "principal": arn, "merchants": merchants, "by": by, "at": at}
        return {"Put": {"TableName": self.t.merchants, "Item": to_item(row)}}

    def delete_principal(self, arn: str) -> None:
        self.t.ddb.delete_item(**self.principal_delete(arn)["Delete"])

    def principal_delete(self, arn: str) -> dict[str, Any]:
        return {"Delete": {"TableName": self.t.merchants, "Key": to_item({"pk": PRINCIPAL_PREFIX + arn})}}

    def principals(self) -> list[dict[str, Any]]:
        """Every registered principal (small configuration: one paged scan, like `configured`)."""
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.t.merchants,
            "FilterExpression": "begins_with(pk, :p)",
            "ExpressionAttributeValues": to_item({":p": PRINCIPAL_PREFIX}),
        }
        while True:
            answer = self.t.ddb.scan(**kwargs)
            found += [from_item(item) for item in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                return sorted(found, key=lambda row: row["principal"])
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def set_name(self, channel: str, merchant_id: str, name: str) -> None:
        """The merchant's display name (`tally merchant add/set --name`): what people call it, shown next to
        its id. An absent row is not created (ConditionalCheckFailed propagates)."""
        self.t.ddb.update_item(
            TableName=self.t.merchants,
            Key=to_item({"pk": f"{channel}#{merchant_id}"}),
            UpdateExpression="SET display_name = :name",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=names_values(name=name.strip()[:80]),
        )

    def names(self) -> dict[str, str]:
        """Merchant id -> display name, for the merchants that have one (one paged scan, like `configured`)."""
        found: dict[str, str] = {}
        kwargs: dict[str, Any] = {
            "TableName": self.t.merchants,
            "ProjectionExpression": "mchid, display_name",
        }
        while True:
            answer = self.t.ddb.scan(**kwargs)
            for row in map(from_item, answer.get("Items", [])):
                if row and row.get("mchid") and row.get("display_name"):
                    found[str(row["mchid"])] = str(row["display_name"])
            if "LastEvaluatedKey" not in answer:
                return found
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def configured(self) -> list[tuple[str, str]]:
        """Every (channel, merchant id): the merchants table is small configuration, so one paged scan."""
        found, kwargs = [], {"TableName": self.t.merchants, "ProjectionExpression": "channel, mchid"}
        while True:
            answer = self.t.ddb.scan(**kwargs)
            found += [
                (r["channel"], r["mchid"])
                for r in map(from_item, answer.get("Items", []))
                if r and r.get("channel") and r.get("mchid")
            ]
            if "LastEvaluatedKey" not in answer:
                return sorted(found)
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


class ApplyQueue:
    def __init__(self, sqs: Any, url: str):
        self.sqs = sqs
        self.url = url

    def send(self, raw_key: str, notice: dict[str, Any] | None = None) -> None:
        """One message per raw row; carrying the notice spares the worker a read (2 calls per apply)."""
        body: dict[str, Any] = {"raw_key": raw_key}
        if notice is not None:
            body["notice"] = notice
        self.sqs.send_message(QueueUrl=self.url, MessageBody=json.dumps(body, separators=(",", ":")))
