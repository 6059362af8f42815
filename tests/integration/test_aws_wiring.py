"""Production wiring on the handlers (issue #16): heartbeats, per-stack secrets, clients, routing."""

from __future__ import annotations

from tally import bootstrap


def test_r46_a_recon_tick_with_nothing_to_reconcile_still_beats_the_heartbeat(h):
    """No merchant configured: the scheduled tick finishes, reconciles nothing, and counts ReconRunCompleted,
    so ReconNotRunAlarm stays quiet on a stack that has no merchant yet (and fires when ticks stop)."""
    assert list(bootstrap.recon_service().merchants()) == []
    result = h.invoke(
        "ReconFunction", {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
    )
    assert result == {"runs": []}
    assert h.metric("ReconRunCompleted") == 1
    assert h.series("ReconRunCompleted") == 1  # the service-only series the alarm watches
