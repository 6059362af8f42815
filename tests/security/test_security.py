"""Security checks: signature before state, replay window, tenant isolation, no secret in logs,
least-privilege IAM per function (over the transformed template), request size limits."""

from __future__ import annotations

import base64
import fnmatch
import io
import json
import pathlib
import time

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from tally import bootstrap
from tally.observability import logger as tally_logger
from tally.service.ingest import MAX_BODY_BYTES

from tally_local.resources import load_template
from tally_local.sigv4 import LOCAL_BACKEND_ARN
from tally_local.streams import on_failure_message
from tests.integration.outbox_helpers import stream_records, stream_shard
from tests.integration.template_helpers import resource_name as _resource_name
from tests.integration.template_helpers import sam_transform

ALL_TABLES = [
    "NOTIFY_RAW_TABLE",
    "NOTIFY_EVENT_TABLE",
    "ORDERS_TABLE",
    "LEDGER_TABLE",
    "TRANSITIONS_TABLE",
    "REFUND_TASKS_TABLE",
]


def state(h):
    """Everything that could carry business state. A callback rejected for its signature is kept in
    notify_event as kind `rejected` (7-day TTL, replayable by a person after a key fix, never applied):
    that row is evidence, not state, so it is left out here and checked on its own."""
    rows = {
        t: sorted(
            json.dumps(r, sort_keys=True)
            for r in h.scan(t)
            if not (t == "NOTIFY_EVENT_TABLE" and r.get("kind") in ("rejected", "rejected_count"))
        )
        for t in ALL_TABLES
    }
    return rows | {"queue": h.queue_depth()}


@pytest.fixture
def merchant(h):
    return h.add_merchant()


def order_for(h, mchid, amount=100, otn=None):
    return json.loads(h.create_order(mchid, otn, amount_cent=amount)["body"])["out_trade_no"]


# ------------------------------------------------------------------------------ signature before state


def test_R1_R4_forged_callback_for_a_real_order_changes_nothing(h, merchant, sim):
    """An attacker knows the order and the envelope format but not the platform key."""
    otn = order_for(h, merchant["mchid"], 100)
    headers, body, _ = h.notification(merchant["mchid"], otn, 100)
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ts, nonce = headers["Wechatpay-Timestamp"], headers["Wechatpay-Nonce"]
    forged = base64.b64encode(
        attacker.sign(f"{ts}\n{nonce}\n".encode() + body + b"\n", padding.PKCS1v15(), hashes.SHA256())
    ).decode()
    other_headers, other_body, _ = h.notification(merchant["mchid"], otn, 1)  # genuine, for 1 cent
    before = state(h)
    attempts = [
        {**headers, "Wechatpay-Signature": forged},  # signed with the wrong key
        other_headers,  # genuine headers of another callback over this body
        {**headers, "Wechatpay-Serial": sim.platform_serial},  # right signature, another key's serial
    ]
    for forged_headers in attempts:
        response = h.notify(merchant["mchid"], forged_headers, body)
        assert response["statusCode"] == 401 and json.loads(response["body"])["code"] == "FAIL"
    response = h.notify(merchant["mchid"], headers, other_body)  # genuine headers, tampered body
    assert response["statusCode"] == 401
    assert state(h) == before  # not even a quarantine row: nothing before the signature holds (R1)
    assert h.metric("NotifyRejected") == 4


# ------------------------------------------------------------------------------ replay window


@pytest.mark.parametrize(
    "age_s,accepted", [(-299, True), (299, True), (300, False), (301, False), (3600, False), (-301, False)]
)
def test_R4_replay_outside_the_5_minute_window_is_refused(h, merchant, age_s, accepted):
    otn = order_for(h, merchant["mchid"])
    signed_at = int(time.time())
    headers, body, _ = h.notification(merchant["mchid"], otn, 100, timestamp=signed_at)
    bootstrap.set_clock(lambda: signed_at + age_s)  # the same bytes arrive age_s later
    before = state(h)
    response = h.notify(merchant["mchid"], headers, body)
    if accepted:
        assert response["statusCode"] == 204 and len(h.scan("NOTIFY_RAW_TABLE")) == 1
    else:
        assert response["statusCode"] == 401 and state(h) == before


# ------------------------------------------------------------------------------ tenant isolation


def test_R11_colliding_ids_across_merchants_never_cross(h):
    a = h.add_merchant(mchid="1900000101")
    b = h.add_merchant(mchid="1900000102")
    for m, amount in ((a, 100), (b, 700)):
        h.create_order(m["mchid"], "SHARED-ORDER-01", amount_cent=amount)
    results = {}
    for m, amount in ((a, 100), (b, 700)):
        headers, body, resource = h.notification(m["mchid"], "SHARED-ORDER-01", amount)
        assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
        results[m["mchid"]] = resource["transaction_id"]
    # B's genuine callback replayed on A's URL: quarantined, never applied to A's order (R11, R5).
    headers, body, _ = h.notification(b["mchid"], "SHARED-ORDER-01", 100)
    assert h.notify(a["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    for m, amount in ((a, 100), (b, 700)):
        view = h.order(m["mchid"], "SHARED-ORDER-01")
        assert (view["status"], view["transaction_id"], view["paid_cent"]) == (
            "PAID",
            results[m["mchid"]],
            amount,
        )
    ledger = {e["transaction_id"]: e for e in h.scan("LEDGER_TABLE")}
    assert {tx: ledger[tx]["mchid"] for tx in ledger} == {tx: mchid for mchid, tx in results.items()}
    assert {e["order_pk"] for e in ledger.values()} == {
        "1900000101#SHARED-ORDER-01",
        "1900000102#SHARED-ORDER-01",
    }
    assert [e["kind"] for e in h.scan("NOTIFY_EVENT_TABLE")] == ["quarantined"]


# ------------------------------------------------------------------------------ no secret in logs


def test_no_secret_in_logs(h, sim, capsys):
    """A whole run with real keys: nothing logged carries the APIv3 key, a private key line or an openid."""
    stream = io.StringIO()
    handler = tally_logger.registered_handler
    previous = handler.setStream(stream)
    seen = []
    try:
        m = h.add_merchant()
        openids = [f"oSECRET{i}{'x' * 20}" for i in range(4)]
        otn = order_for(h, m["mchid"])
        for i, kw in enumerate([{}, {"apiv3_key": "Y" * 32}, {"total": 1}, {"signature_override": "AAAA"}]):
            headers, body, _ = h.notification(
                m["mchid"],
                otn if i != 2 else order_for(h, m["mchid"], 5),
                kw.pop("total", 100),
                openid=openids[i],
                **kw,
            )
            h.notify(m["mchid"], headers, body)
        h.drain()
        h.create_order(m["mchid"], amount_cent=100, prepay=True)  # a signed API call to the channel
        seen.append(capsys.readouterr())
    finally:
        handler.setStream(previous)
    text = stream.getvalue() + "".join(c.out + c.err for c in seen)
    assert "payment booked" in text  # the capture did see the product's logs
    pem_lines = [line for line in m["merchant_private_key_pem"].splitlines() if len(line) > 40]
    secrets = {
        "APIv3 key": m["apiv3_key"],
        **{f"PEM line {i}": line for i, line in enumerate(pem_lines)},
        **{f"openid {i}": o for i, o in enumerate(openids)},
    }
    assert [name for name, value in secrets.items() if value in text] == []
    assert "PRIVATE KEY" not in text
    stored = json.dumps({t: h.scan(t) for t in ALL_TABLES})
    assert [o for o in openids if o in stored] == []  # not even the raw rows keep a decrypted openid


# ------------------------------------------------------------------------------ least privilege


# What each function may do, and on what: the lead adds a line per new function (poller, refunds...).
# The reviewed grants of every function, pinned: a policy change must change this file on purpose.
# The event-source functions (worker: SQS, outbox: streams) have explicit roles: SAM's managed
# AWSLambdaSQSQueueExecutionRole / AWSLambdaDynamoDBExecutionRole grant every queue / stream of the account.
_PINNED = json.loads((pathlib.Path(__file__).with_name("least_privilege.json")).read_text())
LEAST_PRIVILEGE = {
    fn: {res: set(actions) for res, actions in grants.items()} for fn, grants in _PINNED["policies"].items()
}
MANAGED = {fn: set(names) for fn, names in _PINNED["managed"].items()}


@pytest.fixture(scope="module")
def granted():
    from tests.integration.template_helpers import TEMPLATE

    transformed = sam_transform(load_template(TEMPLATE), "us-east-1")
    grants = {}
    for lid, res in transformed["Resources"].items():
        if res["Type"] != "AWS::Lambda::Function":
            continue
        role = transformed["Resources"][res["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
        found: dict[str, set[str]] = {}
        for policy in role.get("Policies", []):
            for st in policy["PolicyDocument"]["Statement"]:
                assert st["Effect"] == "Allow", (lid, st)
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
                for r in resources:
                    found.setdefault(_resource_name(r), set()).update(actions)
        managed = role.get("ManagedPolicyArns", [])
        grants[lid] = (found, managed)
    return grants


@pytest.mark.parametrize("function", sorted(LEAST_PRIVILEGE))
def test_each_function_policy_names_only_its_own_tables_and_actions(granted, function):
    found, managed = granted[function]
    assert found == LEAST_PRIVILEGE[function]
    assert {json.dumps(arn).rsplit("/", 1)[-1].strip('"') for arn in managed} == MANAGED[function]


def test_every_function_is_covered_by_the_least_privilege_table(granted):
    assert set(granted) == set(LEAST_PRIVILEGE) == set(MANAGED)


def test_no_function_holds_an_account_wide_managed_policy_or_a_grant_it_never_uses(granted):
    """Issue #16: only the logs-only basic execution role may be managed; the worker reads no secret; the
    event-source grants name their own queue and streams."""
    for function, (found, managed) in granted.items():
        names = {json.dumps(arn).rsplit("/", 1)[-1].strip('"') for arn in managed}
        assert names <= {"AWSLambdaBasicExecutionRole"}, function
        assert "*" not in found and '"*"' not in found, function
    worker, _ = granted["WorkerFunction"]
    assert not any(r.startswith("secret:") for r in worker)
    assert worker["ApplyQueue"] >= {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
    outbox, _ = granted["OutboxFunction"]
    assert {r for r, actions in outbox.items() if "dynamodb:GetRecords" in actions} == {
        "OrdersTable/stream/*",
        "RefundsTable/stream/*",
    }


def test_what_the_code_calls_is_what_the_policy_grants(h, merchant, granted):
    """Run each handler and record its AWS calls: each must be granted (else it fails in production)."""
    names = {v: k for k, v in h.env.items()}
    logical = {
        "NOTIFY_RAW_TABLE": "NotifyRawTable",
        "NOTIFY_EVENT_TABLE": "NotifyEventTable",
        "ORDERS_TABLE": "OrdersTable",
        "TRANSITIONS_TABLE": "TransitionsTable",
        "LEDGER_TABLE": "LedgerTable",
        "REFUND_TASKS_TABLE": "RefundTasksTable",
        "MERCHANTS_TABLE": "MerchantsTable",
        "REFUNDS_TABLE": "RefundsTable",
        "REFUND_RAW_TABLE": "RefundRawTable",
        "WEBHOOKS_TABLE": "WebhooksTable",
        "RECON_RUNS_TABLE": "ReconRunsTable",
        "RECON_DIFF_TABLE": "ReconDiffTable",
        "ALERTS_TABLE": "AlertsTable",
        "JOURNAL_TABLE": "JournalTable",
    }
    current = {"fn": None}
    calls: dict[str, set[tuple[str, str]]] = {}

    def seen(model, params, **_):
        service = model.service_model.endpoint_prefix
        if service == "dynamodb":
            request = json.loads(params.get("body") or b"{}")
            # IAM authorises a transaction item by item, with the item's own action (no TransactWriteItems action).
            items = [
                (f"{kind}Item" if kind != "ConditionCheck" else "ConditionCheckItem", op)
                for entry in request.get("TransactItems", [])
                for kind, op in entry.items()
            ]
            # BatchGetItem is authorised per table it reads (the journal's order + chain head read)
            items = items or [("BatchGetItem", {"TableName": t}) for t in request.get("RequestItems", {})]
            items = items or [(model.name, request)]
            for action, op in items:
                table = logical[names[op["TableName"]]]
                resource = f"{table}/index/*" if op.get("IndexName") else table
                calls.setdefault(current["fn"], set()).add((f"dynamodb:{action}", resource))
        elif service == "sqs":
            url = str(json.loads(params.get("body") or b"{}").get("QueueUrl", ""))
            queue = (
                "WebhookQueue"
                if url.endswith(".fifo")
                else "OutboxDLQ"
                if url == h.env["OUTBOX_DLQ_URL"]
                else "ApplyQueue"
            )
            calls.setdefault(current["fn"], set()).add((f"sqs:{model.name}", queue))
        else:  # secretsmanager: the secret's own name, matched against the granted patterns below
            name = params.get("body") and json.loads(params["body"])
            secret = (name or {}).get("SecretId") or (name or {}).get("Name")
            calls.setdefault(current["fn"], set()).add((f"{service}:{model.name}", f"name:{secret}"))

    bootstrap.reset()
    clients = [
        bootstrap.tables().ddb,
        bootstrap.ingest_service().queue.sqs,
        bootstrap.merchants().secrets.client,
    ]
    for client in clients:
        client.meta.events.register("before-call", seen)
    for lid, (handler, spec) in list(h.handlers.items()):

        def wrapped(event, context, _handler=handler, _lid=lid):
            current["fn"] = _lid
            try:
                return _handler(event, context)
            finally:
                current["fn"] = None

        h.handlers[lid] = (wrapped, spec)
    bootstrap.merchants()._cache.clear()  # each function loads its merchant itself, as a cold container
    otn = order_for(h, merchant["mchid"])
    h.order(merchant["mchid"], otn)
    headers, body, _ = h.notification(merchant["mchid"], otn, 100)
    h.notify(merchant["mchid"], headers, body)
    h.notify(
        merchant["mchid"], *h.notification(merchant["mchid"], otn, 100)[:2]
    )  # a double payment: refund task
    h.notify(merchant["mchid"], *h.notification(merchant["mchid"], "NO-SUCH-ORDER", 100)[:2])
    h.drain()
    h.call(
        "OrdersFunction",
        "GET",
        f"/orders/{merchant['mchid']}/{otn}",
        b"",
        {},
        {"mchid": merchant["mchid"], "out_trade_no": otn},
    )
    h.invoke("KeysFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    # the heartbeat's first run configures its synthetic merchant (secrets, merchants table) and books a beat
    bootstrap.heartbeat().api_url = "http://127.0.0.1:9"  # unreachable: the post fails, the rest runs
    h.invoke("HeartbeatFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    # webhooks (docs/webhooks.md): the outbox on the orders stream, one delivery, the pull path
    h.sim.receiver.reset()
    bootstrap.webhook_endpoints().add(merchant["mchid"], f"{h.sim.url}/merchant/hooks/policy")
    h.invoke("OutboxFunction", {"Records": stream_records(h.env)})
    queued = h.sqs.receive_message(
        QueueUrl=h.env["WEBHOOK_QUEUE_URL"], MaxNumberOfMessages=10, AttributeNames=["All"]
    )["Messages"]
    h.invoke("WebhooksFunction", {"Records": [h._record(m) for m in queued]})
    for message in queued:  # settled as the event source mapping would
        h.sqs.delete_message(QueueUrl=h.env["WEBHOOK_QUEUE_URL"], ReceiptHandle=message["ReceiptHandle"])
    assert h.sim.receiver.accepted()
    # the OutboxDLQ's consumer (R20): a parked batch read back from the stream, and a case's republish request
    arn, shard = stream_shard(h.env)
    parked = on_failure_message(stream_records(h.env), shard, arn, "OutboxFunction", "us-east-1")
    republish = {"republish": {"order": [merchant["mchid"], otn]}, "case": "evt-policy", "by": "test"}
    for body in (parked, republish):
        message = {"messageId": "m", "receiptHandle": "r", "body": json.dumps(body), "attributes": {}}
        assert h.invoke("OutboxParkedFunction", {"Records": [message]}) == {"batchItemFailures": []}
    bootstrap.callers().allow(LOCAL_BACKEND_ARN, ["*"], by="test")  # R53: the backend may read its events
    pull = {
        "requestContext": {"http": {"method": "GET"}, "authorizer": {"iam": {"userArn": LOCAL_BACKEND_ARN}}},
        "queryStringParameters": {"mchid": merchant["mchid"]},
    }
    h.invoke("EventsFunction", {"version": "2.0", "rawPath": "/events", "headers": {}, **pull})
    # the notifier: the work queue's indexes, the incidents, the destinations' secret (docs/alerts.md)
    h.invoke("NotifierFunction", {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}})
    assert set(calls) >= {
        "NotifierFunction",
        "NotifyFunction",
        "WorkerFunction",
        "OrdersFunction",
        "KeysFunction",
        "HeartbeatFunction",
        "OutboxFunction",
        "OutboxParkedFunction",
        "WebhooksFunction",
        "EventsFunction",
    }
    stack = h.env["MERCHANT_SECRET_PREFIX"].split("/")[1]
    for function, used in calls.items():
        if function is None:
            continue
        found, _ = granted[function]
        for action, resource in used:
            if resource.startswith("name:"):  # a secret: some granted pattern must match its name
                patterns = [
                    r.removeprefix("secret:").replace("${AWS::StackName}", stack)
                    for r, actions in found.items()
                    if r.startswith("secret:") and action in actions
                ]
                assert any(fnmatch.fnmatch(resource[5:], p) for p in patterns), (
                    f"{function} calls {action} on secret {resource[5:]} but its policy does not grant it"
                )
                continue
            assert action in found.get(resource, set()), (
                f"{function} calls {action} on {resource} but its policy does not grant it"
            )


# ------------------------------------------------------------------------------ request size limits


def test_R10_notify_refuses_bodies_over_the_limit_before_any_work(h, merchant):
    otn = order_for(h, merchant["mchid"])
    headers, body, _ = h.notification(merchant["mchid"], otn, 100)
    before = state(h)
    padded = body[:-1] + b" " * (MAX_BODY_BYTES - len(body) + 1) + b"}"  # valid JSON, 1 byte over
    assert len(padded) == MAX_BODY_BYTES + 1
    response = h.notify(merchant["mchid"], headers, padded)
    assert response["statusCode"] == 400 and json.loads(response["body"])["code"] == "FAIL"
    assert state(h) == before
    huge_header = {**headers, "Wechatpay-Nonce": "N" * 200_000}
    assert h.notify(merchant["mchid"], huge_header, body)["statusCode"] == 401
    assert state(h) == before


def test_api_payload_limits_are_the_platform_ones(resources_template=None):
    """HTTP APIs cap a request at 10 MB and Lambda a synchronous event at 6 MB; notify caps the body at
    256 KB itself (a WeChat callback is 1-2 KB). Pin the product's own limit so nobody raises it casually."""
    assert MAX_BODY_BYTES == 256 * 1024
