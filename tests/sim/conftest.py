"""The CI slice prints the coverage matrix of the days it ran (tests/sim/coverage.py); under xdist each worker
keeps its own, so run `pytest -n 0 tests/sim` (or `make soak`) to see it."""

from __future__ import annotations

from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.sim import coverage

    if coverage.SESSION:
        terminalreporter.section("simulation coverage matrix (issue #15 item 6)")
        terminalreporter.write_line(coverage.render(coverage.SESSION))
        terminalreporter.write_line(coverage.render_gaps(coverage.SESSION))
