"""The ledger's write-sharded bill-date index, as every ledger write needs it (booking, refunds, reversals,
fees): kept apart from store/recon.py so the notify and worker paths do not import reconciliation."""

from __future__ import annotations

from typing import Any

from tally.store.tables import shard_of

# The ledger's bill-date index is write-sharded: GSI by_bill_shard, partition key `bill_shard` =
# `<bill_date>#<shard>` (two digits), sort key pk. The shard is a hash of the entry's key (a REVERSAL takes
# the shard of the entry it reverses), so one shard of a day is one partition of reconciliation's match.
# Changing the count re-shards every entry: see docs/recon.md "Migration" and docs/cost.md for the number.
LEDGER_SHARDS = 16


def ledger_shard(pk: str) -> int:
    """The ledger shard of an entry key, by the one key hash (store.tables.shard_of) of the key its bill row
    names, `channel#id`: an entry's pk is merchant-scoped (`channel#mchid#id`, issue #15; pre-#15 entries are
    `channel#id` already), the bill's key is not, and bill partition p must hold ledger shard p's keys
    (service/recon_partition.py). Channel ids never contain `#` (digits; refund numbers are [0-9A-Za-z_-|*@])."""
    if pk.startswith("fee#"):  # a FEE entry sits in the shard of the bill row it was charged on
        pk = pk[4:]
    channel, _, rest = pk.partition("#")
    _, scoped, ident = rest.partition("#")
    return shard_of(f"{channel}#{ident}" if scoped else pk, LEDGER_SHARDS)


# Orders and refunds are found by when they changed through GSI by_updated (`--since`, store/changes.py): partition
# key `upd_shard` = a hash of the row's key into 16 shards, sort key `updated_at`; a window is one Query per shard
# whatever its length. Every write that sets `updated_at` on an order or a refund sets `upd_shard` with it, so the
# writes of a busy hour spread over 16 partitions instead of one.
UPDATED_SHARDS = 16


def updated_shard(key: str) -> str:
    """The by_updated partition of the order or refund row `key`."""
    return f"{shard_of(key, UPDATED_SHARDS):02d}"


def bill_shard(bill_date: str, shard: int) -> str:
    return f"{bill_date}#{shard:02d}"


def with_bill_shard(row: dict[str, Any]) -> dict[str, Any]:
    """A ledger row with its `bill_shard` attribute: every ledger write goes through this (booking, refunds,
    reversals), so every entry is in the by_bill_shard index. A REVERSAL is sharded by the key it reverses."""
    if not row.get("bill_date"):
        return row
    return {
        **row,
        "bill_shard": bill_shard(row["bill_date"], ledger_shard(str(row.get("reverses") or row["pk"]))),
    }
