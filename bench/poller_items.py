"""Items the poller reads per run against the size of the orders table (R21): it must stay flat.

    python -m bench.poller_items            # 1k / 10k / 100k orders, 100 due each time
    python -m bench.poller_items 1000 5000  # other sizes

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
                bootstrap.merchants().add_wechatpay(
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


def main(argv: list[str]) -> int:
    """Prints the per-size table; with --table-rows it goes to stderr and the last stdout line is the
    bench table's row as JSON (bench.run puts it in its one table)."""
    sys.path[:0] = [str(ROOT / "layers/common"), str(ROOT)]
    import logging

    logging.disable(logging.WARNING)
    table_rows = "--table-rows" in argv
    sizes = [int(a) for a in argv if a != "--table-rows"] or [1_000, 10_000, 100_000]
    rows = measure(sizes)
    out = sys.stderr if table_rows else sys.stdout
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
                    ]
                ]
            )
        )
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
