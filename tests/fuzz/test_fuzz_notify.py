"""Fuzzing the notify front door (R1, R4, R5, R6): a few thousand inputs per route in CI.

`make soak` runs >= 100,000. See tests/fuzz/strategies.py for what is generated.
"""

from __future__ import annotations

import pytest

from tests.fuzz.run import WriteLog, check_case, run
from tests.fuzz.strategies import ROUTES, Case, event
from tests.sim.scenario import World

CI_EXAMPLES = 1000


@pytest.fixture(scope="module")
def world():
    w = World()
    yield w, WriteLog(w)
    w.close()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_R1_R4_R5_R6_front_door_survives_fuzzing(world, route):
    w, log = world
    stats = run(w, log, ROUTES[route], CI_EXAMPLES)
    assert stats["problems"] == [], stats["problems"]
    assert stats["inputs"] >= CI_EXAMPLES


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_checker_flags_a_write_from_an_unsigned_input(world, route):
    """Meta-test: the fuzz contract catches an unsigned input that writes (a handler with that bug)."""
    from types import SimpleNamespace

    w, log = world

    def buggy_invoke(function, ev):
        w.env.product_ddb.put_item(TableName=w.env.env["NOTIFY_RAW_TABLE"], Item={"pk": {"S": "planted"}})
        return {"statusCode": 204, "body": ""}

    buggy = SimpleNamespace(env=SimpleNamespace(invoke=buggy_invoke, observer=w.env.observer))
    case = Case(event(ROUTES[route], "1900000101", {}, b"{}"), signed=False, what="meta")
    log.writes.clear()
    problems = check_case(buggy, log, ROUTES[route], case)
    assert any("unsigned input wrote ['NOTIFY_RAW_TABLE']" in p for p in problems), problems
    assert any("unsigned input answered 204" in p for p in problems), problems


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_r40_issue_15_shapes_on_every_notify_route(world, route):
    """Every shape of issue #15 (UTF-16 XML bomb, 150 KB non-UTF-8, signed-looking negative amounts), unsigned
    on every route: refused, no business write, never a 500 (R40)."""
    from tests.fuzz.strategies import HOSTILE_BODIES, MCHID

    w, log = world
    for body in HOSTILE_BODIES:
        case = Case(event(ROUTES[route], MCHID, {}, body), signed=False, what="issue 15 shape")
        log.writes.clear()
        assert check_case(w, log, ROUTES[route], case) == [], body[:60]
