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
from tally.channels import registry
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.service.apply import RetryLater
from tally.store.codec import from_item, names_values, to_item
from tally.store.tables import iso_now, order_key

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
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "POWERTOOLS_METRICS_NAMESPACE": "Tally",
            "POWERTOOLS_SERVICE_NAME": "tally",
        }
    )
    import urllib.request

    urllib.request.urlopen(
        urllib.request.Request(endpoint + "/moto-api/reset", method="POST"), timeout=10
    ).read()
    env = create_from_template(
        ROOT / "template.yaml",
        boto3.Session(region_name="us-east-1"),
        prefix="tally-conc",
        parameter_overrides={"WechatPayApiBase": "http://127.0.0.1:9"},
    )
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
    # The simulator answers the channel's API over real HTTP (prepay, the poller's and return page's queries).
    sim = ChannelSimulator(fixed_keys=True, time_scale=0.001).start()
    os.environ["WECHATPAY_API_BASE"] = sim.url
    bootstrap.reset()
    server_errors: Counter = Counter()

    def count_5xx(http_response, **kwargs):
        if http_response is not None and http_response.status_code >= 500:
            server_errors[kwargs.get("event_name", "?")] += 1

    for client in (bootstrap.tables().ddb, bootstrap.ingest_service().queue.sqs):
        client.meta.events.register("after-call", count_5xx)
        client.meta.events.register(
            "response-received",
            lambda response_dict=None, **kw: (
                server_errors.update(["retried 5xx"])
                if response_dict and response_dict.get("status_code", 0) >= 500
                else None
            ),
        )
    m = sim.register_test_merchant()
    mchid = m["mchid"]
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=mchid,
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}",
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    yield {"sim": sim, "mchid": mchid, "env": server, "server_errors": server_errors}
    sim.stop()
    os.environ["WECHATPAY_API_BASE"] = server["WECHATPAY_API_BASE"]
    assert sum(server_errors.values()) == 0, f"moto answered 5xx under concurrency: {dict(server_errors)}"


def new_order(stack, amount=100):
    otn = f"C{uuid.uuid4().hex[:20]}"
    bootstrap.order_service().create(
        {
            "mchid": stack["mchid"],
            "out_trade_no": otn,
            "amount_cent": amount,
            "description": "concurrency",
            "prepay": False,
        }
    )
    return otn


def event_for(stack, headers, body):
    mchid = stack["mchid"]
    return {
        "version": "2.0",
        "routeKey": "POST /notify/wechatpay/{mchid}",
        "rawPath": f"/notify/wechatpay/{mchid}",
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": {"http": {"method": "POST"}},
        "pathParameters": {"mchid": mchid},
        "body": body.decode(),
        "isBase64Encoded": False,
    }


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

    answers = together(
        THREADS,
        lambda i: ingest.notify(
            registry.get("wechatpay_v3"), HttpRequest.from_event(event_for(stack, headers, body))
        ),
    )
    assert [a if isinstance(a, Exception) else a.status for a in answers] == [204] * THREADS
    tx = resource["transaction_id"]
    raw_key = f"wechatpay#{stack['mchid']}#{tx}"
    assert len(rows_for(stack, "NOTIFY_RAW_TABLE", "transaction_id", tx)) == 1

    # Every enqueued copy, plus padding to 32, applied by 32 workers at the same instant.
    sqs = boto3.client("sqs")
    bodies = []
    while True:
        msgs = sqs.receive_message(QueueUrl=stack["env"]["APPLY_QUEUE_URL"], MaxNumberOfMessages=10).get(
            "Messages", []
        )
        if not msgs:
            break
        bodies += [json.loads(m["Body"]) for m in msgs]
        sqs.delete_message_batch(
            QueueUrl=stack["env"]["APPLY_QUEUE_URL"],
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)],
        )
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
        answer = bootstrap.ingest_service().notify(
            registry.get("wechatpay_v3"), HttpRequest.from_event(event_for(stack, headers, body))
        )
        for _ in range(10):
            try:
                return answer.status, bootstrap.apply_service().apply(
                    f"wechatpay#{stack['mchid']}#{tx}"
                ).value
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
        bootstrap.ingest_service().notify(
            registry.get("wechatpay_v3"), HttpRequest.from_event(event_for(stack, headers, body))
        )
        for _ in range(10):
            try:
                return bootstrap.apply_service().apply(f"wechatpay#{stack['mchid']}#{tx}").value
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


def test_R7_R9_R18_R19_R21_R23_32_deliveries_racing_the_poller_and_the_return_page_book_once(stack):
    """A paid order whose callback arrives 32 times at the same instant as the poller's run and the return
    page's confirmation query the channel about it, while workers apply what the queue holds: one ledger
    entry, the order PAID once with the channel's amount, the one raw row (callback and query share the key
    `wechatpay#<mchid>#<transaction_id>`, R7, R23) at handled 1, and every delivery answered the success ACK (R9)."""
    sim, mchid = stack["sim"], stack["mchid"]
    otn = f"P{uuid.uuid4().hex[:20]}"
    bootstrap.order_service().create(
        {
            "mchid": mchid,
            "out_trade_no": otn,
            "amount_cent": 700,
            "description": "poller race",
            "prepay": True,
        }
    )  # precreated at the simulator
    past = time.time() - 10  # due for the poller (R21) and old enough for the return page's confirmation
    boto3.client("dynamodb").update_item(
        TableName=stack["env"]["ORDERS_TABLE"],
        Key=to_item({"pk": order_key(mchid, otn)}),
        UpdateExpression="SET poll_due = :t, created_at = :t",
        ExpressionAttributeValues=names_values(t=iso_now(past)),
    )
    tx = sim.pay(mchid, otn, drop=True)  # paid at the channel; the callback is ours to deliver
    headers, body = sim.build_notification(mchid, sim.get_order(mchid, otn)["transaction"])
    snapshot = bootstrap.order_service().orders.get(mchid, otn)  # what the return page holds: WAIT_PAY
    assert snapshot["status"] == "WAIT_PAY"

    queue_url, sqs = stack["env"]["APPLY_QUEUE_URL"], boto3.client("sqs")
    producers_done = threading.Event()
    pollers, confirmers, workers = 3, 2, 4
    barrier = threading.Barrier(THREADS + pollers + confirmers + workers)

    def deliver(_):
        barrier.wait(timeout=30)
        return (
            bootstrap.ingest_service()
            .notify(registry.get("wechatpay_v3"), HttpRequest.from_event(event_for(stack, headers, body)))
            .status
        )

    def poll(i):
        """Thread 0 is a whole poller run (index read, claim, query); the others poll the due order they read
        a moment ago (PollService.poll_one: claim, query, act), so the claim itself is raced."""
        barrier.wait(timeout=30)
        if i == 0:
            return bootstrap.poll_service().run().outcomes
        return {bootstrap.poll_service().poll_one(dict(snapshot)): 1}

    def confirm(_):
        barrier.wait(timeout=30)
        return bootstrap.poll_service().confirm(dict(snapshot))

    def work(_):
        """The worker: apply each queued raw key; RetryLater leaves the message for redelivery (made visible
        again at once, as SQS would after its visibility timeout). Ends when producers are done and it is empty."""
        barrier.wait(timeout=30)
        outcomes = []
        while True:
            msgs = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not msgs:
                if producers_done.is_set():
                    return outcomes
                producers_done.wait(0.05)
                continue
            for msg in msgs:
                message = json.loads(msg["Body"])
                try:
                    outcomes.append(
                        bootstrap.apply_service().apply(message["raw_key"], message.get("notice")).value
                    )
                except RetryLater:
                    sqs.change_message_visibility(
                        QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
                    )
                    continue
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"])

    with ThreadPoolExecutor(max_workers=barrier.parties) as pool:
        delivered = [pool.submit(deliver, i) for i in range(THREADS)]
        polled = [pool.submit(poll, i) for i in range(pollers)]
        confirmed = [pool.submit(confirm, i) for i in range(confirmers)]
        working = [pool.submit(work, i) for i in range(workers)]
        acks = [f.result(timeout=60) for f in delivered]
        poll_outcomes = Counter()
        for f in polled:
            poll_outcomes.update(f.result(timeout=60))
        confirms = [f.result(timeout=60) for f in confirmed]
        producers_done.set()
        applied = Counter(o for f in working for o in f.result(timeout=60))

    assert acks == [204] * THREADS  # the channel's success ACK, every time
    # The poller either claimed the order and booked / found it booked, or found it already paid and left it.
    assert set(poll_outcomes) <= {"BOOKED", "DUPLICATE", "ENQUEUED", "SKIPPED"}, poll_outcomes
    assert all(isinstance(c, bool) for c in confirms), confirms
    assert set(applied) <= {"BOOKED", "DUPLICATE", "ALREADY_HANDLED"}, applied

    (entry,) = rows_for(stack, "LEDGER_TABLE", "transaction_id", tx)  # exactly one, whoever booked it
    assert entry["amount_cent"] == 700
    order = bootstrap.order_service().show(mchid, otn)
    assert order["status"] == "PAID" and order["transaction_id"] == tx and order["paid_cent"] == 700
    assert len(order["transitions"]) == 1 and order["transitions"][0]["to_status"] == "PAID"
    assert [(r["pk"], r["handled"]) for r in order["raw"]] == [(f"wechatpay#{mchid}#{tx}", 1)]
    assert [r["handled"] for r in rows_for(stack, "NOTIFY_RAW_TABLE", "transaction_id", tx)] == [1]
    assert poll_outcomes["BOOKED"] + applied["BOOKED"] <= 1, (poll_outcomes, applied)
