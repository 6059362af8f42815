"""#21 item 4's simulation: N payments waiting for a person are replayed by TWO bulk replay runs at once,
while a worker applies what they re-queue, on moto's server in a process of its own, as the embedded stack runs it
(tally_local/moto_process.py: real threads, real HTTP, one DynamoDB request applied at a time as DynamoDB does, and
moto_fixes, so a transaction or a Query page costs what it touches, not the table: `moto_server` below). Each payment is booked exactly once,
both runs together replayed each item exactly once, and the ledger holds exactly the yuan the dry run announced.

N = 200 here; `make soak` runs N = 10,000 (TALLY_REPLAY_SOAK=1)."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from collections import Counter

import boto3
import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.domain.notifications import PaymentNotice
from tally.service.ingest import raw_row
from tally.store.codec import to_item
from tally.store.polling import poll_pk
from tally.store.tables import OrderStore, RawStore, iso_now, order_key, pending_pk

from tally_local.moto_process import MotoProcess


@pytest.fixture(scope="module")
def moto_server():
    """`server_aws` (tests/integration/conftest.py) on the embedded stack's moto process instead of a moto server
    in this process: the two runs, the worker and the client's own Python keep this process's GIL busy, and
    moto_fixes (installed in the child) keep its per-request cost independent of the table's size. Measured on
    the first try (2026-12-01, in-process unpatched moto, 200 items): a TransactWriteItems took 1.24 s on average
    (moto deep-copies every table it names), every other request waited behind it (0.3-0.4 s each)."""
    server = MotoProcess("127.0.0.1", 0).start()
    yield server.endpoint_url
    server.stop()


def merchant(sim) -> str:
    m = sim.register_test_merchant()
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=m["mchid"],
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay/{m['mchid']}",
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    return m["mchid"]


def seed(mchid: str, n: int) -> dict[str, int]:
    """n payments in the state the worker leaves one whose order was not found (R15: handled=2, with a
    person), each order created afterwards by support (no prepay: the seed is setup, not what is measured).
    Returns cents by order number; a soak-sized seed says how far it got every 1,000 items.

    At soak size the first item goes the product path and the rest are written as exactly those rows, 25 to a
    BatchWriteItem (`bulk_rows`): three requests an item took ~0.35 s an item on this loaded machine (an hour for
    10,000), and the seed is not what the soak measures; the dry run's count and yuan check every row it wrote."""
    raw, orders = RawStore(bootstrap.tables()), bootstrap.order_service()
    cents, t0 = {}, time.monotonic()
    raws, orders_rows, template = [], [], None
    for i in range(n):
        if n >= 1000 and i and i % 1000 == 0:
            progress(f"seeded {i} of {n} in {time.monotonic() - t0:.0f} s")
        otn, amount = f"RP{i:06d}{uuid.uuid4().hex[:6]}", 100 + random.randrange(5000)
        notice = PaymentNotice(
            channel="wechatpay",
            transaction_id=f"42{uuid.uuid4().int % 10**26:026d}",
            out_trade_no=otn,
            mchid=mchid,
            sp_mchid=None,
            trade_state="SUCCESS",
            order_total_cent=amount,
            paid_cent=amount,
            currency="CNY",
            success_time=None,
        )
        cents[otn] = amount
        if template is not None:  # the rows the product path wrote for the first item, for this one
            now = iso_now()
            raws.append(
                {
                    **raw_row(notice, time.time(), body=None, headers=None),
                    **{"handled": 2, "manual_reason": REASON, "handled_at": now},
                    **{"pending_pk": pending_pk(2, notice.raw_key), "pending_at": now},
                }
            )
            order = order_key(mchid, otn)
            orders_rows.append(
                {
                    **template,
                    "pk": order,
                    "out_trade_no": otn,
                    "amount_cent": amount,
                    "poll_pk": poll_pk(order),
                }
            )
            if len(raws) == 25 or i == n - 1:
                bulk_rows(os.environ["NOTIFY_RAW_TABLE"], raws)
                bulk_rows(os.environ["ORDERS_TABLE"], orders_rows)
                raws, orders_rows = [], []
            continue
        assert raw.put_new(raw_row(notice, time.time(), body=None, headers=None)) is None
        assert raw.send_to_person(notice.raw_key, REASON, iso_now())
        orders.create(
            {
                "mchid": mchid,
                "out_trade_no": otn,
                "amount_cent": amount,
                "description": "replay",
                "prepay": False,
            }
        )
        if n >= 1000:
            template = OrderStore(bootstrap.tables()).get(mchid, otn)
            assert template is not None and set(template) >= {"pk", "out_trade_no", "amount_cent", "poll_pk"}
    return cents


REASON = "order not found after 4 attempts"


def bulk_rows(table: str, rows: list[dict]) -> None:
    """BatchWriteItem of up to 25 new rows, until DynamoDB has taken all of them (UnprocessedItems)."""
    ddb = boto3.client("dynamodb")
    requests = {table: [{"PutRequest": {"Item": to_item(row)}} for row in rows]}
    while requests:
        requests = ddb.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}


def progress(line: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {line}", flush=True)


def watch(mchid: str, n: int, stop: threading.Event, every_s: float = 300) -> threading.Thread:
    """A soak-sized run says every `every_s` how many of the n payments the ledger holds (one COUNT scan)."""

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                progress(f"ledger holds {len(ledger_rows(mchid))} of {n} payments")
            except Exception as exc:  # noqa: BLE001 - a progress line must not fail the soak
                progress(f"ledger count failed: {type(exc).__name__}")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def together(calls):
    """Run the callables on threads released at once; their results (or exceptions), waiting as long as it takes."""
    barrier, results = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - the test inspects what each run got
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def worker(stop: threading.Event) -> Counter:
    """The worker: applies every message the replays send, until told to stop and the queue is empty."""
    sqs, url, applied = boto3.client("sqs"), os.environ["APPLY_QUEUE_URL"], Counter()
    service = bootstrap.apply_service()
    while True:
        msgs = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=0
        ).get("Messages", [])
        if not msgs and stop.is_set():
            return applied
        for msg in msgs:
            body = json.loads(msg["Body"])
            try:
                applied[service.apply(body["raw_key"], body.get("notice")).value] += 1
            except Exception:  # noqa: BLE001 - as SQS would: the message comes back and is applied again
                continue
            sqs.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])
        if not msgs:
            time.sleep(0.05)


def ledger_rows(mchid: str) -> list[dict]:
    pages = boto3.client("dynamodb").get_paginator("scan").paginate(TableName=os.environ["LEDGER_TABLE"])
    return [r for page in pages for r in page["Items"] if r.get("mchid", {}).get("S") == mchid]


def settle(applied: Counter, n: int, mchid: str) -> None:
    """What the poller does every minute until nothing is left: the sweeper re-queues raw rows at handled=0
    whose message is gone (a lost answer, R9), the worker applies; a few rounds, each an hour later."""
    sqs, url = boto3.client("sqs"), os.environ["APPLY_QUEUE_URL"]
    stopped = threading.Event()
    stopped.set()
    for hour in range(1, 6):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            applied.update(worker(stopped))
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            waiting = sum(
                int(attrs.get(k, 0))
                for k in (
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                )
            )
            if not waiting:
                break
            time.sleep(0.2)
        if (
            len(ledger_rows(mchid)) >= n
        ):  # (an apply whose answer was lost booked too: the ledger is the truth)
            return
        bootstrap.set_clock(lambda hour=hour: time.time() + 3600 * hour)
        try:
            bootstrap.sweep_service().run()
        finally:
            bootstrap.set_clock(time.time)


@pytest.mark.parametrize(
    "n",
    [
        pytest.param(
            200, marks=pytest.mark.slow
        ),  # a long simulation (~40 s): make test runs it, make check not
        pytest.param(
            10_000,
            marks=[
                pytest.mark.slow,
                pytest.mark.skipif(not os.environ.get("TALLY_REPLAY_SOAK"), reason="make soak runs it"),
            ],
        ),
    ],
)
def test_r41_two_concurrent_bulk_replays_book_each_payment_once(server_aws, sim, n, monkeypatch):
    mchid = merchant(sim)
    t0 = time.monotonic()
    # Seeding waits out a slow answer (30 s, not the product's 5 s): on this shared machine the first 10,000-item
    # soak lost its seed to three 5 s read timeouts in a row after 18 min. The runs keep the product's timeouts at
    # N = 200 (their lost answers are part of what is tested); at soak size they wait 60 s too, because moto answers
    # an index Query page of ~2,400 rows in up to 8 s in-process with 10,000 rows (34.5 s for the whole listing,
    # measured 2026-12-01), so the second soak's dry run timed out on its first page: DynamoDB takes milliseconds.
    product_timeout = os.environ.get("TALLY_AWS_READ_TIMEOUT_S")
    monkeypatch.setenv("TALLY_AWS_READ_TIMEOUT_S", "30")
    bootstrap.reset()
    cents = seed(mchid, n)
    if n >= 1000:
        monkeypatch.setenv("TALLY_AWS_READ_TIMEOUT_S", "60")
    elif product_timeout is None:
        monkeypatch.delenv("TALLY_AWS_READ_TIMEOUT_S")
    else:
        monkeypatch.setenv("TALLY_AWS_READ_TIMEOUT_S", product_timeout)
    bootstrap.reset()
    seeded = time.monotonic() - t0
    if n >= 1000:
        progress(f"seeded {n} in {seeded:.0f} s; two runs start")
    selector = f"kind=unbooked,merchant={mchid}"
    runs = [bootstrap.bulk_replay(), bootstrap.bulk_replay()]
    preview = runs[0].preview(selector)
    assert (preview["would_change"], preview["amount_cent"]) == (n, sum(cents.values()))

    stop = threading.Event()
    applied: list[Counter] = []
    drain = threading.Thread(target=lambda: applied.append(worker(stop)))
    drain.start()
    if n >= 1000:
        watch(mchid, n, stop)
    started = time.monotonic()
    a, b = together(
        [
            lambda r=r, i=i: r.start(selector, by=f"ops-{i}", why="orders created by support", rate=1e6)
            for i, r in enumerate(runs)
        ]
    )
    seconds = time.monotonic() - started
    stop.set()
    drain.join(600)
    assert not isinstance(a, Exception) and not isinstance(b, Exception), (a, b)

    # A replay whose write landed but whose answer was lost (the client's timeout and retry, on this loaded
    # machine) is recognised by its run from the row's history and counted as done ("landed"); its row may be
    # left at handled=0 without a message, the sweeper's case (R9): settle() lets the poller do its job.
    settle(applied[0], n, mchid)
    left = bootstrap.work_queue().list(selector)
    why = [
        {k: r["this_call"][k] for k in ("changed", "failed", "landed", "passed", "errors")} for r in (a, b)
    ] + [(i["id"], i["reason"], i["since"]) for i in left]
    assert a["done_items"] + b["done_items"] == n, why  # together each item exactly once
    assert a["done_cent"] + b["done_cent"] == preview["amount_cent"]
    ledger = ledger_rows(mchid)
    per_order = Counter(r["out_trade_no"]["S"] for r in ledger)
    assert set(per_order) == set(cents) and set(per_order.values()) == {1}  # each booked once
    assert sum(int(r["amount_cent"]["N"]) for r in ledger) == preview["amount_cent"]
    assert bootstrap.work_queue().list(selector) == []
    print(
        f"\n{n} items seeded in {seeded:.1f} s; two concurrent runs: {seconds:.1f} s "
        f"({a['done_items']} + {b['done_items']} replayed, {a['failed_items'] + b['failed_items']} lost a race, "
        f"{a['this_call']['landed'] + b['this_call']['landed']} answers lost)"
    )
