"""The worker's partial batch response, Powertools' BatchProcessor: every record is tried, the ones that raised are
reported by messageId (SQS redelivers only those), an all-failed batch is reported like any other (not raised),
and a failure is still counted and logged where it was before."""

from __future__ import annotations

import importlib.util
import io
import json

import pytest
from tally import bootstrap
from tally.observability import M, logger, metrics

from tally_local.lambda_io import emf_metrics
from tally_local.resources import LambdaContext
from tests.conftest import ROOT


@pytest.fixture()
def worker(monkeypatch):
    spec = importlib.util.spec_from_file_location("worker_app_under_test", ROOT / "functions/worker/app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Outcome:
        value = "booked"

    class Apply:
        def apply(self, raw_key, notice):
            if raw_key.startswith("bad"):
                raise RuntimeError("the table said no")
            return Outcome()

    monkeypatch.setattr(bootstrap, "apply_service", lambda: Apply())
    metrics.clear_metrics()
    yield module.handler
    metrics.clear_metrics()


def record(message_id, body):
    return {"messageId": message_id, "body": body if isinstance(body, str) else json.dumps(body)}


def test_only_the_records_that_raised_are_reported(worker, capsys):
    capsys.readouterr()
    logs = io.StringIO()
    before = logger.registered_handler.setStream(logs)
    event = {
        "Records": [
            record("m1", {"raw_key": "good#1"}),
            record("m2", {"raw_key": "bad#2"}),
            record("m3", "not json"),  # unreadable: reported, redelivered, then the queue's DLQ
            record("m4", {"raw_key": "good#4"}),
        ]
    }
    try:
        assert worker(event, LambdaContext("WorkerFunction")) == {
            "batchItemFailures": [{"itemIdentifier": "m2"}, {"itemIdentifier": "m3"}]
        }
    finally:
        logger.registered_handler.setStream(before)
    assert dict(emf_metrics(capsys.readouterr().out)) == {
        M.APPLY_FAILED: 1
    }  # the apply that raised, as before
    line = json.loads(logs.getvalue().splitlines()[-1])
    assert (line["message"], line["raw_key"], line["exception_name"]) == (
        "apply failed",
        "bad#2",
        "RuntimeError",
    )


def test_an_all_failed_batch_is_reported_not_raised(worker):
    event = {"Records": [record("a", {"raw_key": "bad#a"}), record("b", {"raw_key": "bad#b"})]}
    assert worker(event, LambdaContext("WorkerFunction")) == {
        "batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "b"}]
    }


def test_a_clean_batch_reports_nothing(worker):
    event = {"Records": [record("a", {"raw_key": "good#a"})]}
    assert worker(event, LambdaContext("WorkerFunction")) == {"batchItemFailures": []}
