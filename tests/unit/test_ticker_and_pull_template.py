"""The local EventBridge ticker, and the pull side's template promises (R21, R25, R37)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tally_local.resources import load_template
from tally_local.ticker import (
    Schedule,
    ScheduleTicker,
    rate_seconds,
    scheduled_event,
    schedules_from_template,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def template():
    return load_template(ROOT / "template.yaml")


def test_R21_poller_runs_every_minute_from_the_template(template):
    (schedule,) = [s for s in schedules_from_template(template, ROOT) if s.function == "PollerFunction"]
    assert (schedule.expression, schedule.every_s) == ("rate(1 minute)", 60)
    assert schedule.timeout_s == 60


@pytest.mark.parametrize(
    "expression, seconds",
    [
        ("rate(1 minute)", 60),
        ("rate(5 minutes)", 300),
        ("rate(2 hours)", 7200),
        ("rate(1 day)", 86400),
        ("cron(0 10 * * ? *)", None),
    ],
)
def test_rate_expressions(expression, seconds):
    assert rate_seconds(expression) == seconds


def test_scheduled_event_is_eventbridge_shaped():
    event = scheduled_event(Schedule("PollerFunction", "EveryMinute", "rate(1 minute)", 60), now=0)
    assert event["detail-type"] == "Scheduled Event" and event["source"] == "aws.events"
    assert event["time"] == "1970-01-01T00:00:00Z" and event["detail"] == {}
    assert event["resources"][0].startswith("arn:aws:events:us-east-1:")


def test_ticker_invokes_on_its_compressed_schedule_and_survives_a_failing_handler():
    seen, enough = [], threading.Event()

    def handler(event, context):
        seen.append((event["detail-type"], context.function_name))
        if len(seen) >= 3:
            enough.set()
        if len(seen) == 1:
            raise RuntimeError("first run fails; the schedule goes on")
        return "ok"

    ticker = ScheduleTicker([(Schedule("F", "E", "rate(1 minute)", 60), handler)], scale=0.001).start()
    try:
        assert enough.wait(10)
    finally:
        ticker.stop()
    assert seen[0] == ("Scheduled Event", "F") and ticker.runs["F"] >= 3
    assert ticker.fire("F") == "ok"
    with pytest.raises(KeyError):
        ticker.fire("Nope")


def test_R21_no_function_may_scan(template):
    """Never a scan of business tables (R21): not even the permission for one."""
    for lid, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for policy in resource["Properties"].get("Policies", []):
            for statement in policy["Statement"]:
                actions = (
                    statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                )
                if "dynamodb:Scan" in actions:  # only the small configuration table may be listed whole
                    assert statement["Resource"] == {"Fn::GetAtt": ["MerchantsTable", "Arn"]}, lid


def test_R21_poller_may_query_only_the_sparse_indexes(template):
    statements = template["Resources"]["PollerFunction"]["Properties"]["Policies"][0]["Statement"]
    (query,) = [s for s in statements if "dynamodb:Query" in s["Action"]]
    assert query["Resource"] == [
        {"Fn::Sub": "${OrdersTable.Arn}/index/by_poll"},
        {"Fn::Sub": "${OrdersTable.Arn}/index/by_hold"},
        {"Fn::Sub": "${NotifyRawTable.Arn}/index/by_pending"},
        {"Fn::Sub": "${RefundsTable.Arn}/index/by_poll"},
        {"Fn::Sub": "${RefundTasksTable.Arn}/index/by_status"},
        # the work queue's sparse indexes: the morning number counts its open items (R41)
        {"Fn::Sub": "${NotifyEventTable.Arn}/index/manual"},
        {"Fn::Sub": "${RefundRawTable.Arn}/index/by_manual"},
        {"Fn::Sub": "${ReconDiffTable.Arn}/index/by_open"},
        {"Fn::Sub": "${ReconRunsTable.Arn}/index/by_blocked"},
        {"Fn::Sub": "${RefundRawTable.Arn}/index/by_pending"},  # refund reports the sweeper re-queues (L2)
    ]


@pytest.mark.parametrize("metric", ["PendingOver10m", "ManualOver24h"])
def test_R25_R37_morning_number_alarms_breach_on_any_row_or_on_silence(template, metric):
    (alarm,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") == metric
    ]
    assert (alarm["Namespace"], alarm["Statistic"], alarm["Threshold"]) == ("Tally", "Maximum", 1)
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "breaching"  # the poller stopped publishing: that is an alarm too
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]
