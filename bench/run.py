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
    print(table(title, rows, ("measure", "value", "reference", "note")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
