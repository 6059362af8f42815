"""A rehearsable morning (R41): the demo day is loaded into a running embedded stack (what `tally demo --keep`
and `TALLY_DEMO=1 make run` do), then a script that uses ONLY the `tally` command takes the work queue from
its starting count to zero, and `tally pending` exits 0."""

import io
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tally_local.day import SCENARIOS, play_into
from tally_local.stack import EmbeddedStack

ROOT = pathlib.Path(__file__).resolve().parents[2]
TALLY = str(pathlib.Path(sys.executable).with_name("tally"))
pytestmark = pytest.mark.e2e

# kind → the verb and options a person uses for it this morning (docs/morning.md)
MORNING = {
    "unbooked-payment": ["resolve", "--code", "refunded-by-hand", "--why", "refunded in the merchant portal"],
    "refund-task": [
        "close-task",
        "--code",
        "refunded-at-channel",
        "--why",
        "refunded in the merchant portal",
    ],
    "refund": ["refund-outcome", "--outcome", "SUCCESS", "--why", "the platform shows it refunded"],
    "recon-diff": ["resolve", "--why", "explained by the day's faults"],
}
OTHERWISE = ["resolve", "--code", "other", "--why", "rehearsal"]


def tally(state_dir, *args):
    env = {**os.environ, "TALLY_STATE_DIR": str(state_dir), "USER": "rehearsal"}
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(var, None)  # the CLI finds the stack from the state file alone
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)


def test_r41_r48_the_demo_morning_is_worked_to_zero_with_the_cli_only_one_case_per_planted_problem(tmp_path):
    out = io.StringIO()
    with EmbeddedStack(
        api_port=0, state_dir=tmp_path, simulator_options={"fixed_keys": True}, schedule_scale=0
    ) as stack:
        stack.write_state()
        assert play_into(stack, len(SCENARIOS) * 2, out=out) == 0
        report = out.getvalue()
        assert (
            "work queue: " in report and "certificate rotation: " in report and "reconciliation: " in report
        )
        assert "the new one included" in report
        assert_demo_views_agree(report)

        listed = tally(tmp_path, "manual", "list", "--local", "--json")
        # the day is yesterday: its items are about a day old, some past their 24 h threshold (exit 3), as on
        # a real morning
        assert listed.returncode in (0, 3), listed.stderr
        start = json.loads(listed.stdout)
        kinds = sorted({k for i in start["items"] for k in i.get("kinds") or [i["kind"]]})
        assert start["open"] >= 4 and "unbooked-payment" in kinds and "refund-task" in kinds, kinds
        # R48: one case per money: no two open items name the same merchant and order
        orders = [(i["merchant"], i["order"]) for i in start["items"] if i.get("order")]
        assert len(orders) == len(set(orders)), orders
        planted = {
            f"DAY{i:06d}"
            for i in range(len(SCENARIOS) * 2)
            if SCENARIOS[i % len(SCENARIOS)] in ("mismatch", "paid_after_close")
        }
        assert {order for _, order in orders} == planted  # one case per planted problem, no more
        assert tally(tmp_path, "pending", "--local", "--over", "0").returncode == 3  # cron sees the open work
        one = start["items"][0]
        shown = tally(tmp_path, "manual", "show", one["id"], "--local", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == one["id"]

        # a dry run first: what would change, in yuan, and nothing changes
        dry = tally(
            tmp_path,
            "manual",
            "resolve",
            "--filter",
            "kind=unbooked-payment",
            "--code",
            "refunded-by-hand",
            "--why",
            "y",
            "--dry-run",
            "--local",
            "--json",
        )
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["would_change"] == sum(
            i["kind"] == "unbooked-payment" for i in start["items"]
        )
        assert (
            json.loads(tally(tmp_path, "manual", "list", "--local", "--json").stdout)["open"] == start["open"]
        )

        worked: list[str] = []  # each case worked once: no money seen twice (R48)
        for kind in kinds:
            verb, *options = MORNING.get(kind, OTHERWISE)
            listed = json.loads(tally(tmp_path, "manual", "list", "--local", "--json").stdout)["items"]
            if not any(kind in (i.get("kinds") or [i["kind"]]) for i in listed):
                continue  # its cases were closed with another part's decision (R48)
            done = tally(tmp_path, "manual", verb, "--filter", f"kind={kind}", *options, "--local", "--json")
            assert done.returncode == 0, (kind, done.stdout[-1500:], done.stderr[-1500:])
            report = json.loads(done.stdout)
            assert report["changed"] >= 1
            worked += [i["id"] for i in report["items"]]

        end = json.loads(tally(tmp_path, "manual", "list", "--local", "--json").stdout)
        assert end["open"] == 0, end["items"]
        assert sorted(worked) == sorted(i["id"] for i in start["items"])
        for args in (("pending", "--local"), ("pending", "--local", "--over", "0")):
            final = tally(tmp_path, *args)
            assert final.returncode == 0, final.stdout
        assert "nothing waits for a person" in final.stdout


def assert_demo_views_agree(report: str) -> None:
    """R49 on the demo's days: the day played (yesterday) and the two coupon days, every merchant, the same
    payments, fees and net in the ledger day, its CSV, the statement and the console's Recon page."""
    import re

    from tally import bootstrap

    from tests.integration.money_helpers import assert_views_agree

    days = set(re.findall(r"three-way [a-z ]+ (\d{4}-\d{2}-\d{2})", report))
    days |= set(re.findall(r"Tally demo day (\d{4}-\d{2}-\d{2})", report))
    assert len(days) == 3, days
    for day in sorted(days):
        rows = bootstrap.ledger_day_service().day(day)["rows"]
        assert rows, day
        assert_views_agree(day, [(r["channel"], r["mchid"]) for r in rows])
