"""The EMF blobs of `count()` (tally/observability.py: per-invocation sums handed to Powertools' EMF provider,
one provider cell per (channel, merchant)) are the blobs of plain Powertools providers given the summed values:
the same names, dimension sets, order and values, byte for byte but for the clock. And the product's logger is
Powertools' Logger with the keys the handlers rely on (clear_state drops an earlier invocation's keys)."""

from __future__ import annotations

import io
import json
import re

import pytest
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider
from tally import observability as obs
from tally.observability import M, count, logger, metrics

from tally_local.resources import LambdaContext

TIMESTAMP = re.compile(r'"Timestamp":\d{13}')
LOG_TIME = re.compile(r'"timestamp":"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}[+-]\d{4}"')


# ---------------------------------------------------------------------------------------------- EMF


def powertools_emf(counts: list[tuple[str, float, str | None, str | None]], capsys) -> str:
    """Plain Powertools providers: one per (channel, merchant) cell with its dimension sets, then the
    service-only provider."""
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
def lines():
    """The product logger (Powertools' Logger) on a private stream."""
    stream = io.StringIO()
    before = logger.registered_handler.setStream(stream)  # type: ignore[attr-defined]
    yield stream
    logger.registered_handler.setStream(before)  # type: ignore[attr-defined]


def test_the_product_logger_is_powertools_logger():
    from aws_lambda_powertools import Logger

    assert isinstance(logger, Logger) and logger.service == "tally"


def test_a_line_carries_the_invocation_and_its_keys(lines):
    context = LambdaContext("NotifyFunction", memory_mb=256)

    @logger.inject_lambda_context(clear_state=True)
    def handler(event, context):
        logger.append_keys(raw_key="wechatpay#4200000001")
        logger.info("payment booked", extra={"order": "1900000001#ORDER-1", "amount_cent": 100})
        logger.warning("notification rejected 拒绝", extra={"reason": "bad signature", "hint": None})
        try:
            {}["missing"]
        except KeyError:
            logger.exception("apply failed", extra={"raw_key": "wechatpay#4200000001"})
        return "ok"

    assert handler({}, context) == "ok"
    booked, rejected, failed = (json.loads(line) for line in lines.getvalue().splitlines())
    assert LOG_TIME.search(lines.getvalue())  # Powertools' timestamp format, as docs/observability.md shows
    assert (booked["level"], booked["message"], booked["service"]) == ("INFO", "payment booked", "tally")
    assert booked["function_name"] == "NotifyFunction" and booked["function_memory_size"] == 256
    assert (booked["raw_key"], booked["order"], booked["amount_cent"]) == (
        "wechatpay#4200000001",
        "1900000001#ORDER-1",
        100,
    )
    assert rejected["message"] == "notification rejected 拒绝" and "hint" not in rejected
    assert failed["exception_name"] == "KeyError" and failed["level"] == "ERROR"


def test_clear_state_drops_the_keys_of_the_invocation_before(lines):
    @logger.inject_lambda_context(clear_state=True)
    def handler(event, context):
        if event.get("first"):
            logger.append_keys(raw_key="k1")
        logger.info("line")

    handler({"first": True}, LambdaContext("WorkerFunction"))
    handler({}, LambdaContext("WorkerFunction"))
    first, second = (json.loads(line) for line in lines.getvalue().splitlines())
    assert first["raw_key"] == "k1" and "raw_key" not in second


def test_later_flushes_of_a_cell_are_still_byte_for_byte_powertools(listed, capsys):
    """A cell's later flushes take the settled unit and resolution and the line shape Powertools serialised
    once (no add_metric or serialisation per callback): still the blob of a fresh Powertools provider, for
    every mix of names, order and value, a shape seen before or new."""
    listed(["1900000001"])
    rounds = [
        [("NotifyAccepted", 1, "wechatpay", "1900000001"), ("NotifyRejected", 2, "wechatpay", "other")],
        [("NotifyAccepted", 3, "wechatpay", "1900000001")],
        [("NotifyAccepted", 1, "wechatpay", "1900000001"), ("NotifyRejected", 2, "wechatpay", "other")],
        [
            ("NotifyRejected", 5, "wechatpay", "1900000001"),
            ("NotifyAccepted", 12345, "wechatpay", "1900000001"),
        ],
        [("NotifyAccepted", 1, "wechatpay", "1900000001")],
    ]
    for counts in rounds:
        capsys.readouterr()
        for name, value, channel, merchant in counts:
            count(name, value, channel=channel, merchant="1900000009" if merchant == "other" else merchant)
        metrics.flush_metrics()
        ours = capsys.readouterr().out
        assert TIMESTAMP.sub("T", ours) == TIMESTAMP.sub("T", powertools_emf(counts, capsys))
        assert len(TIMESTAMP.findall(ours)) == len({c[3] for c in counts})


def _keys_of(decorator, lines, events):
    @decorator
    def handler(event, context):
        if event.get("quarantined"):
            logger.append_keys(raw_key="wechatpay#4200000001", order="1900000001#ORDER-1")
        logger.info("line")

    for i, event in enumerate(events):
        context = LambdaContext("NotifyFunction", memory_mb=512)
        context.aws_request_id = f"req-{i}"
        handler(event, context)
    found = [json.loads(line) for line in lines.getvalue().splitlines()]
    lines.seek(0)
    lines.truncate()
    return [{k: v for k, v in line.items() if k != "timestamp"} for line in found]


def test_notify_lean_context_logs_what_inject_lambda_context_logs(lines, monkeypatch):
    """functions/notify's `lean_lambda_context`: every line carries the same keys and values as under
    Powertools' inject_lambda_context(clear_state=True), a quarantined callback's keys are gone from the next
    invocation's lines, and cold_start is true on the container's first invocation only."""
    from aws_lambda_powertools.logging import logger as powertools_logger

    events = [{}, {"quarantined": True}, {}, {}]
    monkeypatch.setattr(powertools_logger, "is_cold_start", True)
    theirs = _keys_of(logger.inject_lambda_context(clear_state=True), lines, events)
    ours = _keys_of(obs.lean_lambda_context, lines, events)
    assert ours == theirs
    assert [line["cold_start"] for line in ours] == [True, False, False, False]
    assert [line["function_request_id"] for line in ours] == ["req-0", "req-1", "req-2", "req-3"]
    assert "raw_key" in ours[1] and "raw_key" not in ours[2]
