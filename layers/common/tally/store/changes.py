"""Current order and refund rows for the outbox's republish (docs/runbook.md "OutboxDLQAlarm").

`since` reads GSI `by_updated` of the orders and refunds tables (partition `upd_shard`, 16 shards by a hash of
the key, sort key `updated_at`; every write that sets `updated_at` sets `upd_shard`: store/shards.py): one Query per
shard with the window as its key condition, then the rows themselves; never a Scan of the tables (R21). Its
cost grows with the rows changed in the window, not with the tables. `order`/`refund` read one row each.
`backfill_updated_shards` is the one-off migration for rows written before the index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.shards import UPDATED_SHARDS, updated_shard
from tally.store.tables import Tables, order_key

UPDATED_INDEX = "by_updated"


class ChangedRows:
    def __init__(self, tables: Tables, refunds_table: str):
        self.t = tables
        self.refunds_table = refunds_table

    def order(self, mchid: str, out_trade_no: str) -> dict[str, Any] | None:
        return self.t.get(self.t.orders, order_key(mchid, out_trade_no))

    def refund(self, refund_no: str) -> dict[str, Any] | None:
        """By its key (`mchid#refund_no`, or a legacy row's refund_no), else the one refund with that number
        (index `by_refund_no`; several merchants using it: None, give `MCHID#REFUND_NO`)."""
        row = self.t.get(self.refunds_table, refund_no)
        if row is not None:
            return row
        answer = self.t.ddb.query(
            TableName=self.refunds_table,
            IndexName="by_refund_no",
            KeyConditionExpression="refund_no = :n",
            ExpressionAttributeValues=names_values(n=refund_no),
            Limit=2,
        )
        keys = [from_item(i)["pk"] for i in answer.get("Items", [])]
        return self.t.get(self.refunds_table, keys[0]) if len(keys) == 1 else None

    def since(self, iso: str, until: str | None = None) -> Iterator[dict[str, Any]]:
        """Orders, then refunds, whose `updated_at` is in [iso, until): GSI by_updated, one paged Query per shard
        with the window as its key condition (the index keeps the keys; each row is then read whole)."""
        for table in (self.t.orders, self.refunds_table):
            yield from changed_rows(self.t, table, iso, until)

    def backfill_updated_shards(self) -> int:
        """One-off migration (the release that added by_updated): give every order and refund row that has an
        `updated_at` but no `upd_shard` its shard. One paged Scan per table, one conditional UpdateItem per row
        that lacks it; re-runnable (0 once done). Returns how many rows it set."""
        done = 0
        for table in (self.t.orders, self.refunds_table):
            request: dict[str, Any] = {
                "TableName": table,
                "ProjectionExpression": "pk, updated_at",
                "FilterExpression": "attribute_exists(updated_at) AND attribute_not_exists(upd_shard)",
            }
            while True:
                answer = self.t.ddb.scan(**request)
                for item in answer.get("Items", []):
                    row = from_item(item)
                    try:
                        self.t.ddb.update_item(
                            TableName=table,
                            Key=to_item({"pk": row["pk"]}),
                            UpdateExpression="SET upd_shard = :s",
                            ConditionExpression="updated_at = :u AND attribute_not_exists(upd_shard)",
                            ExpressionAttributeValues=names_values(
                                s=updated_shard(str(row["pk"])), u=row["updated_at"]
                            ),
                        )
                        done += 1
                    except self.t.ddb.exceptions.ConditionalCheckFailedException:
                        pass  # written meanwhile: that write set its own upd_shard
                if "LastEvaluatedKey" not in answer:
                    break
                request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        return done


def changed_rows(tables: Tables, table: str, iso: str, until: str | None = None) -> Iterator[dict[str, Any]]:
    """The rows of one table (orders or refunds) whose `updated_at` is in [iso, until): GSI by_updated, one paged
    Query per shard with the window as its key condition, each row then read whole."""
    condition = "upd_shard = :p AND " + ("updated_at BETWEEN :s AND :u" if until else "updated_at >= :s")
    bounds = {"s": iso, **({"u": until} if until else {})}
    for shard in range(UPDATED_SHARDS):
        request: dict[str, Any] = {
            "TableName": table,
            "IndexName": UPDATED_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": names_values(p=f"{shard:02d}", **bounds),
        }
        while True:
            answer = tables.ddb.query(**request)
            for key in answer.get("Items", []):
                row = tables.get(table, from_item(key)["pk"])
                if row is not None and (until is None or str(row.get("updated_at")) < until):
                    yield row  # BETWEEN includes `until`: the window is half-open
            if "LastEvaluatedKey" not in answer:
                break
            request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
