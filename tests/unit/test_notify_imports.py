"""Cold start (issue #20 item 4): the notify function's first callback pays for nothing it does not use.
Importing the handler and building its service must not import reconciliation (store/recon.py and the
recon domain: ~20 ms of a ~600 ms cold start); every ledger write's shard helper lives in store/shards.py.
Nor the refund code before a refund notification (the refund inbox is built on the first one). Of Powertools,
notify imports the Logger and Metrics (tally/observability.py) and never the HTTP resolver or the batch utility;
the worker imports the batch utility (BatchProcessor), not the resolver. docs/cost.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location('app', r'{app}')
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
from tally import bootstrap; bootstrap.{build}()
built = [name for name in ("refund_inbox", "refund_service", "refund_tables") if getattr(bootstrap, name).cache_info().currsize]
print(json.dumps({{"modules": sorted(sys.modules), "built": built}}))
"""
# the refund inbox's store and service; the refund domain (pure, small) comes with WeChat Pay v3's notify step,
# which notify imports at init with its wire module (functions/notify/app.py)
REFUND_CODE = {"tally.store.refunds", "tally.service.refunds"}

ENV = {
    **{k: "t" for k in ("NOTIFY_RAW_TABLE", "NOTIFY_EVENT_TABLE", "ORDERS_TABLE", "TRANSITIONS_TABLE")},
    **{k: "t" for k in ("LEDGER_TABLE", "REFUND_TASKS_TABLE", "MERCHANTS_TABLE", "REFUNDS_TABLE")},
    "REFUND_RAW_TABLE": "t",
    "MERCHANT_SECRET_PREFIX": "tally/test/merchants/",
    "APPLY_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
}


def cold_start(function: str, build: str) -> tuple[set[str], list[str]]:
    """The modules a fresh process holds after importing the handler and building its service, and which
    refund services that build made."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(app=ROOT / "functions" / function / "app.py", build=build)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **ENV, "PYTHONPATH": f"{ROOT / 'layers/common'}:{ROOT}"},
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    return set(seen["modules"]), seen["built"]


def test_the_notify_cold_start_imports_no_reconciliation():
    loaded, _ = cold_start("notify", "ingest_service")
    assert "tally.service.ingest" in loaded and "tally.store.tables" in loaded  # the probe saw the service
    assert not loaded & {"tally.store.recon", "tally.domain.recon", "tally.service.recon"}, sorted(loaded)


def test_the_notify_cold_start_builds_no_refund_inbox_and_imports_no_refund_code():
    loaded, built = cold_start("notify", "ingest_service")
    assert "tally.service.ingest" in loaded
    assert (
        built == []
    )  # the refund inbox is built on the first refund notification (bootstrap.ingest_service)
    assert not loaded & REFUND_CODE, sorted(loaded & REFUND_CODE)


RESOLVER = "aws_lambda_powertools.event_handler"
BATCH = "aws_lambda_powertools.utilities.batch"


def _under(loaded: set[str], package: str) -> set[str]:
    return {m for m in loaded if m == package or m.startswith(package + ".")}


def test_notify_uses_powertools_logger_and_metrics_never_the_resolver_or_batch():
    loaded, _ = cold_start("notify", "ingest_service")
    assert {"tally.observability", "aws_lambda_powertools.logging", "aws_lambda_powertools.metrics"} <= loaded
    assert not _under(loaded, RESOLVER), sorted(_under(loaded, RESOLVER))
    assert not _under(loaded, BATCH), sorted(_under(loaded, BATCH))


def test_the_worker_uses_batchprocessor_and_imports_no_resolver_and_no_refund_code():
    loaded, built = cold_start("worker", "apply_service")
    assert "tally.service.apply" in loaded and BATCH in loaded
    assert not _under(loaded, RESOLVER), sorted(_under(loaded, RESOLVER))
    assert built == [] and not loaded & REFUND_CODE, sorted(loaded & REFUND_CODE)


def test_the_resolver_is_imported_at_the_api_edge_only():
    """import-linter cannot forbid a subpackage of an external package (.importlinter), so this holds the
    source to it: only tally/api/ and the orders and refunds handlers import Powertools' event_handler; the
    contract `pydantic-at-the-edge` keeps tally.api out of notify and every other function."""
    import ast

    allowed = {"functions/orders/app.py", "functions/refunds/app.py"}
    sources = [*(ROOT / "functions").glob("*/app.py"), *(ROOT / "layers/common/tally").rglob("*.py")]
    found = set()
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == RESOLVER or n.startswith(RESOLVER + ".") for n in names):
                found.add(rel)
    assert {f for f in found if f not in allowed and not f.startswith("layers/common/tally/api/")} == set()


def test_pydantic_only_at_the_api_edge_never_in_notify_or_the_worker():
    """pydantic's ~53 ms of import (docs/design.md §7) is paid by the orders and refunds functions only: notify
    (on WeChat's 5 s clock, R10) and the worker import neither pydantic nor the API models (tally/api). The
    import contract in .importlinter says the same statically; this is the real import."""
    for function, build in (("notify", "ingest_service"), ("worker", "apply_service")):
        loaded, _ = cold_start(function, build)
        assert "tally.apigw" in loaded or function == "worker"
        assert not {m for m in loaded if m == "pydantic" or m.startswith(("pydantic.", "pydantic_core"))}, (
            function
        )
        assert not {m for m in loaded if m == "tally.api" or m.startswith("tally.api.")}, function
    loaded, _ = cold_start("orders", "order_service")  # the probe does see pydantic where it is imported
    assert "pydantic" in loaded and "tally.api.models" in loaded
