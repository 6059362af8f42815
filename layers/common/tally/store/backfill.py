"""The reads and the one write of `tally ledger backfill-settlement` (service/backfill.py, docs/settlement.md §8).

* a channel's PAYMENT / REFUND entries of one bill_date, all merchants: the sharded bill-date index
  (`by_bill_shard`, key condition on the shard and the channel prefix of pk), every shard, paged;
* the entry's raw rows: notify_raw (a payment: same key as its entry) and refund_raw (a refund's reports);
* the write: the settlement figures next to amount_cent with `attribute_not_exists(settlement_cent)` and
  `attribute_not_exists(settlement_refund_cent)`, so a figure booked (or backfilled) meanwhile is never
  overwritten and a second run writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.recon import LEDGER_SHARDS, SHARD_INDEX, bill_shard
from tally.store.tables import Tables

BOOKED_KINDS = ("PAYMENT", "REFUND")


class SettlementBackfillStore:
    def __init__(self, tables: Tables, refund_raw_table: str):
        self.t = tables
        self.refund_raw = refund_raw_table

    def entries(self, channel: str, bill_date: str, mchid: str | None = None) -> Iterator[dict[str, Any]]:
        """Every PAYMENT and REFUND entry of `channel` (the stored word) booked on `bill_date` (one merchant's)."""
        for shard in range(LEDGER_SHARDS):
            values = {"s": bill_shard(bill_date, shard), "c": f"{channel}#", "p": BOOKED_KINDS[0]}
            values.update(r=BOOKED_KINDS[1], **({"m": mchid} if mchid else {}))
            kwargs: dict[str, Any] = {
                "TableName": self.t.ledger,
                "IndexName": SHARD_INDEX,
                "KeyConditionExpression": "bill_shard = :s AND begins_with(pk, :c)",
                "FilterExpression": "kind IN (:p, :r)" + (" AND mchid = :m" if mchid else ""),
                "ExpressionAttributeValues": names_values(**values),
            }
            while True:
                answer = self.t.ddb.query(**kwargs)
                for item in answer.get("Items", []):
                    yield from_item(item)
                if "LastEvaluatedKey" not in answer:
                    break
                kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def ledger_entry(self, pk: str) -> dict[str, Any] | None:
        return self.t.get(self.t.ledger, pk)

    def payment_raw(self, pk: str) -> dict[str, Any] | None:
        """The payment's raw row (notify_raw: the entry's own key)."""
        return self.t.get(self.t.notify_raw, pk)

    def refund_reports(self, raw_key: str) -> list[dict[str, Any]]:
        """Every report kept for one refund (refund_raw: one row per status)."""
        return self.t.query_pk(self.refund_raw, raw_key)

    def write(self, pk: str, fields: Mapping[str, int], now: str) -> bool:
        """The figures next to amount_cent, once: False when the entry has a settlement figure already (booked
        or backfilled meanwhile) or is gone. `settlement_state` becomes KNOWN; `settlement_backfilled_at` says
        the figures came later."""
        sets = {
            **{k: int(v) for k, v in fields.items()},
            "settlement_state": "KNOWN",
            "settlement_backfilled_at": now,
        }
        try:
            self.t.ddb.update_item(
                TableName=self.t.ledger,
                Key=to_item({"pk": pk}),
                UpdateExpression="SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(sets))),
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(settlement_cent) "
                "AND attribute_not_exists(settlement_refund_cent)",
                ExpressionAttributeNames={f"#f{i}": k for i, k in enumerate(sets)},
                ExpressionAttributeValues=names_values(**{f"v{i}": v for i, v in enumerate(sets.values())}),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False
