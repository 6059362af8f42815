"""The stdlib log lines (tally/logs.py) and EMF blobs (tally/observability.py) are what Powertools printed
(issue #20 item 4: Powertools left the layer for cold start). Powertools itself is the independent checker here,
test-only (requirements-dev.txt), like wechatpayv3 for the wire formats: the same calls go to both and the lines
must be equal, key order included; only the clock (timestamps) may differ."""

from __future__ import annotations

import io
import json
import re

import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider
from tally import observability as obs
from tally.logs import StructuredLogger
from tally.observability import M, count, metrics

from tally_local.resources import LambdaContext

TIMESTAMP = re.compile(r'"Timestamp":\d{13}')
LOG_TIME = re.compile(r'"timestamp":"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}[+-]\d{4}"')


# ---------------------------------------------------------------------------------------------- EMF


def powertools_emf(counts: list[tuple[str, float, str | None, str | None]], capsys) -> str:
    """What the layer printed with Powertools (observability.py before issue #20): one provider per
    (channel, merchant) cell with its dimension sets, then the service-only provider."""
    plain = AmazonCloudWatchEMFProvider(namespace="Tally", service="tally")
    cells: dict[tuple[str, str | None], AmazonCloudWatchEMFProvider] = {}
    for name, value, channel, merchant in counts:
        if channel is None:
            plain.add_metric(name=name, unit=MetricUnit.Count, value=value)
            continue
        cell = cells.get((channel, merchant))
        if cell is None:
            cell = cells[(channel, merchant)] = AmazonCloudWatchEMFProvider(
                namespace="Tally", service="tally"
            )
            cell.add_dimensions(service="tally", channel=channel)
            if merchant is not None:
                cell.add_dimensions(service="tally", channel=channel, merchant=merchant)
        cell.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for cell in cells.values():
        cell.flush_metrics()
    if plain.metric_set:
        plain.flush_metrics()
    return capsys.readouterr().out


@pytest.fixture()
def listed():
    before = obs._listed
    metrics.clear_metrics()
    yield obs.configure_merchants
    obs.configure_merchants(sorted(before))
    metrics.clear_metrics()


def test_emf_blobs_are_byte_for_byte_powertools(listed, capsys):
    listed(["1900000001"])
    capsys.readouterr()
    for _ in range(3):
        count(M.NOTIFY_ACCEPTED, channel="wechatpay", merchant="1900000001")
    count(M.NOTIFY_REJECTED, channel="alipay", merchant="2088000000000001")  # unlisted: merchant=other
    count(M.PENDING_STALE, 7)  # a gauge, service-only
    count(M.NOTIFY_DUPLICATE, channel="wechatpay", merchant="1900000001")
    count(M.APPLY_BOOKED)
    metrics.flush_metrics()
    ours = capsys.readouterr().out
    theirs = powertools_emf(
        [
            ("NotifyAccepted", 3, "wechatpay", "1900000001"),
            ("NotifyRejected", 1, "alipay", "other"),
            ("PendingOver10m", 7, None, None),
            ("NotifyDuplicate", 1, "wechatpay", "1900000001"),
            ("ApplyBooked", 1, None, None),
        ],
        capsys,
    )
    assert len(ours.splitlines()) == 3  # the wechatpay cell, the alipay cell, the service-only blob
    assert TIMESTAMP.sub("T", ours) == TIMESTAMP.sub("T", theirs)
    assert len(TIMESTAMP.findall(ours)) == 3


def test_emf_without_an_allow_list_and_without_counts(listed, capsys):
    listed([])
    capsys.readouterr()
    metrics.flush_metrics()
    assert capsys.readouterr().out == ""  # a quiet invocation prints nothing (as before: no warning either)
    count(M.POLL_QUERIED, 2, channel="wechatpay-v2", merchant="1900000001")
    metrics.flush_metrics()
    ours = capsys.readouterr().out
    theirs = powertools_emf([("PollQueried", 2, "wechatpay-v2", None)], capsys)
    assert TIMESTAMP.sub("T", ours) == TIMESTAMP.sub("T", theirs)


def test_a_blob_holds_at_most_100_metrics(listed, capsys):
    """The EMF limit (Powertools flushed early at 100); a name is in exactly one blob."""
    capsys.readouterr()
    for i in range(130):
        count(f"Synthetic{i:03d}")
    metrics.flush_metrics()
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [len(b["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for b in blobs] == [100, 30]
    assert sorted(k for b in blobs for k in b if k.startswith("Synthetic")) == [
        f"Synthetic{i:03d}" for i in range(130)
    ]


def test_log_metrics_flushes_when_the_handler_raises(listed, capsys):
    capsys.readouterr()

    @metrics.log_metrics
    def handler(event, context):
        count(M.NOTIFY_FAILED)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        handler({}, None)
    assert [name for name, _ in _names(capsys.readouterr().out)] == ["NotifyFailed"]


def _names(text):
    for line in text.splitlines():
        for metric in json.loads(line)["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
            yield metric["Name"], line


# ---------------------------------------------------------------------------------------------- log lines


@pytest.fixture()
def both():
    """Our logger and Powertools' on two private streams, same service name."""
    ours = StructuredLogger(service="tally-compat", level="INFO")
    theirs = Logger(service="tally-compat-pt", level="INFO")
    streams = io.StringIO(), io.StringIO()
    ours.registered_handler.setStream(streams[0])
    theirs.registered_handler.setStream(streams[1])  # type: ignore[attr-defined]
    yield ours, theirs, streams
    ours.removeHandler(ours.registered_handler)


def _lines(stream):
    out = []
    for line in stream.getvalue().splitlines():
        line = LOG_TIME.sub('"timestamp":"T"', line).replace('"service":"tally-compat-pt"', '"service":"S"')
        out.append(line.replace('"service":"tally-compat"', '"service":"S"'))
    return out


def test_log_lines_are_powertools_lines(both):
    ours, theirs, streams = both
    context = LambdaContext("NotifyFunction", memory_mb=256)

    def handler_of(log):
        @log.inject_lambda_context(clear_state=True)
        def handler(event, context):
            log.append_keys(raw_key="wechatpay#4200000001")
            log.info("payment booked", extra={"order": "1900000001#ORDER-1", "amount_cent": 100})
            log.warning("notification rejected 拒绝", extra={"reason": "bad signature", "hint": None})
            try:
                {}["missing"]
            except KeyError:
                log.exception("apply failed", extra={"raw_key": "wechatpay#4200000001"})
            log.debug("not at INFO")
            log.info("%s orders", 3)
            return "ok"

        return handler

    for log in (ours, theirs):  # one line of source: same location, same traceback
        assert handler_of(log)({}, context) == "ok"
    mine, reference = _lines(streams[0]), _lines(streams[1])
    assert len(mine) == 4
    for a, b in zip(mine, reference, strict=True):
        a_doc, b_doc = json.loads(a), json.loads(b)
        a_doc.pop("cold_start"), b_doc.pop("cold_start")  # Powertools' is per process, ours per logger
        assert list(a_doc) == list(b_doc)
        assert a_doc == b_doc
    assert json.loads(mine[0])["level"] == "INFO" and "hint" not in json.loads(mine[1])


def test_clear_state_drops_the_keys_of_the_invocation_before(both):
    ours, _, streams = both

    @ours.inject_lambda_context(clear_state=True)
    def handler(event, context):
        if event.get("first"):
            ours.append_keys(raw_key="k1")
        ours.info("line")

    handler({"first": True}, LambdaContext("WorkerFunction"))
    handler({}, LambdaContext("WorkerFunction"))
    first, second = (json.loads(line) for line in streams[0].getvalue().splitlines())
    assert first["raw_key"] == "k1" and "raw_key" not in second
    assert (first["cold_start"], second["cold_start"]) == (True, False)


def test_the_level_comes_from_the_environment_as_powertools_read_it():
    from tally.settings import log_level

    assert log_level({}) == "INFO"
    assert log_level({"POWERTOOLS_LOG_LEVEL": "error"}) == "ERROR"
    assert log_level({"POWERTOOLS_LOG_LEVEL": "DEBUG", "AWS_LAMBDA_LOG_LEVEL": "WARN"}) == "WARNING"
    assert log_level({"LOG_LEVEL": "nonsense"}) == "INFO"
