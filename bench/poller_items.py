"""Items the poller reads per run against the size of the orders table (R21): it must stay flat.

    python -m bench.poller_items            # 1k / 10k / 100k orders, 100 due each time
    python -m bench.poller_items 1000 5000  # other sizes
    python -m bench.poller_items --volume   # 1,000 due orders, 4 merchants, the channel answering in 200 ms

In-process moto + the signed simulator, the real PollerFunction handler. Every order is pending (in
the poll index) — the worst case for an index — and only 100 are due. The meter counts, per
DynamoDB operation, the calls and the items each answer reports (`ScannedCount`: what DynamoDB
reads and bills), and fails if any Scan happens. Writing 100k orders to in-process moto takes ~50 s;
moto's index query is itself O(table) in Python, so wall time grows — the items read must not.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

ROOT = Path(__file__).resolve().parents[1]


class ReadMeter:
    """Counts DynamoDB calls and the items they read, from botocore's after-call events."""

    def __init__(self, client: Any):
        self.calls: Counter[str] = Counter()
        self.items_read = 0
        client.meta.events.register("after-call.dynamodb", self._after)

    def _after(self, http_response: Any = None, parsed: Any = None, model: Any = None, **_: Any) -> None:
        name = model.name if model is not None else "?"
        self.calls[name] += 1
        parsed = parsed or {}
        if name in ("Query", "Scan"):
            self.items_read += int(parsed.get("ScannedCount", parsed.get("Count", 0)))
        elif name == "GetItem":
            self.items_read += 1 if parsed.get("Item") else 0
        elif name == "BatchGetItem":
            self.items_read += sum(len(v) for v in parsed.get("Responses", {}).values())

    def reset(self) -> None:
        self.calls.clear()
        self.items_read = 0


def write_orders(ddb: Any, table: str, mchid: str, total: int, due: int, now: float) -> None:
    """`total` pending orders (all in the poll index), `due` of them due now; batch_write_item."""
    from tally.store.codec import to_item
    from tally.store.polling import poll_pk
    from tally.store.tables import iso_now, order_key

    past, future, expire = iso_now(now - 5), iso_now(now + 3600), iso_now(now + 7200)
    batch = []
    for i in range(total):
        no = f"BENCH{i:09d}"
        pk = order_key(mchid, no)
        batch.append(
            {
                "PutRequest": {
                    "Item": to_item(
                        {
                            "pk": pk,
                            "mchid": mchid,
                            "out_trade_no": no,
                            "channel": "wechatpay",
                            "status": "WAIT_PAY",
                            "amount_cent": 100,
                            "currency": "CNY",
                            "version": 0,
                            "created_at": past,
                            "expire_at": expire,
                            "poll_pk": poll_pk(pk),
                            "poll_due": past if i < due else future,
                            "poll_count": 1,
                        }
                    )
                }
            }
        )
        if len(batch) == 25:
            ddb.batch_write_item(RequestItems={table: batch})
            batch = []
    if batch:
        ddb.batch_write_item(RequestItems={table: batch})


def measure(sizes: list[int], due: int = 100) -> list[dict[str, Any]]:
    import boto3
    from moto import mock_aws
    from tally import bootstrap

    from tally_local.resources import (
        LambdaContext,
        create_from_template,
        function_specs,
        load_handler,
        load_template,
    )
    from tally_local.simulator import ChannelSimulator
    from tally_local.ticker import Schedule, scheduled_event

    os.environ.update(
        AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing"
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    sim = ChannelSimulator(fixed_keys=True, time_scale=0.001).start()
    rows = []
    try:
        m = sim.register_test_merchant()
        spec = function_specs(load_template(ROOT / "template.yaml"), ROOT)["PollerFunction"]
        for size in sizes:
            with mock_aws():
                env = create_from_template(
                    ROOT / "template.yaml",
                    boto3.Session(region_name="us-east-1"),
                    parameter_overrides={"WechatPayApiBase": sim.url},
                )
                os.environ.update(env)
                bootstrap.reset()
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
                t0 = time.time()
                write_orders(bootstrap.tables().ddb, env["ORDERS_TABLE"], m["mchid"], size, due, time.time())
                wrote = time.time() - t0
                handler = load_handler(spec)
                meter = ReadMeter(bootstrap.tables().ddb)
                t0 = time.time()
                with contextlib.redirect_stdout(io.StringIO()):  # the EMF lines
                    result = handler(
                        scheduled_event(Schedule("PollerFunction", "EveryMinute", "rate(1 minute)", 60)),
                        LambdaContext("PollerFunction", spec.timeout_s),
                    )
                rows.append(
                    {
                        "orders": size,
                        "due": due,
                        "polled": result["orders_polled"],
                        "items_read": meter.items_read,
                        "calls": dict(meter.calls),
                        "run_s": round(time.time() - t0, 2),
                        "write_s": round(wrote, 1),
                    }
                )
                assert "Scan" not in meter.calls, meter.calls
    finally:
        sim.stop()
    return rows


VOLUME_DUE = 1_000
VOLUME_MERCHANTS = 4
VOLUME_LATENCY_S = 0.2


class MemoryPolls:
    """The poll index in memory, for the volume figure: in-process moto spends ~50 ms of CPU (under the GIL)
    per conditional update, which would measure moto, not the poller. DynamoDB is a ~5 ms network wait in
    AWS; the two index writes per order (claim, note_answer) are counted and reported instead."""

    def __init__(self, orders: list[dict[str, Any]]):
        import threading

        self.orders = {o["pk"]: dict(o) for o in orders}
        self.items_read = 0
        self.writes = 0
        self._lock = threading.Lock()

    def due(self, now_iso: str, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            found = sorted(
                (
                    o
                    for o in self.orders.values()
                    if o["poll_pk"].startswith("poll#") and o["poll_due"] <= now_iso
                ),
                key=lambda o: o["poll_due"],
            )[:limit]
            self.items_read += len(found)
            return [dict(o) for o in found]

    def claim(self, order: dict[str, Any], next_due_iso: str, now_iso: str) -> int | None:
        with self._lock:
            self.writes += 1
            row = self.orders[order["pk"]]
            if row["poll_due"] != order["poll_due"]:
                return None
            row["poll_due"], row["poll_count"] = next_due_iso, row.get("poll_count", 0) + 1
            return row["poll_count"]

    def note_answer(self, pk: str, word: str) -> None:
        with self._lock:
            self.writes += 1
            self.orders[pk]["poll_last"] = word

    def count_error(self, pk: str, word: str) -> int:
        with self._lock:
            self.writes += 1
            row = self.orders[pk]
            row["poll_errors"] = row.get("poll_errors", 0) + 1
            return row["poll_errors"]

    def to_person(self, pk: str, reason: str, now_iso: str) -> bool:
        with self._lock:
            self.writes += 1
            self.orders[pk]["poll_pk"] = "manual#0"
            return True


def measure_volume(
    due: int = VOLUME_DUE, merchants: int = VOLUME_MERCHANTS, latency_s: float = VOLUME_LATENCY_S
) -> dict[str, Any]:
    """`due` due orders over `merchants` merchants, the simulator answering every /v3/ call after
    `latency_s` (its `delay` fault), one poller run (PollService with the product's pull clients, pacing
    and concurrency; the poll index in memory: MemoryPolls), bounded like the Lambda: 60 s less the 10 s
    it keeps. Each request is timed as it leaves (tally.httpclient) and as it reaches the channel (before the delay)."""
    import re
    import threading

    import boto3
    from moto import mock_aws
    from tally import bootstrap, httpclient
    from tally.service.poll import PollService
    from tally.store.polling import poll_pk
    from tally.store.tables import iso_now, order_key

    from tally_local.resources import create_from_template
    from tally_local.simulator import ChannelSimulator

    os.environ.update(
        AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing"
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    sim = ChannelSimulator(fixed_keys=True, time_scale=0.001).start()
    arrivals: list[tuple[float, str]] = []
    sends: list[tuple[float, str]] = []
    lock = threading.Lock()
    take_fault = sim._take_fault
    send = httpclient.request

    def timed_take_fault(method: str, path: str) -> Any:  # called as each /v3/ request reaches the channel
        found = re.search(r"mchid=([0-9A-Za-z]+)", path)
        if found:
            with lock:
                arrivals.append((time.monotonic(), found.group(1)))
        return take_fault(method, path)

    def timed_send(method: str, url: str, **kwargs: Any) -> Any:  # as each request leaves the poller
        found = re.search(r"mchid=([0-9A-Za-z]+)", url)
        if found:
            with lock:
                sends.append((time.monotonic(), found.group(1)))
        return send(method, url, **kwargs)

    sim._take_fault = timed_take_fault  # type: ignore[method-assign]
    httpclient.request = timed_send  # type: ignore[assignment]
    try:
        m = sim.register_test_merchant()
        sim.inject_fault("delay", count=10**9, path_contains="/v3/", seconds=latency_s)
        with mock_aws():
            env = create_from_template(
                ROOT / "template.yaml",
                boto3.Session(region_name="us-east-1"),
                parameter_overrides={"WechatPayApiBase": sim.url},
            )
            os.environ.update(env)
            bootstrap.reset()
            ids = [f"19{i:08d}" for i in range(1, merchants + 1)]
            now = time.time()
            orders = []
            for mchid in ids:
                sim.register_merchant(
                    mchid,
                    m["apiv3_key"],
                    m["merchant_public_key_pem"],
                    m["merchant_serial"],
                    appid=m["appid"],
                )
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
                for i in range(due // merchants):
                    pk = order_key(mchid, f"VOL{i:07d}")
                    orders.append(
                        {
                            "pk": pk,
                            "mchid": mchid,
                            "out_trade_no": f"VOL{i:07d}",
                            "channel": "wechatpay",
                            "status": "WAIT_PAY",
                            "created_at": iso_now(now - 5),
                            "expire_at": iso_now(now + 7200),
                            "poll_pk": poll_pk(pk),
                            "poll_due": iso_now(now - 5 + i * 1e-3),
                            "poll_count": 1,
                        }
                    )
            s = bootstrap.settings()
            for (
                mchid
            ) in ids:  # the container's first callback loads each merchant's keys: not the steady rate
                wechatpay_v3_desk(bootstrap.merchants()).wechatpay(mchid)
            polls = MemoryPolls(orders)
            service = PollService(
                polls,  # type: ignore[arg-type]
                None,  # type: ignore[arg-type]  # raw rows, queue and apply: only a PAID answer needs them
                None,  # type: ignore[arg-type]
                None,
                bootstrap.pull_channels(),
                concurrency=s.poll_concurrency,
            )
            t0 = time.monotonic()
            with contextlib.redirect_stdout(io.StringIO()):  # the EMF lines
                report = service.run(out_of_time=lambda: time.monotonic() - t0 > 50)
            run_s = time.monotonic() - t0
    finally:
        httpclient.request = send  # type: ignore[assignment]
        sim.stop()
    return {
        "due": due,
        "merchants": merchants,
        "latency_ms": round(latency_s * 1000),
        "polled": report.claimed,
        "queried": len(sends),
        "run_s": round(run_s, 1),
        "per_minute": round(len(sends) / run_s * 60) if run_s else 0,
        "max_merchant_rate": max_rate(sends),  # as sent: what the limit promises
        "max_merchant_rate_at_channel": max_rate(arrivals),  # plus the channel's accept queue
        "limit": s.poll_merchant_qps,
        "concurrency": s.poll_concurrency,
        "index_writes": polls.writes,
        "outcomes": report.outcomes,
    }


def max_rate(arrivals: list[tuple[float, str]], window_s: float = 1.0) -> int:
    """The most requests one merchant made inside any window of `window_s` seconds."""
    best = 0
    by_merchant: dict[str, list[float]] = {}
    for at, who in arrivals:
        by_merchant.setdefault(who, []).append(at)
    for times in by_merchant.values():
        times.sort()
        start = 0
        for end, t in enumerate(times):
            while times[start] <= t - window_s:
                start += 1
            best = max(best, end - start + 1)
    return best


def volume_row(v: dict[str, Any]) -> list[str]:
    return [
        f"poller at volume: {v['due']:,} due, {v['merchants']} merchants, channel answering in {v['latency_ms']} ms",
        f"{v['per_minute']:,} orders queried/min ({v['polled']:,} polled in {v['run_s']} s)",
        f"1,000/min; max per-merchant rate {v['max_merchant_rate']}/s <= limit {v['limit']}/s",
        f"concurrency {v['concurrency']}; {'held' if v['max_merchant_rate'] <= v['limit'] else 'EXCEEDED'}",
    ]


def main(argv: list[str]) -> int:
    """Prints the per-size table; with --table-rows it goes to stderr and the last stdout line is the
    bench table's row as JSON (bench.run puts it in its one table)."""
    sys.path[:0] = [str(ROOT / "layers/common"), str(ROOT)]
    import logging

    logging.disable(logging.WARNING)
    table_rows = "--table-rows" in argv
    out = sys.stderr if table_rows else sys.stdout
    if "--volume" in argv or table_rows:
        volume = measure_volume()
        print(json.dumps(volume), file=out)
        if "--volume" in argv:
            return 0 if volume["max_merchant_rate"] <= volume["limit"] else 1
    sizes = [int(a) for a in argv if not a.startswith("--")] or [1_000, 10_000, 100_000]
    rows = measure(sizes)
    print(
        f"{'orders':>8} {'due':>5} {'polled':>7} {'items read':>11} {'poller run s':>13} {'write s':>8}  calls",
        file=out,
    )
    for r in rows:
        print(
            f"{r['orders']:>8} {r['due']:>5} {r['polled']:>7} {r['items_read']:>11} {r['run_s']:>13} "
            f"{r['write_s']:>8}  {r['calls']}",
            file=out,
        )
    reads = [r["items_read"] for r in rows]
    flat = max(reads) - min(reads) <= 10
    print("flat" if flat else "NOT FLAT", file=out)
    if table_rows:
        sizes_text = " / ".join(f"{r['orders']:,}" for r in rows)
        print(
            json.dumps(
                [
                    [
                        f"poller items read per run, {rows[0]['due']} due, at {sizes_text} orders",
                        " / ".join(str(n) for n in reads),
                        "flat: no Scan" if flat else "NOT FLAT",
                        "poller run s " + " / ".join(str(r["run_s"]) for r in rows),
                    ],
                    volume_row(volume),
                ]
            )
        )
        return 0 if flat and volume["max_merchant_rate"] <= volume["limit"] else 1
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
