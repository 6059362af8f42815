"""Incidents and chat cards on the embedded stack (docs/alerts.md, issue #34's "done when"): a merchant configured
with the wrong platform key receives 200 signed callbacks over real HTTP through the front door; the notifier's
schedule makes exactly one incident of them and each robot in the simulator's chat sink (WeCom, DingTalk,
Feishu, Slack, each verifying its platform's signature) receives one "opened" and one "escalated" card; once
the key is fixed and the kept callbacks replayed with the `tally` command, one "resolved" card each. Then a
robot that refuses gets its retries and the undelivered card becomes a work-queue item. R38, R40, R41."""

import json
import os
import random
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tally_local.stack import EmbeddedStack

pytestmark = pytest.mark.e2e
TALLY = str(Path(sys.executable).with_name("tally"))
ROOT = Path(__file__).resolve().parents[2]
SECRET = "SECe2e00000000000000000000000000000000000000000000000000000000c"
WORDS = {
    "opened": ("新事件", "New incident"),
    "escalated": ("事件升级", "escalating"),
    "resolved": ("已解决", "resolved"),
}


def tally(state_dir, *args):
    env = {**os.environ, "TALLY_STATE_DIR": str(state_dir), "USER": "oncall"}
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(var, None)  # the CLI finds the stack from the state file alone
    done = subprocess.run(
        [TALLY, *args, "--local"], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )
    assert done.returncode in (0, 3), (args, done.stdout[-1500:], done.stderr[-1500:])
    return json.loads(done.stdout) if "--json" in args else done.stdout


def received(sim, robots):
    """{kind: {change: number of cards}} as each robot accepted them."""
    out = {}
    for kind, robot in robots.items():
        texts = [json.dumps(c["message"], ensure_ascii=False) for c in sim.chat.cards(robot["name"])]
        out[kind] = {
            change: sum(any(w in t for w in words) for t in texts) for change, words in WORDS.items()
        }
    return out


def post(url, headers, body):
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the local front door
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_r38_r40_two_hundred_refused_callbacks_are_one_incident_and_one_card_per_change_per_robot(tmp_path):
    with EmbeddedStack(
        api_port=0, state_dir=tmp_path, simulator_options={"fixed_keys": True}, schedule_scale=0
    ) as stack:
        stack.write_state()
        sim = stack.simulator
        from tally import bootstrap

        robots = {}
        for kind in ("wecom", "dingtalk", "feishu", "slack"):
            signed = kind in ("dingtalk", "feishu")
            robot = sim.chat.robot(kind, secret=SECRET if signed else "", name=f"oncall-{kind}")
            extra = ["--secret", SECRET] if signed else []
            tally(tmp_path, "alerts", "add", robot["name"], "--kind", kind, "--url", robot["url"], *extra)
            robots[kind] = robot
        assert len(tally(tmp_path, "alerts", "list", "--json")["destinations"]) == 4

        # a merchant whose platform public key in Tally is wrong (its own public key instead of WeChat's)
        m = sim.register_test_merchant(verify_mode="public_key")
        mchid = str(random.randrange(10**9, 10**10))
        sim.register_merchant(
            mchid, m["apiv3_key"], m["merchant_public_key_pem"], m["merchant_serial"], appid=m["appid"]
        )

        def configure(public_key, mchid=mchid):
            wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
                mchid=mchid,
                apiv3_key=m["apiv3_key"],
                merchant_key_pem=m["merchant_private_key_pem"],
                merchant_serial=m["merchant_serial"],
                appid=m["appid"],
                notify_url=f"{stack.api_url}/notify/wechatpay/{mchid}",
                public_key=public_key,
                public_key_id=sim.public_key_id,
            )
            bootstrap.merchants()._cache.clear()

        configure(m["merchant_public_key_pem"])
        for i in range(200):
            order = {
                "mchid": mchid,
                "out_trade_no": f"E2E-{i:04d}",
                "amount_cent": 100,
                "description": "e2e",
                "prepay": False,
            }
            bootstrap.order_service().create(order)
            headers, body = sim.build_notification(
                mchid, sim.transaction_resource(mchid, f"E2E-{i:04d}", 100)
            )
            assert post(f"{stack.api_url}/notify/wechatpay/{mchid}", headers, body) == 401

        first = stack.ticker.fire("NotifierFunction")
        assert first == {"changes": 2, "sent": 8, "suppressed": 0, "failed": 0}, first
        (incident,) = tally(tmp_path, "incidents", "list", "--all", "--json")["incidents"]
        assert (incident["state"], incident["merchant"], incident["count"]) == ("escalated", mchid, 200)
        assert incident["origin"] == "tenant" and incident["rate_per_h"] >= 100
        assert stack.ticker.fire("NotifierFunction")["changes"] == 0
        assert received(sim, robots) == dict.fromkeys(robots, {"opened": 1, "escalated": 1, "resolved": 0})
        assert tally(tmp_path, "pending").startswith("incidents (1 live")

        configure(sim.public_key_pem)  # the key fixed, then the kept callbacks replayed by a person
        (item,) = tally(tmp_path, "manual", "list", "--json", "--filter", "kind=rejected")["items"]
        tally(tmp_path, "manual", "replay", item["id"], "--by", "oncall", "--why", "platform key fixed")
        stack.drain()
        assert stack.ticker.fire("NotifierFunction") == {
            "changes": 1,
            "sent": 4,
            "suppressed": 0,
            "failed": 0,
        }
        assert received(sim, robots) == dict.fromkeys(robots, {"opened": 1, "escalated": 1, "resolved": 1})
        (incident,) = tally(tmp_path, "incidents", "list", "--all", "--json")["incidents"]
        assert (incident["state"], incident["resolved_why"]) == ("resolved", "cleared")
        refused_cards = [c for r in robots.values() for c in sim.chat.cards(r["name"], accepted=False)]
        assert refused_cards == []  # every signature verified as the platform would

        # a robot that refuses: retried, then a case in the work queue (and the log says so)
        sim.chat.set_refusing("oncall-feishu", True)
        other = str(
            int(mchid) + 1
        )  # another merchant with a wrong key (the first one's hour kept its 20 rows)
        sim.register_merchant(
            other, m["apiv3_key"], m["merchant_public_key_pem"], m["merchant_serial"], appid=m["appid"]
        )
        configure(m["merchant_public_key_pem"], other)
        headers, body = sim.build_notification(other, sim.transaction_resource(other, "E2E-OTHER", 100))
        assert post(f"{stack.api_url}/notify/wechatpay/{other}", headers, body) == 401
        assert stack.ticker.fire("NotifierFunction")["failed"] == 1
        assert len(sim.chat.cards("oncall-feishu", accepted=False)) == 3
        (case,) = tally(tmp_path, "manual", "list", "--json", "--filter", "kind=alert-delivery")["items"]
        assert "oncall-feishu" in case["reason"]
        log = tally(tmp_path, "alerts", "log", "--json")["entries"]
        assert [e["outcome"] for e in log if e["destination"] == "oncall-feishu"].count("failed") == 1
