"""The embedded stack's plumbing, without the product code: resources from the real template.yaml on
moto's server, the front door (payload 2.0 in, API Gateway answers out), the SQS pump
(batchItemFailures honoured) and the whole EmbeddedStack on a toy functions tree."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tally_local.frontdoor import MAX_BODY_BYTES, FrontDoor, Target
from tally_local.pump import SqsPump
from tally_local.resources import (
    LambdaContext,
    Resolver,
    UnresolvedReference,
    create_from_template,
    function_specs,
    load_handler,
    load_template,
)
from tally_local.sigv4 import signed_headers
from tally_local.stack import EmbeddedStack, PortInUse
from tests.integration.toy_functions import write_function

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
REGION = "us-east-1"


# ------------------------------------------------------------------------------------ moto server


@pytest.fixture(scope="module")
def moto_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL", endpoint)
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.delenv("AWS_PROFILE", raising=False)
        yield endpoint
    server.stop()


@pytest.fixture(scope="module")
def env(moto_endpoint) -> dict[str, str]:
    session = boto3.session.Session(region_name=REGION)
    return create_from_template(
        TEMPLATE, session, parameter_overrides={"WechatPayApiBase": "http://127.0.0.1:9"}
    )


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


def test_tables_and_indexes_match_the_template(env, template):
    ddb = boto3.client("dynamodb")
    declared = {
        lid: r["Properties"]
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::DynamoDB::Table"
    }
    assert {"NotifyRawTable", "OrdersTable", "LedgerTable", "MerchantsTable"} <= set(declared)
    for lid, props in declared.items():
        name = f"tally-local-{lid}"
        assert name in env.values()
        table = ddb.describe_table(TableName=name)["Table"]
        assert table["KeySchema"] == props["KeySchema"]
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        gsis = {g["IndexName"]: g["KeySchema"] for g in table.get("GlobalSecondaryIndexes", [])}
        assert gsis == {g["IndexName"]: g["KeySchema"] for g in props.get("GlobalSecondaryIndexes", [])}
        backups = ddb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
        assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    ttl = ddb.describe_time_to_live(TableName=env["NOTIFY_EVENT_TABLE"])["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_apply_queue_redrives_to_the_dlq(env):
    sqs = boto3.client("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=env["APPLY_QUEUE_URL"], AttributeNames=["All"])[
        "Attributes"
    ]
    dlq_url = sqs.get_queue_url(QueueName="tally-local-ApplyDLQ")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert json.loads(attributes["RedrivePolicy"]) == {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}
    assert attributes["VisibilityTimeout"] == "180"


def test_bills_bucket_is_versioned_and_private(env):
    s3 = boto3.client("s3")
    assert s3.get_bucket_versioning(Bucket=env["BILLS_BUCKET"])["Status"] == "Enabled"
    block = s3.get_public_access_block(Bucket=env["BILLS_BUCKET"])["PublicAccessBlockConfiguration"]
    assert all(block.values())


def test_environment_is_resolved(env, template, moto_endpoint):
    assert set(env) == set(template["Globals"]["Function"]["Environment"]["Variables"])
    assert env["APPLY_QUEUE_URL"].startswith(moto_endpoint)
    assert env["WECHATPAY_API_BASE"] == "http://127.0.0.1:9"
    assert env["MERCHANT_SECRET_PREFIX"] == "tally/tally-local/merchants/"  # per stack (AWS::StackName)
    assert all(isinstance(value, str) for value in env.values())


def test_creating_again_is_idempotent_and_defaults_apply(env):
    again = create_from_template(TEMPLATE, boto3.session.Session(region_name=REGION))
    assert again == env | {"WECHATPAY_API_BASE": "https://api.mch.weixin.qq.com"}


def test_overriding_an_undeclared_parameter_fails(moto_endpoint):
    with pytest.raises(UnresolvedReference, match="Nope"):
        create_from_template(
            TEMPLATE, boto3.session.Session(region_name=REGION), parameter_overrides={"Nope": "x"}
        )


def test_resolver_intrinsics():
    resolver = Resolver(
        parameters={"AWS::Region": "cn-north-1", "Email": ""},
        conditions={"HasEmail": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Email"}, ""]}]}},
        refs={"Queue": "https://q"},
        attrs={("Queue", "Arn"): "arn:aws-cn:sqs:cn-north-1:1:q"},
    )
    assert resolver.resolve({"Fn::Sub": "${Queue.Arn}|${AWS::Region}|${!Literal}"}) == (
        "arn:aws-cn:sqs:cn-north-1:1:q|cn-north-1|${Literal}"
    )
    assert resolver.resolve({"Fn::If": ["HasEmail", "yes", "no"]}) == "no"
    assert resolver.resolve({"Fn::Join": ["/", [{"Ref": "Queue"}, "x"]]}) == "https://q/x"
    assert (
        resolver.resolve({"Fn::Select": [1, {"Fn::Split": [":", {"Fn::GetAtt": ["Queue", "Arn"]}]}]})
        == "aws-cn"
    )
    assert resolver.resolve({"a": {"Ref": "AWS::NoValue"}, "b": 1}) == {"b": 1}
    with pytest.raises(UnresolvedReference, match="Missing"):
        resolver.resolve({"Ref": "Missing"})


# ------------------------------------------------------------------------------------ functions


def test_function_specs_from_the_real_template(template):
    specs = function_specs(template, ROOT)
    assert specs["NotifyFunction"].http_routes == (
        "POST /notify/wechatpay/{mchid}",
        "POST /notify/alipay/{app_id}",
        "POST /notify/wechatpay-v2/{mchid}",
        "POST /notify/{channel}/{merchant}",
    )
    assert set(specs["OrdersFunction"].http_routes) == {"POST /orders", "GET /orders/{mchid}/{out_trade_no}"}
    assert specs["WorkerFunction"].sqs_queues == ("ApplyQueue",)
    assert specs["WorkerFunction"].timeout_s == 30
    assert specs["NotifyFunction"].code_dir == ROOT / "functions" / "notify"
    assert specs["NotifyFunction"].handler == "app.handler"


def test_handlers_load_under_unique_names_and_afresh(tmp_path, template):
    write_function(tmp_path, "notify", "def handler(event, context):\n    return 'notify'\n")
    write_function(tmp_path, "orders", "def handler(event, context):\n    return 'orders'\n")
    specs = function_specs(template, tmp_path)
    notify, orders = load_handler(specs["NotifyFunction"]), load_handler(specs["OrdersFunction"])
    assert (notify({}, None), orders({}, None)) == ("notify", "orders")
    assert notify.__module__ == "tally_fn_notify" and orders.__module__ == "tally_fn_orders"
    write_function(tmp_path, "notify", "def handler(event, context):\n    return 'reloaded'\n")
    assert load_handler(specs["NotifyFunction"])({}, None) == "reloaded"


def test_lambda_context():
    context = LambdaContext("NotifyFunction", timeout_s=10, memory_mb=512)
    assert context.invoked_function_arn == "arn:aws:lambda:us-east-1:123456789012:function:NotifyFunction"
    assert context.log_group_name == "/aws/lambda/NotifyFunction"
    assert context.memory_limit_in_mb == 512 and context.function_version == "$LATEST"
    assert 9000 < context.get_remaining_time_in_millis() <= 10000
    assert uuid.UUID(context.aws_request_id)


# ------------------------------------------------------------------------------------ front door


def echo(event, context):
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"event": event, "function_name": context.function_name}),
        "isBase64Encoded": False,
    }


def explode(event, context):
    raise RuntimeError("secret detail from the handler")


def binary_reply(event, context):
    return {
        "statusCode": 201,
        "headers": {"content-type": "application/octet-stream", "x-extra": "1"},
        "cookies": ["a=1; Path=/", "b=2"],
        "body": base64.b64encode(b"\x00\xffbytes").decode(),
        "isBase64Encoded": True,
    }


@pytest.fixture(scope="module")
def front_door():
    door = FrontDoor(
        {
            "POST /notify/wechatpay/{mchid}": Target(echo, function_name="NotifyFunction"),
            "GET /orders/{mchid}/{out_trade_no}": echo,
            "POST /boom": explode,
            "GET /binary": binary_reply,
            "GET /plain": lambda event, context: {"ok": True},
            "ANY /files/{path+}": echo,
        }
    ).start()
    yield door
    door.stop()


def request(door: FrontDoor, method: str, path: str, body: bytes | None = None, headers=(), signed=False):
    """`signed`: SigV4 with the stack's fake credentials, as a merchant backend signs for an AWS_IAM route."""
    if signed:
        headers = [*headers, *signed_headers(method, door.url + path, body, dict(headers)).items()]
    host, port = door.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.putrequest(method, path)
    for name, value in headers:
        connection.putheader(name, value)
    if body is not None:
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response, data


def echoed(door, method, path, body=None, headers=()):
    response, data = request(door, method, path, body, headers)
    assert response.status == 200, data
    return json.loads(data)["event"]


def test_payload_2_0_event_shape(front_door):
    body = b'{"id":"EV-1","amount":1}'
    headers = [("Content-Type", "application/json"), ("X-Dup", "a"), ("X-Dup", "b"), ("User-Agent", "ua/1")]
    event = echoed(front_door, "POST", "/notify/wechatpay/1900000109?x=1&x=2&y=", body, headers)
    assert event["version"] == "2.0"
    assert event["routeKey"] == "POST /notify/wechatpay/{mchid}"
    assert event["rawPath"] == "/notify/wechatpay/1900000109"
    assert event["rawQueryString"] == "x=1&x=2&y="
    assert event["queryStringParameters"] == {"x": "1,2", "y": ""}
    assert event["pathParameters"] == {"mchid": "1900000109"}
    assert event["headers"]["x-dup"] == "a,b"
    assert event["headers"]["content-type"] == "application/json"
    assert all(name == name.lower() for name in event["headers"])
    assert (event["body"], event["isBase64Encoded"]) == (body.decode(), False)
    context = event["requestContext"]
    assert context["http"] == {
        "method": "POST",
        "path": "/notify/wechatpay/1900000109",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "ua/1",
    }
    assert context["routeKey"] == event["routeKey"] and context["stage"] == "$default"
    assert context["requestId"] and abs(context["timeEpoch"] / 1000 - time.time()) < 60


def test_route_gets_its_function_name(front_door):
    response, data = request(
        front_door, "POST", "/notify/wechatpay/1", b"{}", [("Content-Type", "application/json")]
    )
    assert json.loads(data)["function_name"] == "NotifyFunction"


def test_get_without_body_or_query(front_door):
    event = echoed(front_door, "GET", "/orders/1900000109/T%2F123")
    assert event["pathParameters"] == {"mchid": "1900000109", "out_trade_no": "T/123"}
    assert event["rawPath"] == "/orders/1900000109/T%2F123"
    assert "body" not in event and "queryStringParameters" not in event
    assert event["isBase64Encoded"] is False


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/octet-stream", b"plain ascii but binary type"),
        ("application/json", b'{"bad utf-8": "\xff\xfe"}'),
        (None, b"no content type"),
    ],
)
def test_binary_bodies_are_base64(front_door, content_type, body):
    headers = [("Content-Type", content_type)] if content_type else []
    event = echoed(front_door, "POST", "/notify/wechatpay/1", body, headers)
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == body


@pytest.mark.parametrize(
    "content_type", ["text/xml; charset=utf-8", "application/x-www-form-urlencoded", "text/plain"]
)
def test_text_bodies_are_plain(front_door, content_type):
    body = "<xml>支付</xml>".encode()
    event = echoed(front_door, "POST", "/notify/wechatpay/1", body, [("Content-Type", content_type)])
    assert (event["body"], event["isBase64Encoded"]) == (body.decode(), False)


def test_greedy_path_and_any_method(front_door):
    event = echoed(front_door, "DELETE", "/files/a/b/c.txt")
    assert event["routeKey"] == "ANY /files/{path+}"
    assert event["pathParameters"] == {"path": "a/b/c.txt"}


def test_chunked_request_body(front_door):
    host, port = front_door.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request(
        "POST",
        "/notify/wechatpay/1",
        body=iter([b'{"a":', b"1}"]),
        headers={"Content-Type": "application/json"},
        encode_chunked=True,
    )
    event = json.loads(connection.getresponse().read())["event"]
    connection.close()
    assert event["body"] == '{"a":1}'


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/nowhere"), ("GET", "/notify/wechatpay/1"), ("GET", "/orders/1")]
)
def test_unknown_route_is_404(front_door, method, path):
    response, data = request(front_door, method, path)
    assert response.status == 404
    assert json.loads(data) == {"message": "Not Found"}


def test_handler_exception_is_a_bare_500(front_door, caplog):
    response, data = request(front_door, "POST", "/boom", b"{}")
    assert response.status == 500
    assert json.loads(data) == {"message": "Internal Server Error"}
    assert b"secret detail" not in data and b"Traceback" not in data
    assert "secret detail from the handler" in caplog.text and "Traceback" in caplog.text


def test_base64_response_is_decoded(front_door):
    response, data = request(front_door, "GET", "/binary")
    assert response.status == 201
    assert data == b"\x00\xffbytes"
    assert response.getheader("x-extra") == "1"
    assert response.getheader("content-type") == "application/octet-stream"
    assert response.msg.get_all("set-cookie") == ["a=1; Path=/", "b=2"]


def test_result_without_status_code_is_json_200(front_door):
    response, data = request(front_door, "GET", "/plain")
    assert response.status == 200 and json.loads(data) == {"ok": True}
    assert response.getheader("content-type") == "application/json"


def test_body_over_10_mb_is_413(front_door):
    host, port = front_door.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(
            f"POST /notify/wechatpay/1 HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        reply = b""
        while chunk := raw.recv(65536):  # the server closes the connection: the body is unread
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413")
    assert reply.endswith(b'{"message": "Request Entity Too Large"}')


# ------------------------------------------------------------------------------------ pump


@pytest.fixture
def queue(moto_endpoint):
    """A fresh queue with a DLQ after 3 receives."""
    sqs = boto3.client("sqs")
    name = f"pump-{uuid.uuid4().hex[:8]}"
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "60", "RedrivePolicy": redrive})[
        "QueueUrl"
    ]
    return sqs, url, dlq_url


class Recorder:
    """A worker handler: records records; fails a body as often as `fail` says, or raises."""

    def __init__(self, fail: dict[str, int] | None = None, raise_times: int = 0, bogus: bool = False):
        self.fail = dict(fail or {})
        self.raise_times = raise_times
        self.bogus = bogus
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, event, context):
        with self.lock:
            self.records.extend(event["Records"])
            if self.raise_times:
                self.raise_times -= 1
                raise RuntimeError("worker crashed")
            if self.bogus:
                self.bogus = False
                return {"batchItemFailures": [{"itemIdentifier": "not-in-this-batch"}]}
            failures = []
            for record in event["Records"]:
                if self.fail.get(record["body"], 0) > 0:
                    self.fail[record["body"]] -= 1
                    failures.append({"itemIdentifier": record["messageId"]})
            return {"batchItemFailures": failures}

    def bodies(self) -> list[str]:
        return sorted(record["body"] for record in self.records)


def run_pump(queue, handler, messages: list[str], timeout: float = 15.0) -> SqsPump:
    sqs, url, _ = queue
    for body in messages:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    pump = SqsPump(sqs, url, handler, function_name="WorkerFunction", retry_visibility_s=1).start()
    try:
        assert pump.drain(timeout), "queue did not drain"
    finally:
        pump.stop()
    return pump


def queue_count(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def test_pump_deletes_successes_with_a_real_looking_event(queue):
    handler = Recorder()
    pump = run_pump(queue, handler, ['{"raw_key": "wechatpay#1"}', '{"raw_key": "wechatpay#2"}'])
    assert handler.bodies() == ['{"raw_key": "wechatpay#1"}', '{"raw_key": "wechatpay#2"}']
    record = handler.records[0]
    assert set(record) >= {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
    }
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == pump.queue_arn and record["awsRegion"] == REGION
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert {"SentTimestamp", "ApproximateFirstReceiveTimestamp"} <= set(record["attributes"])
    sqs, url, dlq_url = queue
    assert queue_count(sqs, url) == 0 and queue_count(sqs, dlq_url) == 0


def test_pump_redelivers_batch_item_failures_only(queue):
    handler = Recorder(fail={"flaky": 1})
    run_pump(queue, handler, ["ok-1", "flaky", "ok-2"])
    assert handler.bodies() == ["flaky", "flaky", "ok-1", "ok-2"]
    second = [r for r in handler.records if r["body"] == "flaky"][1]
    assert second["attributes"]["ApproximateReceiveCount"] == "2"


def test_pump_handler_exception_fails_the_whole_batch(queue):
    handler = Recorder(raise_times=1)
    run_pump(queue, handler, ["a", "b"])
    assert handler.bodies().count("a") == 2 and handler.bodies().count("b") == 2


def test_pump_failure_naming_no_message_fails_the_whole_batch(queue):
    handler = Recorder(bogus=True)
    run_pump(queue, handler, ["a"])
    assert handler.bodies() == ["a", "a"]


def test_pump_honours_the_redrive_policy(queue):
    handler = Recorder(fail={"poison": 99})
    run_pump(queue, handler, ["poison"], timeout=20)
    sqs, _, dlq_url = queue
    assert handler.bodies() == ["poison"] * 3
    assert queue_count(sqs, dlq_url) == 1


class RacySqs:
    """Reports an empty queue once while a message is between invisible and visible, as SQS may."""

    def __init__(self):
        self.counts = [0, 1, 0, 0]
        self.calls = 0

    def get_queue_attributes(self, QueueUrl, AttributeNames):  # noqa: N803 - boto3's names
        if AttributeNames == ["QueueArn"]:
            return {"Attributes": {"QueueArn": "arn:aws:sqs:us-east-1:123456789012:q"}}
        visible = self.counts[min(self.calls, len(self.counts) - 1)]
        self.calls += 1
        return {
            "Attributes": {name: "0" for name in AttributeNames}
            | {"ApproximateNumberOfMessages": str(visible)}
        }


def test_drain_needs_two_empty_looks_in_a_row():
    sqs = RacySqs()
    pump = SqsPump(sqs, "https://q", Recorder())
    assert pump.drain(5)
    assert sqs.calls >= 4


def test_pump_stop_joins(queue):
    sqs, url, _ = queue
    pump = SqsPump(sqs, url, Recorder()).start()
    thread = pump._thread
    started = time.monotonic()
    pump.stop()
    assert thread is not None and not thread.is_alive()
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------------------------ the whole stack
# Last in this module: a new EmbeddedStack resets moto's (process-wide) state.


def test_embedded_stack_end_to_end_on_toy_functions(toy_root, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "must-not-be-used")
    before = dict(os.environ)
    seeded = []
    early: list = []  # a request sent while the stack is being seeded: answered once it is ready, not before
    asking = threading.Thread(
        target=lambda: early.append(request(stack.front_door, "POST", "/orders", b"{}", signed=True)),
        daemon=True,
    )

    def seed(started):
        asking.start()
        asking.join(0.5)
        assert not early, "the front door answered before the stack was ready"
        seeded.append(started)
        return {"mchid": "19"}

    stack = EmbeddedStack(api_port=0, root=toy_root, state_dir=tmp_path / "state", retry_visibility_s=1)
    stack.seed_demo = seed
    with stack:
        assert seeded == [stack] and stack.seeded == {"mchid": "19"}
        asking.join(10)
        assert early and early[0][0].status == 200 and json.loads(early[0][1]) == {"api": stack.simulator.url}
        assert "mchid=19" in stack.describe()
        assert os.environ["AWS_ENDPOINT_URL"] == stack.endpoint_url
        assert "AWS_PROFILE" not in os.environ
        assert os.environ["ORDERS_TABLE"] == stack.env["ORDERS_TABLE"] == "tally-local-OrdersTable"
        assert stack.env["WECHATPAY_API_BASE"] == stack.simulator.url
        response, _ = request(
            stack.front_door,
            "POST",
            "/notify/wechatpay/19",
            b'{"id": "T1"}',
            [("Content-Type", "application/json")],
        )
        assert response.status == 204
        assert stack.drain(10)
        response, data = request(stack.front_door, "GET", "/orders/19/T1", signed=True)
        assert response.status == 200, data
        assert json.loads(data)["by"] == {"S": "WorkerFunction"}
        response, data = request(stack.front_door, "POST", "/orders", b"{}", signed=True)
        assert json.loads(data) == {"api": stack.simulator.url}
        state_file = stack.write_state()
        state = json.loads(state_file.read_text())
        assert state == {
            "endpoint_url": stack.endpoint_url,
            "region": "us-east-1",
            "api_url": stack.api_url,
            "simulator_url": stack.simulator.url,
            "env": stack.env,
        }
        assert "Ctrl-C" not in stack.describe() and stack.api_url in stack.describe()
    assert not state_file.exists()
    assert dict(os.environ) == before
    assert stack.simulator is None and stack.front_door is None and not stack.pumps


def test_busy_api_port_fails_fast_naming_the_variable(toy_root):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PortInUse, match="TALLY_API_PORT"):
            EmbeddedStack(api_port=port, root=toy_root).start()
