"""The synthetic heartbeat on the embedded stack (issue #16): over real HTTP through the front door, booked by
the worker through the SQS pump, its age shown by `tally pending --local`; then `tally outbox republish
--local` publishes its OrderPaid again."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
