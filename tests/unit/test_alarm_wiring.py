"""Alarm wiring proved statically (R37, R38): no alarm on a metric nobody emits, no failure metric unwatched."""

import json
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
    from tally.observability import OTHER, channel_words

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
            assert dims["channel"] in (*channel_words(), OTHER), line
            per_channel.add((line[1], dims["channel"]))
    for outcome in ("NotifyAccepted", "NotifyDuplicate", "NotifyRejected", "NotifyQuarantined"):
        assert {(outcome, c) for c in (*channel_words(), OTHER)} <= per_channel, outcome
    searches = [
        m[0]["expression"]
        for w in _dashboard_widgets()
        for m in w["properties"]["metrics"]
        if isinstance(m[0], dict) and "SEARCH(" in m[0].get("expression", "")
    ]
    assert searches and all("{Tally,channel,merchant,service}" in s for s in searches)


# ------------------------------------------------------------------------------ R46: every failure is alarmed

# AWS's own metrics (what Lambda and API Gateway publish): one failed invocation / one 5xx counts once.
AWS_EMISSION = {
    ("AWS/Lambda", "Errors"): ("per occurrence", 0, 1),
    ("AWS/Lambda", "Throttles"): ("per occurrence", 0, 1),
    ("AWS/ApiGateway", "5xx"): ("per occurrence", 0, 1),
    # a gauge, every minute while the queue is active (SQS stops publishing 6 h after the last access)
    ("AWS/SQS", "ApproximateNumberOfMessagesVisible"): ("gauge", 60, 1),
    # seconds the oldest message has waited: a message its consumer cannot handle reads > 900 after 15 min
    ("AWS/SQS", "ApproximateAgeOfOldestMessage"): ("gauge", 60, 901),
    # the outbox's oldest pending change, ms (a gauge per batch; a stuck stream reads > 300000 after 5 min)
    ("AWS/Lambda", "IteratorAge"): ("gauge", 60, 300001),
}
FIRING = {"GreaterThanOrEqualToThreshold": 0, "GreaterThanThreshold": 1}  # integer counts: T or T+1 needed
HEARTBEAT = {"LessThanThreshold", "LessThanOrEqualToThreshold"}


def emission_of(props):
    """(every_s, per) of the metric an alarm watches, from observability.EMISSION or AWS_EMISSION."""
    from tally.observability import EMISSION

    if props["Namespace"] == "Tally":
        assert props["MetricName"] in EMISSION, (
            f"{props['MetricName']}: declare its emission in tally.observability.EMISSION"
        )
        em = EMISSION[props["MetricName"]]
        return em.every_s, em.per
    key = (props["Namespace"], props["MetricName"])
    assert key in AWS_EMISSION, f"{key}: declare its emission in AWS_EMISSION"
    return AWS_EMISSION[key][1:]


def unreachable(props, every_s, per):
    """Why this alarm's period/threshold/datapoints cannot be met by a metric emitted `per` every `every_s`
    seconds (0: once per occurrence) from the smallest failing source; None when they can (R46).

    Schedules drift across period boundaries, so an emission every I seconds is guaranteed only
    floor(P / I) - 1 times in a period of P, and in floor(N * P / I) - 1 periods of N when I >= P."""
    period, n = props["Period"], props["EvaluationPeriods"]
    d = props.get("DatapointsToAlarm", n)
    threshold, op = props["Threshold"], props["ComparisonOperator"]
    actions = {json.dumps(a) for a in props.get("AlarmActions", [])}
    if '{"Ref": "AlarmTopic"}' not in actions:
        return "notifies nobody"
    if op in HEARTBEAT:
        if props.get("TreatMissingData") == "missing":
            if '{"Ref": "AlarmTopic"}' not in {
                json.dumps(a) for a in props.get("InsufficientDataActions", [])
            }:
                return "a stopped heartbeat goes INSUFFICIENT_DATA and notifies nobody"
        elif props.get("TreatMissingData") != "breaching":
            return "a stopped heartbeat is missing data, and missing data does not breach"
        if per < threshold + (1 if op == "LessThanOrEqualToThreshold" else 0):
            return "a healthy heartbeat is below the threshold"
        if d * period < every_s + period:
            return f"the heartbeat's normal {every_s} s gap fills {d} periods of {period} s: it alarms when healthy"
        return None
    need = threshold + FIRING[op]
    if props.get("TreatMissingData") == "breaching" and not (0 < every_s <= period):
        return "missing data breaches, but the metric is not emitted every period"
    if every_s == 0:  # one occurrence is all a failure may give
        if d != 1:
            return f"one occurrence fills one period, the alarm needs {d}"
        return None if per >= need else f"one occurrence counts {per}, the alarm needs {need}"
    sums = props.get("Statistic") == "Sum"
    most = per * (-(-period // every_s) if sums else 1)
    least = per * (max(period // every_s - 1, 0) if sums else (1 if every_s < period else 0))
    if d == 1:
        return None if most >= need else f"a period holds at most {most}, the alarm needs {need}"
    if least >= need:
        return None
    if every_s >= period and per >= need and (n * period) // every_s - 1 >= d:
        return None
    return f"one source fills at most {(n * period) // every_s - 1} of {n} periods with {per}, the alarm needs {d} with {need}"


def all_alarms():
    resources = load_template(ROOT / "template.yaml")["Resources"]
    return {lid: r["Properties"] for lid, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


def test_R46_every_alarm_can_be_met_by_the_rate_its_metric_is_emitted_at():
    problems = {lid: unreachable(props, *emission_of(props)) for lid, props in all_alarms().items()}
    assert {lid: why for lid, why in problems.items() if why} == {}


def test_R46_the_arithmetic_refuses_alarms_that_can_never_fire():
    """The check above is not vacuous: the alarms of issue #16 fail it, and so would a slow heartbeat."""
    from tally.observability import EMISSION, M

    cert = {**all_alarms()["PlatformCertRefreshFailedAlarm"], "DatapointsToAlarm": 3, "Threshold": 3}
    assert "at most" in unreachable(cert, EMISSION[M.CERT_REFRESH_FAILED].every_s, 1)
    every_hour_of_three = {**cert, "Threshold": 1}  # 3 of 3 hourly periods: a drifting schedule misses one
    assert unreachable(every_hour_of_three, 3600, 1)
    recon = all_alarms()["ReconNotRunAlarm"]
    assert unreachable({**recon, "EvaluationPeriods": 12, "DatapointsToAlarm": 12}, 18 * 3600, 1)
    assert unreachable({**recon, "TreatMissingData": "notBreaching"}, 18 * 3600, 1)
    assert unreachable({**recon, "InsufficientDataActions": []}, 18 * 3600, 1)
    rejected = all_alarms()["NotifyRejectedAlarm"]
    assert unreachable({**rejected, "Threshold": 2}, 0, 1)
    assert unreachable({**rejected, "AlarmActions": []}, 0, 1)


def _transformed():
    from tests.integration.template_helpers import sam_transform

    return sam_transform(load_template(ROOT / "template.yaml"), "us-east-1")["Resources"]


def lambda_alarms(resources, metric):
    return {
        r["Properties"]["Dimensions"][0]["Value"]["Ref"]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and r["Properties"].get("Namespace") == "AWS/Lambda"
        and r["Properties"]["MetricName"] == metric
        and [d["Name"] for d in r["Properties"]["Dimensions"]] == ["FunctionName"]
    }


def test_R46_every_function_has_an_errors_and_a_throttles_alarm():
    """On the transformed template: every AWS::Lambda::Function SAM generates, whoever added it."""
    resources = _transformed()
    functions = {lid for lid, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    assert {"NotifyFunction", "WorkerFunction", "OutboxFunction", "ReconFunction"} <= functions
    assert functions - lambda_alarms(resources, "Errors") == set(), "functions without an Errors alarm"
    assert functions - lambda_alarms(resources, "Throttles") == set(), "functions without a Throttles alarm"


def test_R46_every_http_api_stage_has_a_5xx_alarm():
    resources = _transformed()
    apis = {lid for lid, r in resources.items() if r["Type"] == "AWS::ApiGatewayV2::Api"}
    stages = {
        r["Properties"]["ApiId"]["Ref"]: r["Properties"]["StageName"]
        for r in resources.values()
        if r["Type"] == "AWS::ApiGatewayV2::Stage"
    }
    watched = {
        (dims["ApiId"]["Ref"], dims["Stage"])
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and r["Properties"].get("Namespace") == "AWS/ApiGateway"
        and r["Properties"]["MetricName"] == "5xx"
        for dims in [{d["Name"]: d["Value"] for d in r["Properties"]["Dimensions"]}]
    }
    assert apis and {(api, stages[api]) for api in apis} <= watched
