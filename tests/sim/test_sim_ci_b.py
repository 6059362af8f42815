"""Second CI slice of the simulation (see test_sim_ci.py); a separate file so xdist runs it in parallel."""

from __future__ import annotations

import pytest

from tests.sim import day as d
from tests.sim.ci import failures_in
from tests.sim.scenario import World

CI_SEEDS = range(100, 130)
MICRO_SEEDS = range(120, 240)


@pytest.fixture(scope="module")
def world():
    w = World()
    yield w
    w.close()


def test_R7_R9_R12_R17_R18_seeded_days_keep_every_invariant(world):
    assert failures_in(world, CI_SEEDS, "tiny") == []


def test_R7_R9_R12_R17_R18_R27_micro_days_keep_every_invariant(world):
    assert failures_in(world, MICRO_SEEDS, "micro") == []


def test_crash_between_raw_write_and_enqueue_is_recovered_by_redelivery(world):
    """A day whose plan crashes the notify λ right after the raw put: the channel's retry enqueues it."""
    for seed in range(5000, 6000):
        day = d.generate(seed, d.TINY)
        if any(f.kind == "crash" and f.operation == "PutItem" and f.phase == "after" for f in day.aws_faults):
            result = world.run(seed, d.TINY)
            if result.faults["aws dynamodb.PutItem[notify_raw] crash after"]:
                assert result.ok, result.violations
                return
    pytest.fail("no seed in 5000..5999 fired the crash")
