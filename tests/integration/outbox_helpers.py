"""The outbox's stream and bus as a consumer sees them, for the test modules that read them (test modules never
import from each other)."""

import json

import boto3


def stream_records(env):
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=env["ORDERS_TABLE"])["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    return streams.get_records(ShardIterator=it)["Records"]


def subscribe(env):
    events, sqs = boto3.client("events"), boto3.client("sqs")
    url = sqs.create_queue(QueueName="consumer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name="all", EventBusName=env["EVENT_BUS_NAME"], EventPattern=json.dumps({"source": ["tally"]})
    )
    events.put_targets(Rule="all", EventBusName=env["EVENT_BUS_NAME"], Targets=[{"Id": "q", "Arn": arn}])
    return lambda: [
        json.loads(m["Body"])
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ]
