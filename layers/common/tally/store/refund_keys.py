"""The refund tables' keys (docs/contracts.md "Refund keys"): the row key scoped per merchant, the ledger key,
the poll index partitions, and the tables themselves.

Keys are scoped per merchant (issue #15): a refund row is `pk = mchid#refund_no` (the order's scope:
`order_key`), its ledger entry `channel#mchid#refund_no`, so two merchants may use the same own refund number.
Rows written before that (`pk = refund_no`, ledger `channel#refund_no`) are read by `RefundStore.find` and keep
their keys (`refund_ledger_key` derives from the row's pk).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tally.store.codec import names_values, to_item
from tally.store.tables import Tables, shard_of

POLL_SHARDS = 4


def refund_key(mchid: str, refund_no: str) -> str:
    """The refunds table key: a refund number is unique per merchant, like an out_trade_no (`order_key`)."""
    return f"{mchid}#{refund_no}"


def is_legacy_key(pk: str) -> bool:
    """A row stored before refund keys were scoped (`pk = refund_no`; a refund_no never holds '#')."""
    return "#" not in pk


def refund_ledger_key(refund: Mapping[str, Any]) -> str:
    """`channel#mchid#refund_no` (a legacy row: `channel#refund_no`, where its entry already is)."""
    return f"{refund['channel']}#{refund['pk']}"


def legacy_free(table: str, mchid: str, refund_no: str) -> dict[str, Any]:
    """Transaction item: no pre-upgrade row of THIS merchant holds the number (another merchant's may)."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": to_item({"pk": refund_no}),
            "ConditionExpression": "attribute_not_exists(pk) OR mchid <> :m",
            "ExpressionAttributeValues": names_values(m=mchid),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def poll_pk(refund_no: str) -> str:
    return f"poll#{shard_of(refund_no, POLL_SHARDS)}"


def manual_pk(refund_no: str) -> str:
    return f"manual#{shard_of(refund_no, POLL_SHARDS)}"


@dataclass
class RefundTables:
    base: Tables
    refunds: str
    refund_raw: str

    @property
    def ddb(self) -> Any:
        return self.base.ddb
