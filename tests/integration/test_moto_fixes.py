"""tally_local.moto_fixes: the embedded stack's moto keeps DynamoDB's transaction semantics (R18: all or
nothing) while copying only the items a transaction names, and routes requests without the disk."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from tally_local import moto_fixes


@pytest.fixture(scope="module")
def ddb(patched_moto):
    client = patched_moto.client("dynamodb")
    stream = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    client.create_table(
        TableName="single",
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification=stream,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    client.create_table(
        TableName="ranged",
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification=stream,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    yield client, patched_moto.client("dynamodbstreams")


def _stream_records(client, streams, table: str) -> list[dict]:
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    return streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]


def _state(client) -> tuple[list, list]:
    return (
        sorted(client.scan(TableName="single")["Items"], key=str),
        sorted(client.scan(TableName="ranged")["Items"], key=str),
    )


def test_r18_cancelled_transaction_leaves_every_item_and_stream_as_it_was(ddb):
    client, streams = ddb
    client.put_item(TableName="single", Item={"pk": {"S": "kept"}, "v": {"N": "1"}})
    client.put_item(TableName="single", Item={"pk": {"S": "other"}, "v": {"N": "7"}})
    client.put_item(TableName="ranged", Item={"pk": {"S": "o"}, "sk": {"S": "1"}, "v": {"N": "1"}})
    before = _state(client)
    streams_before = [len(_stream_records(client, streams, t)) for t in ("single", "ranged")]

    with pytest.raises(ClientError) as raised:
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": "single",
                        "Key": {"pk": {"S": "kept"}},
                        "UpdateExpression": "SET v = :v",
                        "ExpressionAttributeValues": {":v": {"N": "2"}},
                    }
                },
                {"Put": {"TableName": "single", "Item": {"pk": {"S": "new"}, "v": {"N": "3"}}}},
                {
                    "Put": {
                        "TableName": "ranged",
                        "Item": {"pk": {"S": "o"}, "sk": {"S": "2"}, "v": {"N": "4"}},
                    }
                },
                {"Delete": {"TableName": "ranged", "Key": {"pk": {"S": "o"}, "sk": {"S": "1"}}}},
                {
                    "Put": {
                        "TableName": "single",
                        "Item": {"pk": {"S": "other"}, "v": {"N": "9"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },  # fails: cancels them all
            ]
        )

    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [r["Code"] for r in raised.value.response["CancellationReasons"]]
    assert reasons == ["None", "None", "None", "None", "ConditionalCheckFailed"]
    assert _state(client) == before
    assert [len(_stream_records(client, streams, t)) for t in ("single", "ranged")] == streams_before


def test_r18_committed_transaction_writes_every_item_and_its_stream_records(ddb):
    client, streams = ddb
    before = len(_stream_records(client, streams, "single"))
    client.transact_write_items(
        TransactItems=[
            {
                "Put": {
                    "TableName": "single",
                    "Item": {"pk": {"S": "t1"}, "v": {"N": "1"}},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {"Put": {"TableName": "ranged", "Item": {"pk": {"S": "t"}, "sk": {"S": "1"}, "v": {"N": "1"}}}},
        ]
    )
    assert client.get_item(TableName="single", Key={"pk": {"S": "t1"}})["Item"]["v"] == {"N": "1"}
    assert client.get_item(TableName="ranged", Key={"pk": {"S": "t"}, "sk": {"S": "1"}})["Item"]["v"] == {
        "N": "1"
    }
    assert len(_stream_records(client, streams, "single")) == before + 1


def test_transaction_on_a_missing_table_is_cancelled_without_writing(ddb):
    client, _ = ddb
    before = _state(client)
    with pytest.raises(ClientError):
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "single", "Item": {"pk": {"S": "lost"}, "v": {"N": "1"}}}},
                {"Put": {"TableName": "nowhere", "Item": {"pk": {"S": "x"}}}},
            ]
        )
    assert _state(client) == before


def test_a_transaction_does_not_copy_the_tables_it_names(ddb, monkeypatch):
    """The cost fix itself: moto's whole-table deepcopy is not taken (only the named items are)."""
    import moto.dynamodb.models as models

    client, _ = ddb
    copied = []
    original = moto_fixes.copy.deepcopy
    monkeypatch.setattr(
        moto_fixes.copy,
        "deepcopy",
        lambda value, memo=None: copied.append(type(value).__name__) or original(value, memo),
    )
    client.transact_write_items(
        TransactItems=[{"Put": {"TableName": "single", "Item": {"pk": {"S": "c1"}, "v": {"N": "1"}}}}]
    )
    assert "Table" not in copied
    assert isinstance(models.copy, moto_fixes._CopyKeepingTables)


def test_moto_process_serves_on_its_port_and_ends_with_stop():
    """`make run` and bench.load run moto in a child process (off the functions' GIL)."""
    import os

    from tally_local.moto_process import MotoProcess

    server = MotoProcess("127.0.0.1", 0).start()
    try:
        client = boto3.client(
            "sqs",
            endpoint_url=server.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        url = client.create_queue(QueueName="q")["QueueUrl"]
        client.send_message(QueueUrl=url, MessageBody="x")
        attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        assert attributes["Attributes"] == {"ApproximateNumberOfMessages": "1"}
        pid = server.pid
    finally:
        server.stop()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
