"""The heartbeat's echo (issue #38): WeChat Pay v3's security echo (`POST /v3/security/echo`) asked every beat for
each configured notify path; the channel's signed SECURITY_ECHO.SUCCESS callback, verified and decrypted by the
notify function, is the proof that the channel reaches Tally; no money moves. A missing echo is a case in the
work queue and the HeartbeatEchoAge gauge HeartbeatEchoAgeAlarm watches (every branch that books nothing leaves
a case and a metric). The simulator's v3 desk answers the call and sends the callback over HTTP to the notify URL
the call named; here a loopback listener stands for API Gateway and hands the bytes to the notify handler
(tests/e2e/test_heartbeat_stack.py runs the same through the embedded stack's front door)."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from tally import bootstrap
from tally.service.heartbeat import ECHO_WINDOW_S

MONEY_TABLES = ("NOTIFY_RAW_TABLE", "LEDGER_TABLE", "REFUND_TASKS_TABLE", "TRANSITIONS_TABLE")


class FrontDoor:
    """A loopback HTTP listener: keeps every POST (path, headers, body) and answers 204, as API Gateway would
    once the notify function acknowledged it."""

    def __init__(self):
        self.posts: list[tuple[str, dict[str, str], bytes]] = []
        door = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                door.posts.append((self.path, dict(self.headers.items()), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def echoes(self, mchid: str) -> list[tuple[dict[str, str], bytes]]:
        return [
            (headers, body)
            for path, headers, body in self.posts
            if path == f"/notify/wechatpay/{mchid}" and b"SECURITY_ECHO" in body
        ]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def door():
    d = FrontDoor()
    yield d
    d.close()


@pytest.fixture
def beat(h, sim, door, monkeypatch):
    """A heartbeat proving one v3 merchant's notify path; its clock moves by hand (`beat.now`)."""
    m = h.add_merchant()
    monkeypatch.setenv("HEARTBEAT_API_URL", door.url)
    monkeypatch.setenv("TALLY_HEARTBEAT_ECHO", f"wechatpay/{m['mchid']}")
    now = [time.time()]
    bootstrap.reset()
    bootstrap.set_clock(lambda: now[0])
    heartbeat = bootstrap.heartbeat()
    heartbeat.now, heartbeat.merchant = now, m
    yield heartbeat
    sim.echo_callbacks = True
    bootstrap.set_clock(time.time)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError("not reached in time")


def echo_cases(h):
    return [r for r in h.scan("NOTIFY_EVENT_TABLE") if r.get("manual_kind") == "heartbeat_echo"]


def test_the_channels_echo_comes_back_through_notify_and_books_nothing(h, sim, door, beat):
    """One beat asks the channel (signed call, signed answer verified); the channel's SECURITY_ECHO.SUCCESS goes to
    /notify/wechatpay/{mchid} of this stack; the notify function verifies, decrypts and acknowledges it and writes
    only its arrival: no raw row, no ledger entry, no item; the echo age is 0 and stays 0."""
    mchid = beat.merchant["mchid"]
    first = beat.beat()
    assert first["echo"] == {f"wechatpay/{mchid}": "asked"} and first["echo_age_s"] == 0
    (asked,) = [e for e in sim.echoes if e["mchid"] == mchid]
    assert asked["notify_url"] == f"{door.url}notify/wechatpay/{mchid}"
    assert asked["echo_message"].startswith("tally-heartbeat-")
    ((headers, body),) = wait_for(lambda: door.echoes(mchid))
    assert h.notify(mchid, headers, body)["statusCode"] in (200, 204)
    row = bootstrap.tables().get(h.env["NOTIFY_EVENT_TABLE"], f"echo#wechatpay#{mchid}")
    assert row["echoes"] == 1 and "waiting_since" not in row
    assert h.metric("NotifyEcho") == 1
    mine = [r for t in MONEY_TABLES for r in h.scan(t) if r.get("mchid") == mchid]
    assert mine == [] and echo_cases(h) == []
    beat.now[0] += 60
    assert beat.beat()["echo_age_s"] == 0
    assert h.drain() == []


def test_a_missing_echo_is_one_case_and_the_gauge_its_alarm_watches(h, sim, door, beat):
    """The channel takes the call but its callback never arrives: the age counts from the first unanswered ask;
    at ECHO_WINDOW_S (the alarm's 180 s) one `heartbeat-echo` case opens, naming the path, and stays one while
    the outage lasts; HeartbeatEchoAge is the largest age. Once an echo is back, the age is 0 again."""
    mchid = beat.merchant["mchid"]
    sim.echo_callbacks = False
    ages = []
    for _ in range(5):
        ages.append(beat.beat()["echo_age_s"])
        beat.now[0] += 60
    assert ages == [0, 60, 120, 180, 240]
    assert ECHO_WINDOW_S == 180
    (case,) = echo_cases(h)
    assert case["mchid"] == mchid and f"/notify/wechatpay/{mchid}" in case["reason"]
    assert "expires_at" not in case  # R51: an open item has no lifetime
    listed = [i for i in bootstrap.work_queue().list() if i["kind"] == "heartbeat-echo"]
    assert len(listed) == 1
    # the handler's flush is what publishes: here the service is called directly, so flush as the λ does
    from tally.observability import metrics

    metrics.flush_metrics()
    h._collect_metrics()
    gauge = [v for n, v, _ in h.series_log if n == "HeartbeatEchoAge"]
    assert max(gauge) == 240
    sim.echo_callbacks = True
    from tally_local.simulator import kernel

    # the channel's clock where ours was moved (five minutes on): its signatures are inside the 300 s window
    with kernel.days_behind(-(beat.now[0] - time.time()) / 86400):
        beat.beat()
        ((headers, body),) = wait_for(lambda: door.echoes(mchid))
        assert h.notify(mchid, headers, body)["statusCode"] in (200, 204)
        beat.now[0] += 60
        assert beat.beat()["echo_age_s"] == 0


def test_an_echo_call_the_channel_refuses_is_missing_like_one_that_never_came_back(h, sim, door, beat):
    """A merchant the channel does not know (the call is refused: not a provider's credentials, a wrong key) is
    an echo that will not come: said per path, and the same case after the window."""
    sim.inject_fault(
        "error", count=10, path_contains="/v3/security/echo", status=403, code="NO_AUTH", message="无权限"
    )
    try:
        results = []
        for _ in range(4):
            results.append(beat.beat())
            beat.now[0] += 60
    finally:
        sim.clear_faults()
    path = f"wechatpay/{beat.merchant['mchid']}"
    assert all(r["echo"][path].startswith("refused: HTTP 403 NO_AUTH") for r in results)
    assert [r["echo_age_s"] for r in results] == [0, 60, 120, 180]
    assert len(echo_cases(h)) == 1
