"""Incidents and their cards (docs/alerts.md), through the real handlers on moto, with the chat sink's robots
on real HTTP: one wrong key is one incident whatever the number of refused callbacks (R38, R40), its changes
and only its changes become cards, a destination that refuses gets retries and then a case in the work queue
(R41), snooze and the hourly cap suppress and log, and an alarm's state change is an incident of its own."""

from __future__ import annotations

import json
import random
import time

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.store.tables import closed_expiry

SECRET = "SECtest0000000000000000000000000000000000000000000000000000000b"
SCHEDULE = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


@pytest.fixture
def cli(h, tmp_path, monkeypatch, capsys):
    """`tally …` as a person types it, against this test's moto (through .tally/local.json)."""
    from tally_cli.main import main

    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:3000", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)

    def run(*argv, expect=0):
        capsys.readouterr()
        code = main([*argv, "--local"])
        out = capsys.readouterr()
        assert code == expect, (argv, code, out.out[-2000:], out.err[-2000:])
        return json.loads(out.out) if "--json" in argv else out.out

    return run


@pytest.fixture
def robots(sim, cli):
    """One robot of each platform in the sink, each added with `tally alerts add`."""
    made = {}
    for kind in ("wecom", "dingtalk", "feishu", "slack"):
        signed = kind in ("dingtalk", "feishu")
        robot = sim.chat.robot(
            kind, secret=SECRET if signed else "", name=f"ops-{kind}-{random.randrange(10**6)}"
        )
        argv = ["alerts", "add", robot["name"], "--kind", kind, "--url", robot["url"], "--json"]
        cli(*argv, *(["--secret", SECRET] if signed else []), *(["--lang", "en"] if kind == "slack" else []))
        made[kind] = robot
    yield made
    bootstrap.reset()  # settings a test changed (thresholds) and the notifier's pause


def cards(sim, robots, change=None):
    """{kind: [what each robot accepted]}, only cards of `change` when given (their text names it)."""
    words = {
        "opened": ("新事件", "New incident"),
        "escalated": ("事件升级", "escalating"),
        "resolved": ("已解决", "resolved"),
    }
    out = {}
    for kind, robot in robots.items():
        got = [json.dumps(c["message"], ensure_ascii=False) for c in sim.chat.cards(robot["name"])]
        out[kind] = [g for g in got if change is None or any(w in g for w in words[change])]
    return out


def wrong_key_merchant(h, sim):
    """A merchant configured with a stale platform public key: every signed callback fails to verify."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=m["mchid"],
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url="http://127.0.0.1:9/n",
        public_key=m["merchant_public_key_pem"],
        public_key_id=sim.public_key_id,
    )
    return m


def refused(h, m, first, n):
    for i in range(first, first + n):
        h.create_order(m["mchid"], f"REJ-{i:04d}")
        headers, body, _ = h.notification(m["mchid"], f"REJ-{i:04d}", 100)
        assert h.notify(m["mchid"], headers, body)["statusCode"] == 401


def sweep(h):
    return h.invoke("NotifierFunction", SCHEDULE)


def test_r38_r40_one_wrong_key_is_one_incident_opened_escalated_resolved_one_card_each_per_robot(
    h, sim, cli, robots, monkeypatch
):
    monkeypatch.setenv("TALLY_INCIDENT_ESCALATE_PER_H", "12")
    bootstrap.reset()
    m = wrong_key_merchant(h, sim)
    refused(h, m, 0, 5)
    assert sweep(h) == {"changes": 1, "sent": 4, "suppressed": 0, "failed": 0}
    (incident,) = cli("incidents", "list", "--json")["incidents"]
    assert (incident["state"], incident["merchant"], incident["count"], incident["origin"]) == (
        "open",
        m["mchid"],
        5,
        "tenant",
    )
    assert all(len(c) == 1 for c in cards(sim, robots, "opened").values())
    assert (
        "5 notification(s) refused (5 kept)" in cards(sim, robots, "opened")["slack"][0]
    )  # a case's own words
    refused(h, m, 5, 2)
    assert sweep(h)["changes"] == 0  # more of the same: the incident counts them, nobody is paged again
    assert cli("incidents", "show", incident["id"], "--json")["count"] == 7
    refused(h, m, 7, 6)  # 13 in the hour: past 12 an hour
    assert sweep(h) == {"changes": 1, "sent": 4, "suppressed": 0, "failed": 0}
    assert cli("incidents", "show", incident["id"], "--json")["state"] == "escalated"
    assert all(len(c) == 1 for c in cards(sim, robots, "escalated").values())
    assert sweep(h)["changes"] == 0  # escalated once

    h.add_merchant(mchid=m["mchid"])  # the right key, then the kept callbacks replayed
    (item,) = bootstrap.work_queue().list("kind=rejected")
    bootstrap.work_queue().act(item["id"], "replay", by="ops", reason="platform key fixed")
    h.drain()
    assert sweep(h) == {"changes": 1, "sent": 4, "suppressed": 0, "failed": 0}
    shown = cli("incidents", "show", incident["id"], "--json")
    assert (shown["state"], shown["resolved_why"]) == ("resolved", "cleared")
    assert all(len(c) == 1 for c in cards(sim, robots, "resolved").values())
    assert {k: len(v) for k, v in cards(sim, robots).items()} == dict.fromkeys(robots, 3)
    assert cli("incidents", "list", "--json")["incidents"] == []
    log = cli("alerts", "log", "--json")["entries"]
    assert sorted(e["change"] for e in log if e["incident"] == incident["id"]) == sorted(
        ["opened", "escalated", "resolved"] * 4
    )


def test_r38_r41_a_destination_that_refuses_is_retried_then_becomes_a_case_in_the_work_queue(
    h, sim, cli, robots
):
    """R41, R51: a refused card is retried, then a case; the case's row has no TTL until a person closes it."""
    bootstrap.notifier().pause_s = 0.01
    sim.chat.set_refusing(robots["dingtalk"]["name"], True)
    refused(h, wrong_key_merchant(h, sim), 0, 2)
    assert sweep(h) == {"changes": 1, "sent": 3, "suppressed": 0, "failed": 1}
    assert len(sim.chat.cards(robots["dingtalk"]["name"], accepted=False)) == 3  # the attempts
    (case,) = bootstrap.work_queue().list("kind=alert-delivery")
    assert robots["dingtalk"]["name"] in case["reason"] and "130101" in case["reason"]
    # R51: an open item has no lifetime: the stored row carries no TTL while nobody closed it
    (row,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if str(r["pk"]).startswith("alert-delivery#")]
    assert "expires_at" not in row and row["manual_kind"] == "alert_delivery"
    (failed,) = [e for e in cli("alerts", "log", "--json")["entries"] if e["outcome"] == "failed"]
    assert (failed["destination"], failed["attempts"]) == (robots["dingtalk"]["name"], 3)
    assert h.metric("AlertDeliveryFailed") == 1
    # the case itself is live work: the next sweep makes it an incident of ours (the other robots hear it)
    changes = sweep(h)
    assert changes["changes"] == 1 and changes["sent"] == 3
    ours = [i for i in cli("incidents", "list", "--json")["incidents"] if i["kind"] == "alert-delivery"]
    assert len(ours) == 1 and ours[0]["origin"] == "ours"
    assert sweep(h)["changes"] == 0  # its own undelivered card joins it: one incident per destination
    assert [
        i["count"] for i in cli("incidents", "list", "--json")["incidents"] if i["kind"] == "alert-delivery"
    ] == [2]
    # the robot fixed, a person closes the cases through the queue: the incident of ours resolves
    sim.chat.set_refusing(robots["dingtalk"]["name"], False)
    for item in bootstrap.work_queue().list("kind=alert-delivery"):
        done = cli(
            "manual",
            "resolve",
            item["id"],
            "--by",
            "ops",
            "--code",
            "robot-fixed",
            "--why",
            "re-added",
            "--json",
        )
        assert done["state"] == "RESOLVED"
    assert sweep(h)["changes"] == 1
    assert [i for i in cli("incidents", "list", "--json")["incidents"] if i["kind"] == "alert-delivery"] == []
    # R51: closing the item starts its lifetime (CLOSED_KEPT_DAYS from the closing), never before
    (closed,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r["pk"] == row["pk"]]
    assert closed["expires_at"] == closed_expiry(closed["resolution"]["at"]) and "manual_kind" not in closed


def test_r38_snooze_and_the_hourly_cap_suppress_and_every_card_is_logged(h, sim, cli, robots):
    name = robots["wecom"]["name"]
    cli("alerts", "snooze", name, "--minutes", "30", "--json")
    cli(
        "alerts",
        "add",
        robots["feishu"]["name"],
        "--kind",
        "feishu",
        "--url",
        robots["feishu"]["url"],
        "--secret",
        SECRET,
        "--hour-cap",
        "1",
    )
    refused(h, wrong_key_merchant(h, sim), 0, 1)
    refused(h, wrong_key_merchant(h, sim), 0, 1)  # a second merchant: a second incident
    assert sweep(h) == {"changes": 2, "sent": 5, "suppressed": 3, "failed": 0}
    log = cli("alerts", "log", "--json")["entries"]
    why = {(e["destination"], e["outcome"]): e.get("reason") or "" for e in log}
    assert why[(name, "suppressed")].startswith("snoozed until")
    assert why[(robots["feishu"]["name"], "suppressed")].startswith("hourly cap reached (1 of 1")
    assert sim.chat.cards(name) == []
    for url in (
        "http://example.com/cgi-bin/webhook/send?key=k",
        "ftp://127.0.0.1/x",
    ):  # https, or this machine
        cli("alerts", "add", "plain-http", "--kind", "wecom", "--url", url, expect=1)
    with pytest.raises(SystemExit):  # argparse refuses a kind it does not know (exit 2), nothing stored
        cli("alerts", "add", "bad-kind", "--kind", "telegram", "--url", "https://t.example/x")
    listed = cli("alerts", "list", "--json")["destinations"]
    assert all(SECRET not in json.dumps(d) and "key=" not in json.dumps(d) for d in listed)
    cli("alerts", "snooze", name, "--minutes", "0")
    text = cli("alerts", "test", name)
    assert "sent" in text and len(sim.chat.cards(name)) == 1
    assert "测试消息:Tally 可以向这个群发送告警" in json.dumps(
        sim.chat.cards(name)[0]["message"], ensure_ascii=False
    )


def test_r38_an_alarm_opens_its_incident_with_the_live_ones_and_ok_resolves_it(h, sim, cli, robots):
    refused(h, wrong_key_merchant(h, sim), 0, 1)
    sweep(h)
    alarm = json.loads(
        (__import__("pathlib").Path(__file__).parents[2] / "events/notifier_alarm.json").read_text()
    )
    assert h.invoke("NotifierFunction", alarm)["changes"] == 1
    (incident,) = [i for i in cli("incidents", "list", "--json")["incidents"] if i["kind"] == "alarm"]
    assert incident["origin"] == "ours" and "inc-rejected-" in incident["context"]
    (got,) = [c for c in cards(sim, robots, "opened")["slack"] if "EnqueueFailedAlarm" in c]
    assert "inc-rejected-" in got
    assert h.invoke("NotifierFunction", alarm)["changes"] == 0  # still in ALARM: counted, not paged
    message = json.loads(alarm["Records"][0]["Sns"]["Message"])
    alarm["Records"][0]["Sns"]["Message"] = json.dumps({**message, "NewStateValue": "OK"})
    assert h.invoke("NotifierFunction", alarm)["changes"] == 1
    assert cli("incidents", "show", incident["id"], "--json")["state"] == "resolved"


def test_r38_an_incident_quiet_for_an_hour_resolves_and_stays_resolved_until_it_grows(h, sim, cli):
    m = wrong_key_merchant(h, sim)
    refused(h, m, 0, 2)
    sweep(h)
    later = time.time() + 2 * 3600
    bootstrap.set_clock(lambda: later)
    try:
        assert sweep(h)["changes"] == 1
        (incident,) = cli("incidents", "list", "--all", "--json")["incidents"]
        assert (incident["state"], incident["resolved_why"]) == ("resolved", "quiet")
        assert sweep(h)["changes"] == 0  # the same cases: still quiet
    finally:
        bootstrap.set_clock(time.time)
    refused(h, m, 2, 1)
    assert sweep(h)["changes"] == 1
    assert cli("incidents", "show", incident["id"], "--json")["state"] == "open"
    log = cli("alerts", "log", "--json")["entries"]  # no destination: the e-mail only, and the log says so
    assert {e["reason"] for e in log if e["incident"] == incident["id"]} == {
        "no chat destination configured (`tally alerts add`)"
    }
    text = cli("pending", expect=0)
    assert text.startswith("incidents (1 live") and incident["id"] in text


def console(h, page, **query):
    from tally_local.lambda_io import http_event

    event = http_event(
        "GET", f"/console/{page}", b"", {"accept-language": "en"}, {"page": page}, base64_body=False
    )
    event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in query.items())
    event["queryStringParameters"] = query
    claims = {
        "sub": "s-viewer",
        "cognito:username": "viewer",
        "cognito:groups": "[viewers]",
        "token_use": "id",
    }
    event["requestContext"]["authorizer"] = {"jwt": {"claims": claims}}
    response = h.invoke("ConsoleFunction", event)
    assert response["statusCode"] == 200, response
    return response["body"]


def test_r41_the_console_lists_incidents_and_the_morning_page_shows_them_above_the_cases(h, sim):
    m = wrong_key_merchant(h, sim)
    refused(h, m, 0, 3)
    sweep(h)
    (incident,) = bootstrap.incidents().list()
    listing = console(h, "incidents")
    assert incident["id"] in listing and m["mchid"] in listing and 'data-state="open"' in listing
    shown = console(h, "incidents", id=incident["id"])
    assert "rejected-wechatpay-" + m["mchid"] in shown  # its case, linked to the queue's item page
    morning = console(h, "morning")
    assert morning.index('id="incidents-now"') < morning.index("Cases by kind and age")


def test_r38_an_alarm_is_decided_again_when_another_run_wrote_its_incident_meanwhile(h, monkeypatch):
    """No reserved concurrency: a sweep and an alarm may run at once. The incident's revision makes the later
    writer read again; an alarm's change is never dropped."""
    message = {"AlarmName": "tally-ApplyFailedAlarm-X1", "NewStateValue": "ALARM", "AlarmDescription": "d"}
    service, other = bootstrap.incidents(), bootstrap.incidents().__class__(bootstrap.incidents().store, None)
    assert [c["change"] for c in service.alarm(message)] == ["opened"]
    real_get = service.store.get
    raced = []

    def get_then_someone_writes(incident_id):
        row = real_get(incident_id)
        if not raced:  # another invocation writes the same incident right after this one read it
            raced.append(other.store.save({**row, "reason": "written by the other run"}))
        return row

    monkeypatch.setattr(service.store, "get", get_then_someone_writes)
    assert service.alarm({**message, "NewStateValue": "OK"})[0]["change"] == "resolved"
    assert raced and service.get("inc-alarm-applyfailedalarm")["state"] == "resolved"
