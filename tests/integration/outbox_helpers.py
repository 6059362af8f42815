"""The outbox's stream and bus as a consumer sees them, for the test modules that read them (test modules never
import from each other)."""

import json

import boto3


def stream_shard(env, table="ORDERS_TABLE"):
    """(stream ARN, shard id) of a table's stream (one shard on moto)."""
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=env[table])["Table"]["LatestStreamArn"]
    return arn, streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]


def stream_records(env):
    streams = boto3.client("dynamodbstreams")
    arn, shard = stream_shard(env)
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


class BusDown:
    """The event bus deleted (every PutEvents fails: nothing replaces the publish path), then made again with its
    archive and rules as they were."""

    def __init__(self, bus):
        self.events, self.bus = boto3.client("events"), bus
        self.archives = [
            self.events.describe_archive(ArchiveName=a["ArchiveName"])
            for a in self.events.list_archives()["Archives"]
        ]
        self.rules = [
            (rule, self.events.list_targets_by_rule(Rule=rule["Name"], EventBusName=bus)["Targets"])
            for rule in self.events.list_rules(EventBusName=bus)["Rules"]
            if not rule.get("ManagedBy")
        ]
        self.events.delete_event_bus(Name=bus)

    def back(self):
        self.events.create_event_bus(Name=self.bus)
        for kept in self.archives:
            self.events.delete_archive(ArchiveName=kept["ArchiveName"])
            self.events.create_archive(
                ArchiveName=kept["ArchiveName"],
                EventSourceArn=kept["EventSourceArn"],
                EventPattern=kept["EventPattern"],
                RetentionDays=kept["RetentionDays"],
            )
        for rule, targets in self.rules:
            self.events.put_rule(Name=rule["Name"], EventBusName=self.bus, EventPattern=rule["EventPattern"])
            if targets:
                self.events.put_targets(Rule=rule["Name"], EventBusName=self.bus, Targets=targets)
