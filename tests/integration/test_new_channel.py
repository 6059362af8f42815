"""Issue #37: a new channel is its package, its simulator desk and one registry line (docs/new-channel.md).

`make new-channel` runs on a copy of the layer and the local stack: the test lists every file it added or changed
and fails when the list leaves the package, the desk and the registry (or grows past 15 files); the channel it
made is registered, satisfies the Channel protocol, is reached by the any-channel notify route, refuses an
unsigned callback (401, kept for replay: R4), and its code passes ruff and mypy as the product's does."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ALLOWED = ("layers/common/tally/channels/unionpay/", "tally_local/simulator/unionpay.py")
REGISTRY = "layers/common/tally/channels/registry.py"


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(
        ROOT / "layers/common/tally",
        root / "layers/common/tally",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(ROOT / "tally_local", root / "tally_local", ignore=shutil.ignore_patterns("__pycache__"))
    before = _tree(root)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tally_local.new_channel",
            "unionpay",
            "--label",
            "UnionPay",
            "--root",
            str(root),
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}:{root / 'layers/common'}"},
        capture_output=True,
        text=True,
        check=True,
    )
    after = _tree(root)
    changed = sorted(path for path in after if before.get(path) != after[path])
    return root, changed, done.stdout.split()


def test_the_new_channel_touches_only_its_package_its_desk_and_one_registry_line(scaffolded):
    root, changed, printed = scaffolded
    assert printed == changed or sorted(printed) == changed  # what it says it wrote is what it wrote
    outside = [p for p in changed if p != REGISTRY and not p.startswith(ALLOWED)]
    assert outside == [] and len(changed) <= 15, changed
    old = (ROOT / REGISTRY).read_text().splitlines()
    new = (root / REGISTRY).read_text().splitlines()
    added = [line for line in new if line not in old]
    assert added == ['    "tally.channels.unionpay.channel",'] and len(new) == len(old) + 1


PROBE = """
import json
from types import SimpleNamespace
from tally.channels import registry
from tally.domain.settlement import SettlementError
from tally_local.simulator.unionpay import UnionpayDesk

channel = registry.get("unionpay")
members = [n for n in dir(registry.Channel) if not n.startswith("_")] + list(registry.Channel.__annotations__)
missing = sorted({n for n in members if not hasattr(channel, n)})
headers, body = UnionpayDesk().callback("M1", "T1", 100)
request = SimpleNamespace(body=body, headers=headers, path_params={"channel": "unionpay", "merchant": "M1"})
read = channel.read_notification(request, object(), None, clock=lambda: 0.0, window_s=300)
try:
    channel.refund_from_basis({"builder": "unionpay"}, None)
    figures = "built"
except SettlementError:
    figures = "refused"
print(json.dumps({
    "names": registry.names(),
    "missing": missing,
    "any_route": registry.for_notify(registry.NOTIFY_ANY_ROUTE, request.path_params) is channel,
    "own_route_key": registry.by_route_key(registry.NOTIFY_ANY_ROUTE) is None,
    "reject": list(read.reject or ()),
    "ack": list(channel.ack_failure(401, "no")),
    "figures": figures,
    "fund_flow": channel.fund_flow_terms() is None,
}))
"""


def test_the_new_channel_is_registered_reachable_and_refuses_what_it_cannot_verify(scaffolded):
    root, _changed, _printed = scaffolded
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=root,
        env={**os.environ, "PYTHONPATH": f"{root}:{root / 'layers/common'}"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["names"][-1] == "unionpay" and seen["missing"] == []
    assert seen["any_route"] and seen["own_route_key"]
    assert seen["reject"][0] == 401 and seen["reject"][2] == "bad_signature"
    assert seen["ack"] == [401, "fail"] and seen["figures"] == "refused" and seen["fund_flow"]


def test_the_new_channels_code_passes_the_products_lint_and_types(scaffolded):
    root, changed, _printed = scaffolded
    made = [str(root / p) for p in changed if p != REGISTRY]
    config = str(ROOT / "pyproject.toml")
    for command in (["ruff", "check", "--config", config], ["ruff", "format", "--check", "--config", config]):
        done = subprocess.run([str(BIN / command[0]), *command[1:], *made], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [
            str(BIN / "mypy"),
            "--config-file",
            config,
            "--cache-dir",
            str(root / ".mypy_cache"),
            "-p",
            "tally.channels.unionpay",
        ],
        cwd=root,
        env={**os.environ, "MYPYPATH": str(root / "layers/common")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


def test_a_name_the_scaffold_cannot_use_is_refused_with_a_reason(tmp_path):
    for name, why in (("UnionPay", "lower-case"), ("alipay", "exists already")):
        root = tmp_path / name
        (root / "layers/common/tally/channels/alipay").mkdir(parents=True)
        (root / "layers/common/tally/channels/registry.py").write_text("_BUILTIN = (\n)\n")
        done = subprocess.run(
            [sys.executable, "-m", "tally_local.new_channel", name, "--root", str(root)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr
