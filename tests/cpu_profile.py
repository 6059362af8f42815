"""CPU per test file, for tuning the fast lane (docs/gates.md): `pytest -p tests.cpu_profile ...` writes
one JSON line per test (file, test, CPU seconds of the worker process: setup + call + teardown, every
thread of the process, so the simulator's and moto's server threads count) to $TALLY_CPU_PROFILE
(default /tmp/tally-cpu-profile.jsonl), appended by every xdist worker; `python -m tests.cpu_profile`
prints the files by CPU. Wall time (pytest --durations) says little on a shared machine; CPU does.
A module- or session-scoped fixture is counted in the test that first needs it (and torn down in the
last), so per file the sum is right."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict

import pytest

PATH = os.environ.get("TALLY_CPU_PROFILE", "/tmp/tally-cpu-profile.jsonl")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, wall = time.process_time(), time.monotonic()
    yield
    row = {
        "file": item.location[0],
        "test": item.nodeid,
        "cpu": round(time.process_time() - cpu, 4),
        "wall": round(time.monotonic() - wall, 4),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(PATH, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def main(path: str = PATH, top: int = 40) -> None:
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    tests = []
    with open(path, encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            cpu[row["file"]] += row["cpu"]
            wall[row["file"]] += row["wall"]
            count[row["file"]] += 1
            tests.append((row["cpu"], row["test"]))
    print(
        f"{sum(cpu.values()):.1f} s CPU, {sum(wall.values()):.1f} s wall in tests, {sum(count.values())} tests"
    )
    print(f"{'CPU s':>7} {'wall s':>7} {'tests':>5}  file")
    for name in sorted(cpu, key=cpu.get, reverse=True)[:top]:  # type: ignore[arg-type]
        print(f"{cpu[name]:7.1f} {wall[name]:7.1f} {count[name]:5d}  {name}")
    print("\nheaviest tests (CPU s):")
    for seconds, test in sorted(tests, reverse=True)[:top]:
        print(f"{seconds:7.2f}  {test}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
