"""Toy functions for the embedded stack's plumbing tests: the real template, handlers that only move
messages and rows, so the stack is tested without the product code. The `toy_root` fixture that builds
a functions tree of them is in tests/integration/conftest.py."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_function(root: Path, name: str, body: str) -> None:
    directory = root / "functions" / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "app.py").write_text(textwrap.dedent(body))


TOY_NOTIFY = """
    import base64, json, os
    import boto3

    def handler(event, context):
        body = base64.b64decode(event["body"]) if event["isBase64Encoded"] else event["body"].encode()
        message = {"raw_key": "wechatpay#" + json.loads(body)["id"], "mchid": event["pathParameters"]["mchid"]}
        boto3.client("sqs").send_message(QueueUrl=os.environ["APPLY_QUEUE_URL"], MessageBody=json.dumps(message))
        return {"statusCode": 204, "headers": {}, "body": "", "isBase64Encoded": False}
"""
TOY_WORKER = """
    import json, os
    import boto3

    def handler(event, context):
        table = os.environ["NOTIFY_RAW_TABLE"]
        for record in event["Records"]:
            key = json.loads(record["body"])["raw_key"]
            boto3.client("dynamodb").put_item(TableName=table, Item={"pk": {"S": key}, "by": {"S": context.function_name}})
        return {"batchItemFailures": []}
"""
TOY_IDLE = """
    def handler(event, context):
        return {"batchItemFailures": []}
"""
TOY_ORDERS = """
    import json, os
    import boto3

    def handler(event, context):
        if event["routeKey"] == "POST /orders":
            return {"statusCode": 200, "body": json.dumps({"api": os.environ["WECHATPAY_API_BASE"]})}
        key = "wechatpay#" + event["pathParameters"]["out_trade_no"]
        item = boto3.client("dynamodb").get_item(TableName=os.environ["NOTIFY_RAW_TABLE"], Key={"pk": {"S": key}})
        return {"statusCode": 200 if "Item" in item else 404, "body": json.dumps(item.get("Item", {}))}
"""


def make_toy_root(root: Path) -> Path:
    """A copy of template.yaml and a toy app.py for every function directory of the repo."""
    shutil.copy(ROOT / "template.yaml", root / "template.yaml")
    write_function(root, "notify", TOY_NOTIFY)
    write_function(root, "worker", TOY_WORKER)
    write_function(root, "orders", TOY_ORDERS)
    for other in (
        ROOT / "functions"
    ).iterdir():  # every other function: loaded like the rest, not called here
        if other.is_dir() and not (root / "functions" / other.name).exists():
            write_function(root, other.name, TOY_IDLE)
    return root
