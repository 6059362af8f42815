"""tally_local.moto_fixes 14 (`query_by_hash_key`): a Query reads only its hash key's items, and answers exactly
what moto's own Query answers over the whole table: the same items in the same order, the same counts, the same
LastEvaluatedKey page after page (Limit), ScanIndexForward, range conditions, filters and projections, after puts,
updates that move an item between GSI keys or out of the index, deletes, batch writes and transactions (applied
and cancelled). Each Query is asked twice on the same data: once through the index, once with the index switched
off (moto's path: every item of the table)."""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError

from tally_local import moto_fixes

S = {"AttributeType": "S"}


@pytest.fixture(scope="module")
def ddb(patched_moto):
    client = patched_moto.client("dynamodb")
    gsis = [
        {
            "IndexName": "by_k",
            "KeySchema": [
                {"AttributeName": "k", "KeyType": "HASH"},
                {"AttributeName": "r", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        },
        {
            "IndexName": "by_h",
            "KeySchema": [{"AttributeName": "h", "KeyType": "HASH"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        },
    ]
    client.create_table(
        TableName="single",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": a, **S} for a in ("pk", "k", "r", "h")],
        GlobalSecondaryIndexes=gsis,
    )
    client.create_table(
        TableName="ranged",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, **S} for a in ("pk", "sk", "k", "r", "h")],
        GlobalSecondaryIndexes=gsis,
    )
    yield client


def key(table: str, i: int) -> dict:
    return (
        {"pk": {"S": f"p{i % 7}"}, "sk": {"S": f"s{i:04d}"}}
        if table == "ranged"
        else {"pk": {"S": f"p{i:04d}"}}
    )


def row(table: str, i: int, rnd: random.Random) -> dict:
    item = {**key(table, i), "n": {"N": str(rnd.randrange(100))}, "pad": {"S": "x" * rnd.randrange(1, 400)}}
    if rnd.random() < 0.8:  # some items are in no index (a sparse GSI)
        item["k"] = {"S": f"k{rnd.randrange(4)}"}
        if rnd.random() < 0.9:
            item["r"] = {"S": f"2026-12-{rnd.randrange(1, 29):02d}T{rnd.randrange(24):02d}"}
    if rnd.random() < 0.5:
        item["h"] = {"S": f"h{rnd.randrange(3)}"}
    return item


QUERIES = [
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v",
        "ExpressionAttributeValues": {":v": {"S": "k1"}},
    },
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v",
        "ExpressionAttributeValues": {":v": {"S": "k2"}},
        "ScanIndexForward": False,
    },
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v AND r BETWEEN :a AND :b",
        "ExpressionAttributeValues": {
            ":v": {"S": "k0"},
            ":a": {"S": "2026-12-05"},
            ":b": {"S": "2026-12-20"},
        },
    },
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "#k = :v AND begins_with(r, :p)",
        "ExpressionAttributeNames": {"#k": "k"},
        "ExpressionAttributeValues": {":v": {"S": "k3"}, ":p": {"S": "2026-12-1"}},
        "ScanIndexForward": False,
    },
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v",
        "FilterExpression": "n < :n",
        "ExpressionAttributeValues": {":v": {"S": "k1"}, ":n": {"N": "50"}},
    },
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v",
        "ProjectionExpression": "pk, n",
        "ExpressionAttributeValues": {":v": {"S": "k0"}},
    },
    {
        "IndexName": "by_h",
        "KeyConditionExpression": "h = :v",
        "ExpressionAttributeValues": {":v": {"S": "h0"}},
    },
    {
        "IndexName": "by_h",
        "KeyConditionExpression": "h = :v",
        "ExpressionAttributeValues": {":v": {"S": "h2"}},
        "ScanIndexForward": False,
    },
    {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v",
        "ExpressionAttributeValues": {":v": {"S": "none"}},
    },
]
TABLE_QUERIES = [  # the table's own key (ranged only: a hash-only table's Query is one item)
    {"KeyConditionExpression": "pk = :v", "ExpressionAttributeValues": {":v": {"S": "p3"}}},
    {
        "KeyConditionExpression": "pk = :v AND sk > :s",
        "ExpressionAttributeValues": {":v": {"S": "p5"}, ":s": {"S": "s0100"}},
        "ScanIndexForward": False,
    },
    {"KeyConditionExpression": "pk = :v", "ExpressionAttributeValues": {":v": {"S": "p-none"}}},
]


def pages(client, table: str, query: dict, limit: int | None) -> list[dict]:
    """Every page of the Query, as the product's store reads it (ExclusiveStartKey from LastEvaluatedKey)."""
    kwargs = {"TableName": table, **query, **({"Limit": limit} if limit else {})}
    out = []
    while True:
        page = client.query(**kwargs)
        page.pop("ResponseMetadata")
        out.append(page)
        if "LastEvaluatedKey" not in page:
            return out
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def same_as_moto(client, table: str, monkeypatch, limits=(None, 4)) -> int:
    """Every Query's pages through the index == moto's own; returns how many items they listed. Paged by 4
    (`limits`), moto's own path reads every item of the table again for each page: the costly half."""
    listed = 0
    queries = QUERIES + (TABLE_QUERIES if table == "ranged" else [])
    for query in queries:
        for limit in limits:
            indexed = pages(client, table, query, limit)
            with monkeypatch.context() as m:
                m.setattr(moto_fixes, "_query_candidates", lambda *a, **k: None)  # moto's path
                full = pages(client, table, query, limit)
            assert indexed == full, (table, query, limit)
            listed += sum(p["Count"] for p in indexed)
    return listed


def write(client, table: str, rnd: random.Random, n: int) -> None:
    for i in range(n):
        client.put_item(TableName=table, Item=row(table, i, rnd))


@pytest.mark.parametrize("table", ["single", "ranged"])
def test_query_through_the_index_answers_as_moto_after_every_kind_of_write(ddb, table, monkeypatch):
    rnd = random.Random(21)
    write(ddb, table, rnd, 120)
    assert same_as_moto(ddb, table, monkeypatch) > 100  # the index is built now; every write below keeps it

    # updates that move items between GSI keys, out of an index (REMOVE) and into one
    for i in range(0, 120, 3):
        ddb.update_item(
            TableName=table,
            Key=key(table, i),
            UpdateExpression="SET k = :k, r = :r",
            ExpressionAttributeValues={
                ":k": {"S": f"k{rnd.randrange(4)}"},
                ":r": {"S": f"2026-12-{i % 28 + 1:02d}"},
            },
        )
    for i in range(1, 120, 5):
        ddb.update_item(TableName=table, Key=key(table, i), UpdateExpression="REMOVE k, h")
    for i in range(2, 120, 7):
        ddb.update_item(
            TableName=table,
            Key=key(table, i),
            UpdateExpression="SET h = :h",
            ExpressionAttributeValues={":h": {"S": "h0"}},
        )
    ddb.update_item(  # an update that creates its item
        TableName=table,
        Key=key(table, 900),
        UpdateExpression="SET k = :k, r = :r",
        ExpressionAttributeValues={":k": {"S": "k1"}, ":r": {"S": "2026-12-01"}},
    )
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):  # a refused update changes nothing
        ddb.update_item(
            TableName=table,
            Key=key(table, 3),
            UpdateExpression="SET k = :k",
            ConditionExpression="attribute_not_exists(pk)",
            ExpressionAttributeValues={":k": {"S": "k2"}},
        )
    same_as_moto(ddb, table, monkeypatch, limits=(None,))  # paged as well at the first and the last check

    # puts over existing items (a new key), deletes, batch writes
    for i in range(4, 120, 11):
        ddb.put_item(TableName=table, Item=row(table, i, rnd))
    for i in range(5, 120, 13):
        ddb.delete_item(TableName=table, Key=key(table, i))
    ddb.batch_write_item(
        RequestItems={
            table: [{"PutRequest": {"Item": row(table, 1000 + i, rnd)}} for i in range(10)]
            + [{"DeleteRequest": {"Key": key(table, i)}} for i in range(6, 100, 17)]
        }
    )
    same_as_moto(ddb, table, monkeypatch, limits=(None,))

    # a transaction applied, and one cancelled (its items back as they were, also in the index)
    ddb.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": table,
                    "Key": key(table, 9),
                    "UpdateExpression": "SET k = :k, r = :r",
                    "ExpressionAttributeValues": {":k": {"S": "k0"}, ":r": {"S": "2026-12-09"}},
                }
            },
            {
                "Put": {
                    "TableName": table,
                    "Item": {**key(table, 2000), "k": {"S": "k0"}, "r": {"S": "2026-12-10"}},
                }
            },
            {"Delete": {"TableName": table, "Key": key(table, 10)}},
        ]
    )
    before = pages(ddb, table, QUERIES[0], None)
    with pytest.raises(ClientError, match="TransactionCanceled"):
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": table,
                        "Key": key(table, 12),
                        "UpdateExpression": "SET k = :k, r = :r",
                        "ExpressionAttributeValues": {":k": {"S": "k1"}, ":r": {"S": "2026-12-12"}},
                    }
                },
                {"Delete": {"TableName": table, "Key": key(table, 13)}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": key(table, 14),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert pages(ddb, table, QUERIES[0], None) == before
    same_as_moto(ddb, table, monkeypatch)


def test_a_query_costs_its_keys_items_not_the_table(ddb, monkeypatch):
    """3 items under one key in a table of 1,500: the Query hands moto 3 candidates, and no longer lists the
    table (moto's all_items sorted every item for each page)."""
    table = "costly"
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": a, **S} for a in ("pk", "k")],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_k",
                "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    items = [
        {"pk": {"S": f"p{i:05d}"}, "k": {"S": "rare" if i % 500 == 7 else f"common{i % 3}"}}
        for i in range(1500)
    ]
    for start in range(
        0, 1500, 25
    ):  # the table's size is the point, not how it was written: 60 requests, not 1,500
        batch = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        assert not ddb.batch_write_item(RequestItems={table: batch}).get("UnprocessedItems")
    query = {
        "IndexName": "by_k",
        "KeyConditionExpression": "k = :v",
        "ExpressionAttributeValues": {":v": {"S": "rare"}},
    }
    pages(ddb, table, query, None)  # builds the index
    seen, listed = [], []
    real_candidates, real_items = moto_fixes._query_candidates, moto_fixes.original_items
    monkeypatch.setattr(
        moto_fixes, "_query_candidates", lambda *a, **k: seen.append(real_candidates(*a, **k)) or seen[-1]
    )
    monkeypatch.setattr(moto_fixes, "original_items", lambda t: listed.append(t) or real_items(t))
    ddb.put_item(TableName=table, Item={"pk": {"S": "p99999"}, "k": {"S": "rare"}})
    answer = pages(ddb, table, query, None)
    assert [i["pk"]["S"] for p in answer for i in p["Items"]] == ["p00007", "p00507", "p01007", "p99999"]
    assert [len(c) for c in seen] == [4] and listed == []


def test_a_page_of_items_is_the_same_json_as_motos_serializer_writes(ddb, monkeypatch):
    """moto_fixes 15 (`items_as_json`): a Query's and a Scan's answer, with every attribute type, parses to
    exactly what moto's own serializer answers (binary values included)."""
    table = "typed"
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": a, **S} for a in ("pk", "sk")],
    )
    for i in range(30):
        item = {
            "pk": {"S": "p"},
            "sk": {"S": f"s{i:02d}"},
            "n": {"N": str(i * 7 - 50)},
            "b": {"B": bytes([i, 0, 255, 10])},
            "bs": {"BS": [b"\x00\x01", bytes([i + 2])]},
            "ss": {"SS": ["a", f"x{i}"]},
            "ns": {"NS": ["1", str(i + 2)]},
            "m": {"M": {"k": {"S": "v"}, "inner": {"B": b"\xfe"}, "l": {"L": [{"N": "1"}, {"NULL": True}]}}},
            "l": {"L": [{"S": "ü€"}, {"BOOL": False}, {"M": {}}]},
            "t": {"BOOL": True},
            "z": {"NULL": True},
        }
        ddb.put_item(TableName=table, Item=item)
    calls = [
        lambda: ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
            Limit=7,
        ),
        lambda: ddb.query(
            TableName=table,
            KeyConditionExpression="pk = :p",
            ProjectionExpression="sk, b, m.inner",
            ExpressionAttributeValues={":p": {"S": "p"}},
        ),
        lambda: ddb.scan(TableName=table, Limit=11),
        lambda: ddb.scan(TableName=table, Select="COUNT"),
        lambda: ddb.query(
            TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "none"}}
        ),
    ]
    for call in calls:
        fast = call()
        with monkeypatch.context() as m:
            m.setattr(moto_fixes, "_ITEM_PAGES", frozenset())  # moto's serializer for the whole answer
            slow = call()
        fast.pop("ResponseMetadata"), slow.pop("ResponseMetadata")
        assert fast == slow
    assert fast["Count"] == 0 and slow["Items"] == []
    page = calls[0]()
    assert page["Items"][3]["b"] == {"B": bytes([3, 0, 255, 10])} and page["LastEvaluatedKey"]["sk"] == {
        "S": "s06"
    }
