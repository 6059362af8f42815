"""The fast lane's isolation (tests/conftest.py `MotoAccount`): moto is provisioned once per worker, and
whatever one test leaves — items, stream records, messages, objects, secrets, rules, extra queues — is gone
when the next test starts, exactly as if every table had been created afresh."""

from __future__ import annotations

import json
import sys

import boto3
import pytest


def leave_everything_behind(env):
    ddb, sqs, s3 = boto3.client("dynamodb"), boto3.client("sqs"), boto3.client("s3")
    ddb.put_item(TableName=env["ORDERS_TABLE"], Item={"pk": {"S": "left#1"}})
    ddb.put_item(TableName=env["TRANSITIONS_TABLE"], Item={"pk": {"S": "left#1"}, "sk": {"S": "PAY#1"}})
    for n in range(30):  # more than one batch_write_item of 25
        ddb.put_item(
            TableName=env["LEDGER_TABLE"], Item={"pk": {"S": f"left#{n}"}, "bill_date": {"S": "2024-05-01"}}
        )
    sqs.send_message(QueueUrl=env["APPLY_QUEUE_URL"], MessageBody=json.dumps({"raw_key": "left"}))
    sqs.receive_message(QueueUrl=env["APPLY_QUEUE_URL"], VisibilityTimeout=600)  # in flight, not deleted
    sqs.send_message(QueueUrl=env["APPLY_QUEUE_URL"], MessageBody="visible")
    extra = sqs.create_queue(QueueName="consumer")["QueueUrl"]
    sqs.send_message(QueueUrl=extra, MessageBody="x")
    s3.put_object(Bucket=env["BILLS_BUCKET"], Key="bills/wechatpay/1/2024-05-01/a", Body=b"1")
    s3.put_object(Bucket=env["BILLS_BUCKET"], Key="bills/wechatpay/1/2024-05-01/a", Body=b"2")
    boto3.client("secretsmanager").create_secret(Name="tally/merchants/wechatpay/left", SecretString="{}")
    events = boto3.client("events")
    events.put_rule(Name="all", EventBusName=env["EVENT_BUS_NAME"], EventPattern='{"source": ["tally"]}')
    events.put_targets(Rule="all", EventBusName=env["EVENT_BUS_NAME"], Targets=[{"Id": "q", "Arn": "arn:x"}])


def stream_records(env, table_var):
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=env[table_var])["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    return streams.get_records(ShardIterator=it["ShardIterator"])["Records"]


def assert_as_new(env):
    ddb, sqs, s3 = boto3.client("dynamodb"), boto3.client("sqs"), boto3.client("s3")
    for var in ("ORDERS_TABLE", "TRANSITIONS_TABLE", "LEDGER_TABLE", "REFUNDS_TABLE", "MERCHANTS_TABLE"):
        assert ddb.scan(TableName=env[var])["Items"] == [], var
    assert stream_records(env, "ORDERS_TABLE") == [] and stream_records(env, "REFUNDS_TABLE") == []
    attrs = sqs.get_queue_attributes(QueueUrl=env["APPLY_QUEUE_URL"], AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "0",
    )
    assert all("consumer" not in url for url in sqs.list_queues().get("QueueUrls", []))
    versions = s3.list_object_versions(Bucket=env["BILLS_BUCKET"])
    assert versions.get("Versions", []) == [] and versions.get("DeleteMarkers", []) == []
    assert boto3.client("secretsmanager").list_secrets()["SecretList"] == []
    rules = boto3.client("events").list_rules(EventBusName=env["EVENT_BUS_NAME"])["Rules"]
    assert [r["Name"] for r in rules if not r.get("ManagedBy")] == []  # the archive's own rule stays


def test_the_next_test_finds_the_account_as_if_created_afresh(aws, moto_account):
    created = moto_account.created
    assert_as_new(aws)
    leave_everything_behind(aws)
    assert stream_records(aws, "ORDERS_TABLE")  # the write reached the stream
    moto_account.stop()  # what the fixture does between two tests
    env = moto_account.start()
    assert env == aws and moto_account.created == created  # emptied, not created again
    assert_as_new(env)


def test_a_reset_of_moto_between_tests_is_noticed_and_the_resources_created_again(aws, moto_account):
    from moto.core.base_backend import BackendDict

    created = moto_account.created
    moto_account.stop()
    BackendDict.reset()  # what another test's own mock_aws() or an EmbeddedStack does to moto's data
    env = moto_account.start()
    assert moto_account.created == created + 1
    assert_as_new(env)
    assert (
        boto3.client("dynamodb").describe_table(TableName=env["ORDERS_TABLE"])["Table"]["TableStatus"]
        == "ACTIVE"
    )


def test_a_stack_that_recreated_the_tables_and_left_a_queue_is_emptied_to_the_template(aws, moto_account):
    """An EmbeddedStack in this process resets moto and makes the same tables plus its own consumer queue:
    the next test still starts from exactly the template's resources, empty."""
    created = moto_account.created
    moto_account.stop()
    moto_account.mock.start(reset=False)
    boto3.client("sqs").create_queue(QueueName="tally-local-consumer")
    boto3.client("dynamodb").put_item(TableName=aws["ORDERS_TABLE"], Item={"pk": {"S": "server#1"}})
    moto_account.mock.stop(remove_data=False)
    env = moto_account.start()
    assert moto_account.created == created
    assert_as_new(env)
    assert not [u for u in boto3.client("sqs").list_queues()["QueueUrls"] if u.endswith("consumer")]


def test_a_test_that_leaves_thousands_of_items_is_emptied_in_place_and_its_index_forgets_them(
    aws, moto_account
):
    """Emptying clears moto's tables directly (no API call per item, no rebuild): a Query on an index after
    it finds nothing of the last test, and the index serves the next test's own writes."""
    created = moto_account.created
    ddb, raw = boto3.client("dynamodb"), aws["NOTIFY_RAW_TABLE"]

    def pending(value):
        return ddb.query(
            TableName=raw,
            IndexName="by_pending",
            KeyConditionExpression="pending_pk = :p",
            ExpressionAttributeValues={":p": {"S": value}},
        )["Items"]

    for n in range(0, 1000, 25):
        ddb.batch_write_item(
            RequestItems={
                raw: [
                    {
                        "PutRequest": {
                            "Item": {
                                "pk": {"S": f"r{n + i}"},
                                "pending_pk": {"S": "0#1"},
                                "pending_at": {"S": "t"},
                            }
                        }
                    }
                    for i in range(25)
                ]
            }
        )
    assert len(pending("0#1")) == 1000  # the index is built
    moto_account.stop()
    env = moto_account.start()
    assert moto_account.created == created  # emptied, not created again
    assert_as_new(env)
    assert ddb.scan(TableName=raw)["Items"] == []
    assert pending("0#1") == []
    ddb.put_item(
        TableName=raw, Item={"pk": {"S": "next"}, "pending_pk": {"S": "0#1"}, "pending_at": {"S": "u"}}
    )
    assert [i["pk"]["S"] for i in pending("0#1")] == ["next"]


LEFT_ALONE = {
    "an in-flight message": lambda env: (
        boto3.client("sqs").send_message(QueueUrl=env["APPLY_QUEUE_URL"], MessageBody="left"),
        boto3.client("sqs").receive_message(QueueUrl=env["APPLY_QUEUE_URL"], VisibilityTimeout=600),
    ),
    "an extra queue": lambda env: boto3.client("sqs").create_queue(QueueName="consumer"),
    "an object version": lambda env: boto3.client("s3").put_object(
        Bucket=env["BILLS_BUCKET"], Key="bills/a", Body=b"1"
    ),
    "a delete marker": lambda env: (
        boto3.client("s3").put_object(Bucket=env["BILLS_BUCKET"], Key="bills/b", Body=b"1"),
        boto3.client("s3").delete_object(Bucket=env["BILLS_BUCKET"], Key="bills/b"),
    ),
    "a secret": lambda env: boto3.client("secretsmanager").create_secret(Name="left", SecretString="{}"),
    "a stack": lambda env: boto3.client("cloudformation").create_stack(
        StackName="left", TemplateBody=json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}})
    ),
    "a rule": lambda env: boto3.client("events").put_rule(
        Name="all", EventBusName=env["EVENT_BUS_NAME"], EventPattern='{"source": ["tally"]}'
    ),
}


@pytest.mark.parametrize("leave", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_one_thing_left_alone_outside_dynamodb_is_noticed_and_emptied(aws, moto_account, leave):
    """empty() skips its API calls when moto's backends match the baseline (_leftovers): each kind of leftover
    on its own must still change that fingerprint, or the next test would inherit it."""
    leave(aws)
    assert moto_account._leftovers() != moto_account.baseline
    moto_account.stop()
    env = moto_account.start()
    assert_as_new(env)
    assert moto_account._leftovers() == moto_account.baseline
    if "moto.cloudformation.models" in sys.modules:
        assert boto3.client("cloudformation").describe_stacks()["Stacks"] == []


def test_an_untouched_account_is_emptied_without_an_api_call(aws, moto_account, monkeypatch):
    """The common case costs no request: every test starts and stops the account."""
    calls = []
    monkeypatch.setattr(moto_account, "client", lambda service: calls.append(service))
    moto_account.stop()
    moto_account.start()
    assert calls == []


def test_bootstraps_clients_are_handed_to_the_next_test_only_as_they_were_built(aws, monkeypatch):
    """tests/conftest.py `WorkerClients`: bootstrap's boto3 clients are kept across tests, but a client a test
    hooked into (events, attributes) is built again for the next, and a changed Config or environment, a spy
    on boto3.client or an AWS_ENDPOINT_URL gets bootstrap's own client, built as in production."""
    from tally import bootstrap

    kept = bootstrap._client  # the worker's cache (the aws fixture puts it in bootstrap's place)
    clients = type(kept)(kept.built)  # a cache of this test's own, empty
    sqs = clients("sqs")
    assert clients("sqs") is sqs and clients("dynamodb") is not sqs
    sqs.exceptions.QueueDoesNotExist  # noqa: B018 - botocore fills client.exceptions on first use
    clients.forget_changed()  # what the fixture does after each test
    assert clients("sqs") is sqs

    sqs.meta.events.register("before-call.sqs", lambda **_: None)
    clients.forget_changed()
    again = clients("sqs")
    assert again is not sqs
    again.meta.events.unregister("before-call.sqs.*")  # an unregister counts too, even of nothing
    clients.forget_changed()
    assert clients("sqs") is not again
    monkeypatch.setattr(clients("sqs"), "send_message", lambda **_: None)
    touched = clients("sqs")
    clients.forget_changed()
    assert clients("sqs") is not touched

    plain = clients("sqs")
    monkeypatch.setenv("TALLY_AWS_READ_TIMEOUT_S", "1.5")
    bootstrap.reset()
    slow = clients("sqs")
    assert slow is not plain and slow.meta.config.read_timeout == 1.5
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert clients("sqs").meta.region_name == "eu-west-1"

    built = []
    original = boto3.client
    monkeypatch.setattr(boto3, "client", lambda *a, **kw: built.append(a) or original(*a, **kw))
    spied = clients("sqs")
    assert built == [("sqs",)] and clients("sqs") is spied  # bootstrap's own cache, until its reset
    monkeypatch.setattr(boto3, "client", original)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    bootstrap.reset()
    assert clients("sqs").meta.endpoint_url == "http://127.0.0.1:9"
    assert not any(dict(key[3]).get("AWS_ENDPOINT_URL") for key in clients.clients)  # never kept


def test_moto_answers_requests_after_every_start_and_its_registry_does_not_grow(aws, moto_account):
    """moto's requests mock (the `responses` registry) keeps its URL patterns across tests: a start adds them
    only when the registry is empty, where moto's own start added 1,253 more every time."""
    import requests
    from moto.core.models import responses_mock

    registered = len(responses_mock.registered())
    for _ in range(3):
        moto_account.stop()
        moto_account.start()
    assert len(responses_mock.registered()) == registered
    answer = requests.post(
        "https://dynamodb.us-east-1.amazonaws.com/",
        data="{}",
        headers={
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
            "Content-Type": "application/x-amz-json-1.0",
        },
        timeout=5,
    )
    assert aws["ORDERS_TABLE"] in answer.json()["TableNames"]
