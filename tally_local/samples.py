"""Write the sample events in events/ (for `sam local invoke` and for the test that replays them).

    python -m tally_local.samples        # rewrites events/*.json

The callback is signed with the simulator's committed TEST-ONLY keys at a fixed timestamp, so a
replay must judge the 5-minute window by that timestamp (the test injects the clock).
"""

from __future__ import annotations

import json
import pathlib

from tally_local import lambda_io
from tally_local.simulator import ChannelSimulator

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"
SAMPLE_TIMESTAMP = 1796000000  # 2026-11-29T... UTC; fixed so the file is reproducible
SAMPLE_ORDER = "SAMPLE-ORDER-0001"
SAMPLE_TRANSACTION = "4200000000202611290000000001"
# the merchant backend's role as API Gateway's IAM authorizer reports it (R53: `tally merchant allow` it first)
SAMPLE_CALLER = "arn:aws:sts::123456789012:assumed-role/shop-backend/sample-session"


def http_event(
    method: str,
    path: str,
    route: str,
    body: bytes,
    headers: dict[str, str],
    path_params: dict[str, str],
    *,
    base64_body: bool,
    caller: str | None = None,
) -> dict:
    """A sample event: reproducible request id, time and a WeChat source address; `caller`: the IAM principal
    of a signed route (R53)."""
    return lambda_io.http_event(
        method,
        path,
        body,
        headers,
        path_params,
        route=route,
        base64_body=base64_body,
        request_id="sample-request-0001",
        time_ms=SAMPLE_TIMESTAMP * 1000,
        source_ip="101.226.103.0",
        caller=caller,
    )


def build() -> dict[str, dict]:
    sim = ChannelSimulator(fixed_keys=True, seed=7)
    merchant = sim.register_test_merchant("public_key")
    mchid = merchant["mchid"]
    resource = sim.transaction_resource(
        mchid,
        SAMPLE_ORDER,
        100,
        transaction_id=SAMPLE_TRANSACTION,
        success_time="2026-11-29T17:33:20+08:00",
        openid="oSampleOpenid0001",
    )
    headers, body = sim.build_notification(
        mchid,
        resource,
        timestamp=SAMPLE_TIMESTAMP,
        nonce="SAMPLENONCE0001",
        notification_id="EV-SAMPLE-0001",
        resource_nonce="SampleNonce1",
        create_time="2026-11-29T17:33:20+08:00",
    )
    notify = http_event(
        "POST",
        f"/notify/wechatpay/{mchid}",
        "/notify/wechatpay/{mchid}",
        body,
        headers,
        {"mchid": mchid},
        base64_body=True,
    )
    order_body = {
        "mchid": mchid,
        "out_trade_no": SAMPLE_ORDER,
        "amount_cent": 100,
        "currency": "CNY",
        "description": "sample order",
        "expire_minutes": 120,
        "prepay": False,
    }
    orders = http_event(
        "POST",
        "/orders",
        "/orders",
        json.dumps(order_body).encode(),
        {"content-type": "application/json"},
        {},
        base64_body=False,
        caller=SAMPLE_CALLER,
    )
    worker = {
        "Records": [
            {
                "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
                "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
                "body": json.dumps({"raw_key": f"wechatpay#{mchid}#{SAMPLE_TRANSACTION}"}),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": str(SAMPLE_TIMESTAMP * 1000),
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": str(SAMPLE_TIMESTAMP * 1000),
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:tally-ApplyQueue",
                "awsRegion": "us-east-1",
            }
        ]
    }
    refund_body = {"mchid": mchid, "out_trade_no": SAMPLE_ORDER, "amount_cent": 50, "reason": "sample refund"}
    refunds = http_event(
        "POST",
        "/refunds",
        "/refunds",
        json.dumps(refund_body).encode(),
        {"content-type": "application/json"},
        {},
        base64_body=False,
        caller=SAMPLE_CALLER,
    )
    return {
        "notify_wechatpay.json": notify,
        "orders_create.json": orders,
        "worker_sqs.json": worker,
        "refunds_create.json": refunds,
        "outbox_stream.json": _stream_event(mchid),
        **{f"{name}_schedule.json": _scheduled(name) for name in ("poller", "keys", "heartbeat", "notifier")},
        "notifier_alarm.json": _alarm_message(),
        # the console's open sign-in page (every other console route needs the JWT authorizer's claims)
        "console_login_page.json": http_event(
            "GET", "/console/login", "/console/login", b"", {}, {}, base64_body=False
        ),
    }


def _scheduled(function: str) -> dict:
    """What EventBridge sends a function on its schedule (every minute / hourly)."""
    return {
        "version": "0",
        "id": f"sample-{function}-0001",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-11-29T09:33:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:123456789012:rule/tally-{function}"],
        "detail": {},
    }


def _alarm_message() -> dict:
    """What SNS hands the notifier when a CloudWatch alarm changes state (docs/alerts.md)."""
    message = {
        "AlarmName": "tally-EnqueueFailedAlarm-1A2B3C4D5E6F",
        "AlarmDescription": "A verified callback could not be enqueued (runbook EnqueueFailedAlarm).",
        "NewStateValue": "ALARM",
        "NewStateReason": "Threshold Crossed: 1 datapoint [2.0 (29/11/26 09:30:00)] was >= the threshold (1.0).",
        "StateChangeTime": "2026-11-29T09:33:00.000+0000",
        "OldStateValue": "OK",
    }
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": "arn:aws:sns:us-east-1:123456789012:tally-AlarmTopic:sample",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": "sample-alarm-0001",
                    "TopicArn": "arn:aws:sns:us-east-1:123456789012:tally-AlarmTopic",
                    "Subject": 'ALARM: "tally-EnqueueFailedAlarm-1A2B3C4D5E6F" in US East (N. Virginia)',
                    "Message": json.dumps(message),
                    "Timestamp": "2026-11-29T09:33:00.000Z",
                },
            }
        ]
    }


def _stream_event(mchid: str) -> dict:
    """One orders-table stream record: the sample order going WAIT_PAY -> PAID (the outbox publishes OrderPaid)."""
    pk = f"{mchid}#{SAMPLE_ORDER}"
    base = {
        "pk": {"S": pk},
        "mchid": {"S": mchid},
        "out_trade_no": {"S": SAMPLE_ORDER},
        "channel": {"S": "wechatpay"},
        "tenant": {"S": mchid},
        "amount_cent": {"N": "100"},
        "currency": {"S": "CNY"},
    }
    new = {
        **base,
        "status": {"S": "PAID"},
        "transaction_id": {"S": SAMPLE_TRANSACTION},
        "paid_cent": {"N": "100"},
        "paid_at": {"S": "2026-11-29T09:33:20Z"},
    }
    return {
        "Records": [
            {
                "eventID": "sample-stream-0001",
                "eventName": "MODIFY",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {
                    "ApproximateCreationDateTime": SAMPLE_TIMESTAMP,
                    "Keys": {"pk": {"S": pk}},
                    "OldImage": {**base, "status": {"S": "WAIT_PAY"}},
                    "NewImage": new,
                    "SequenceNumber": "100000000000000000001",
                    "SizeBytes": 300,
                    "StreamViewType": "NEW_AND_OLD_IMAGES",
                },
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/tally-OrdersTable/stream/2026-11-29T00:00:00.000",
            }
        ]
    }


def main() -> None:
    EVENTS.mkdir(exist_ok=True)
    for name, event in build().items():
        (EVENTS / name).write_text(json.dumps(event, ensure_ascii=False, indent=2) + "\n")
        print(f"wrote events/{name}")


if __name__ == "__main__":
    main()
