"""The embedded stack's schedule ticker: the template's Schedule events reach their handlers."""

from __future__ import annotations

import json
import threading

import boto3

from tally_local.stack import EmbeddedStack
from tests.integration.toy_functions import write_function

TOY_POLLER = """
    import json, os
    import boto3

    def handler(event, context):
        boto3.client("dynamodb").put_item(TableName=os.environ["NOTIFY_RAW_TABLE"], Item={
            "pk": {"S": "tick#" + event["id"]}, "event": {"S": json.dumps(event)}, "by": {"S": context.function_name}})
        return {"ok": True}
"""


def test_embedded_stack_ticks_the_poller_on_a_compressed_schedule(toy_root, tmp_path):
    write_function(toy_root, "poller", TOY_POLLER)
    stack = EmbeddedStack(api_port=0, root=toy_root, state_dir=tmp_path / "state", schedule_scale=0.002)
    with stack:
        ddb = boto3.client("dynamodb")
        ticked = threading.Event()
        for _ in range(200):  # rate(1 minute) x 0.002 = every 0.12 s; wait for two runs, at most ~10 s
            items = ddb.scan(TableName=stack.env["NOTIFY_RAW_TABLE"]).get("Items", [])
            if len([i for i in items if i["pk"]["S"].startswith("tick#")]) >= 2:
                ticked.set()
                break
            threading.Event().wait(0.05)
        assert ticked.is_set()
        event = json.loads(items[0]["event"]["S"])
        assert event["detail-type"] == "Scheduled Event" and event["source"] == "aws.events"
        assert items[0]["by"]["S"] == "PollerFunction"
        assert stack.ticker.fire("PollerFunction") == {"ok": True}
    assert stack.ticker.runs["PollerFunction"] >= 3
