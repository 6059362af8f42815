"""AWS calls per payment are a budget the code keeps (issue "Performance"): counted with botocore's
before-call hooks on moto by the same code `make bench` prints, run in its own process so its
environment (moto, simulator, bootstrap caches) cannot leak into other tests."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = (
    "import json; from bench import aws_calls; print(json.dumps({r[0]: int(r[1]) for r in aws_calls.run()}))"
)


def test_aws_calls_per_payment_stay_within_budget():
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'layers' / 'common'}{os.pathsep}{ROOT}",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    calls = json.loads(out.strip().splitlines()[-1])
    assert calls["AWS calls: notify, first delivery"] <= 2
    assert calls["AWS calls: notify, duplicate"] <= 1
    assert calls["AWS calls: worker apply"] <= 2
    # reserve-and-read (R27), the answer stored after the channel call (R28): docs/cost.md
    assert calls["AWS calls: refund create"] <= 2
    # the caller's own number is checked unused across orders before the channel sees it (R30): one more
    assert calls["AWS calls: refund create, caller's refund_no"] <= 3
