"""Alarm wiring proved statically (R37, R38): no alarm on a metric nobody emits, no failure metric unwatched."""

import pathlib
import re

from tally.observability import ALARMED, M

from tally_local.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tally_alarms():
    resources = load_template(ROOT / "template.yaml")["Resources"]
    return {r["Properties"]["MetricName"]: r["Properties"] for r in resources.values()
            if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Namespace") == "Tally"}


def emitted_names():
    """Metric names the code really emits: count(M.X) call sites in the product code."""
    source = "\n".join(p.read_text() for p in (ROOT / "layers/common/tally").rglob("*.py"))
    source += "\n".join(p.read_text() for p in (ROOT / "functions").rglob("*.py"))
    used = set(re.findall(r"count\(M\.([A-Z_]+)", source))
    return {getattr(M, attr) for attr in used}


def test_R38_every_alarm_watches_a_metric_the_code_emits():
    assert set(tally_alarms()) <= emitted_names()


def test_R38_every_failure_metric_has_an_alarm():
    assert ALARMED <= set(tally_alarms())
    assert ALARMED <= emitted_names()


def test_alarms_use_the_dimension_the_code_emits():
    for name, props in tally_alarms().items():
        dims = {d["Name"]: d["Value"] for d in props.get("Dimensions", [])}
        assert dims == {"service": "tally"}, name


def test_dashboard_shows_only_metrics_the_code_declares_and_the_morning_number():
    import json

    resources = load_template(ROOT / "template.yaml")["Resources"]
    body = resources["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    widgets = json.loads(body.replace("${AWS::Region}", "r").replace("${ApplyDLQ.QueueName}", "q")
                         .replace("${OutboxDLQ.QueueName}", "q"))["widgets"]
    shown = {m[1] for w in widgets for m in w["properties"]["metrics"] if m[0] == "Tally"}
    declared = {v for k, v in vars(M).items() if k.isupper()}
    assert shown <= declared
    assert {"PendingOver10m", "ManualOver24h", "ApplyManual", "NotifyRejected", "ApplyFailed", "ReconBlocked"} <= shown


def test_runbook_has_a_section_for_every_alarm():
    runbook = (ROOT / "docs/runbook.md").read_text()
    resources = load_template(ROOT / "template.yaml")["Resources"]
    for lid, resource in resources.items():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            assert f"## {lid}\n" in runbook, f"docs/runbook.md has no section for {lid}"
