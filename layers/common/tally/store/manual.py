"""The manual queue's rows (service/manual.py): raw notifications at handled=2 and the notifications kept in
notify_event (quarantined, rejected). Every write is one conditional UpdateItem that appends to the row's
`history`; a row no longer waiting for a person raises NotWaiting. Nothing is deleted.

Indexes read (docs/contracts.md): notify_raw `by_pending` (`pending_pk = "2#<shard>"`), notify_event
`manual` (`manual_kind`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.records import RawRow, as_raw
from tally.store.tables import (
    PENDING_SHARDS,
    Tables,
    TransactionFailed,
    closed_expiry,
    pending_pk,
    release_slot,
    transact,
)

RAW_WAITING = "handled = :two AND attribute_exists(pending_pk)"  # a raw row with a person (handled=2)
REQUEUE = (  # handled 2 → 0, back in the pending index, attempts reset, the replay in its history
    "SET handled = :zero, pending_pk = :ppk, pending_at = :now, "
    "attempts = :zero, history = list_append(if_not_exists(history, :empty), :one) "
    "REMOVE manual_reason"
)


class NotWaiting(Exception):
    """The row's condition failed: it is not waiting for a person (resolved, replayed or booked already)."""


class ManualStore:
    def __init__(self, tables: Tables):
        self.t = tables

    # ------------------------------------------------------------ reads

    def raw_waiting(self) -> list[RawRow]:
        """Raw rows at handled=2 still in the pending index (every shard)."""
        return [
            r
            for shard in range(PENDING_SHARDS)
            for r in self._query(self.t.notify_raw, "by_pending", "pending_pk", f"2#{shard}")
        ]

    def events_waiting(self, kind: str) -> list[dict[str, Any]]:
        """notify_event rows of `manual_kind` = kind (quarantined, rejected …)."""
        return self._query(self.t.notify_event, "manual", "manual_kind", kind)

    def raw(self, key: str) -> RawRow | None:
        return as_raw(self.t.get(self.t.notify_raw, key))

    def event(self, key: str) -> dict[str, Any] | None:
        return self.t.get(self.t.notify_event, key)

    # ------------------------------------------------------------ writes (each conditional)

    def resolve_raw(self, key: str, entry: dict[str, Any]) -> RawRow:
        """A person dealt with it: the resolution recorded, the row out of the pending index."""
        return self._raw_update(
            key,
            "SET resolution = :entry, history = list_append("
            "if_not_exists(history, :empty), :one) REMOVE pending_pk, pending_at",
            entry=entry,
            empty=[],
            one=[entry],
            two=2,
        )

    def requeue_raw(self, key: str, entry: dict[str, Any], now: str) -> RawRow:
        """handled 2 → 0 (a replay): back in the pending index as not yet applied, attempts reset."""
        return self._raw_update(key, REQUEUE, **self._requeue_values(key, entry, now))

    def requeue_raw_journaled(
        self,
        key: str,
        entry: dict[str, Any],
        now: str,
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    ) -> RawRow:
        """`requeue_raw` in one transaction with its journal record; the row read back after (a person's action:
        no call budget). NotWaiting as `requeue_raw`; TransactionFailed when only the chain head moved."""
        items = [
            {
                "Update": {
                    "TableName": self.t.notify_raw,
                    "Key": to_item({"pk": key}),
                    "UpdateExpression": REQUEUE,
                    "ConditionExpression": RAW_WAITING,
                    "ExpressionAttributeValues": names_values(**self._requeue_values(key, entry, now)),
                }
            }
        ]
        try:
            transact(self.t.ddb, items + journal(items))
        except TransactionFailed as exc:
            if 0 in exc.failed:
                raise NotWaiting(key) from None
            raise
        return as_raw(self.t.get(self.t.notify_raw, key)) or {}

    def get_raw(self, key: str) -> RawRow | None:
        return as_raw(self.t.get(self.t.notify_raw, key))

    @staticmethod
    def _requeue_values(key: str, entry: dict[str, Any], now: str) -> dict[str, Any]:
        return {"zero": 0, "two": 2, "ppk": pending_pk(0, key), "now": now, "empty": [], "one": [entry]}

    def resolve_event(self, key: str, entry: dict[str, Any], recorded: dict[str, Any] | None = None) -> None:
        """A kept notification leaves the manual index; `recorded` (default: entry) becomes its resolution,
        `entry` is appended to its history."""
        row = self._update(
            self.t.notify_event,
            key,
            "SET resolution = :entry, expires_at = :exp, history = list_append("
            "if_not_exists(history, :empty), :one) REMOVE manual_kind",
            "attribute_exists(manual_kind)",
            entry=entry if recorded is None else recorded,
            exp=closed_expiry(entry["at"]),  # R51: its lifetime starts when it is closed
            empty=[],
            one=[entry],
        )
        release_slot(self.t.ddb, self.t.notify_event, row)

    # ------------------------------------------------------------ helpers

    def _raw_update(self, key: str, update: str, **values: Any) -> RawRow:
        row = self._update(self.t.notify_raw, key, update, RAW_WAITING, **values)
        return as_raw(row) or {}

    def _update(self, table: str, key: str, update: str, condition: str, **values: Any) -> dict[str, Any]:
        try:
            answer = self.t.ddb.update_item(
                TableName=table,
                Key=to_item({"pk": key}),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=names_values(**values),
                ReturnValues="ALL_NEW",
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            raise NotWaiting(key) from None
        return from_item(answer["Attributes"]) or {}

    def _query(self, table: str, index: str, name: str, value: str) -> list[Any]:
        rows: list[Any] = []
        kwargs: dict[str, Any] = {
            "TableName": table,
            "IndexName": index,
            "KeyConditionExpression": f"{name} = :v",
            "ExpressionAttributeValues": names_values(v=value),
        }
        while True:
            page = self.t.ddb.query(**kwargs)
            rows += [from_item(item) for item in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
