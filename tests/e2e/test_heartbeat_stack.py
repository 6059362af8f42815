"""The synthetic heartbeat on the embedded stack (issue #16): over real HTTP through the front door, booked by
the worker through the SQS pump, its age shown by `tally pending --local`; then `tally outbox republish
--local` publishes its OrderPaid again."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tally_local.stack import EmbeddedStack

pytestmark = pytest.mark.e2e
TALLY = str(Path(sys.executable).with_name("tally"))


def test_the_heartbeat_is_booked_on_the_embedded_stack_and_shown_by_tally_pending(tmp_path):
    state_dir = tmp_path / "state"
    with EmbeddedStack(api_port=0, state_dir=state_dir, schedule_scale=0) as stack:
        stack.write_state()
        first = stack.ticker.fire("HeartbeatFunction")
        assert first["status"] == 204, first  # accepted by notify through the front door
        from tally import bootstrap

        for _ in range(100):
            order = bootstrap.order_service().show("0000000000", first["order"])
            if order["status"] == "PAID":
                break
            time.sleep(0.1)
        assert order["status"] == "PAID" and order["paid_cent"] == 1
        # the age counts from the start of the beat's minute (its id is per minute), so a beat fired at :59 and
        # booked a moment later is 60 s old: fresh means under two minutes (the alarm is at 3)
        assert bootstrap.heartbeat_age_s() < 120
        env = {**os.environ, "TALLY_STATE_DIR": str(state_dir)}
        shown = subprocess.run(
            [TALLY, "pending", "--local"], capture_output=True, text=True, env=env, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert "heartbeat: last synthetic payment booked" in shown.stdout
        # republish on the embedded stack: the booked beat's OrderPaid again, with the stream's stable id
        again = subprocess.run(
            [TALLY, "outbox", "republish", "--order", "0000000000", first["order"], "--local"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
        assert f"OrderPaid:0000000000#{first['order']}:" in again.stdout


def test_the_channels_echo_comes_back_through_the_front_door_of_the_embedded_stack(tmp_path, monkeypatch):
    """The heartbeat's echo (issue #38) end to end: the beat asks the simulated WeChat Pay v3 for its security echo
    with a configured merchant's credentials; the simulator answers signed and POSTs its signed SECURITY_ECHO.SUCCESS
    to the stack's front door, the notify function verifies and acknowledges it and writes its arrival; the next
    beat's echo age is 0. No money moves for that merchant."""
    with EmbeddedStack(api_port=0, state_dir=tmp_path / "state", schedule_scale=0) as stack:
        from tally import bootstrap

        m = stack.simulator.register_test_merchant("public_key")
        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
            mchid=m["mchid"],
            apiv3_key=m["apiv3_key"],
            merchant_key_pem=m["merchant_private_key_pem"],
            merchant_serial=m["merchant_serial"],
            appid=m["appid"],
            notify_url=f"{stack.api_url}/notify/wechatpay/{m['mchid']}",
            public_key=stack.simulator.public_key_pem,
            public_key_id=stack.simulator.public_key_id,
        )
        monkeypatch.setenv("TALLY_HEARTBEAT_ECHO", f"wechatpay/{m['mchid']}")
        bootstrap.reset()
        first = stack.ticker.fire("HeartbeatFunction")
        assert first["echo"] == {f"wechatpay/{m['mchid']}": "asked"}, first
        events = bootstrap.tables()

        def arrived():
            row = events.get(stack.env["NOTIFY_EVENT_TABLE"], f"echo#wechatpay#{m['mchid']}") or {}
            return row if row.get("echoes") else None

        deadline = time.monotonic() + 20
        while not arrived() and time.monotonic() < deadline:
            time.sleep(0.1)
        row = arrived()
        assert row and "waiting_since" not in row, row
        (delivery,) = [d for d in stack.simulator.deliveries if d["event_type"] == "SECURITY_ECHO.SUCCESS"]
        assert delivery["status"] in (200, 204) and delivery["notify_url"].startswith(stack.api_url)
        assert stack.ticker.fire("HeartbeatFunction")["echo_age_s"] == 0
        ledger = events.ddb.scan(TableName=stack.env["LEDGER_TABLE"])["Items"]
        assert not [e for e in ledger if e["mchid"]["S"] == m["mchid"]]
