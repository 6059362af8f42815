"""Production wiring on the handlers (issue #16): heartbeats, per-stack secrets, clients, routing."""

from __future__ import annotations

import base64
import json

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tests.integration.stack_helpers import cli as _cli
from tests.integration.stack_helpers import deploy_stack as _deploy_stack


def test_r46_a_recon_tick_with_nothing_to_reconcile_still_beats_the_heartbeat(h):
    """No merchant configured: the scheduled tick finishes, reconciles nothing, and counts ReconRunCompleted,
    so ReconNotRunAlarm stays quiet on a stack that has no merchant yet (and fires when ticks stop)."""
    assert list(bootstrap.recon_service().merchants()) == []
    result = h.invoke(
        "ReconFunction", {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
    )
    assert result == {"runs": []}
    assert h.metric("ReconRunCompleted") == 1
    assert h.series("ReconRunCompleted") == 1  # the service-only series the alarm watches


def test_two_stacks_never_share_a_merchant_secret(h, monkeypatch):
    """Issue #16: `tally merchant add … --stack staging` overwrote prod's keys for the same mchid. The CLI now
    reads the stack's own prefix from its MerchantSecretPrefix output."""
    import boto3

    from tally_cli.env import use_deployed

    for name in ("prod", "staging"):
        _deploy_stack(name, h.env)
    stored = {}
    for name in ("prod", "staging"):
        monkeypatch.setenv("MERCHANT_SECRET_PREFIX", "tally/wrong/merchants/")  # restored after the test
        use_deployed(name)
        bootstrap.reset()
        assert bootstrap.settings().merchant_secret_prefix == f"tally/{name}/merchants/"
        m = h.sim.register_test_merchant(verify_mode="public_key")
        stored[name] = f"{name}-apiv3-key".ljust(32, "0")  # each stack's own key for the same mchid
        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
            mchid="1900000777",
            apiv3_key=stored[name],
            merchant_key_pem=m["merchant_private_key_pem"],
            merchant_serial=m["merchant_serial"],
            appid=m["appid"],
            notify_url="http://127.0.0.1:9/notify/wechatpay/1900000777",
            public_key=h.sim.public_key_pem,
            public_key_id=h.sim.public_key_id,
        )
    secrets = boto3.client("secretsmanager")
    names = sorted(s["Name"] for s in secrets.list_secrets()["SecretList"] if "1900000777" in s["Name"])
    assert names == [f"tally/{n}/merchants/wechatpay/1900000777" for n in ("prod", "staging")]
    for name in ("prod", "staging"):
        value = json.loads(secrets.get_secret_value(SecretId=names[name == "staging"])["SecretString"])
        assert value["apiv3_key"] == stored[name]
    assert stored["prod"] != stored["staging"]


@pytest.mark.parametrize("prefix", ["tally/merchants", "", "merchants/"])
def test_a_missing_or_shared_secret_prefix_is_refused(prefix):
    from tally.settings import _secret_prefix

    with pytest.raises(RuntimeError):
        _secret_prefix(prefix)


def test_notify_routes_on_the_route_key_behind_a_custom_domain_path_mapping(h):
    """A custom domain mapped at /pay sends rawPath /pay/notify/wechatpay/{mchid}; API Gateway's routeKey and
    pathParameters are the same as without it, and they are what notify routes on (issue #16)."""
    from tally_local.lambda_io import http_event
    from tally_local.resources import LambdaContext

    m = h.add_merchant()
    otn = h.create_order(m["mchid"])
    assert otn["statusCode"] == 201
    out_trade_no = json.loads(otn["body"])["out_trade_no"]
    headers, body, _ = h.notification(m["mchid"], out_trade_no, 100)
    event = http_event(
        "POST",
        f"/pay/notify/wechatpay/{m['mchid']}",
        body,
        headers,
        {"mchid": m["mchid"]},
        route="/notify/wechatpay/{mchid}",
    )
    handler, _ = h.handlers["NotifyFunction"]
    response = handler(event, LambdaContext("NotifyFunction"))
    h._collect_metrics()
    assert response["statusCode"] == 204 and h.metric("NotifyAccepted") == 1
    h.drain()
    assert h.order(m["mchid"], out_trade_no)["status"] == "PAID"
    unknown = {**event, "routeKey": "POST /notify/unknown/{mchid}"}
    assert handler(unknown, LambdaContext("NotifyFunction"))["statusCode"] == 404


@pytest.fixture
def silent_aws(monkeypatch):
    """An endpoint on localhost that accepts connections and never answers: AWS at its most degraded."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    yield
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_notify_aws_calls_fail_inside_wechats_5_seconds(aws, silent_aws, monkeypatch):
    """botocore's defaults (60 s connect, 60 s read, legacy retries) would hold a notify far past WeChat's 5 s.
    With notify's settings from template.yaml a DynamoDB call that never answers fails in about 3 s, after
    the one retry standard mode makes: the 500 reaches WeChat inside its 5 s, and WeChat retries."""
    import time

    from botocore.exceptions import ReadTimeoutError

    from tally_local.resources import load_template

    template = load_template(bootstrap.__file__.rsplit("/layers/", 1)[0] + "/template.yaml")
    notify_env = template["Resources"]["NotifyFunction"]["Properties"]["Environment"]["Variables"]
    for name, value in notify_env.items():
        monkeypatch.setenv(name, value)
    bootstrap.reset()
    config = bootstrap.aws_config()
    assert (config.connect_timeout, config.read_timeout) == (0.5, 1.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 2}
    for service in ("dynamodb", "sqs", "secretsmanager"):
        assert bootstrap._client(service).meta.config.read_timeout == 1.0  # one Config for every client
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        bootstrap.tables().ddb.get_item(TableName=aws["NOTIFY_RAW_TABLE"], Key={"pk": {"S": "x"}})
    elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 4.5, (
        elapsed
    )  # two 1 s reads (so it retried once) + backoff: 3.0 s measured, not 60
    bootstrap.reset()


def test_other_functions_get_the_default_short_timeouts(aws):
    bootstrap.reset()
    config = bootstrap._client("dynamodb").meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.0, 5.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}


# ------------------------------------------------------------------------------ events never lost (R20)


def _paid_order(h, otn):
    m = h.add_merchant()
    h.create_order(m["mchid"], otn)
    headers, body, resource = h.notification(m["mchid"], otn, 100)
    h.notify(m["mchid"], headers, body)
    h.drain()
    return m["mchid"], resource


def test_r20_republish_rebuilds_a_lost_event_with_the_stream_s_own_id(h, capsys):
    """The stream gave up (OutboxDLQ holds pointers into a 24 h stream): `tally outbox republish` rebuilds
    OrderPaid from the order row, with the id the stream would have given it, through the deployed stack."""
    from tally.domain.events import events_for_change
    from tally.store.codec import from_item

    from tests.integration.outbox_helpers import stream_records, subscribe

    mchid, resource = _paid_order(h, "REPUB-ORDER-1")
    consumed = subscribe(h.env)  # the outbox never ran: the consumer has nothing
    paid = next(
        r
        for r in stream_records(h.env)
        if r["dynamodb"].get("NewImage", {}).get("status", {}).get("S") == "PAID"
    )
    images = paid["dynamodb"]
    (expected,) = events_for_change(from_item(images["OldImage"]), from_item(images["NewImage"]))
    _deploy_stack("tally", h.env)
    capsys.readouterr()
    assert _cli("outbox", "republish", "--order", mchid, "REPUB-ORDER-1", "--stack", "tally") == 0
    assert json.loads(capsys.readouterr().out) == {"events": [expected.event_id]}
    (event,) = consumed()
    assert event["detail-type"] == "OrderPaid" and event["detail"] == expected.detail
    assert event["detail"]["transaction_id"] == resource["transaction_id"]


def test_r20_republish_since_covers_orders_and_refunds_and_skips_what_has_no_event(h, capsys):
    import boto3
    from tally.store.shards import updated_shard

    mchid, _ = _paid_order(h, "REPUB-ORDER-2")
    h.create_order(mchid, "REPUB-UNPAID-1")  # WAIT_PAY: no event to rebuild
    boto3.client("dynamodb").put_item(
        TableName=h.env["REFUNDS_TABLE"],
        Item={
            "pk": {"S": "R-REPUB-1"},
            "refund_no": {"S": "R-REPUB-1"},
            "status": {"S": "SUCCESS"},
            "amount_cent": {"N": "20"},
            "channel": {"S": "wechatpay"},
            "mchid": {"S": mchid},
            "out_trade_no": {"S": "REPUB-ORDER-2"},
            "updated_at": {"S": "2999-01-01T00:00:00Z"},
            "upd_shard": {"S": updated_shard("R-REPUB-1")},  # as every refund write sets it (GSI by_updated)
        },
    )
    consumed = subscribe_all(h)
    _deploy_stack("tally", h.env)
    capsys.readouterr()
    assert _cli("outbox", "republish", "--since", "2000-01-01", "--stack", "tally") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rows"] == 2  # the unpaid order was never updated: no updated_at, and no event to rebuild
    assert sorted(e.split(":")[0] for e in result["events"]) == ["OrderPaid", "RefundSucceeded"]
    assert sorted(e["detail-type"] for e in consumed()) == ["OrderPaid", "RefundSucceeded"]
    capsys.readouterr()
    assert (
        _cli("outbox", "republish", "--since", "2000-01-01", "--until", "2000-01-02", "--stack", "tally") == 0
    )
    assert json.loads(capsys.readouterr().out) == {"rows": 0, "events": []}
    assert _cli("outbox", "republish", "--order", mchid, "NO-SUCH-ORDER", "--stack", "tally") == 1


def subscribe_all(h):
    from tests.integration.outbox_helpers import subscribe

    return subscribe(h.env)


def test_r20_the_bus_is_archived_and_a_window_replays_through_the_bus(h, capsys):
    """StartReplay on moto: the archive (template.yaml EventArchive, created by the embedded stack too) takes
    what the outbox published; `tally events replay` sends the window through the bus again. (On AWS a replay
    is asynchronous and takes minutes; moto does it at once. docs/events.md.)"""
    import datetime as dt

    import boto3

    from tests.integration.outbox_helpers import stream_records

    events = boto3.client("events")
    archive = events.describe_archive(ArchiveName=h.env["EVENT_ARCHIVE_ARN"].rsplit("/", 1)[1])
    assert archive["EventSourceArn"].endswith(h.env["EVENT_BUS_NAME"]) and archive["RetentionDays"] == 365
    _paid_order(h, "REPLAY-ORDER-1")
    consumed = subscribe_all(h)
    before = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    assert h.invoke("OutboxFunction", {"Records": stream_records(h.env)}) == {"batchItemFailures": []}
    (published,) = consumed()
    assert published["detail-type"] == "OrderPaid"
    after = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    _deploy_stack("tally", h.env)
    capsys.readouterr()
    args = ["--since", before.isoformat(), "--until", after.isoformat(), "--stack", "tally"]
    assert _cli("events", "replay", *args, "--name", "replay-1") == 0
    started = json.loads(capsys.readouterr().out)
    assert started["replay"] == "replay-1" and started["state"] in ("STARTING", "RUNNING", "COMPLETED")
    # moto replays synchronously: the archived event comes through the bus again, with its id
    assert [e["detail"]["event_id"] for e in consumed()] == [published["detail"]["event_id"]]
    assert _cli("events", "replay-status", "replay-1", "--stack", "tally") == 0
    assert json.loads(capsys.readouterr().out)["State"] in ("STARTING", "RUNNING", "COMPLETED")
    assert (
        _cli(
            "events",
            "replay",
            "--since",
            after.isoformat(),
            "--until",
            before.isoformat(),
            "--stack",
            "tally",
        )
        == 1
    )


def test_the_runbook_s_outbox_commands_are_real_commands():
    """docs/runbook.md OutboxDLQAlarm: every `tally …` line there parses with the real CLI, and the section
    no longer says to touch the order."""
    import pathlib
    import shlex

    from tally_cli.main import build_parser

    runbook = (pathlib.Path(__file__).parents[2] / "docs/runbook.md").read_text()
    section = runbook.split("## OutboxDLQAlarm\n", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#")[0].strip() for line in section.splitlines() if line.startswith("tally ")]
    assert {c.split()[1] for c in commands} == {"outbox", "events"} and len(commands) == 5
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert callable(args.run), command
    assert "touch the order" not in section.replace('"touching" the order publishes nothing', "")


# ------------------------------------------------------------------------------ the synthetic heartbeat


def test_heartbeat_books_a_synthetic_payment_a_minute_and_its_age_alarms_after_3_minutes(
    h, monkeypatch, capsys
):
    """Each beat is a real signed+encrypted WeChat v3 callback through the notify handler; while beats are
    booked the age stays near a minute; when the API stops booking, the age crosses 180 s on the third
    minute (HeartbeatAgeAlarm: Maximum >= 180). The synthetic merchant is not reconciled, and the keys
    function has nothing to download for it."""
    import base64

    monkeypatch.setenv("HEARTBEAT_API_URL", "https://api.example/")
    now = [1_796_000_000.0 - 1_796_000_000 % 60 + 5]  # 5 s into a UTC minute
    bootstrap.set_clock(lambda: now[0])
    beat = bootstrap.heartbeat()
    delivered = []

    def through_the_api(url, headers, body):
        assert url == "https://api.example/notify/wechatpay/0000000000"
        delivered.append(body)
        response = h.call(
            "NotifyFunction", "POST", url.split("example", 1)[1], body, headers, {"mchid": "0000000000"}
        )
        return response["statusCode"]

    beat.post = through_the_api
    first = beat.beat()
    assert first["status"] == 204 and first["age_s"] == 5  # a new stack: waiting 5 s, not in alarm
    assert b"0000000000" not in base64.b64decode(json.loads(delivered[0])["resource"]["ciphertext"])  # sealed
    h.drain()
    assert h.order("0000000000", first["order"])["status"] == "PAID"
    now[0] += 60
    assert beat.beat()["age_s"] == 65 and h.drain() == []
    beat.post = lambda url, headers, body: 500  # the API stops booking
    ages = []
    for _ in range(3):
        now[0] += 60
        ages.append(beat.beat()["age_s"])
    assert ages == [65, 125, 185]
    assert bootstrap.heartbeat_age_s() == 185
    assert ("wechatpay", "0000000000") in bootstrap.merchants().store.configured()
    assert ("wechatpay", "0000000000") not in bootstrap.recon_service().merchants()
    h.invoke("KeysFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    assert h.metric("PlatformCertRefreshFailed") == 0
    bootstrap.set_clock(__import__("time").time)


def test_heartbeat_handler_publishes_the_age_gauge_the_alarm_watches(h, monkeypatch):
    monkeypatch.setenv("HEARTBEAT_API_URL", "https://api.example/")
    bootstrap.reset()
    bootstrap.heartbeat().post = lambda url, headers, body: 0  # the API unreachable
    result = h.invoke(
        "HeartbeatFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    )
    assert result["status"] == 0 and result["age_s"] < 60
    assert h.series("HeartbeatAge") == result["age_s"]  # service=tally, what HeartbeatAgeAlarm watches
    assert [n for n, _, _ in h.series_log].count("HeartbeatAge") == 1


# ------------------------------------------------------------------------------ a deployable README (docs/deploy.md)


def test_env_vars_cover_every_variable_the_functions_get():
    """`tally env-vars` builds sam local invoke's --env-vars from the stack's outputs and parameters: together
    they must give every Globals variable of template.yaml, or a local invoke misses one."""
    import pathlib

    from tally_cli.envvars import env_vars_of
    from tally_local.resources import load_template

    template = load_template(pathlib.Path(__file__).parents[2] / "template.yaml")
    stack = {
        "Outputs": [{"OutputKey": k, "OutputValue": f"out-{k}"} for k in template["Outputs"]],
        "Parameters": [{"ParameterKey": k, "ParameterValue": f"param-{k}"} for k in template["Parameters"]],
    }
    env = env_vars_of(stack)["Parameters"]
    assert set(env) == set(template["Globals"]["Function"]["Environment"]["Variables"])
    assert env["MERCHANT_SECRET_PREFIX"] == "out-MerchantSecretPrefix"


def test_tally_env_vars_reads_a_deployed_stack(h, capsys):
    _deploy_stack("tally", h.env)
    capsys.readouterr()
    assert _cli("env-vars", "--stack", "tally") == 0
    env = json.loads(capsys.readouterr().out)["Parameters"]
    assert (
        env["ORDERS_TABLE"] == h.env["ORDERS_TABLE"]
        and env["MERCHANT_SECRET_PREFIX"] == "tally/tally/merchants/"
    )
    assert _cli("env-vars", "--stack", "no-such-stack") == 1


def test_every_function_has_a_sample_event_that_its_handler_takes(h):
    """events/ covers every function of the template (sam local invoke -e events/<function>_….json)."""
    import pathlib

    events = pathlib.Path(__file__).parents[2] / "events"
    names = {p.name for p in events.glob("*.json")}
    for lid in h.handlers:
        prefix = lid.removesuffix("Function").lower() + "_"
        samples = sorted(n for n in names if n.startswith(prefix))
        assert samples, f"events/ has no sample for {lid}"
    for name in ("poller_schedule.json", "keys_schedule.json", "outbox_stream.json", "refunds_create.json"):
        lid = name.split("_")[0].capitalize() + "Function"
        result = h.invoke(lid, json.loads((events / name).read_text()))
        assert result is not None, name
    assert h.metric("OutboxPublished") == 1  # the stream sample is a WAIT_PAY -> PAID change


def _signed_call_example():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "examples/signed_call.py"
    spec = importlib.util.spec_from_file_location("signed_call", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_the_signed_caller_example_signs_sigv4_for_execute_api(monkeypatch):
    """examples/signed_call.py (README, docs/deploy.md): its SigV4 request passes the front door's IAM check
    (tally_local/sigv4.py, API Gateway's rules) over real HTTP, and the function sees the verified caller."""
    from tally_local.frontdoor import FrontDoor
    from tally_local.sigv4 import IamAuthorizer

    seen = {}

    def orders(event, context):
        seen["event"] = event
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/json"},
            "body": '{"status":"WAIT_PAY"}',
        }

    iam = IamAuthorizer("cn-north-1")
    iam.add("AKIDEXAMPLE", "secret", "arn:aws-cn:iam::123456789012:role/shop-backend")
    door = FrontDoor({"POST /orders": orders}, authorizers={"POST /orders": iam}).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    body = {"mchid": "1900000109", "out_trade_no": "SIGNED1", "amount_cent": 1999, "description": "coffee"}
    try:
        status, answer = _signed_call_example().call("POST", f"{door.url}/orders", body, region="cn-north-1")
    finally:
        door.stop()
    assert (status, answer) == (201, {"status": "WAIT_PAY"})
    event = seen["event"]
    assert (
        event["requestContext"]["authorizer"]["iam"]["userArn"]
        == "arn:aws-cn:iam::123456789012:role/shop-backend"
    )
    assert json.loads(base64.b64decode(event["body"]) if event["isBase64Encoded"] else event["body"]) == body


def test_the_signed_caller_example_without_credentials_says_so(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(SystemExit, match="no AWS credentials"):
        _signed_call_example().signed_request("POST", "http://127.0.0.1:9/orders", {}, region="us-east-1")


def test_R54_two_beats_in_one_minute_are_one_payment_and_synthetic_money_opens_no_item(h, monkeypatch):
    """Issue #38 finding 10 (R54): two beats in one minute (a duplicate EventBridge delivery, a re-run) gave
    the minute's order several payments: ILLEGAL, refund tasks, queue items. The beat's transaction id is now a
    function of the beat, so the second is a duplicate; and a synthetic payment that would still go to a
    person (another transaction id for a paid beat) is closed as synthetic: no item, no refund task."""
    monkeypatch.setenv("HEARTBEAT_API_URL", "https://api.example/")
    now = [1_796_000_000.0 - 1_796_000_000 % 60 + 5]
    bootstrap.set_clock(lambda: now[0])
    beat = bootstrap.heartbeat()

    def through_the_api(url, headers, body):
        return h.call(
            "NotifyFunction", "POST", url.split("example", 1)[1], body, headers, {"mchid": "0000000000"}
        )["statusCode"]

    beat.post = through_the_api
    try:
        first = beat.beat()
        now[0] += 20
        second = beat.beat()  # the same minute again
        assert first["order"] == second["order"] and h.drain() == []
        assert h.order("0000000000", first["order"])["status"] == "PAID"
        assert len(h.scan("LEDGER_TABLE")) == 1 and h.scan("REFUND_TASKS_TABLE") == []
        keys = bootstrap.heartbeat().keys.get()  # a beat whose order is gone: it would go to a person
        headers, body = beat.synthetic.callback(keys, "0000000000", "HB209901010000", now[0])
        assert through_the_api(beat.notify_url, headers, body) == 204
        h.drain()
        assert len(h.scan("LEDGER_TABLE")) == 1 and h.scan("REFUND_TASKS_TABLE") == []
        assert bootstrap.work_queue().list() == [] and h.metric("HeartbeatDiscarded") == 1
    finally:
        bootstrap.set_clock(__import__("time").time)


def test_R54_wechats_security_echo_callback_is_verified_acknowledged_and_stores_nothing(h):
    """WeChat Pay's POST /v3/security/echo (docs/channels.md) makes the channel send a signed, encrypted
    SECURITY_ECHO.SUCCESS callback to the notify_url it is given: a connectivity check, no money. It is verified and
    decrypted (keys and route work), acknowledged and counted (NotifyEcho); nothing is stored but its arrival on the
    merchant's one echo row (the heartbeat's echo reads it): no raw row, no item."""
    m = h.add_merchant()
    headers, body = h.sim.build_notification(
        m["mchid"],
        json.dumps({"echo_message": "hello"}).encode(),
        event_type="SECURITY_ECHO.SUCCESS",
        associated_data="",
    )
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    (arrival,) = h.scan("NOTIFY_EVENT_TABLE")
    assert arrival["pk"] == f"echo#wechatpay#{m['mchid']}" and arrival["echoes"] == 1
    assert "manual_kind" not in arrival and h.scan("NOTIFY_RAW_TABLE") == []
    assert h.metric("NotifyEcho") == 1 and bootstrap.work_queue().list() == []
    headers["Wechatpay-Signature"] = headers["Wechatpay-Signature"][
        ::-1
    ]  # not the channel's: refused as ever
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 401
