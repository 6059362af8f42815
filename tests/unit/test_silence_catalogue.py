"""The silence catalogue (docs/silence.md) is checkable (R37, R38): every failure mode names a proof test
that exists, a metric the code declares and emits, and an alarm in template.yaml watching that metric."""

import pathlib
import re

import pytest
from tally.observability import M

from tally_local.resources import load_template

ROOT = pathlib.Path(__file__).resolve().parents[2]


def rows():
    table = [line for line in (ROOT / "docs/silence.md").read_text().splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table[1:]]  # after the header


CATALOGUE = rows()
DECLARED = {v for k, v in vars(M).items() if k.isupper()}
RESOURCES = load_template(ROOT / "template.yaml")["Resources"]


def test_the_catalogue_covers_the_named_failure_modes():
    modes = " ".join(row[0] for row in CATALOGUE)
    for needed in (
        "after the ACK",
        "lost callback",
        "tenant collision",
        "yuan/cents",
        "coupon",
        "unknown state",
        "paid after close",
        "rollback",
        "outside the transaction",
        "accepted taken as success",
        "regenerated",
        "over-refund",
        "FAIL rolled back",
        "zero-row bill",
        "changed bill format",
        "volume drop",
        "day cut",
        "fees",
        "wrong merchant",
        "certificate rotation",
        "undecryptable",
        "endless polling",
        "forgotten diffs",
        "nobody emits",
        "DLQ",
    ):
        assert needed in modes, needed


@pytest.mark.parametrize("mode,row,metric,alarm,proof", CATALOGUE, ids=[r[0] for r in CATALOGUE])
def test_R38_each_failure_mode_has_row_metric_alarm_and_a_proof(mode, row, metric, alarm, proof):
    path, name = proof.split("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"def {re.escape(name)}\(", source), f"{mode}: proof {proof} does not exist"
    if metric != "-":
        assert metric in DECLARED, f"{mode}: {metric} is not a metric the code declares"
    if alarm != "-":
        props = RESOURCES[alarm]["Properties"]
        assert RESOURCES[alarm]["Type"] == "AWS::CloudWatch::Alarm"
        if props.get("Namespace") == "Tally":
            assert props["MetricName"] == metric, (
                f"{mode}: {alarm} watches {props['MetricName']}, not {metric}"
            )
