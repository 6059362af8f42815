"""Load check on the embedded stack: 2,000 signed callbacks over HTTP from 16 concurrent senders;
throughput, p50/p99 ACK latency, and proof that every payment was booked exactly once."""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

CALLBACKS = 2000
SENDERS = 16


def run(callbacks: int = CALLBACKS, senders: int = SENDERS) -> list[tuple[str, ...]]:
    import boto3
    from tally import bootstrap

    from tally_local.demo import seed_demo
    from tally_local.stack import EmbeddedStack

    with EmbeddedStack(api_port=0, state_dir="/tmp/tally-bench-state",
                       simulator_options={"fixed_keys": True}) as stack:
        merchant = seed_demo(stack)
        mchid, sim = merchant["mchid"], stack.simulator
        orders = bootstrap.order_service()
        requests = []
        for i in range(callbacks):
            no = f"LOAD{i:08d}"
            orders.create({"mchid": mchid, "out_trade_no": no, "amount_cent": 100 + i, "description": "load",
                           "prepay": False})
        requests = list(range(callbacks))
        url = f"{stack.api_url}/notify/wechatpay/{mchid}"

        def send(i):
            # signed when sent, as the channel does: the 300 s window holds however slow the stack is
            resource = sim.transaction_resource(mchid, f"LOAD{i:08d}", 100 + i)
            headers, body = sim.build_notification(mchid, resource)
            start = time.perf_counter()
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=30) as resp:
                status = resp.status
            return status, (time.perf_counter() - start) * 1000

        started = time.perf_counter()
        with ThreadPoolExecutor(senders) as pool:
            results = list(pool.map(send, requests))
        elapsed = time.perf_counter() - started
        stack.drain(120)
        ddb = boto3.client("dynamodb", endpoint_url=stack.endpoint_url, region_name="us-east-1")
        booked = _count(ddb, stack.env["LEDGER_TABLE"])
        latencies = sorted(ms for _, ms in results)
        ok = sum(1 for status, _ in results if status in (200, 204))
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99) - 1]
    return [
        (f"load: {callbacks} callbacks, {senders} senders over HTTP", f"{callbacks / elapsed:.0f} /s",
         f"ACK p50 {p50:.0f} ms, p99 {p99:.0f} ms", f"{ok} success ACKs"),
        ("load: booked exactly once", f"{booked} ledger entries", f"of {callbacks} payments",
         "OK" if booked == callbacks == ok else "MISMATCH"),
    ]


def _count(ddb, table: str) -> int:
    total, kwargs = 0, {"TableName": table, "Select": "COUNT"}
    while True:
        page = ddb.scan(**kwargs)
        total += page["Count"]
        if "LastEvaluatedKey" not in page:
            return total
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
