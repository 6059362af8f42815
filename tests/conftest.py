"""Shared fixtures: AWS on in-process moto (tables/queues from template.yaml), the channel simulator,
and a harness that drives the real handlers."""

from __future__ import annotations

import json
import pathlib
import sys
import time
import uuid

import boto3
import pytest
from moto import mock_aws

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tally import bootstrap  # noqa: E402
from tally.observability import metrics  # noqa: E402

from tally_local.lambda_io import emf_metrics, emf_series, http_event  # noqa: E402
from tally_local.resources import (  # noqa: E402
    LambdaContext,
    create_from_template,
    function_specs,
    load_handler,
    load_template,
)
from tally_local.simulator import ChannelSimulator  # noqa: E402


@pytest.fixture(scope="session")
def sim():
    simulator = ChannelSimulator(fixed_keys=True, time_scale=0.001).start()
    yield simulator
    simulator.stop()


@pytest.fixture(scope="session")
def handlers():
    specs = function_specs(load_template(ROOT / "template.yaml"), ROOT)
    return {lid: (load_handler(spec), spec) for lid, spec in specs.items()}


@pytest.fixture
def aws(monkeypatch, sim):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for var, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_METRICS_NAMESPACE": "Tally",
        "POWERTOOLS_SERVICE_NAME": "tally",
    }.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        env = create_from_template(
            ROOT / "template.yaml",
            session,
            parameter_overrides={"WechatPayApiBase": sim.url, "AlipayGateway": sim.url + "/gateway.do"},
        )
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        bootstrap.reset()
        yield env
    bootstrap.set_clock(time.time)


class Harness:
    """Drives the real handlers the way API Gateway and SQS would."""

    def __init__(self, env, sim, handlers, capsys):
        self.env = env
        self.sim = sim
        self.handlers = handlers
        self.capsys = capsys
        self.ddb = boto3.client("dynamodb")
        self.sqs = boto3.client("sqs")
        self.metric_log: list[dict] = []
        self.series_log: list[tuple] = []  # (name, value, dimensions): what CloudWatch would store
        # counts an earlier test left by calling services directly (no handler flushed them) would
        # otherwise ride out with this test's first handler call and be read as this test's
        metrics.clear_metrics()

    # ---- set-up
    def add_merchant(self, verify_mode="public_key", mchid=None):
        m = self.sim.register_test_merchant(verify_mode=verify_mode)
        if mchid is not None and mchid != m["mchid"]:
            self.sim.register_merchant(
                mchid,
                m["apiv3_key"],
                m["merchant_public_key_pem"],
                m["merchant_serial"],
                appid=m["appid"],
                verify_mode=verify_mode,
            )
        mchid = mchid or m["mchid"]
        bootstrap.merchants().add_wechatpay(
            mchid=mchid,
            apiv3_key=m["apiv3_key"],
            merchant_key_pem=m["merchant_private_key_pem"],
            merchant_serial=m["merchant_serial"],
            appid=m["appid"],
            notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}",
            platform_certs=[self.sim.platform_cert_pem],
            public_key=self.sim.public_key_pem,
            public_key_id=self.sim.public_key_id,
        )
        return {**m, "mchid": mchid}

    def create_order(self, mchid, out_trade_no=None, amount_cent=100, prepay=False, **extra):
        out_trade_no = out_trade_no or f"T{uuid.uuid4().hex[:20]}"
        body = {
            "mchid": mchid,
            "out_trade_no": out_trade_no,
            "amount_cent": amount_cent,
            "description": "test order",
            "prepay": prepay,
            **extra,
        }
        return self.call("OrdersFunction", "POST", "/orders", json.dumps(body).encode(), {}, {})

    # ---- callbacks
    def notification(self, mchid, out_trade_no, total=100, **kw):
        build = {
            k: kw.pop(k)
            for k in list(kw)
            if k
            in {
                "timestamp",
                "nonce",
                "serial",
                "signature_override",
                "associated_data",
                "apiv3_key",
                "event_type",
            }
        }
        currency = kw.pop("currency", None)
        resource = self.sim.transaction_resource(mchid, out_trade_no, total, **kw)
        if currency:
            resource["amount"]["currency"] = resource["amount"]["payer_currency"] = currency
        headers, body = self.sim.build_notification(mchid, resource, **build)
        return headers, body, resource

    def notify(self, mchid, headers, body, base64_body=True):
        return self.call(
            "NotifyFunction",
            "POST",
            f"/notify/wechatpay/{mchid}",
            body,
            headers,
            {"mchid": mchid},
            base64_body=base64_body,
        )

    def call(self, function, method, path, body: bytes, headers, path_params, base64_body=True):
        handler, _ = self.handlers[function]
        event = http_event(method, path, body, headers, path_params, base64_body=base64_body)
        response = handler(event, LambdaContext(function))
        self._collect_metrics()
        return response

    def invoke(self, function, event):
        """Any function with any event (stream, schedule …), metrics collected."""
        handler, _ = self.handlers[function]
        result = handler(event, LambdaContext(function))
        self._collect_metrics()
        return result

    # ---- the worker
    def drain(self, max_rounds=20):
        """Feed queued messages to the worker handler until the queue is empty; returns results."""
        handler, _ = self.handlers["WorkerFunction"]
        url = self.env["APPLY_QUEUE_URL"]
        failures = []
        for _ in range(max_rounds):
            msgs = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
            ).get("Messages", [])
            if not msgs:
                return failures
            event = {"Records": [self._record(m) for m in msgs]}
            result = handler(event, LambdaContext("WorkerFunction"))
            self._collect_metrics()
            failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
            failures.extend(failed)
            for m in msgs:
                if m["MessageId"] not in failed:
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return failures

    def _record(self, m):
        return {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {},
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:apply",
            "awsRegion": "us-east-1",
        }

    def queue_depth(self):
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.env["APPLY_QUEUE_URL"], AttributeNames=["ApproximateNumberOfMessages"]
        )
        return int(attrs["Attributes"]["ApproximateNumberOfMessages"])

    # ---- observations
    def _collect_metrics(self):
        out = self.capsys.readouterr().out
        for name, value in emf_metrics(out):
            self.metric_log.append({"name": name, "value": value})
        self.series_log.extend(emf_series(out))

    def series(self, name, **dimensions):
        """`name` summed over the one CloudWatch series with exactly service=tally plus `dimensions`."""
        want = {"service": "tally", **dimensions}
        return sum(value for n, value, dims in self.series_log if n == name and dims == want)

    def metric(self, name):
        return sum(m["value"] for m in self.metric_log if m["name"] == name)

    def scan(self, env_var):
        from tally.store.codec import from_item

        return [from_item(i) for i in self.ddb.scan(TableName=self.env[env_var]).get("Items", [])]

    def order(self, mchid, out_trade_no):
        return bootstrap.order_service().show(mchid, out_trade_no)


@pytest.fixture
def h(aws, sim, handlers, capsys):
    return Harness(aws, sim, handlers, capsys)
