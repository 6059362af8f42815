"""Current order and refund rows for the outbox's republish (docs/runbook.md "OutboxDLQAlarm").

`since` is a paginated Scan filtered on `updated_at`: an operator's tool after an outage, never a hot path.
Its cost is one read per 4 KB of the orders and refunds tables, whatever the window (DynamoDB filters after
reading); `order`/`refund` read one row each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tally.store.codec import from_item, names_values
from tally.store.tables import Tables, order_key


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
        """Orders, then refunds, whose `updated_at` is in [iso, until)."""
        condition = "updated_at >= :s" + (" AND updated_at < :u" if until else "")
        values = names_values(s=iso, **({"u": until} if until else {}))
        for table in (self.t.orders, self.refunds_table):
            request: dict[str, Any] = {
                "TableName": table,
                "FilterExpression": condition,
                "ExpressionAttributeValues": values,
            }
            while True:
                answer = self.t.ddb.scan(**request)
                for item in answer.get("Items", []):
                    yield from_item(item)
                if "LastEvaluatedKey" not in answer:
                    break
                request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
