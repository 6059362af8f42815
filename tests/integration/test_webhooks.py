"""Webhooks to the merchant's systems (docs/webhooks.md): the real handlers on moto, the simulator's receiver
over real HTTP on localhost, the Standard Webhooks reference library from PyPI as the signature's oracle."""

import json
import time

import pytest
from standardwebhooks.webhooks import Webhook
from tally import bootstrap
from tally.store.codec import from_item

from tally_local.resources import LambdaContext
from tally_local.streams import on_failure_message
from tests.integration.outbox_helpers import BusDown, stream_records, stream_shard, subscribe


@pytest.fixture
def hooks(h, monkeypatch):
    monkeypatch.setenv("TALLY_WEBHOOK_RETRY_S", "0")  # every retry at once: the window below bounds them
    monkeypatch.setenv("TALLY_EVENTS_SETTLE_S", "0")
    monkeypatch.setenv(
        "TALLY_WEBHOOK_CONCURRENCY", "1"
    )  # in-process moto is not thread-safe (docs/design.md §6)
    bootstrap.reset()
    h.sim.receiver.reset()
    yield h
    h.sim.receiver.reset()
    bootstrap.reset()


def paid(h, mchid, out_trade_no, amount=1999):
    h.create_order(mchid, out_trade_no, amount_cent=amount)
    headers, body, resource = h.notification(mchid, out_trade_no, amount)
    h.notify(mchid, headers, body)
    h.drain()
    return resource


def outbox(h):
    """The orders stream's records (every change so far) through the outbox function, as Lambda would."""
    assert h.invoke("OutboxFunction", {"Records": stream_records(h.env)}) == {"batchItemFailures": []}


def deliver(h, rounds=50):
    """The webhooks function on the FIFO queue until it is empty (kept messages come back at once here)."""
    url = h.env["WEBHOOK_QUEUE_URL"]
    for _ in range(rounds):
        messages = h.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], WaitTimeSeconds=0
        ).get("Messages", [])
        if not messages:
            attrs = h.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            if int(attrs["ApproximateNumberOfMessagesNotVisible"]) == 0:
                return
            time.sleep(0.2)
            continue
        result = h.invoke("WebhooksFunction", {"Records": [h._record(m) for m in messages]})
        kept = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        for m in messages:
            if m["MessageId"] not in kept:
                h.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    raise AssertionError("the webhook queue did not drain")


def endpoint(h, mchid, events=None):
    return bootstrap.webhook_endpoints().add(mchid, f"{h.sim.url}/merchant/hooks/{mchid}", events)


def received(h):
    return [(d["headers"], d["body"]) for d in h.sim.receiver.accepted()]


def test_R20_a_paid_order_reaches_the_endpoint_signed_and_the_reference_library_verifies_it(hooks):
    h = hooks
    m = h.add_merchant()
    ep = endpoint(h, m["mchid"])
    assert ep["secret"].startswith("whsec_") and ep["status"] == "ACTIVE"
    resource = paid(h, m["mchid"], "HOOK-PAID-1")
    outbox(h)
    deliver(h)
    [(headers, body)] = received(h)
    payload = Webhook(ep["secret"]).verify(body, headers)  # the Standard Webhooks reference implementation
    assert payload["type"] == "OrderPaid"
    data = payload["data"]
    assert (
        headers["webhook-id"]
        == data["event_id"]
        == f"OrderPaid:{m['mchid']}#HOOK-PAID-1:{resource['transaction_id']}"
    )
    assert (data["amount_cent"], data["amount_yuan"], data["paid_cent"], data["paid_yuan"]) == (
        1999,
        "19.99",
        1999,
        "19.99",
    )
    assert data["link"].endswith(f"/orders/{m['mchid']}/HOOK-PAID-1")
    tampered = body.replace(b"1999", b"9999")
    with pytest.raises(Exception, match="signature"):
        Webhook(ep["secret"]).verify(tampered, headers)
    log = bootstrap.webhook_log().order(m["mchid"], "HOOK-PAID-1")
    assert [e["type"] for e in log] == ["OrderPaid"]
    [attempt] = log[0]["deliveries"][0]["attempts"]
    assert attempt["http_status"] == 200 and attempt["latency_ms"] >= 0 and '"ok"' in attempt["snippet"]
    story = bootstrap.story_service().story(m["mchid"], "HOOK-PAID-1")
    [shown] = [e for e in story["entries"] if e["kind"] == "webhook"]  # the order story shows the delivery
    assert "attempt 1: HTTP 200" in shown["title"] and not shown["needs_person"]


def test_R20_a_refund_is_never_delivered_before_the_payment_it_refunds(hooks):
    """The refunds stream may reach the outbox before the orders stream: the payment's event is queued first."""
    from tally.domain.events import DownstreamEvent

    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"])
    paid(h, m["mchid"], "HOOK-REFUND-1", 500)
    refund_id = f"RefundSucceeded:{m['mchid']}#R-HOOK-1"
    refund = DownstreamEvent(
        refund_id,
        "RefundSucceeded",
        {
            "event_id": refund_id,
            "refund_no": "R-HOOK-1",
            "mchid": m["mchid"],
            "out_trade_no": "HOOK-REFUND-1",
            "amount_cent": 200,
            "status": "SUCCESS",
            "channel": "wechatpay",
        },
    )
    bootstrap.outbox_service().webhooks.publish([refund])  # the refund's stream first …
    outbox(h)  # … then the order's: its OrderPaid is already queued, not sent twice
    deliver(h)
    types = [json.loads(body)["type"] for _, body in received(h)]
    assert types == ["OrderPaid", "RefundSucceeded"]


def test_R38_a_receiver_down_past_the_window_is_a_case_and_a_paused_endpoint_and_resend_delivers_once(
    hooks, monkeypatch
):
    h = hooks
    monkeypatch.setenv("TALLY_WEBHOOK_WINDOW_S", "1")
    bootstrap.reset()
    m = h.add_merchant()
    ep = endpoint(h, m["mchid"])
    h.sim.receiver.configure(down=True)
    started = time.time()
    paid(h, m["mchid"], "HOOK-DOWN-1")
    outbox(h)
    deliver(h, rounds=400)
    assert time.time() - started >= 1  # retried until the window was over
    endpoints = {e["endpoint_id"]: e for e in bootstrap.webhook_endpoints().list(m["mchid"])}
    assert endpoints[ep["endpoint_id"]]["status"] == "PAUSED"
    assert h.metric("WebhookGaveUp") == 1
    cases = bootstrap.work_queue().list("kind=webhook-failing")
    assert len(cases) == 1 and ep["endpoint_id"] in cases[0]["reason"]
    failed = [a for a in bootstrap.webhook_log().endpoint(ep["endpoint_id"]) if a["http_status"] == 503]
    assert len(failed) >= 2  # every failed attempt is in the log
    paid(h, m["mchid"], "HOOK-DOWN-2")  # while paused: held, not sent, not dropped
    outbox(h)
    deliver(h)
    [held] = bootstrap.webhook_log().order(m["mchid"], "HOOK-DOWN-2")
    assert held["deliveries"][0]["status"] == "HELD" and held["deliveries"][0]["attempts"] == []
    story = bootstrap.story_service().story(m["mchid"], "HOOK-DOWN-2")
    assert [e["needs_person"] for e in story["entries"] if e["kind"] == "webhook"] == [True]
    assert h.metric("WebhookHeld") >= 1

    h.sim.receiver.configure(down=False)
    bootstrap.webhook_endpoints().resume(ep["endpoint_id"])
    resender = bootstrap.webhook_resender()
    preview = resender.range(ep["endpoint_id"], "2000-01-01", "2100-01-01")
    assert preview["dry_run"] and preview["count"] == 2
    assert h.sim.receiver.accepted() == []  # a dry run never acts
    done = resender.range(
        ep["endpoint_id"], "2000-01-01", "2100-01-01", dry_run=False, expect=preview["digest"]
    )
    assert done["queued"] == 2
    deliver(h)
    ids = [hdrs["webhook-id"] for hdrs, _ in received(h)]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 2
    again = resender.range(ep["endpoint_id"], "2000-01-01", "2100-01-01")
    assert again["count"] == 0  # everything delivered: nothing left to resend
    work = bootstrap.work_queue()
    work.act(cases[0]["id"], "resolve", by="ops", reason="receiver fixed, resent")
    assert work.list("kind=webhook-failing") == []  # R41: resolved once, gone everywhere


def test_a_range_resend_refuses_a_set_that_changed_since_its_preview(hooks):
    from tally.service.webhooks import WebhookError

    h = hooks
    m = h.add_merchant()
    ep = endpoint(h, m["mchid"])
    h.sim.receiver.configure(down=True)
    bootstrap.webhook_endpoints().pause(ep["endpoint_id"], "maintenance")
    paid(h, m["mchid"], "HOOK-PREVIEW-1")
    outbox(h)
    preview = bootstrap.webhook_resender().range(ep["endpoint_id"], "2000-01-01", "2100-01-01")
    paid(h, m["mchid"], "HOOK-PREVIEW-2")
    outbox(h)
    with pytest.raises(WebhookError, match="changed since its preview"):
        bootstrap.webhook_resender().range(
            ep["endpoint_id"], "2000-01-01", "2100-01-01", dry_run=False, expect=preview["digest"]
        )


def test_R20_pull_path_keeps_the_callers_cursor_and_shows_only_the_merchant_asked_for(hooks):
    h = hooks
    a, b = h.add_merchant(mchid="1900000201"), h.add_merchant(mchid="1900000202")
    paid(h, a["mchid"], "HOOK-PULL-A")
    paid(h, b["mchid"], "HOOK-PULL-B")
    outbox(h)
    for principal in (
        "arn:aws:iam::123456789012:user/backend-a",
        "arn:aws:iam::123456789012:user/other",
    ):  # R53: a's backends
        bootstrap.callers().allow(principal, [a["mchid"]], by="test")

    def get(mchid, principal="arn:aws:iam::123456789012:user/backend-a", **query):
        event = {
            "version": "2.0",
            "routeKey": "GET /events",
            "rawPath": "/events",
            "headers": {},
            "queryStringParameters": {"mchid": mchid, **query},
            "requestContext": {"http": {"method": "GET"}, "authorizer": {"iam": {"userArn": principal}}},
            "isBase64Encoded": False,
        }
        response = h.invoke("EventsFunction", event)
        return response["statusCode"], json.loads(response["body"])

    status, first = get(a["mchid"])
    assert status == 200
    assert [e["data"]["out_trade_no"] for e in first["events"]] == ["HOOK-PULL-A"]
    assert first["events"][0]["data"]["amount_yuan"] == "19.99"
    assert get(a["mchid"])[1]["events"] == []  # the cursor is kept by Tally: nothing new
    assert (
        get(a["mchid"], principal="arn:aws:iam::123456789012:user/other")[1]["events"][0]["event_id"]
        == first["events"][0]["event_id"]
    )
    assert get(a["mchid"], after="")[1]["events"] == first["events"]  # an explicit cursor reads again
    assert get("")[0] == 400
    assert get(b["mchid"])[0] == 403  # R53: another merchant's events, refused
    assert get(a["mchid"], after="~" * 40) == (200, {"events": [], "cursor": "~" * 40, "has_more": False})
    assert get(a["mchid"], after="x" * 300)[0] == 400  # hostile input: refused, nothing read or moved
    assert get(a["mchid"], limit="many")[0] == 400


def test_R20_a_change_whose_event_cannot_be_built_becomes_an_event_and_a_case(hooks):
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"], ["EventGenerationFailed"])
    broken = {
        "pk": f"{m['mchid']}#HOOK-BROKEN",
        "mchid": m["mchid"],
        "out_trade_no": "HOOK-BROKEN",
        "status": "PAID",
    }
    record = {
        "eventName": "MODIFY",
        "dynamodb": {
            "SequenceNumber": "4711",
            "OldImage": {"pk": {"S": broken["pk"]}, "status": {"S": "WAIT_PAY"}},
            "NewImage": {k: {"S": v} for k, v in broken.items()},  # PAID without a transaction id
        },
    }
    assert h.invoke("OutboxFunction", {"Records": [record]}) == {"batchItemFailures": []}
    assert h.metric("EventGenerationFailed") == 1
    deliver(h)
    [(_, body)] = received(h)
    payload = json.loads(body)
    assert payload["type"] == "EventGenerationFailed" and "transaction_id" in payload["data"]["error"]
    assert len(bootstrap.work_queue().list("kind=event-generation-failed")) == 1


def test_webhook_endpoints_are_listed_and_removed_and_refuse_unknown_event_types(hooks):
    from tally.service.webhooks import WebhookError

    h = hooks
    ep = endpoint(h, "1900000109", ["OrderPaid"])
    assert [e["endpoint_id"] for e in bootstrap.webhook_endpoints().list("1900000109")] == [ep["endpoint_id"]]
    assert "secret" not in bootstrap.webhook_endpoints().list("1900000109")[0]
    with pytest.raises(WebhookError):
        endpoint(h, "1900000109", ["OrderPaidd"])
    bootstrap.webhook_endpoints().remove(ep["endpoint_id"])
    assert bootstrap.webhook_endpoints().list("1900000109") == []
    row = from_item(
        h.ddb.get_item(
            TableName=h.env["WEBHOOKS_TABLE"],
            Key={"pk": {"S": f"endpoint#{ep['endpoint_id']}"}, "sk": {"S": "endpoint"}},
        ).get("Item")
    )
    assert row is None
    assert LambdaContext  # the handlers run with Lambda's context object


def test_the_console_webhooks_page_shows_each_endpoint_its_state_and_its_attempts(hooks):
    from tally.console import app, data
    from tally.console.auth import Identity

    h = hooks
    m = h.add_merchant()
    ep = endpoint(h, m["mchid"])
    h.sim.receiver.configure(fail_rate=1.0)
    deliverer = bootstrap.webhook_deliverer()
    deliverer.window_s = 0  # the first failure is past the window: paused at once
    paid(h, m["mchid"], "HOOK-CONSOLE-1")
    outbox(h)
    deliver(h)
    who = Identity("sub", "viewer", frozenset({"viewers"}), "jti")
    html = app.render("webhooks.html", who, page="webhooks", mchid="", endpoints=data.webhooks()).body
    assert ep["endpoint_id"] in html and "PAUSED" in html and "HOOK-CONSOLE-1" in html and ">500<" in html
    assert ep["secret"] not in html


def test_R20_the_feed_and_the_endpoints_get_the_event_while_the_bus_refuses_it(hooks, monkeypatch):
    """The bus down: the stream record is retried for the bus (OutboxFailed), the merchant is told anyway."""
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"])
    paid(h, m["mchid"], "HOOK-NOBUS-1")
    bus = bootstrap.outbox_service().bus
    monkeypatch.setattr(bus.client, "put_events", lambda **kw: {"FailedEntryCount": 1, "Entries": []})
    assert h.invoke("OutboxFunction", {"Records": stream_records(h.env)})["batchItemFailures"]
    assert h.metric("OutboxFailed") == 1
    deliver(h)
    assert [json.loads(body)["data"]["out_trade_no"] for _, body in received(h)] == ["HOOK-NOBUS-1"]


def test_R20_republish_after_a_parked_stream_record_reaches_the_endpoints_once(hooks):
    """`tally outbox republish` (the OutboxDLQ runbook) goes through the same path: the endpoint gets the event,
    and a second republish sends nothing it already has."""
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"])
    paid(h, m["mchid"], "HOOK-REPUB-1")  # the stream record is never handed to the outbox here
    bootstrap.republisher().order(m["mchid"], "HOOK-REPUB-1")
    deliver(h)
    bootstrap.republisher().order(m["mchid"], "HOOK-REPUB-1")
    deliver(h)
    assert [json.loads(body)["data"]["out_trade_no"] for _, body in received(h)] == ["HOOK-REPUB-1"]


def test_R38_events_still_on_their_way_to_a_removed_endpoint_are_one_case_not_lost_silently(hooks):
    h = hooks
    m = h.add_merchant()
    ep = endpoint(h, m["mchid"])
    paid(h, m["mchid"], "HOOK-GONE-1")
    paid(h, m["mchid"], "HOOK-GONE-2")
    outbox(h)
    bootstrap.webhook_endpoints().remove(ep["endpoint_id"])
    deliver(h)
    assert h.sim.receiver.deliveries == []
    [case] = bootstrap.work_queue().list("kind=webhook-failing")
    assert "removed" in case["reason"] and h.metric("WebhookGaveUp") == 2
    statuses = [
        e["deliveries"][0]["status"] for e in bootstrap.webhook_log().order(m["mchid"], "HOOK-GONE-1")
    ]
    assert statuses == ["FAILED"]


def test_an_endpoint_with_a_bad_url_or_secret_is_refused_and_nothing_is_stored(hooks):
    from tally.service.webhooks import WebhookError

    h = hooks
    endpoints = bootstrap.webhook_endpoints()
    for url, secret in (
        ("ftp://shop.example/hooks", None),
        ("", None),
        ("https://shop.example", "whsec_!!"),
        ("https://shop.example", "whsec_" + "QUFB" * 2),
    ):  # 6 bytes: too short
        with pytest.raises(WebhookError):
            endpoints.add("1900000109", url, secret=secret)
    assert endpoints.list() == []
    assert h.ddb.scan(TableName=h.env["WEBHOOKS_TABLE"])["Items"] == []


def _console(h, method, who_groups, form=None, query=None, page="webhooks"):
    """A console request as API Gateway hands it over after the Cognito authorizer (claims of a signed-in person)."""
    import urllib.parse

    from tally.console.auth import csrf_token, identity

    claims = {
        "sub": "u-1",
        "cognito:username": "ops",
        "cognito:groups": who_groups,
        "jti": "j-1",
        "token_use": "id",
    }
    context = {"http": {"method": method}, "authorizer": {"jwt": {"claims": claims}}}
    who = identity({"requestContext": context})
    body = urllib.parse.urlencode({**(form or {}), "csrf": csrf_token(who)}) if form is not None else ""
    event = {
        "version": "2.0",
        "routeKey": f"{method} /console/{{page}}",
        "rawPath": f"/console/{page}",
        "pathParameters": {"page": page},
        "queryStringParameters": query or {},
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "host": "console.example",
            "accept-language": "en",
        },
        "requestContext": context,
        "body": body,
        "isBase64Encoded": False,
    }
    answer = h.invoke("ConsoleFunction", event)
    return answer["statusCode"], answer["body"]


def test_an_operator_adds_an_endpoint_and_resends_from_the_console_a_count_first_a_viewer_cannot(hooks):
    h = hooks
    m = h.add_merchant()
    url = f"{h.sim.url}/merchant/hooks/console"
    status, page = _console(h, "POST", "[operators]", {"action": "add", "mchid": m["mchid"], "url": url})
    assert status == 200 and "whsec_" in page  # the secret, shown once on this answer
    [ep] = bootstrap.webhook_endpoints().list(m["mchid"])
    assert "whsec_" not in _console(h, "GET", "[viewers]")[1]  # never on the page itself
    h.sim.receiver.configure(down=True)
    bootstrap.webhook_endpoints().pause(ep["endpoint_id"], "receiver down")
    paid(h, m["mchid"], "HOOK-CONSOLE-2")
    outbox(h)
    h.sim.receiver.configure(down=False)
    resend = {"action": "resend", "endpoint": ep["endpoint_id"], "since": "2000-01-01T00:00:00Z"}
    assert _console(h, "POST", "[viewers]", resend)[0] == 403  # a viewer acts on nothing
    assert _console(h, "POST", "[operators]", {"action": "resume", "endpoint": ep["endpoint_id"]})[0] == 200
    status, page = _console(h, "POST", "[operators]", resend)
    assert status == 200 and "1 event would be resent" in page
    deliver(h)
    assert received(h) == []  # the count came first: nothing sent yet
    digest = bootstrap.webhook_resender().range(
        ep["endpoint_id"], "2000-01-01T00:00:00Z", "9999-12-31T23:59:59Z"
    )
    status, page = _console(h, "POST", "[operators]", {**resend, "digest": digest["digest"]})
    assert status == 200 and "queued" in page
    deliver(h)
    assert [json.loads(body)["data"]["out_trade_no"] for _, body in received(h)] == ["HOOK-CONSOLE-2"]


def parked(h, rounds=10):
    """The OutboxDLQ through the outbox-parked function until it is empty, as its SQS event source would."""
    url = h.env["OUTBOX_DLQ_URL"]
    for _ in range(rounds):
        messages = h.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
            "Messages", []
        )
        if not messages:
            return
        for m in messages:  # batch size 1 (template.yaml)
            result = h.invoke("OutboxParkedFunction", {"Records": [h._record(m)]})
            assert result == {"batchItemFailures": []}
            h.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    raise AssertionError("the OutboxDLQ did not drain")


def park(h, records, table="ORDERS_TABLE"):
    """The outbox fails on `records` (its retries spent): Lambda's on-failure record for the rest of the batch
    from the failed record, on the OutboxDLQ, as the embedded stack's stream pump sends it."""
    result = h.invoke("OutboxFunction", {"Records": records})
    [failed] = [f["itemIdentifier"] for f in result["batchItemFailures"]]
    rest = records[[r["dynamodb"]["SequenceNumber"] for r in records].index(failed) :]
    arn, shard = stream_shard(h.env, table)
    message = on_failure_message(rest, shard, arn, "OutboxFunction", "us-east-1")
    h.sqs.send_message(QueueUrl=h.env["OUTBOX_DLQ_URL"], MessageBody=json.dumps(message))
    return rest


def test_R20_a_record_the_stream_gave_up_on_is_an_event_and_a_case_and_the_cases_replay_republishes(hooks):
    """Issue #35 item 6: the bus is gone for longer than the stream's retries. The parked record gets one more
    attempt, then becomes an EventGenerationFailed event (to the endpoint) and a case with an alarmed metric; the
    case's closing action republishes from the row once the bus is back, and the endpoint gets nothing twice."""
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"])
    paid(h, m["mchid"], "HOOK-PARKED-1")
    mine = [r for r in stream_records(h.env) if "HOOK-PARKED-1" in json.dumps(r, default=str)]
    bus = BusDown(h.env["EVENT_BUS_NAME"])
    assert len(park(h, mine)) == 1  # the paid change (the order's creation publishes nothing)
    parked(h)
    assert h.metric("EventGenerationFailed") == 1
    [case] = bootstrap.work_queue().list("kind=event-generation-failed")
    assert case["merchant"] == m["mchid"] and case["order"] == "HOOK-PARKED-1"
    assert "replay" in case["actions"] and "not published" in case["reason"]
    deliver(h)
    payloads = [json.loads(body) for _, body in received(h)]
    # the endpoint does not depend on the bus: it got the payment, and the event that says the bus did not
    assert [p["type"] for p in payloads] == ["OrderPaid", "EventGenerationFailed"]
    assert "ResourceNotFound" in payloads[1]["data"]["error"]

    bus.back()
    consumer = subscribe(h.env)
    acted = bootstrap.work_queue().act(case["id"], "replay", by="ops", reason="the bus is back")
    assert acted["state"] == "RESOLVED" and "republish requested" in acted["outcome"]
    assert bootstrap.work_queue().list("kind=event-generation-failed") == []
    parked(h)  # the request: the row's events rebuilt and published by the outbox's own function
    on_bus = consumer()
    assert [(e["detail-type"], e["detail"]["out_trade_no"]) for e in on_bus] == [
        ("OrderPaid", "HOOK-PARKED-1")
    ]
    deliver(h)
    assert [json.loads(body)["type"] for _, body in received(h)] == ["OrderPaid", "EventGenerationFailed"]
    assert h.metric("EventGenerationFailed") == 1  # the republish succeeded: no new case


def test_R20_records_parked_beside_the_failing_one_are_published_not_lost(hooks):
    """Lambda parks the whole rest of a batch from the failed record; the records after it were never tried.
    Each gets its attempt: only the one that fails again is a case."""
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"])
    for no in ("HOOK-BESIDE-1", "HOOK-BESIDE-2"):
        paid(h, m["mchid"], no)
    changes = [r for r in stream_records(h.env) if "HOOK-BESIDE" in json.dumps(r, default=str)]
    bus = BusDown(h.env["EVENT_BUS_NAME"])
    rest = park(h, changes)
    bus.back()
    consumer = subscribe(h.env)
    parked(h)  # the bus is back before the parked batch is worked: everything is published, no case
    assert len(rest) >= 2
    assert sorted(e["detail"]["out_trade_no"] for e in consumer()) == ["HOOK-BESIDE-1", "HOOK-BESIDE-2"]
    assert bootstrap.work_queue().list("kind=event-generation-failed") == []
    assert h.metric("EventGenerationFailed") == 0


def test_R20_a_parked_batch_the_stream_no_longer_holds_is_one_case_for_its_window_and_replay_republishes_it(
    hooks,
):
    """Past the stream's 24 hours the records cannot be read back: one case names the window they arrived in;
    its replay republishes every order and refund changed in it (`tally outbox republish --since`)."""
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"])
    paid(h, m["mchid"], "HOOK-GONE-1")
    arn, shard = stream_shard(h.env)
    gone = arn.split(":table/")[0] + ":table/replaced/stream/2020-01-01T00:00:00.000"  # no longer exists
    window = [{"dynamodb": {"SequenceNumber": "1" * 22, "ApproximateCreationDateTime": time.time() - 60}}]
    message = on_failure_message(window, shard, gone, "OutboxFunction", "us-east-1")
    h.sqs.send_message(QueueUrl=h.env["OUTBOX_DLQ_URL"], MessageBody=json.dumps(message))
    parked(h)
    [case] = bootstrap.work_queue().list("kind=event-generation-failed")
    assert "no longer holds" in case["reason"] and h.metric("EventGenerationFailed") == 1
    bootstrap.work_queue().act(case["id"], "replay", by="ops", reason="republish the window")
    parked(h)
    deliver(h)
    assert [json.loads(body)["data"]["out_trade_no"] for _, body in received(h)] == ["HOOK-GONE-1"]


def test_R20_a_parked_change_whose_event_cannot_be_built_is_still_one_case(hooks):
    """A row the builder cannot read, met by the stream while the bus is gone: its EventGenerationFailed is not
    published either, so the record is parked; the parked attempt finds the same failure and the same case."""
    h = hooks
    m = h.add_merchant()
    endpoint(h, m["mchid"], ["EventGenerationFailed"])
    broken = {
        "pk": f"{m['mchid']}#HOOK-PARKED-BROKEN",
        "mchid": m["mchid"],
        "out_trade_no": "HOOK-PARKED-BROKEN",
    }
    table = h.env["ORDERS_TABLE"]
    h.ddb.put_item(TableName=table, Item={k: {"S": v} for k, v in {**broken, "status": "WAIT_PAY"}.items()})
    h.ddb.put_item(TableName=table, Item={k: {"S": v} for k, v in {**broken, "status": "PAID"}.items()})
    mine = [r for r in stream_records(h.env) if "HOOK-PARKED-BROKEN" in json.dumps(r, default=str)]
    bus = BusDown(h.env["EVENT_BUS_NAME"])
    park(h, mine)  # PAID without a transaction id, and nowhere to say so
    parked(h)
    bus.back()
    [case] = bootstrap.work_queue().list("kind=event-generation-failed")
    assert case["order"] == "HOOK-PARKED-BROKEN" and "produced no event" in case["reason"]
    deliver(h)
    [(_, body)] = received(h)  # the endpoint was told, once (the stable id)
    assert json.loads(body)["type"] == "EventGenerationFailed"


def test_R20_a_republish_request_that_fails_is_a_new_case_not_a_silent_gap(hooks):
    h = hooks
    m = h.add_merchant()
    asked = bootstrap.republish_requests().ask(
        "evt-gone", {"mchid": m["mchid"], "out_trade_no": "NO-SUCH"}, "ops"
    )
    assert asked == f"republish requested: order {m['mchid']}/NO-SUCH"
    parked(h)
    [case] = bootstrap.work_queue().list("kind=event-generation-failed")
    assert case["order"] == "NO-SUCH" and "republishing for evt-gone failed" in case["reason"]
    assert h.metric("EventGenerationFailed") == 1
    with pytest.raises(LookupError):  # a case that names nothing to republish is refused, nothing sent
        bootstrap.republish_requests().ask("evt-empty", {}, "ops")


def test_R20_an_operator_closes_an_event_generation_failed_case_from_the_console_and_it_republishes(hooks):
    """The console's Replay on the case: the console only asks (SendMessage on the OutboxDLQ, its one new grant);
    the outbox-parked function publishes the row's real event. A viewer cannot."""
    h = hooks
    m = h.add_merchant()
    paid(h, m["mchid"], "HOOK-PARKED-CONSOLE")
    mine = [r for r in stream_records(h.env) if "HOOK-PARKED-CONSOLE" in json.dumps(r, default=str)]
    bus = BusDown(h.env["EVENT_BUS_NAME"])
    park(h, mine)
    parked(h)
    bus.back()
    consumer = subscribe(h.env)
    [case] = bootstrap.work_queue().list("kind=event-generation-failed")
    form = {"id": case["id"], "action": "replay", "reason": "the bus is back"}
    assert _console(h, "POST", "[viewers]", form, page="act")[0] == 403
    status, _ = _console(h, "POST", "[operators]", form, page="act")
    assert status in (302, 303)
    assert bootstrap.work_queue().list("kind=event-generation-failed") == []
    parked(h)
    assert [(e["detail-type"], e["detail"]["out_trade_no"]) for e in consumer()] == [
        ("OrderPaid", "HOOK-PARKED-CONSOLE")
    ]


def test_R38_an_endpoint_beside_tally_is_refused_when_added_and_never_called_if_it_moves_there(
    hooks, monkeypatch
):
    """SSRF: a configured tenant registers an endpoint on a loopback, link-local (instance metadata) or private
    address to make Tally call what sits beside it. With the deployed default (WebhookPrivateAddresses=refuse) the
    endpoint is refused and nothing is stored; one whose name resolves there later (registered while it pointed
    elsewhere) gets no request: each attempt fails with the reason, and past the window the endpoint is paused
    with one case, as for any receiver that is down."""
    h = hooks
    m = h.add_merchant()
    ep = endpoint(h, m["mchid"])  # registered while private addresses are allowed (the tests' receiver)
    monkeypatch.setenv("TALLY_WEBHOOK_PRIVATE", "refuse")
    monkeypatch.setenv("TALLY_WEBHOOK_WINDOW_S", "1")
    bootstrap.reset()
    endpoints = bootstrap.webhook_endpoints()
    for url in (
        "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next",
        "http://169.254.169.254/latest/meta-data/",
        "https://10.0.0.7/hooks",
        "http://[::ffff:192.168.1.1]/hooks",
        "https://localhost/hooks",
        "https://no-such-host.invalid/hooks",
    ):
        with pytest.raises(Exception, match="not a receiver Tally may call"):
            endpoints.add(m["mchid"], url)
    assert [e["endpoint_id"] for e in endpoints.list(m["mchid"])] == [ep["endpoint_id"]]

    paid(h, m["mchid"], "HOOK-SSRF-1")
    outbox(h)
    deliver(h, rounds=400)
    assert h.sim.receiver.accepted() == []  # never called
    attempts = bootstrap.webhook_log().endpoint(ep["endpoint_id"])
    assert attempts and all(
        a["http_status"] == 0 and "127.0.0.1" in a["snippet"] and "loopback" in a["snippet"] for a in attempts
    )
    assert {e["endpoint_id"]: e for e in endpoints.list(m["mchid"])}[ep["endpoint_id"]]["status"] == "PAUSED"
    (case,) = bootstrap.work_queue().list("kind=webhook-failing")
    assert ep["endpoint_id"] in case["reason"]
