"""The money rules R1–R17 re-proved for every channel (WeChat v3, Alipay public-key and cert mode,
WeChat v2 MD5 and HMAC-SHA256), plus the ACK protocol table (R6) and bad input per route."""

import json

import pytest

from tests.integration.channel_kit import DRIVERS, IN_BETWEEN, UNKNOWN_STATE, ack_kind

BUSINESS = ["NOTIFY_RAW_TABLE", "ORDERS_TABLE", "LEDGER_TABLE", "TRANSITIONS_TABLE", "REFUND_TASKS_TABLE"]


# WeChat v3 proves every rule in test_ingest_apply.py; here the other channels do. The key-mode variants
# (Alipay cert mode, v2 HMAC-SHA256) re-run the tests that depend on the signature.
MAIN = [d for d in DRIVERS if d.name in ("alipay", "wechatpay_v2")]
SIGNATURE_VARIANTS = [d for d in DRIVERS if d.name != "wechatpay_v3"]


@pytest.fixture(params=MAIN, ids=lambda d: d.name)
def ch(request, h):
    return request.param(h)


@pytest.fixture(params=SIGNATURE_VARIANTS, ids=lambda d: d.name)
def chv(request, h):
    return request.param(h)


def snapshot(h):
    return {t: h.scan(t) for t in BUSINESS}


def test_happy_path_books_once_per_channel(h, chv):
    mid = chv.setup()
    otn = chv.order(mid, 1999)
    body, headers, tx = chv.callback(mid, otn, 1999)
    assert ack_kind(chv.name, chv.notify(mid, body, headers)) == "success"
    assert h.drain() == []
    view = h.order(mid, otn)
    assert view["status"] == "PAID" and view["transaction_id"] == tx and view["paid_cent"] == 1999
    (entry,) = h.scan("LEDGER_TABLE")
    assert entry["pk"] == f"{chv.raw_prefix}#{mid}#{tx}" and entry["amount_cent"] == 1999


def not_evidence(h):
    """notify_event rows other than the bounded evidence of rejected bodies (R40): business rows."""
    return [r for r in h.scan("NOTIFY_EVENT_TABLE") if r["kind"] not in ("rejected", "rejected_count")]


def test_R1_R4_bad_signature_changes_nothing_and_answers_failure(h, chv):
    mid = chv.setup()
    otn = chv.order(mid)
    body, headers = chv.tamper(*chv.callback(mid, otn, 100)[:2])
    before = snapshot(h)
    response = chv.notify(mid, body, headers)
    assert ack_kind(chv.name, response) == "failure" and 400 <= response["statusCode"] < 500
    assert snapshot(h) == before and h.queue_depth() == 0 and not_evidence(h) == []
    assert h.metric("NotifyRejected") == 1
    # R40: every channel keeps the rejected body the same bounded way, with a cause, for a replay
    (kept,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r["kind"] == "rejected"]
    assert kept["cause"] == "bad_signature" and kept["body_sha256"] and kept["body"] == body.decode()


def test_R5_signed_but_unusable_is_quarantined_with_success_ack(h, chv):
    mid = chv.setup()
    otn = chv.order(mid)
    body, headers = chv.unusable(mid, otn)
    assert ack_kind(chv.name, chv.notify(mid, body, headers)) == "success"
    (event,) = h.scan("NOTIFY_EVENT_TABLE")
    assert event["kind"] == "quarantined" and event["body"] == body.decode()
    assert h.scan("NOTIFY_RAW_TABLE") == [] and h.metric("NotifyQuarantined") == 1


def test_R7_duplicate_delivery_keeps_one_raw_row_and_one_ledger_entry(h, chv):
    mid = chv.setup()
    otn = chv.order(mid)
    body, headers, tx = chv.callback(mid, otn, 100)
    for _ in range(3):
        assert ack_kind(chv.name, chv.notify(mid, body, headers)) == "success"
    assert [r["pk"] for r in h.scan("NOTIFY_RAW_TABLE")] == [f"{chv.raw_prefix}#{mid}#{tx}"]
    h.drain()
    assert len(h.scan("LEDGER_TABLE")) == 1


def test_R8_in_between_state_goes_to_events_never_an_empty_key(h, ch):
    mid = ch.setup()
    otn = ch.order(mid)
    state, tx = IN_BETWEEN[ch.name]
    body, headers, _ = ch.callback(mid, otn, 100, state=state, transaction_id=tx)
    assert ack_kind(ch.name, ch.notify(mid, body, headers)) == "success"
    assert h.scan("NOTIFY_RAW_TABLE") == []
    assert [e["kind"] for e in h.scan("NOTIFY_EVENT_TABLE")] == ["in_between"]


def test_R9_R10_ingest_is_async_and_a_handled_row_answers_success_without_enqueue(h, ch):
    mid = ch.setup()
    otn = ch.order(mid)
    body, headers, _ = ch.callback(mid, otn, 100)
    ch.notify(mid, body, headers)
    assert h.order(mid, otn)["status"] == "WAIT_PAY" and h.queue_depth() == 1 and h.scan("LEDGER_TABLE") == []
    h.drain()
    assert ack_kind(ch.name, ch.notify(mid, body, headers)) == "success"
    assert h.queue_depth() == 0 and h.metric("NotifyDuplicate") == 1


def test_R11_same_out_trade_no_for_two_merchants_never_crosses(h, ch):
    a, b = ch.setup(), ch.setup()
    ch.order(a, 100, "SAME-NO-001")
    ch.order(b, 5000, "SAME-NO-001")
    body, headers, _ = ch.callback(b, "SAME-NO-001", 1)  # one cent for the other tenant
    ch.notify(b, body, headers)
    h.drain()
    assert (
        h.order(a, "SAME-NO-001")["status"] == "WAIT_PAY"
        and h.order(b, "SAME-NO-001")["status"] == "WAIT_PAY"
    )
    assert h.metric("ApplyMismatch") == 1 and h.scan("LEDGER_TABLE") == []


def test_R12_amount_mismatch_goes_to_a_person(h, ch):
    mid = ch.setup()
    otn = ch.order(mid, 100)
    body, headers, _ = ch.callback(mid, otn, 1)
    assert ack_kind(ch.name, ch.notify(mid, body, headers)) == "success"
    h.drain()
    view = h.order(mid, otn)
    assert (
        view["status"] == "WAIT_PAY"
        and view["raw"][0]["handled"] == 2
        and "amount" in view["raw"][0]["manual_reason"]
    )
    assert h.metric("ApplyManual") == 1 and h.scan("LEDGER_TABLE") == []


def test_R13_books_what_the_channel_received_and_checks_the_order_amount(h, ch):
    mid = ch.setup()
    otn = ch.order(mid, 1000)
    body, headers, _ = ch.callback(mid, otn, 1000, paid=800)
    ch.notify(mid, body, headers)
    h.drain()
    (entry,) = h.scan("LEDGER_TABLE")
    assert entry["amount_cent"] == 800 and entry["order_total_cent"] == 1000
    assert h.order(mid, otn)["paid_cent"] == 800


def test_R14_amounts_stay_integer_cents_in_the_ledger(h, ch):
    mid = ch.setup()
    otn = ch.order(mid, 999999999)
    body, headers, _ = ch.callback(mid, otn, 999999999)
    ch.notify(mid, body, headers)
    h.drain()
    raw = h.ddb.scan(TableName=h.env["LEDGER_TABLE"])["Items"][0]
    assert raw["amount_cent"] == {"N": "999999999"}


def test_R15_order_not_found_is_retried_then_goes_to_a_person(h, ch):
    mid = ch.setup()
    body, headers, _ = ch.callback(mid, "NO-SUCH-ORDER-1", 100)
    ch.notify(mid, body, headers)
    assert len(h.drain()) == 3
    (row,) = h.scan("NOTIFY_RAW_TABLE")
    assert row["handled"] == 2 and "not found" in row["manual_reason"]


def test_R16_unknown_state_goes_to_a_person(h, ch):
    mid = ch.setup()
    otn = ch.order(mid)
    body, headers, _ = ch.callback(mid, otn, 100, state=UNKNOWN_STATE[ch.name])
    assert ack_kind(ch.name, ch.notify(mid, body, headers)) == "success"
    h.drain()
    (row,) = h.scan("NOTIFY_RAW_TABLE")
    assert row["handled"] == 2 and "unknown state" in row["manual_reason"]
    assert h.order(mid, otn)["status"] == "WAIT_PAY"


def test_R17_second_payment_is_illegal_with_one_refund_task(h, ch):
    mid = ch.setup()
    otn = ch.order(mid)
    for _ in range(2):
        body, headers, _ = ch.callback(mid, otn, 100)
        ch.notify(mid, body, headers)
        h.drain()
    assert len(h.scan("LEDGER_TABLE")) == 1 and len(h.scan("REFUND_TASKS_TABLE")) == 1
    assert h.metric("ApplyIllegal") == 1


# ---------------------------------------------------------------- R6: the ACK protocol table

OUTCOMES = ["success", "duplicate", "manual", "bad signature", "undecryptable", "internal error"]
EXPECTED = {
    "success": "success",
    "duplicate": "success",
    "manual": "success",
    "bad signature": "failure",
    "undecryptable": "success",
    "internal error": "failure",
}
EXACT = {  # channel → ack kind → (status, content type, body)
    "wechatpay_v3": {"success": (204, None, ""), "failure": (None, "application/json", None)},
    "alipay": {"success": (200, "text/plain", "success"), "failure": (None, "text/plain", "fail")},
    "wechatpay_v2": {
        "success": (
            200,
            "text/xml",
            "<xml><return_code><![CDATA[SUCCESS]]></return_code>"
            "<return_msg><![CDATA[OK]]></return_msg></xml>",
        ),
        "failure": (None, "text/xml", None),
    },
}


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize(
    "driver",
    [d for d in DRIVERS if d.name in ("wechatpay_v3", "alipay", "wechatpay_v2")],
    ids=lambda d: d.name,
)
def test_R6_ack_protocol_table(h, driver, outcome, monkeypatch):
    """R6: per channel × outcome, the exact status, content type and body the channel expects."""
    from tally import bootstrap

    ch = driver(h)
    mid = ch.setup()
    otn = ch.order(mid)
    body, headers, _ = ch.callback(mid, otn, 100)
    status = {"internal error": 500, "bad signature": 401}.get(outcome)
    if outcome in ("duplicate", "manual"):
        if outcome == "manual":
            body, headers, _ = ch.callback(mid, otn, 1)  # amount mismatch → handled=2
        ch.notify(mid, body, headers)
        h.drain()
    elif outcome == "bad signature":
        body, headers = ch.tamper(body, headers)
    elif outcome == "undecryptable":
        body, headers = ch.unusable(mid, otn)
    elif outcome == "internal error":

        def broken(*args):
            raise ConnectionError("queue unavailable")

        monkeypatch.setattr(bootstrap.ingest_service().queue, "send", broken)
    response = ch.notify(mid, body, headers)
    kind = EXPECTED[outcome]
    want_status, want_type, want_body = EXACT[ch.name][kind]
    assert response["statusCode"] == (want_status or status)
    assert response["headers"].get("content-type") == want_type
    if want_body is not None:
        assert response["body"] == want_body
    elif ch.name == "wechatpay_v3":
        assert json.loads(response["body"]) == {
            "code": "FAIL",
            "message": json.loads(response["body"])["message"],
        }
    elif ch.name == "wechatpay_v2":
        assert response["body"].startswith("<xml><return_code><![CDATA[FAIL]]></return_code><return_msg>")
    if kind == "failure":  # the exact failure body too (the channel logs it; no internals leak)
        assert response["body"] == FAILURE_BODY[ch.name][outcome]
    assert "Traceback" not in response["body"] and response["statusCode"] not in (301, 302, 303, 307, 308)


FAILURE_BODY = {  # channel → outcome → the exact failure ACK body (R6)
    "wechatpay_v3": {
        "bad signature": '{"code": "FAIL", "message": "rejected"}',
        "internal error": '{"code": "FAIL", "message": "enqueue failed, retry"}',
    },
    "alipay": {"bad signature": "fail", "internal error": "fail"},
    "wechatpay_v2": {
        "bad signature": "<xml><return_code><![CDATA[FAIL]]></return_code><return_msg><![CDATA[rejected]]>"
        "</return_msg></xml>",
        "internal error": "<xml><return_code><![CDATA[FAIL]]></return_code><return_msg><![CDATA[enqueue failed, "
        "retry]]></return_msg></xml>",
    },
}


# ---------------------------------------------------------------- bad input per route

BAD = {
    "alipay": [
        b"",
        b"a=%ZZ&=",
        b"sign=abc",
        b"charset=ebcdic&sign=x",
        b"a=1&a=2",
        b"\xff\xfe\x00",
        b"trade_status=TRADE_SUCCESS&total_amount=1.00&sign_type=RSA&sign=QUJD",
    ],
    "wechatpay_v2": [
        b"",
        b"not xml",
        b"<xml><a><b>1</b></a></xml>",
        b"<other/>",
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><xml><a>&e;</a></xml>',
        b'<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]><xml><a>&lol2;</a></xml>',
        b"<xml><sign>ABC</sign></xml>",
        b"<xml><req_info>bm90IGVuY3J5cHRlZA==</req_info></xml>",
    ],
}


@pytest.mark.parametrize("channel", list(BAD))
def test_bad_input_gets_failure_ack_no_stack_trace_no_business_row(h, channel):
    """One moto set-up per route (it dominates the cost); every bad body is checked on it."""
    driver = next(d for d in DRIVERS if d.name == channel)(h)
    mid = driver.setup()
    before = snapshot(h)
    for body in BAD[channel]:
        response = driver.notify(mid, body, {})
        assert ack_kind(channel, response) == "failure" and 400 <= response["statusCode"] < 500, body
        assert "Traceback" not in response["body"] and "etc/passwd" not in response["body"]
    assert snapshot(h) == before and not_evidence(h) == [] and h.queue_depth() == 0
    assert h.metric("NotifyRejected") == len(BAD[channel])


@pytest.mark.parametrize(
    "path,kind",
    [("/notify/alipay/2021000000000001", "alipay"), ("/notify/wechatpay-v2/1900000001", "wechatpay_v2")],
)
def test_unknown_merchant_and_bad_event_answer_in_the_channels_protocol(h, path, kind):
    from tally_local.resources import LambdaContext

    response = h.call(
        "NotifyFunction",
        "POST",
        path,
        b"a=b",
        {},
        {("app_id" if kind == "alipay" else "mchid"): path.rsplit("/", 1)[1]},
    )
    assert ack_kind(kind, response) == "failure" and response["statusCode"] == 404
    handler, _ = h.handlers["NotifyFunction"]
    route = "POST " + path.rsplit("/", 1)[0] + ("/{app_id}" if kind == "alipay" else "/{mchid}")
    bad = handler(
        {"routeKey": route, "rawPath": path, "body": "***", "isBase64Encoded": True, "headers": {}},
        LambdaContext("NotifyFunction"),
    )
    assert ack_kind(kind, bad) == "failure" and bad["statusCode"] == 400
