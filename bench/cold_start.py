"""Cold start of each function: median of 10 fresh processes importing the handler module (which builds its
clients and services at init, bootstrap.at_init; Powertools' Logger and Metrics, the worker's BatchProcessor, the
orders resolver) with .pyc, as the build ships them, next to a bare `import boto3` + 2 clients."""

from __future__ import annotations

import compileall
import os
import pathlib
import subprocess
import sys
import tempfile

from bench.common import median

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {
    "NOTIFY_RAW_TABLE": "t",
    "NOTIFY_EVENT_TABLE": "t",
    "ORDERS_TABLE": "t",
    "TRANSITIONS_TABLE": "t",
    "LEDGER_TABLE": "t",
    "REFUND_TASKS_TABLE": "t",
    "MERCHANTS_TABLE": "t",
    "REFUNDS_TABLE": "t",
    "REFUND_RAW_TABLE": "t",  # required by Settings since the refunds subsystem
    "MERCHANT_SECRET_PREFIX": "tally/bench/merchants/",  # required: per stack, no shared default
    "APPLY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
}
PROBE = """
import sys, time, importlib.util
t = time.perf_counter()
{body}
print(time.perf_counter() - t)
"""
FUNCTIONS = {
    "notify": "bootstrap.ingest_service()",
    "worker": "bootstrap.apply_service()",
    "orders": "bootstrap.order_service()",
}


def _handler_body(name: str, build: str) -> str:
    return (
        f"spec = importlib.util.spec_from_file_location('app', r'{ROOT / 'functions' / name / 'app.py'}')\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        f"from tally import bootstrap; {build}"
    )


def measure(body: str, runs: int = 10, *, without_pyc: bool = False) -> float:
    env = {**os.environ, **ENV, "PYTHONPATH": f"{ROOT / 'layers/common'}:{ROOT}"}
    env.pop("AWS_ENDPOINT_URL", None)
    flags = []
    if without_pyc:  # an empty bytecode cache that is never written: every module compiles (what a
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="nopyc-")  # package without .pyc pays)
        flags = ["-B"]
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, *flags, "-c", PROBE.format(body=body)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return median(times) * 1000


def run() -> list[tuple[str, ...]]:
    compileall.compile_dir(str(ROOT / "layers/common/tally"), quiet=1)
    compileall.compile_dir(str(ROOT / "functions"), quiet=1)
    boto = measure("import boto3; boto3.client('dynamodb'); boto3.client('sqs')")
    rows = [("cold start: bare import boto3 + 2 clients", f"{boto:.0f} ms", "baseline", "")]
    for name, build in FUNCTIONS.items():
        ms = measure(_handler_body(name, build))
        target = {"notify": "target ≤ 1.3×", "worker": "target ≤ 1.4×"}.get(name, "")
        rows.append(
            (
                f"cold start: {name} (import handler + build services)",
                f"{ms:.0f} ms",
                f"{ms / boto:.2f}× boto3",
                target,
            )
        )
    bare = measure(_handler_body("notify", FUNCTIONS["notify"]), runs=5, without_pyc=True)
    rows.append(
        (
            "cold start: notify WITHOUT .pyc (what a plain build ships)",
            f"{bare:.0f} ms",
            f"{bare / boto:.2f}× boto3",
            "why layers/common/Makefile compiles",
        )
    )
    return rows


if __name__ == "__main__":
    from bench.common import print_section

    print_section(run)
