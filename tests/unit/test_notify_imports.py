"""Cold start (issue #20 item 4): the notify function's first callback pays for nothing it does not use.
Importing the handler and building its service must not import reconciliation (store/recon.py and the
recon domain: ~20 ms of a ~600 ms cold start); every ledger write's shard helper lives in store/shards.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

PROBE = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location('app', r'{ROOT / "functions/notify/app.py"}')
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
from tally import bootstrap; bootstrap.ingest_service()
print(json.dumps(sorted(m for m in sys.modules if m.startswith('tally'))))
"""

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


def test_the_notify_cold_start_imports_no_reconciliation():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **ENV, "PYTHONPATH": f"{ROOT / 'layers/common'}:{ROOT}"},
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "tally.service.ingest" in loaded and "tally.store.tables" in loaded  # the probe saw the service
    assert not loaded & {"tally.store.recon", "tally.domain.recon", "tally.service.recon"}, sorted(loaded)
