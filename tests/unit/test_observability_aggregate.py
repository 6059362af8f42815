"""count() sums per invocation and prints one value per series at the flush (issue #20 item 4): the EMF blobs
keep their names, dimension sets and shape; only n samples of 1 become one sample of n."""

from __future__ import annotations

import json
import threading

import pytest
from tally import observability as obs
from tally.observability import M, count, metrics

from tally_local.lambda_io import emf_metrics, emf_series


@pytest.fixture()
def emitted(capsys):
    before = obs._listed
    metrics.clear_metrics()
    capsys.readouterr()

    def flush() -> str:
        metrics.flush_metrics()
        return capsys.readouterr().out

    yield flush
    obs.configure_merchants(sorted(before))
    metrics.clear_metrics()


def blobs(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{") and '"_aws"' in line]


def test_nothing_is_serialized_before_the_flush(emitted, capsys):
    count(M.NOTIFY_ACCEPTED, channel="wechatpay", merchant="1900000001")
    count(M.PENDING_STALE, 2)
    assert len(obs._pending) == 2 and capsys.readouterr().out == ""  # a dict addition, nothing printed
    assert sorted(n for n, _ in emf_metrics(emitted())) == ["NotifyAccepted", "PendingOver10m"]


def test_repeated_counts_are_one_summed_value_per_series(emitted):
    obs.configure_merchants([])
    for _ in range(3):
        count(M.POLL_QUERIED, channel="wechatpay", merchant="1900000001")
    count(M.POLL_QUERIED, channel="alipay", merchant="2021000000000001")
    count(M.POLL_ORDERS_READ, 7)
    count(M.POLL_ORDERS_READ, 5)
    out = blobs(emitted())
    by_channel = {b.get("channel"): b for b in out}
    assert by_channel["wechatpay"]["PollQueried"] == [3.0]
    assert by_channel["alipay"]["PollQueried"] == [1.0]
    assert by_channel[None]["PollOrdersRead"] == [12.0]
    assert by_channel[None]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    assert by_channel["wechatpay"]["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [
        {"Name": "PollQueried", "Unit": "Count"}
    ]


def test_counts_from_many_threads_are_never_lost(emitted):
    """The poller counts from its worker threads (service/poll.py)."""

    def hammer():
        for _ in range(2000):
            count(M.POLL_QUERIED, channel="wechatpay", merchant="x")

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    series = emf_series(emitted())
    assert sum(v for n, v, d in series if n == "PollQueried" and d == {"service": "tally"}) == 16000


def test_clear_drops_what_was_counted_and_not_flushed(emitted):
    count(M.NOTIFY_REJECTED)
    metrics.clear_metrics()
    count(M.NOTIFY_ACCEPTED)
    assert [n for n, _ in emf_metrics(emitted())] == ["NotifyAccepted"]


def test_a_gauge_read_twice_in_one_invocation_keeps_the_larger_reading(emitted):
    """PendingOver10m, ManualOver24h, HeartbeatAge and HeartbeatEchoAge alarm on Maximum: summing two readings
    would raise a false alarm; the larger one is what two samples' Maximum was."""
    count(M.PENDING_STALE, 3)
    count(M.PENDING_STALE, 1)
    count(M.HEARTBEAT_AGE, 0)
    (blob,) = blobs(emitted())
    assert blob["PendingOver10m"] == [3.0] and blob["HeartbeatAge"] == [0.0]
    assert obs.GAUGES == {M.PENDING_STALE, M.MANUAL_AGED, M.HEARTBEAT_AGE, M.HEARTBEAT_ECHO_AGE}
