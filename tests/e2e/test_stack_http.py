"""End to end over real HTTP on localhost: the embedded stack, the CLI, the simulator paying (Spine)."""

import json
import pathlib
import sys
import time

import boto3
import pytest

from tally_local.stack import EmbeddedStack
from tests.e2e.stack_helpers import cli, http, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
TALLY = str(pathlib.Path(sys.executable).with_name("tally"))
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("state")
    with EmbeddedStack(api_port=0, state_dir=state_dir, simulator_options={"fixed_keys": True}) as running:
        running.write_state()
        yield running


@pytest.fixture(scope="module")
def merchant(stack, tmp_path_factory):
    """Configured the way a person would: the simulator knows the merchant, `tally merchant add --local`."""
    files = tmp_path_factory.mktemp("keys")
    m = stack.simulator.register_test_merchant("public_key")
    (files / "merchant_key.pem").write_text(m["merchant_private_key_pem"])
    (files / "wechatpay_pub.pem").write_text(stack.simulator.public_key_pem)
    (files / "apiv3.key").write_text(m["apiv3_key"])
    result = cli(
        stack,
        "merchant",
        "add",
        "wechatpay",
        "--mchid",
        m["mchid"],
        "--appid",
        m["appid"],
        "--apiv3-key",
        f"@{files / 'apiv3.key'}",
        "--merchant-key",
        str(files / "merchant_key.pem"),
        "--merchant-serial",
        m["merchant_serial"],
        "--public-key",
        str(files / "wechatpay_pub.pem"),
        "--public-key-id",
        stack.simulator.public_key_id,
        "--local",
    )
    assert result.returncode == 0, result.stderr
    assert m["apiv3_key"] not in result.stdout + result.stderr
    return m


def ledger_entries(stack, transaction_id):
    ddb = boto3.client(
        "dynamodb",
        endpoint_url=stack.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    items = ddb.scan(TableName=stack.env["LEDGER_TABLE"])["Items"]
    return [i for i in items if i["transaction_id"]["S"] == transaction_id]


@pytest.mark.parametrize("deliveries", [1, 5])
def test_order_paid_by_simulator_is_booked_once_R7_R17_R18_R20(stack, merchant, deliveries):
    out_trade_no = f"E2E{deliveries}{int(time.time() * 1000)}"
    status, order = http(
        "POST",
        f"{stack.api_url}/orders",
        {"mchid": merchant["mchid"], "out_trade_no": out_trade_no, "amount_cent": 1999, "description": "e2e"},
    )
    assert status == 201, order
    assert order["status"] == "WAIT_PAY" and order["code_url"].startswith("weixin://wxpay/bizpayurl")

    transaction_id = stack.simulator.pay(merchant["mchid"], out_trade_no, duplicates=deliveries)
    stack.simulator.wait_delivered(transaction_id, timeout=20, count=deliveries)
    assert stack.drain(20)

    def paid():
        code, view = http("GET", f"{stack.api_url}/orders/{merchant['mchid']}/{out_trade_no}")
        return view if code == 200 and view["status"] == "PAID" else None

    view = wait_for(paid)
    assert view["transaction_id"] == transaction_id and view["paid_cent"] == 1999
    assert len(ledger_entries(stack, transaction_id)) == 1
    acks = [d["status"] for d in stack.simulator.deliveries if d["transaction_id"] == transaction_id]
    assert acks and set(acks) <= {200, 204}  # every delivery got WeChat's success ACK

    def published():  # R20: the outbox turned the commit into one OrderPaid a consumer receives
        return [
            e
            for e in stack.downstream.received
            if e["detail-type"] == "OrderPaid" and e["detail"]["out_trade_no"] == out_trade_no
        ]

    (event,) = wait_for(published)
    assert event["detail"]["transaction_id"] == transaction_id

    shown = cli(stack, "order", "show", merchant["mchid"], out_trade_no, "--local", "--json")
    assert shown.returncode == 0, shown.stderr
    shown = json.loads(shown.stdout)
    assert shown["status"] == "PAID" and [r["handled"] for r in shown["raw"]] == [1]
    assert [t["to_status"] for t in shown["transitions"]] == ["PAID"]


def test_unknown_route_and_bad_order_answer_clearly(stack, merchant):
    status, body = http("POST", f"{stack.api_url}/orders", {"mchid": merchant["mchid"]})
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert {e["field"] for e in body["error"]["errors"]} == {"out_trade_no", "amount_cent", "description"}
    status, body = http("POST", f"{stack.api_url}/notify/wechatpay/{merchant['mchid']}", {"x": 1})
    assert status == 401 and body == {"code": "FAIL", "message": "rejected"}


def test_the_local_api_serves_its_openapi_document(stack):
    status, doc = http("GET", f"{stack.api_url}/openapi.json")
    assert status == 200 and doc == json.loads((ROOT / "docs/openapi.json").read_text(encoding="utf-8"))
