"""Alarm wiring proved statically (R37, R38): no alarm on a metric nobody emits, no failure metric unwatched."""

import pathlib
import re

from tally.observability import ALARMED, M

from tally_local.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tally_alarms():
    resources = load_template(ROOT / "template.yaml")["Resources"]
    return {
        r["Properties"]["MetricName"]: r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("Namespace") == "Tally"
    }


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
    widgets = json.loads(
        body.replace("${AWS::Region}", "r")
        .replace("${ApplyDLQ.QueueName}", "q")
        .replace("${OutboxDLQ.QueueName}", "q")
    )["widgets"]
    shown = {m[1] for w in widgets for m in w["properties"]["metrics"] if m[0] == "Tally"}
    declared = {v for k, v in vars(M).items() if k.isupper()}
    assert shown <= declared
    assert {
        "PendingOver10m",
        "ManualOver24h",
        "ApplyManual",
        "NotifyRejected",
        "ApplyFailed",
        "ReconBlocked",
    } <= shown


def test_runbook_has_a_section_for_every_alarm():
    runbook = (ROOT / "docs/runbook.md").read_text()
    resources = load_template(ROOT / "template.yaml")["Resources"]
    for lid, resource in resources.items():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            assert f"## {lid}\n" in runbook, f"docs/runbook.md has no section for {lid}"


def _dashboard_widgets():
    import json

    resources = load_template(ROOT / "template.yaml")["Resources"]
    body = resources["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    return json.loads(
        body.replace("${AWS::Region}", "r")
        .replace("${ApplyDLQ.QueueName}", "q")
        .replace("${OutboxDLQ.QueueName}", "q")
    )["widgets"]


def _emitted_series(capsys):
    """Count every alarmed metric three ways (with a listed merchant, with junk, without dimensions) and
    return what CloudWatch would store: (name, value, dimensions) per dimension set of every blob."""
    from tally import observability as obs
    from tally.observability import count, metrics

    from tally_local.lambda_io import emf_series

    before = obs._listed
    metrics.clear_metrics()
    capsys.readouterr()
    try:
        obs.configure_merchants(["1900000001"])
        for name in tally_alarms():
            count(name, channel="alipay", merchant="1900000001")
            count(name, channel="not-a-channel", merchant="not-listed")
            count(name)
        metrics.flush_metrics()
        return list(emf_series(capsys.readouterr().out))
    finally:
        obs.configure_merchants(sorted(before))


EMITTED_DIMENSION_SETS = {
    frozenset({"service"}),
    frozenset({"service", "channel"}),
    frozenset({"service", "channel", "merchant"}),
}


def test_R38_alarms_watch_a_dimension_set_the_code_emits_and_see_dimensioned_counts(capsys):
    """An alarm matches one series exactly (name + all its dimensions). Counts made with channel/merchant
    must still reach the service-only series the alarms watch, in full."""
    series = _emitted_series(capsys)
    assert {frozenset(dims) for _, _, dims in series} == EMITTED_DIMENSION_SETS
    for name, props in tally_alarms().items():
        watched = {d["Name"]: d["Value"] for d in props.get("Dimensions", [])}
        assert frozenset(watched) in EMITTED_DIMENSION_SETS, name
        assert sum(v for n, v, dims in series if n == name and dims == watched) == 3, name


def test_dashboard_shows_ack_outcomes_per_channel_on_series_the_code_emits():
    from tally.observability import CHANNELS, OTHER

    lines = [m for w in _dashboard_widgets() for m in w["properties"]["metrics"] if m[0] == "Tally"]
    per_channel = set()
    for line in lines:
        pairs = (
            line[2:-1] if isinstance(line[-1], dict) else line[2:]
        )  # a trailing {"label": …} is no dimension
        dims = dict(zip(pairs[::2], pairs[1::2], strict=True))
        assert frozenset(dims) in EMITTED_DIMENSION_SETS, line
        assert dims["service"] == "tally", line
        if "channel" in dims:
            assert dims["channel"] in (*CHANNELS, OTHER), line
            per_channel.add((line[1], dims["channel"]))
    for outcome in ("NotifyAccepted", "NotifyDuplicate", "NotifyRejected", "NotifyQuarantined"):
        assert {(outcome, c) for c in (*CHANNELS, OTHER)} <= per_channel, outcome
    searches = [
        m[0]["expression"]
        for w in _dashboard_widgets()
        for m in w["properties"]["metrics"]
        if isinstance(m[0], dict) and "SEARCH(" in m[0].get("expression", "")
    ]
    assert searches and all("{Tally,channel,merchant,service}" in s for s in searches)
