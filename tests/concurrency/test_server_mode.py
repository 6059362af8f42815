"""Concurrency on moto's server mode: real threads, real HTTP, one DynamoDB/SQS shared by all.

In-process mock_aws is not thread-safe, so these tests run moto's ThreadedMotoServer and point the
product's clients at it with AWS_ENDPOINT_URL (what the embedded stack does).

One thing about moto itself is accounted for, not hidden: its transact_write_items deep-copies the
tables to roll back a cancelled transaction and restores that copy, so a write committed by another
thread in between is erased (and a concurrent copy can fail with a 500 that botocore retries).
Real DynamoDB makes every request atomic and isolated; `atomic_dynamodb` gives moto that property
by serialising DynamoDB *requests* inside the fake (threads still race through HTTP, the clients and
every read-decide-write of the product). Any 5xx a client still sees is counted and must be zero.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer
from tally import bootstrap
from tally.apigw import HttpRequest
from tally.service.apply import RetryLater
from tally.store.codec import from_item

from tally_local.resources import create_from_template
from tally_local.simulator import ChannelSimulator

ROOT = Path(__file__).resolve().parents[2]
THREADS = 32


@pytest.fixture(scope="module")
def server():
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = dict(os.environ)
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "POWERTOOLS_METRICS_NAMESPACE": "Tally", "POWERTOOLS_SERVICE_NAME": "tally"})
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset", method="POST"), timeout=10).read()
    env = create_from_template(ROOT / "template.yaml", boto3.Session(region_name="us-east-1"),
                               prefix="tally-conc", parameter_overrides={"WechatPayApiBase": "http://127.0.0.1:9"})
    os.environ.update(env)
    bootstrap.set_clock(time.time)
    yield env
    os.environ.clear()
    os.environ.update(saved)
    bootstrap.reset()
    moto.stop()


@pytest.fixture(scope="module")
def atomic_dynamodb():
    """Each DynamoDB request atomic and isolated inside moto, as in DynamoDB (see the module doc)."""
    from moto.dynamodb.responses import DynamoHandler

    lock = threading.RLock()
    original = DynamoHandler.call_action

    def call_action(self):
        with lock:
            return original(self)

    DynamoHandler.call_action = call_action
    yield
    DynamoHandler.call_action = original


@pytest.fixture
def stack(server, atomic_dynamodb):
    bootstrap.reset()
    server_errors: Counter = Counter()

    def count_5xx(http_response, **kwargs):
        if http_response is not None and http_response.status_code >= 500:
            server_errors[kwargs.get("event_name", "?")] += 1

    for client in (bootstrap.tables().ddb, bootstrap.ingest_service().queue.sqs):
        client.meta.events.register("after-call", count_5xx)
        client.meta.events.register("response-received", lambda response_dict=None, **kw: server_errors.update(
            ["retried 5xx"]) if response_dict and response_dict.get("status_code", 0) >= 500 else None)
    sim = ChannelSimulator(fixed_keys=True)
    m = sim.register_test_merchant()
    mchid = m["mchid"]
    bootstrap.merchants().add_wechatpay(
        mchid=mchid, apiv3_key=m["apiv3_key"], merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"], appid=m["appid"], notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}",
        public_key=sim.public_key_pem, public_key_id=sim.public_key_id)
    yield {"sim": sim, "mchid": mchid, "env": server, "server_errors": server_errors}
    assert sum(server_errors.values()) == 0, f"moto answered 5xx under concurrency: {dict(server_errors)}"


def new_order(stack, amount=100):
    otn = f"C{uuid.uuid4().hex[:20]}"
    bootstrap.order_service().create({"mchid": stack["mchid"], "out_trade_no": otn, "amount_cent": amount,
                                      "description": "concurrency", "prepay": False})
    return otn


def event_for(stack, headers, body):
    mchid = stack["mchid"]
    return {"version": "2.0", "rawPath": f"/notify/wechatpay/{mchid}", "headers": {k.lower(): v for k, v in headers.items()},
            "requestContext": {"http": {"method": "POST"}}, "pathParameters": {"mchid": mchid},
            "body": body.decode(), "isBase64Encoded": False}


def together(n, fn):
    """Run fn(i) on n threads released at the same instant; returns results (exceptions as values)."""
    barrier = threading.Barrier(n)

    def go(i):
        barrier.wait(timeout=30)
        try:
            return fn(i)
        except Exception as exc:  # noqa: BLE001 - returned so the test can name it
            return exc

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(go, range(n)))


def apply_until_settled(raw_key, notice, n):
    """n racing workers; a RetryLater is SQS redelivering the message: that worker tries again."""
    def worker(_):
        for _ in range(10):
            try:
                return bootstrap.apply_service().apply(raw_key, notice).value
            except RetryLater:
                continue
        return "STILL_RETRYING"
    return together(n, worker)


def table(stack, env_var):
    ddb = boto3.client("dynamodb")
    return [from_item(i) for i in ddb.scan(TableName=stack["env"][env_var], ConsistentRead=True)["Items"]]


def rows_for(stack, env_var, field, value):
    return [r for r in table(stack, env_var) if r.get(field) == value]


def test_R7_R9_R18_32_simultaneous_deliveries_then_32_racing_workers_book_once(stack):
    otn = new_order(stack, 1000)
    resource = stack["sim"].transaction_resource(stack["mchid"], otn, 1000, payer_total=900)
    headers, body = stack["sim"].build_notification(stack["mchid"], resource)
    ingest = bootstrap.ingest_service()

    answers = together(THREADS, lambda i: ingest.wechatpay_v3(HttpRequest.from_event(event_for(stack, headers, body))))
    assert [a if isinstance(a, Exception) else a.status for a in answers] == [204] * THREADS
    tx = resource["transaction_id"]
    raw_key = f"wechatpay#{tx}"
    assert len(rows_for(stack, "NOTIFY_RAW_TABLE", "transaction_id", tx)) == 1

    # Every enqueued copy, plus padding to 32, applied by 32 workers at the same instant.
    sqs = boto3.client("sqs")
    bodies = []
    while True:
        msgs = sqs.receive_message(QueueUrl=stack["env"]["APPLY_QUEUE_URL"], MaxNumberOfMessages=10).get("Messages", [])
        if not msgs:
            break
        bodies += [json.loads(m["Body"]) for m in msgs]
        sqs.delete_message_batch(QueueUrl=stack["env"]["APPLY_QUEUE_URL"],
                                 Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
    assert 1 <= len(bodies) <= THREADS and {b["raw_key"] for b in bodies} == {raw_key}
    outcomes = Counter(apply_until_settled(raw_key, bodies[0]["notice"], THREADS))
    assert outcomes["BOOKED"] == 1, outcomes
    assert set(outcomes) <= {"BOOKED", "DUPLICATE", "ALREADY_HANDLED"}, outcomes

    (entry,) = rows_for(stack, "LEDGER_TABLE", "transaction_id", tx)
    assert entry["amount_cent"] == 900
    order = bootstrap.order_service().show(stack["mchid"], otn)
    assert order["status"] == "PAID" and len(order["transitions"]) == 1
    assert [r["handled"] for r in order["raw"]] == [1]


def test_R7_R19_ingest_and_apply_racing_in_every_thread(stack):
    """32 threads each deliver the callback and apply it at once (a worker right behind each ingest)."""
    otn = new_order(stack, 250)
    resource = stack["sim"].transaction_resource(stack["mchid"], otn, 250)
    headers, body = stack["sim"].build_notification(stack["mchid"], resource)
    tx = resource["transaction_id"]

    def deliver_and_apply(i):
        answer = bootstrap.ingest_service().wechatpay_v3(HttpRequest.from_event(event_for(stack, headers, body)))
        for _ in range(10):
            try:
                return answer.status, bootstrap.apply_service().apply(f"wechatpay#{tx}").value
            except RetryLater:
                continue
        return answer.status, "STILL_RETRYING"

    results = together(THREADS, deliver_and_apply)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert {status for status, _ in results} == {204}
    outcomes = Counter(outcome for _, outcome in results)
    assert outcomes["BOOKED"] == 1 and set(outcomes) <= {"BOOKED", "DUPLICATE", "ALREADY_HANDLED"}, outcomes
    assert len(rows_for(stack, "LEDGER_TABLE", "transaction_id", tx)) == 1


def test_R17_R19_two_payments_racing_for_one_order_book_one_and_refund_the_other(stack):
    """16 deliveries of payment A and 16 of payment B, applied together: one booked, one refund task."""
    otn = new_order(stack, 500)
    notes = []
    for _ in range(2):
        resource = stack["sim"].transaction_resource(stack["mchid"], otn, 500)
        notes.append((resource["transaction_id"], *stack["sim"].build_notification(stack["mchid"], resource)))

    def deliver_and_apply(i):
        tx, headers, body = notes[i % 2]
        bootstrap.ingest_service().wechatpay_v3(HttpRequest.from_event(event_for(stack, headers, body)))
        for _ in range(10):
            try:
                return bootstrap.apply_service().apply(f"wechatpay#{tx}").value
            except RetryLater:
                continue
        return "STILL_RETRYING"

    outcomes = Counter(together(THREADS, deliver_and_apply))
    assert outcomes["BOOKED"] == 1 and outcomes["MANUAL"] == 1, outcomes
    txs = {tx for tx, _, _ in notes}
    booked = [e for e in table(stack, "LEDGER_TABLE") if e["transaction_id"] in txs]
    tasks = [t for t in table(stack, "REFUND_TASKS_TABLE") if t["transaction_id"] in txs]
    assert len(booked) == 1 and len(tasks) == 1
    assert booked[0]["transaction_id"] != tasks[0]["transaction_id"]
