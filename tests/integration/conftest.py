"""Fixtures shared by integration test modules (the AWS account, the simulator and the harness are in
tests/conftest.py)."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import ThreadedMotoServer
from tally import bootstrap
from werkzeug.serving import make_server

from tally_local.resources import create_from_template
from tests.conftest import ROOT
from tests.integration.cli_helpers import local_cli_state
from tests.integration.toy_functions import make_toy_root


@pytest.fixture
def toy_root(tmp_path: Path) -> Path:
    """template.yaml and toy handlers in a functions tree of their own (the embedded stack's plumbing)."""
    return make_toy_root(tmp_path)


@pytest.fixture
def cli(h, tmp_path, monkeypatch, capsys):
    """`tally …` as a person types it, against this test's moto (through .tally/local.json)."""
    from tally_cli.main import main

    local_cli_state(h, tmp_path, monkeypatch)

    def run(*argv, expect=0):
        capsys.readouterr()
        code = main([*argv, "--local"])
        out = capsys.readouterr()
        assert code == expect, (argv, code, out.out[-2000:], out.err[-2000:])
        return json.loads(out.out) if "--json" in argv else out.out

    return run


@pytest.fixture
def svc(h):
    """The recon service, with the metrics singleton emptied of whatever an earlier test counted and never
    flushed."""
    from tally.observability import metrics

    metrics.flush_metrics()
    h.capsys.readouterr()
    h.metric_log.clear()
    return bootstrap.recon_service()


class AtomicMotoServer(ThreadedMotoServer):
    """ThreadedMotoServer whose backend applies one request at a time (DynamoDB's per-request atomicity).

    Measured: moto 5.2.1's threaded server does not apply a request atomically. Two concurrent
    TransactWriteItems both passed `refundable_cent >= :x` (1010 of 1000 cents reserved) and the server raised
    "dictionary changed size during iteration". DynamoDB applies each request atomically (transactions are
    serializable), so this server serves requests on threads as before but applies one at a time: the callers
    still race between their requests, which is the race under test."""

    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)
        lock = threading.Lock()

        def atomic(environ, start_response):
            with lock:
                return list(app(environ, start_response))

        self._server = make_server(self._ip_address, self._port, atomic, True)
        self._server_ready_event.set()
        self._server.serve_forever()


class PatchedMoto:
    """A moto server in this process with `tally_local.moto_fixes` installed: what the moto_fixes tests compare
    with moto's own answers."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def client(self, service: str):
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


@pytest.fixture(scope="module")
def patched_moto():
    """One PatchedMoto per test module (real threads, real HTTP); the tables the module made are deleted and the
    server stopped with its socket closed."""
    from tally_local import moto_fixes

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto_fixes.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    moto = PatchedMoto(f"http://{host}:{port}")
    ddb = moto.client("dynamodb")
    before = set(ddb.list_tables()["TableNames"])
    yield moto
    # moto's backends are the process's: a table left here would exist for the next module on this worker
    for name in set(ddb.list_tables()["TableNames"]) - before:
        ddb.delete_table(TableName=name)
    server.stop()
    server._server.server_close()  # moto's stop() leaves the socket open


@pytest.fixture(scope="module")
def moto_server():
    """moto's SERVER mode (real threads, real HTTP), one per test module: AWS_ENDPOINT_URL for `server_aws`."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = AtomicMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    server._server.server_close()  # moto's stop() leaves the socket open


@pytest.fixture
def server_aws(moto_server, sim, monkeypatch):
    """The template's resources created on `moto_server` under a fresh prefix, the channel is the simulator
    over HTTP; every client of the test talks to the server (in-process mock_aws is not thread-safe)."""
    for var, value in {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(var, value)
    env = create_from_template(
        ROOT / "template.yaml",
        boto3.Session(region_name="us-east-1"),
        prefix=f"t{uuid.uuid4().hex[:6]}",
        parameter_overrides={"WechatPayApiBase": sim.url},
    )
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    bootstrap.reset()
    yield env
    bootstrap.reset()


@pytest.fixture
def refunds_held(h, sim):
    """Every refund waits for the test to settle it and deliver its notification (or to poll it)."""
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    sim.wechatpay_v2.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    sim.alipay.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    yield
    sim.set_refund_behaviour(outcome="success", drop=False, after_accept=None)
    sim._refund_plans.clear()
    sim.wechatpay_v2.reset_refund_behaviour()
    sim.alipay.reset_refund_behaviour()
    sim.clear_faults()
    bootstrap.set_clock(time.time)


@pytest.fixture
def tally_cli(h, tmp_path, monkeypatch, capsys):
    """`tally …` as a person types it (as $USER alice), against this test's moto (through .tally/local.json):
    run(*argv, expect=0) -> the JSON document with --json, else stdout and stderr."""
    import json

    from tally_cli.main import main

    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:3000", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("USER", "alice")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)

    def run(*argv: str, expect: int = 0) -> object:
        capsys.readouterr()
        code = main([*argv, "--local"])
        out = capsys.readouterr()
        assert code == expect, (argv, code, out.out[-2000:], out.err[-2000:])
        return json.loads(out.out) if "--json" in argv and out.out.strip() else out.out + out.err

    return run


@pytest.fixture
def days_of_2024(monkeypatch):
    """For tests that book and reconcile fixed days of 2024 (their bills and figures are written for those
    days) under today's clock: R50 parks money reported on such a finished day, which is not what they test,
    so its window is opened for them. R50 itself: tests/integration/test_booking_day.py."""
    monkeypatch.setattr("tally.service.apply.booking_day_refusal", lambda *a, **k: None)
    monkeypatch.setattr("tally.service.refund_moves.booking_day_refusal", lambda *a, **k: None)
