"""The outbox (R20): order changes read from the DynamoDB stream reach the event bus, once per change."""

import boto3

from tests.integration.outbox_helpers import stream_records, subscribe


def test_R20_order_paid_reaches_the_bus_with_a_stable_id(h):
    m = h.add_merchant()
    consumed = subscribe(h.env)
    h.create_order(m["mchid"], "OUTBOX-ORDER-1")
    headers, body, resource = h.notification(m["mchid"], "OUTBOX-ORDER-1", 100)
    h.notify(m["mchid"], headers, body)
    h.drain()
    records = stream_records(h.env)
    assert h.invoke("OutboxFunction", {"Records": records}) == {"batchItemFailures": []}
    h.invoke("OutboxFunction", {"Records": records})  # a stream retry publishes again …
    events = consumed()
    paid = [e for e in events if e["detail-type"] == "OrderPaid"]
    assert len(paid) == 2 and len({e["detail"]["event_id"] for e in paid}) == 1  # … with the same id
    assert paid[0]["detail"]["transaction_id"] == resource["transaction_id"]
    assert h.metric("OutboxPublished") == 2


def test_R20_a_failed_publish_is_reported_for_retry_not_swallowed(h, monkeypatch):
    from tally import bootstrap

    m = h.add_merchant()
    h.create_order(m["mchid"], "OUTBOX-ORDER-2")
    headers, body, _ = h.notification(m["mchid"], "OUTBOX-ORDER-2", 100)
    h.notify(m["mchid"], headers, body)
    h.drain()
    service = bootstrap.outbox_service()
    monkeypatch.setattr(service.bus.client, "put_events", lambda **kw: {"FailedEntryCount": 1, "Entries": []})
    records = stream_records(h.env)
    paid_record = next(
        r
        for r in records
        if r["eventName"] == "MODIFY" and r["dynamodb"]["NewImage"]["status"]["S"] == "PAID"
    )
    result = h.invoke("OutboxFunction", {"Records": records})
    assert result == {"batchItemFailures": [{"itemIdentifier": paid_record["dynamodb"]["SequenceNumber"]}]}
    assert h.metric("OutboxFailed") == 1  # one failed record, counted once (audit L6: it was counted twice)


def test_R20_a_publish_that_raises_is_counted_once_and_retried(h, monkeypatch):
    """L6 (docs/silence.md): the bus call itself failing (throttled, network) is counted once, by the handler."""
    from tally import bootstrap

    m = h.add_merchant()
    h.create_order(m["mchid"], "OUTBOX-ORDER-3")
    headers, body, _ = h.notification(m["mchid"], "OUTBOX-ORDER-3", 100)
    h.notify(m["mchid"], headers, body)
    h.drain()
    service = bootstrap.outbox_service()

    def throttled(**kw):
        raise ConnectionError("bus unreachable")

    monkeypatch.setattr(service.bus.client, "put_events", throttled)
    result = h.invoke("OutboxFunction", {"Records": stream_records(h.env)})
    assert len(result["batchItemFailures"]) == 1
    assert h.metric("OutboxFailed") == 1


def test_R20_refund_outcome_reaches_the_bus_from_the_refunds_stream(h):
    """A refund row moving to SUCCESS becomes RefundSucceeded, id `RefundSucceeded:<refund_no>`."""
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    table = h.env["REFUNDS_TABLE"]
    ddb.put_item(
        TableName=table,
        Item={
            "pk": {"S": "R-OUTBOX-1"},
            "refund_no": {"S": "R-OUTBOX-1"},
            "status": {"S": "ACCEPTED"},
            "amount_cent": {"N": "20"},
        },
    )
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "R-OUTBOX-1"}},
        UpdateExpression="SET #s = :s",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "SUCCESS"}},
    )
    consumed = subscribe(h.env)
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    assert h.invoke("OutboxFunction", {"Records": streams.get_records(ShardIterator=it)["Records"]}) == {
        "batchItemFailures": []
    }
    (event,) = consumed()
    assert (
        event["detail-type"] == "RefundSucceeded"
        and event["detail"]["event_id"] == "RefundSucceeded:R-OUTBOX-1"
    )
