"""tally_local.moto_fixes, the patches that cut moto's CPU per request under bench.load (issue #20 item 6):
each answers exactly what moto's own code answers. Serialisation is compared with moto's own functions
(kept as `__wrapped__`) on the same value; the live server round-trips every DynamoDB type."""

from __future__ import annotations

import contextlib
import json

import pytest
from botocore.exceptions import ClientError
from moto.core import serialize
from moto.core.utils import get_service_model

from tally_local import moto_fixes

EVERY_TYPE = {
    "pk": {"S": "order#1"},
    "amount_cent": {"N": "1999"},
    "blob": {"B": "AAEC"},
    "tags": {"SS": ["a", "b"]},
    "counts": {"NS": ["1", "2"]},
    "blobs": {"BS": ["AAEC", "AwQ="]},
    "nested": {"M": {"x": {"L": [{"S": "y"}, {"NULL": True}, {"BOOL": False}, {"N": "0"}]}}},
    "empty_map": {"M": {}},
    "flag": {"BOOL": True},
    "nothing": {"NULL": True},
}


@contextlib.contextmanager
def _moto_own_serialiser():
    """moto's own get_value and structure walk, for the length of the block."""
    base = serialize.ResponseSerializer
    patched = base.get_value, base._serialize_type_structure
    base.get_value = patched[0].__wrapped__
    base._serialize_type_structure = patched[1].__wrapped__
    try:
        yield
    finally:
        base.get_value, base._serialize_type_structure = patched


def _serialise(service: str, operation: str, result) -> str:
    model = get_service_model(service)
    serializer_class = serialize.get_serializer_class(service, model.protocol)
    serializer = serializer_class(
        operation_model=model.operation_model(operation), value_picker=serialize.XFormedAttributePicker()
    )
    return serializer.serialize(result)["body"]


def _both(service: str, operation: str, result) -> tuple[str, str]:
    moto_fixes.install()
    ours = _serialise(service, operation, result)
    with _moto_own_serialiser():
        theirs = _serialise(service, operation, result)
    return ours, theirs


@pytest.mark.parametrize(
    ("service", "operation", "result"),
    [
        ("dynamodb", "GetItem", {"Item": EVERY_TYPE}),
        ("dynamodb", "GetItem", {}),  # no item
        ("dynamodb", "Query", {"Items": [EVERY_TYPE, {"pk": {"S": "b"}}], "Count": 2, "ScannedCount": 2}),
        (
            "dynamodb",
            "Query",
            {"Items": [], "Count": 0, "ScannedCount": 0, "LastEvaluatedKey": {"pk": {"S": "z"}}},
        ),
        (
            "dynamodb",
            "PutItem",
            {"Attributes": EVERY_TYPE, "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0}},
        ),
        ("dynamodb", "TransactWriteItems", {}),
        (
            "dynamodbstreams",
            "GetRecords",
            {
                "NextShardIterator": "it",
                "Records": [
                    {
                        "eventID": "1",
                        "eventName": "MODIFY",
                        "eventVersion": "1.0",
                        "eventSource": "aws:dynamodb",
                        "awsRegion": "us-east-1",
                        "dynamodb": {
                            "StreamViewType": "NEW_AND_OLD_IMAGES",
                            "ApproximateCreationDateTime": 1764614400,
                            "SequenceNumber": "1100000000017454423009",
                            "SizeBytes": 120,
                            "Keys": {"pk": {"S": "order#1"}},
                            "NewImage": EVERY_TYPE,
                            "OldImage": {"pk": {"S": "order#1"}, "amount_cent": {"N": "1"}},
                        },
                    }
                ],
            },
        ),
        # snake_case keys are found through moto's xform alias, a missing member is left out
        (
            "dynamodb",
            "DescribeTable",
            {"Table": {"table_name": "t", "item_count": 3, "TableStatus": "ACTIVE"}},
        ),
    ],
)
def test_a_response_serialises_as_moto_serialises_it(service, operation, result):
    ours, theirs = _both(service, operation, result)
    assert ours == theirs
    assert bool(json.loads(ours)) == bool(result)  # a real answer, not two equal empties


def test_the_same_shape_with_different_values_gives_different_answers():
    """The cache holds names per shape, never values: two items through the same shape keep their own."""
    first, _ = _both("dynamodb", "GetItem", {"Item": {"pk": {"S": "a"}, "v": {"N": "1"}}})
    second, _ = _both("dynamodb", "GetItem", {"Item": {"pk": {"S": "b"}, "v": {"BOOL": True}}})
    assert json.loads(first) == {"Item": {"pk": {"S": "a"}, "v": {"N": "1"}}}
    assert json.loads(second) == {"Item": {"pk": {"S": "b"}, "v": {"BOOL": True}}}


def test_an_object_value_still_goes_moto_s_way():
    """Values that are not plain dicts (moto's models) are picked by moto's own picker, aliases and all."""

    class Table:
        table_name = "from-attribute"
        item_count = 7

    ours, theirs = _both("dynamodb", "DescribeTable", {"Table": Table()})
    assert ours == theirs
    assert json.loads(ours)["Table"] == {"TableName": "from-attribute", "ItemCount": 7}


def test_every_dynamodb_type_round_trips_through_the_server_and_its_stream(patched_moto):
    ddb, streams = patched_moto.client("dynamodb"), patched_moto.client("dynamodbstreams")
    ddb.create_table(
        TableName="types",
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    item = {**EVERY_TYPE, "blob": {"B": b"\x00\x01\x02"}, "blobs": {"BS": [b"\x00\x01\x02", b"\x03\x04"]}}
    ddb.put_item(TableName="types", Item=item)
    changed = ddb.update_item(
        TableName="types",
        Key={"pk": {"S": "order#1"}},
        UpdateExpression="SET amount_cent = :a",
        ExpressionAttributeValues={":a": {"N": "2000"}},
        ReturnValues="ALL_OLD",
    )
    assert changed["Attributes"] == item
    assert ddb.get_item(TableName="types", Key={"pk": {"S": "order#1"}})["Item"] == {
        **item,
        "amount_cent": {"N": "2000"},
    }
    assert ddb.query(
        TableName="types",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "order#1"}},
    )["Items"] == [{**item, "amount_cent": {"N": "2000"}}]
    arn = ddb.describe_table(TableName="types")["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    records = streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    assert [r["eventName"] for r in records] == ["INSERT", "MODIFY"]
    assert records[1]["dynamodb"]["OldImage"] == item
    assert records[1]["dynamodb"]["NewImage"]["amount_cent"] == {"N": "2000"}


def test_actions_dispatch_once_their_names_are_cached(patched_moto):
    """cached_action_names: a known action is answered, an unknown one is still refused."""
    ddb = patched_moto.client("dynamodb")
    assert "TableNames" in ddb.list_tables()
    assert "TableNames" in ddb.list_tables()  # from the cache
    with pytest.raises(ClientError):
        ddb.describe_table(TableName="no-such-table")
    sqs = patched_moto.client("sqs")
    url = sqs.create_queue(QueueName="names")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url).get("Messages", [])] == ["x"]


@pytest.fixture(scope="module")
def table(patched_moto):
    ddb = patched_moto.client("dynamodb")
    ddb.create_table(
        TableName="updates",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    return ddb


def _update(ddb, expression: str, names: dict[str, str] | None = None, **values: str):
    kwargs = {"ExpressionAttributeNames": names} if names else {}
    return ddb.update_item(
        TableName="updates",
        Key={"pk": {"S": "o1"}},
        UpdateExpression=expression,
        ExpressionAttributeValues={f":{k}": {"S": v} for k, v in values.items()},
        ReturnValues="ALL_NEW",
        **kwargs,
    )["Attributes"]


def test_the_same_update_text_with_other_names_is_checked_again(table):
    """structural_checks_once remembers a pass per expression *and* attribute names: the text that was
    fine with two names is refused when both placeholders name the same attribute, every time."""
    expression = "SET #a = :x, #b = :y"
    assert _update(table, expression, {"#a": "p", "#b": "q"}, x="1", y="2") == {
        "pk": {"S": "o1"},
        "p": {"S": "1"},
        "q": {"S": "2"},
    }
    assert _update(table, expression, {"#a": "p", "#b": "q"}, x="3", y="4")["q"] == {"S": "4"}
    for _ in range(2):
        with pytest.raises(ClientError, match="Two document paths overlap"):
            _update(table, expression, {"#a": "p", "#b": "p"}, x="5", y="6")
    assert _update(table, expression, {"#a": "p", "#b": "q"}, x="7", y="8")["p"] == {"S": "7"}


@pytest.mark.parametrize(
    ("expression", "message"),
    [("SET a = :x SET b = :y", 'The "SET" section can only be used once'), ("SET a = :x, a = :y", "overlap")],
)
def test_a_refused_update_is_refused_every_time(table, expression, message):
    for _ in range(3):
        with pytest.raises(ClientError, match=message):
            _update(table, expression, x="1", y="2")


def test_an_update_of_many_actions_applies_each_one(table):
    """cached_processing_maps: every walker still sees every node (SET, REMOVE, if_not_exists, +)."""
    table.put_item(TableName="updates", Item={"pk": {"S": "o1"}, "gone": {"S": "x"}, "n": {"N": "1"}})
    got = table.update_item(
        TableName="updates",
        Key={"pk": {"S": "o1"}},
        UpdateExpression="SET a = :a, b = if_not_exists(b, :b), n = n + :one REMOVE gone",
        ExpressionAttributeValues={":a": {"S": "A"}, ":b": {"S": "B"}, ":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )["Attributes"]
    assert got == {"pk": {"S": "o1"}, "a": {"S": "A"}, "b": {"S": "B"}, "n": {"N": "2"}}


def test_the_item_size_limit_holds_at_the_same_attribute(table):
    """item_size_checked_once: DynamoDB's item limit (moto: 405,000 bytes of names and values)."""
    table.put_item(
        TableName="updates", Item={"pk": {"S": "big"}, "a": {"S": "x" * 200_000}, "b": {"S": "y" * 200_000}}
    )
    with pytest.raises(ClientError, match="Item size has exceeded the maximum allowed size"):
        table.put_item(
            TableName="updates",
            Item={"pk": {"S": "big"}, "a": {"S": "x" * 200_000}, "b": {"S": "y" * 205_000}},
        )
    assert len(table.get_item(TableName="updates", Key={"pk": {"S": "big"}})["Item"]["b"]["S"]) == 200_000


def _shape(node, seen=None):
    """A node tree as nested tuples: class, attributes, and each parent as its position in the walk."""
    from moto.dynamodb.parsing.ast_nodes import Node

    seen = {} if seen is None else seen
    if isinstance(node, list):
        return [_shape(entry, seen) for entry in node]
    if not isinstance(node, Node):
        return node
    seen[id(node)] = len(seen)
    attributes = {
        name: ("parent", seen.get(id(value))) if name == "parent" else _shape(value, seen)
        for name, value in vars(node).items()
    }
    return type(node).__name__, attributes


def test_the_update_tree_copy_is_deepcopy_s_copy():
    """plain_ast_copy: the same classes, attributes and parent links as copy.deepcopy, sharing nothing
    mutable with the parsed tree (which cached_update_parser hands to the next update)."""
    import copy

    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    moto_fixes.install()
    tree = UpdateExpressionParser.make(
        "SET #st = :to, a.b[2] = list_append(if_not_exists(c, :e), :f), n = n + :one "
        "REMOVE poll_pk, poll_due ADD s :set DELETE t :t"
    )
    ours, theirs = validators.deepcopy(tree), copy.deepcopy(tree)
    assert validators.deepcopy is not copy.deepcopy
    assert _shape(ours) == _shape(theirs) == _shape(tree)
    ours.children[0].children.clear()
    assert _shape(tree) == _shape(theirs)  # the original is untouched
    assert ours.children[1].parent is ours  # the copy's links point into the copy


def _moto_own_visible(queue) -> list:
    """moto's Queue.messages as moto writes it (each message's own clock reads); its two counts checked too."""
    assert queue.approximate_number_of_messages_delayed == len([m for m in queue._messages if m.delayed])
    assert queue.approximate_number_of_messages_not_visible == len(
        [m for m in queue._messages if not m.visible]
    )
    return [m for m in queue._messages if m.visible and not m.delayed]


def test_a_queue_backlog_is_received_and_deleted_as_moto_does(patched_moto):
    """moto_fixes 16: one clock read per receive and per count, one pass per delete; the same messages."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.sqs.models import sqs_backends

    sqs = patched_moto.client("sqs")
    url = sqs.create_queue(QueueName="backlog")["QueueUrl"]
    try:
        for n in range(30):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{n}", DelaySeconds=600 if n % 10 == 9 else 0)
        queue = sqs_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].queues["backlog"]
        assert [m.body for m in queue.messages] == [m.body for m in _moto_own_visible(queue)]
        assert len(queue.messages) == 27  # three delayed

        first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600)["Messages"]
        assert [m["Body"] for m in first] == [f"m{n}" for n in range(11) if n != 9]
        assert [m.body for m in queue.messages] == [
            m.body for m in _moto_own_visible(queue)
        ]  # in flight: out
        assert len(queue.messages) == 17
        assert (
            queue.approximate_number_of_messages_delayed,
            queue.approximate_number_of_messages_not_visible,
        ) == (3, 10)

        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=0)["Messages"][0]
        renewed = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=600)["Messages"][
            0
        ]
        assert again["Body"] == renewed["Body"] and again["ReceiptHandle"] != renewed["ReceiptHandle"]

        done = sqs.delete_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(first)],
        )
        assert len(done["Successful"]) == 10 and not done.get("Failed")
        sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])  # a message's older handle
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])  # deleted already: success
        with pytest.raises(ClientError, match="ReceiptHandleIsInvalid"):
            sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
        left = sorted(m.body for m in queue._messages)
        assert len(left) == 19 and again["Body"] not in left and not {m["Body"] for m in first} & set(left)
        assert queue.pending_messages == set()
    finally:
        sqs.delete_queue(QueueUrl=url)
