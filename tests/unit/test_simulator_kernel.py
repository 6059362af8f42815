"""The simulator's shared parts: the one fault queue, the refund behaviours, the one delivery engine (real HTTP on
127.0.0.1), money formatting and the composition helper (issue #19 item 7)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tally_local.simulator.delivery import Chain, DeliveryEngine, DeliveryLog
from tally_local.simulator.faults import Behaviour, FaultQueue, corrupted
from tally_local.simulator.kernel import Forward, Kernel, Reply, cents, post, yuan


# ----------------------------------------------------------------------------------------------- fault queue
def test_fault_queue_hands_out_the_first_matching_fault_and_counts_it_down():
    q = FaultQueue()
    q.arm({"kind": "error", "path_contains": "/v3/pay", "method": "GET"}, count=2)
    q.arm({"kind": "delay"})
    assert q.take(path="/v3/certificates", method="GET")["kind"] == "delay"  # the first does not match
    assert q.take(path="/v3/certificates", method="GET") is None
    assert q.take(path="/v3/pay/transactions/id/1", method="POST") is None  # method differs
    first = q.take(path="/v3/pay/transactions/id/1", method="GET")
    assert first == {"kind": "error", "path_contains": "/v3/pay", "method": "GET", "count": 1}
    first["count"] = 99  # a copy: the queue is not changed through it
    assert len(q) == 1 and q.pending()[0]["count"] == 1
    assert q.take(path="/v3/pay/x", method="GET")["count"] == 0
    assert q.take(path="/v3/pay/x", method="GET") is None and q.pending() == []


def test_bad_signature_changes_the_first_character_only():
    assert corrupted("AbC=") == "BbC=" and corrupted("xyz") == "Ayz"


def test_fault_queue_without_criteria_matches_every_call_in_arming_order():
    q = FaultQueue()
    q.arm({"kind": "html_error"})
    q.arm({"kind": "wrong_hash"}, count=2)
    assert [(q.take() or {}).get("kind") for _ in range(4)] == [
        "html_error",
        "wrong_hash",
        "wrong_hash",
        None,
    ]
    q.arm({"kind": "x"}, 5)
    q.clear()
    assert q.take() is None


def test_behaviour_arms_the_next_n_calls_then_falls_back_to_the_default():
    def check(options: dict[str, Any]) -> None:
        if options.get("outcome") not in (None, "success", "closed"):
            raise ValueError("outcome")

    b = Behaviour({"outcome": "success", "delay_s": 60.0}, check)
    assert b.set(count=2, outcome="closed") == {"outcome": "closed", "delay_s": 60.0}
    assert b.set(delay_s=1.0) == {"outcome": "success", "delay_s": 1.0}  # the default changes
    assert [b.next()["outcome"] for _ in range(3)] == ["closed", "closed", "success"]
    assert b.next() == {"outcome": "success", "delay_s": 1.0}
    with pytest.raises(ValueError, match="unknown refund behaviour"):
        b.set(bogus=1)
    with pytest.raises(ValueError, match="outcome"):
        b.set(outcome="maybe")
    b.set(count=1, outcome="closed")
    b.reset()
    assert b.next() == {"outcome": "success", "delay_s": 60.0}


# ----------------------------------------------------------------------------------------------- delivery
class _Receiver:
    """notify_url on 127.0.0.1 answering a script of statuses (then 200 "success")."""

    def __init__(self, statuses: list[int]):
        self.statuses = list(statuses)
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                receiver.bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                out = b"success" if status == 200 else b"fail"
                self.send_response(status)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _chains(url: str, log: DeliveryLog, copies: int, schedule: tuple[int, ...]) -> list[Chain]:
    def chain(copy: int) -> Chain:
        attempts = iter(range(1, 100))

        def record(attempt: int, headers: dict[str, str], reply: Reply, ok: bool) -> None:
            log.add({"copy": copy, "attempt": attempt, "status": reply.status, "ok": ok, "h": headers["X-N"]})

        return Chain(
            url=url,
            compose=lambda: ({"X-N": str(next(attempts))}, b"body"),  # composed afresh per attempt
            acknowledged=lambda reply: reply.text == b"success",
            record=record,
            schedule=schedule,
        )

    return [chain(i) for i in range(copies)]


def test_delivery_engine_retries_on_the_schedule_until_acknowledged():
    receiver = _Receiver([500, 503])
    kernel = Kernel(time_scale=0.001)
    log = DeliveryLog(kernel.stopping)
    try:
        DeliveryEngine(kernel).send(_chains(receiver.url, log, 1, (1, 1, 1, 1)))
        done = log.wait(lambda r: True, lambda r: r["ok"], what="one", timeout=5)
        assert [(r["attempt"], r["status"], r["h"]) for r in log] == [
            (1, 500, "1"),
            (2, 503, "2"),
            (3, 200, "3"),
        ]
        assert len(done) == 1 and len(receiver.bodies) == 3  # stops at the first acknowledged attempt
    finally:
        receiver.close()


def test_delivery_engine_copies_each_retry_and_give_up_after_the_schedule():
    receiver = _Receiver([500] * 10)
    kernel = Kernel(time_scale=0.001)
    log = DeliveryLog(kernel.stopping)
    try:
        DeliveryEngine(kernel).send(_chains(receiver.url, log, 2, (1, 1)))
        with pytest.raises(TimeoutError, match="0/2 acknowledged"):
            log.wait(lambda r: True, lambda r: r["ok"], what="two", timeout=1, count=2)
        assert sorted((r["copy"], r["attempt"]) for r in log) == [
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 1),
            (1, 2),
            (1, 3),
        ]
    finally:
        receiver.close()


def test_delivery_engine_stops_retrying_when_the_simulator_stops():
    receiver = _Receiver([500] * 10)
    kernel = Kernel(time_scale=1.0)  # 60 s between attempts
    log = DeliveryLog(kernel.stopping)
    engine = DeliveryEngine(kernel)
    try:
        engine.send(_chains(receiver.url, log, 1, (60, 60)))
        with pytest.raises(TimeoutError):
            log.wait(lambda r: True, lambda r: r["attempt"] == 2, what="stop", timeout=0.5)
        kernel.stopping.set()
        engine.join(timeout=2)
        assert [r["attempt"] for r in log] == [1]
    finally:
        receiver.close()


def test_a_post_without_an_answer_is_status_0_with_the_error():
    reply = post("http://127.0.0.1:9/x", b"", {}, 1.0)  # port 9 (discard): nothing listens
    assert reply.status == 0 and reply.error and reply.text == reply.error.encode()


# ----------------------------------------------------------------------------------------------- money, Forward
def test_yuan_and_cents_are_int_cents_both_ways():
    assert [yuan(c) for c in (1999, 5, 0, -5, -150, 100000)] == [
        "19.99",
        "0.05",
        "0.00",
        "-0.05",
        "-1.50",
        "1000.00",
    ]
    assert [cents(t) for t in ("12.3", "12.34", "12", "0.01")] == [1230, 1234, 1200, 1]
    assert [cents(t) for t in ("1e2", "-1", "1.234", "", "1.2.3", None, 5)] == [None] * 7


def test_forward_reads_and_writes_the_composed_desk():
    class Desk:
        def __init__(self) -> None:
            self.rng = 1

        def hello(self) -> str:
            return "desk"

    class Owner:
        hello = Forward("desk")
        _rng = Forward("desk", "rng")

        def __init__(self) -> None:
            self.desk = Desk()

    owner = Owner()
    assert owner.hello() == "desk" and owner._rng == 1
    owner._rng = 2
    assert owner.desk.rng == 2
