"""`--since` from GSI by_updated (store/changes.py), never a Scan (R21): every write that sets an order's or a
refund's `updated_at` sets `upd_shard` with it, so a window finds each changed row; rows written before the index
are found once the one-off migration gave them their shard."""

from __future__ import annotations

import time

from tally import bootstrap
from tally.store.changes import ChangedRows
from tally.store.codec import from_item, to_item
from tally.store.tables import iso_now, order_key

from tests.integration.refund_helpers import paid_order, refund


def rows(h) -> ChangedRows:
    return ChangedRows(bootstrap.tables(), h.env["REFUNDS_TABLE"])


def without_shard(h, table: str) -> list[dict]:
    """What the index would miss (a test may scan: it is not the product)."""
    answer = h.ddb.scan(
        TableName=table, FilterExpression="attribute_exists(updated_at) AND attribute_not_exists(upd_shard)"
    )
    return [from_item(i) for i in answer.get("Items", [])]


def test_r21_since_finds_paid_orders_and_refunds_through_the_index(h):
    """R21: a paid order and its refund: each in the window, and no row written without its shard."""
    start = iso_now(time.time() - 1)
    mchid = h.add_merchant()["mchid"]
    otn, _ = paid_order(h, mchid, 300)
    status, body = refund(h, mchid, otn, 100)
    assert status == 201, body
    found = list(rows(h).since(start))
    assert order_key(mchid, otn) in {r["pk"] for r in found}  # the order (paid: its updated_at moved)
    assert body["refund_no"] in {r.get("refund_no") for r in found}
    assert without_shard(h, h.env["ORDERS_TABLE"]) == [] and without_shard(h, h.env["REFUNDS_TABLE"]) == []
    assert list(rows(h).since(start, iso_now(time.time() - 3600))) == []  # an empty window
    assert list(rows(h).since("2000-01-01", "2000-01-02")) == []


def test_r21_rows_from_before_the_index_are_found_after_the_migration(h):
    """The one-off migration (`backfill_updated_shards`) gives an old row its shard; re-running it sets nothing."""
    h.ddb.put_item(
        TableName=h.env["REFUNDS_TABLE"],
        Item=to_item(
            {"pk": "OLD#R-BEFORE-INDEX", "refund_no": "R-BEFORE-INDEX", "updated_at": "2001-02-03T00:00:00Z"}
        ),
    )
    assert list(rows(h).since("2001-02-03", "2001-02-04")) == []
    assert rows(h).backfill_updated_shards() >= 1
    assert [r["pk"] for r in rows(h).since("2001-02-03", "2001-02-04")] == ["OLD#R-BEFORE-INDEX"]
    assert rows(h).backfill_updated_shards() == 0
