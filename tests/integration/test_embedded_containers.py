"""The front door's warm containers (tally_local/containers.py, issue #20 item 6): Lambda scales a function out with
containers, each a process with its own module state, one invocation at a time. Real child processes, real HTTP on
127.0.0.1, toy handlers (no AWS needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tally_local.containers import ContainerPool, ContainerSpec, FunctionError, containers_setting
from tally_local.frontdoor import FrontDoor, routes_from_template
from tally_local.sigv4 import signed_headers

ROOT = Path(__file__).resolve().parents[2]

TOY = textwrap.dedent(
    """
    import json, os, sys, time

    INVOCATIONS = 0  # module state: per container

    def handler(event, context):
        global INVOCATIONS
        INVOCATIONS += 1
        body = event.get("body") or ""
        if body == "crash":
            os._exit(3)
        if body == "raise":
            raise RuntimeError("the toy handler refused")
        if body.startswith("sleep"):
            time.sleep(float(body.split()[1]))
        print(json.dumps({"_aws": {"CloudWatchMetrics": [{"Namespace": "Toy", "Dimensions": [[]],
              "Metrics": [{"Name": "ToyCalled"}]}]}, "ToyCalled": 1}))
        print("a log line on stderr", file=sys.stderr)
        answer = {"pid": os.getpid(), "invocations": INVOCATIONS, "function": context.function_name,
                  "remaining_ms": context.get_remaining_time_in_millis(), "path": event["rawPath"],
                  "tables": os.environ.get("TOY_TABLE")}
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(answer)}
    """
)


def template(reserved: int | None = None) -> dict:
    props = {
        "CodeUri": "functions/toy/",
        "Handler": "app.handler",
        "Timeout": 7,
        "Events": {"Api": {"Type": "HttpApi", "Properties": {"Path": "/toy", "Method": "POST"}}},
    }
    if reserved is not None:
        props["ReservedConcurrentExecutions"] = reserved
    return {"Resources": {"ToyFunction": {"Type": "AWS::Serverless::Function", "Properties": props}}}


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    (tmp_path / "functions" / "toy").mkdir(parents=True)
    (tmp_path / "functions" / "toy" / "app.py").write_text(TOY, encoding="utf-8")
    return tmp_path


@pytest.fixture
def door(toy, monkeypatch):
    monkeypatch.setenv("TOY_TABLE", "tally-local-Toy")  # the stack's environment reaches every container
    running = FrontDoor(routes_from_template(template(), toy, containers=4)).start()
    yield running
    running.stop()


def post(door: FrontDoor, body: str) -> tuple[int, dict]:
    request = urllib.request.Request(door.url + "/toy", data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def concurrently(door: FrontDoor, bodies: list[str]) -> list[tuple[int, dict]]:
    results: list = [None] * len(bodies)

    def one(i: int) -> None:
        results[i] = post(door, bodies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_two_concurrent_requests_are_served_by_two_containers_each_with_its_own_module_state(door, capsys):
    post(door, "sleep 0")  # one warm container
    first, second = concurrently(door, ["sleep 2", "sleep 2"])
    assert first[0] == second[0] == 200
    assert first[1]["pid"] != second[1]["pid"]
    assert first[1]["pid"] != os.getpid() and second[1]["pid"] != os.getpid()
    assert sorted([first[1]["invocations"], second[1]["invocations"]]) == [1, 2]  # module state per process
    assert first[1]["function"] == "ToyFunction" and 0 < first[1]["remaining_ms"] <= 7000
    assert first[1]["tables"] == "tally-local-Toy" and first[1]["path"] == "/toy"
    assert sorted(door.container_pids()) == sorted({first[1]["pid"], second[1]["pid"]})
    # what the handlers printed reached this process's stdout / stderr by the time they answered
    captured = capsys.readouterr()
    assert captured.out.count('"ToyCalled": 1') == 3
    assert captured.err.count("a log line on stderr") == 3


def test_a_warm_container_is_reused_and_never_more_than_the_limit(toy):
    door = FrontDoor(routes_from_template(template(reserved=2), toy, containers=4)).start()
    try:
        assert post(door, "sleep 0")[1]["pid"] == post(door, "sleep 0")[1]["pid"]  # one at a time: one warm
        answers = concurrently(door, ["sleep 0.5"] * 5)
        assert {status for status, _ in answers} == {200}
        assert len({answer["pid"] for _, answer in answers}) == 2  # ReservedConcurrentExecutions 2 caps 4
    finally:
        door.stop()


def test_a_crashed_container_answers_502_and_a_new_one_serves_the_next_request(door):
    status, before = post(door, "sleep 0")
    assert status == 200
    status, answer = post(door, "crash")
    assert (status, answer) == (502, {"message": "Bad Gateway"})
    assert not alive(before["pid"])
    status, after = post(door, "sleep 0")
    assert status == 200 and after["pid"] != before["pid"] and after["invocations"] == 1
    assert door.container_pids() == [after["pid"]]


def test_a_handler_error_is_a_500_and_the_container_lives_on(door, capsys):
    pid = post(door, "sleep 0")[1]["pid"]
    assert post(door, "raise") == (500, {"message": "Internal Server Error"})
    assert "RuntimeError: the toy handler refused" in capsys.readouterr().err  # the child's traceback
    status, again = post(door, "sleep 0")
    assert status == 200 and again["pid"] == pid and again["invocations"] == 3


def test_stopping_the_front_door_leaves_no_child(toy):
    door = FrontDoor(routes_from_template(template(), toy, containers=3)).start()
    concurrently(door, ["sleep 1.5"] * 3)
    pids = door.container_pids()
    assert len(pids) == 3 and all(alive(pid) for pid in pids)
    door.stop()
    assert not any(alive(pid) for pid in pids)


def test_a_container_exits_when_its_parent_is_killed(toy):
    """No orphan even after SIGKILL: the child's stdin closes with its parent and it exits."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from tally_local.containers import ContainerPool, ContainerSpec
        pool = ContainerPool(ContainerSpec("ToyFunction", {str(toy / "functions" / "toy")!r}, "app.handler"), 1)
        pool.invoke({{"rawPath": "/toy", "body": "sleep 0"}})
        print("PID", pool.pids[0], flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        child = int(next(line for line in parent.stdout if line.startswith("PID ")).split()[1])
        assert alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_a_pool_without_a_front_door_answers_the_handlers_result_and_errors(toy):
    pool = ContainerPool(ContainerSpec("ToyFunction", str(toy / "functions" / "toy"), "app.handler"), 1)
    try:
        result = pool.invoke({"rawPath": "/toy", "body": "sleep 0"})
        assert result["statusCode"] == 200 and json.loads(result["body"])["function"] == "ToyFunction"
        with pytest.raises(FunctionError, match="the toy handler refused") as raised:
            pool.invoke({"rawPath": "/toy", "body": "raise"})
        assert raised.value.error_type == "RuntimeError"
        assert pool.started == 1
    finally:
        pool.stop()
    assert pool.pids == []


def test_the_containers_setting():
    assert containers_setting({}) == 4
    assert containers_setting({"TALLY_LOCAL_CONTAINERS": "8"}) == 8
    assert containers_setting({"TALLY_LOCAL_CONTAINERS": "0"}) == 0
    with pytest.raises(ValueError, match="TALLY_LOCAL_CONTAINERS"):
        containers_setting({"TALLY_LOCAL_CONTAINERS": "many"})


def test_the_demo_s_stack_serves_in_thread_because_it_plays_yesterday_on_a_moved_clock():
    """`tally demo --keep` / TALLY_DEMO=1 make run: a container on the real clock signed its prepay a day after
    the simulated channel's clock and was refused ("timestamp expired"), so no demo order could be created."""
    from tally_local.stack import containers_for

    assert containers_for("1", {"TALLY_LOCAL_CONTAINERS": "4"}) == 0
    assert containers_for("", {"TALLY_LOCAL_CONTAINERS": "3"}) == 3


def test_reserved_concurrency_of_the_real_template_caps_the_notify_containers():
    from tally_local.frontdoor import reserved_concurrency
    from tally_local.resources import Resolver, load_template

    real = load_template(ROOT / "template.yaml")
    conditions = real.get("Conditions", {})
    unset = Resolver(parameters={"NotifyReservedConcurrency": "0"}, conditions=conditions)
    assert reserved_concurrency(real, unset.resolve) == {}  # the default: no reservation, no cap
    three = Resolver(parameters={"NotifyReservedConcurrency": "3"}, conditions=conditions)
    assert reserved_concurrency(real, three.resolve) == {"NotifyFunction": 3}


# Last in this module: a new EmbeddedStack resets moto's (process-wide) state.


def test_the_embedded_stack_serves_http_functions_from_containers_and_stops_them(toy_root, tmp_path):
    from tally_local.stack import EmbeddedStack

    stack = EmbeddedStack(api_port=0, root=toy_root, state_dir=tmp_path / "state", containers=2)
    with stack:
        assert stack.front_door is not None
        bodies = [json.dumps({"id": f"C{i}"}).encode() for i in range(4)]

        def notify(body: bytes) -> int:
            request = urllib.request.Request(stack.api_url + "/notify/wechatpay/19", data=body, method="POST")
            request.add_header("content-type", "application/json")
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status

        statuses: list[int] = []
        threads = [threading.Thread(target=lambda b=b: statuses.append(notify(b))) for b in bodies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert statuses == [204] * 4
        assert stack.drain(10)
        url = stack.api_url + "/orders/19/C3"
        signed = urllib.request.Request(url, headers=signed_headers("GET", url, None, {}))  # an AWS_IAM route
        with urllib.request.urlopen(signed, timeout=60) as answer:
            assert json.loads(answer.read())["by"] == {"S": "WorkerFunction"}  # the worker booked it
        notify_pids = stack.front_door.container_pids("NotifyFunction")
        assert 1 <= len(notify_pids) <= 2 and os.getpid() not in notify_pids  # at most `containers`
        pids = stack.front_door.container_pids()
        assert set(notify_pids) < set(pids)  # every HTTP function got a warm container at start
    assert not any(alive(pid) for pid in pids)


def test_a_container_that_cannot_start_answers_502_and_does_not_hang(toy):
    (toy / "functions" / "toy" / "app.py").write_text("raise ImportError('broken deployment')\n")
    door = FrontDoor(routes_from_template(template(), toy, containers=2)).start()
    try:
        started = time.monotonic()
        assert post(door, "sleep 0") == (502, {"message": "Bad Gateway"})
        assert post(door, "sleep 0")[0] == 502  # tried afresh, refused again
        assert time.monotonic() - started < 30 and door.container_pids() == []
    finally:
        door.stop()


def test_warm_starts_one_container_per_function_before_the_first_request(toy):
    door = FrontDoor(routes_from_template(template(), toy, containers=2)).start()
    try:
        door.warm()
        deadline = time.monotonic() + 30
        while not door.container_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        (pid,) = door.container_pids("ToyFunction")
        answer = post(door, "sleep 0")[1]
        assert answer["pid"] == pid and answer["invocations"] == 1  # imported ahead, invoked now
    finally:
        door.stop()


def test_ack_first_a_pump_gives_way_to_requests_in_flight_but_never_for_more_than_its_max():
    from tally_local.ackfirst import AckFirst

    gate = AckFirst(max_wait_s=0.6)
    assert gate.wait_turn() < 0.05  # nothing in flight: no wait
    with gate.request():
        started = time.monotonic()
        assert 0.55 <= gate.wait_turn() and time.monotonic() - started < 2  # a long burst: its turn anyway
    release = threading.Event()

    def one_request() -> None:
        with gate.request():
            release.wait(5)

    thread = threading.Thread(target=one_request)
    thread.start()
    while not gate.in_flight:
        time.sleep(0.01)
    threading.Timer(0.2, release.set).start()
    waited = gate.wait_turn()
    thread.join()
    assert 0.15 <= waited < 0.55  # the request ended: the pump goes at once
    stopping = threading.Event()
    stopping.set()
    with gate.request():
        assert gate.wait_turn(stopping) < 0.05  # a stopping pump never waits
    assert gate.in_flight == 0 and gate.waited_s >= 0.7
