"""`make bench`: every measured figure in one table, measured in one run on this machine."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import platform
import subprocess
import sys
import time

from bench.common import table

SECTIONS = ["bench.notify_cpu", "bench.aws_calls", "bench.cold_start", "bench.load"]

# Each row's target, by the start of its measure (issue #20); a row with none shows "-".
TARGETS = {
    "notify CPU per WeChat v3": "ratio <= 2.0",
    "notify CPU per Alipay": "ratio <= 2.0",
    "cold start: notify (": "<= 1.3x boto3",
    "cold start: worker (": "<= 1.4x boto3",
    "AWS calls: notify, first delivery": "2",
    "AWS calls: notify, duplicate": "1",
    "AWS calls: worker apply": "2",
    "AWS calls: poller confirmation": "5 + 1 channel query",
    "AWS calls: refund create, caller's refund_no": "3 + channel call",
    "AWS calls: refund create": "2 + channel call",
    "load: failed deliveries": "0 resets, 0 5xx",
    "load: booked exactly once": "OK",
    "poller items read per run": "flat, no Scan",
    "poller at volume": ">= 1,000 queried/min, per-merchant rate <= limit",
    "channel call client CPU": "<= 200 µs",
}


def target_of(measure: str) -> str:
    return next((t for prefix, t in TARGETS.items() if measure.startswith(prefix)), "-")


def main() -> int:
    logging.disable(logging.INFO)  # the product's log lines would drown the table
    rows = []
    for name in SECTIONS:
        start = time.perf_counter()
        print(f"measuring {name} …", file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(io.StringIO()):  # the product's EMF metric lines, not ours
            rows += importlib.import_module(name).run()
        print(f"  done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    for module in (
        "bench.poller_items",
        "bench.recon_1m",
        "bench.http_client",  # its own SSL_CERT_FILE (the test CA beside the system's)
    ):  # in processes of their own (their details: stderr)
        start = time.perf_counter()
        print(f"measuring {module} …", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, "-m", module, "--table-rows"], check=True, stdout=subprocess.PIPE, text=True
        )
        rows += [tuple(r) for r in json.loads(done.stdout.strip().splitlines()[-1])]
        print(f"  done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    title = (
        f"Tally benchmarks — {platform.python_version()} on {platform.machine()}, {time.strftime('%Y-%m-%d')}"
    )
    rows = [(r[0], r[1], target_of(r[0]), *r[2:]) for r in rows]
    print(table(title, rows, ("measure", "value", "target", "reference", "note")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
