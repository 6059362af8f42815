"""An invocation that counted nothing (a quiet poller tick, an empty batch) flushes without Powertools'
"No application metrics to publish" UserWarning: on Lambda it is a log line per quiet invocation, and in
`make run` it was the first thing an operator saw (found trying the README's commands)."""

from __future__ import annotations

import warnings

from tally.observability import metrics


def test_an_invocation_without_metrics_flushes_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics.flush_metrics()
