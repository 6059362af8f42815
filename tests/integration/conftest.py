"""Fixtures shared by integration test modules (the AWS account, the simulator and the harness are in
tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tally import bootstrap

from tests.integration.toy_functions import make_toy_root


@pytest.fixture
def toy_root(tmp_path: Path) -> Path:
    """template.yaml and toy handlers in a functions tree of their own (the embedded stack's plumbing)."""
    return make_toy_root(tmp_path)


@pytest.fixture
def svc(h):
    """The recon service, with the metrics singleton emptied of whatever an earlier test counted and never
    flushed."""
    from tally.observability import metrics

    metrics.flush_metrics()
    h.capsys.readouterr()
    h.metric_log.clear()
    return bootstrap.recon_service()
