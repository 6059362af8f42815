"""The WeChat Pay v3 spine on moto: rules R1–R19, each test named with its rule."""

import json

import pytest
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

BUSINESS_TABLES = [
    "NOTIFY_RAW_TABLE",
    "ORDERS_TABLE",
    "LEDGER_TABLE",
    "TRANSITIONS_TABLE",
    "REFUND_TASKS_TABLE",
]


@pytest.fixture
def merchant(h):
    return h.add_merchant()


def paid(h, merchant, amount=100, **kw):
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=amount)["body"])
    headers, body, resource = h.notification(merchant["mchid"], order["out_trade_no"], amount, **kw)
    return order, headers, body, resource


def snapshot(h):
    return {t: h.scan(t) for t in BUSINESS_TABLES}


def test_happy_path_books_once(h, merchant):
    order, headers, body, resource = paid(h, merchant, 100)
    response = h.notify(merchant["mchid"], headers, body)
    assert response["statusCode"] in (200, 204)
    assert h.drain() == []
    view = h.order(merchant["mchid"], order["out_trade_no"])
    assert view["status"] == "PAID" and view["transaction_id"] == resource["transaction_id"]
    assert [r["handled"] for r in view["raw"]] == [1]
    assert len(h.scan("LEDGER_TABLE")) == 1
    assert h.metric("ApplyBooked") == 1


def test_R1_R4_bad_signature_changes_nothing_and_answers_failure(h, merchant):
    order, headers, body, _ = paid(h, merchant)
    before = snapshot(h)
    headers["Wechatpay-Signature"] = headers["Wechatpay-Signature"][::-1]
    response = h.notify(merchant["mchid"], headers, body)
    assert response["statusCode"] == 401
    assert json.loads(response["body"])["code"] == "FAIL"
    assert snapshot(h) == before and h.queue_depth() == 0
    assert h.metric("NotifyRejected") == 1


def test_R2_signature_is_over_raw_bytes_not_reserialised_json(h, merchant):
    order, headers, body, _ = paid(h, merchant)
    reserialised = json.dumps(json.loads(body), indent=1).encode()  # same JSON, other bytes
    assert h.notify(merchant["mchid"], headers, reserialised)["statusCode"] == 401
    assert h.notify(merchant["mchid"], headers, body, base64_body=False)["statusCode"] == 204


def test_R3_unknown_certificate_serial_triggers_one_refresh(h, sim):
    """R3: an unknown certificate serial triggers one refresh, then one more verify."""
    m = h.add_merchant(verify_mode="certificate")
    new_serial = sim.rotate_platform_certificate()
    order = json.loads(h.create_order(m["mchid"])["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 100, serial=new_serial)
    assert headers["Wechatpay-Serial"] == new_serial
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.metric("PlatformCertRefreshed") == 1
    # a second unknown serial right after does not hammer the channel: still one refresh
    headers2, body2, _ = h.notification(m["mchid"], order["out_trade_no"], 100, serial="ABCDEF0123456789")
    assert h.notify(m["mchid"], headers2, body2)["statusCode"] == 401
    assert h.metric("PlatformCertRefreshed") == 1


def test_R3_public_key_mode_needs_no_download(h, merchant, sim):
    order = json.loads(h.create_order(merchant["mchid"])["body"])
    headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 100, serial=sim.public_key_id)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    assert h.metric("PlatformCertRefreshed") == 0


def test_R4_signtest_probe_is_rejected_without_alarm(h, merchant):
    order, headers, body, _ = paid(h, merchant, signature_override="WECHATPAY/SIGNTEST/abcdef")
    before = snapshot(h)
    response = h.notify(merchant["mchid"], headers, body)
    assert response["statusCode"] >= 400 and json.loads(response["body"])["code"] == "FAIL"
    assert snapshot(h) == before
    assert h.metric("NotifyProbeRejected") == 1 and h.metric("NotifyRejected") == 0


def test_R4_stale_timestamp_is_rejected(h, merchant):
    import time

    order, headers, body, _ = paid(h, merchant, timestamp=int(time.time()) - 301)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 401
    assert h.scan("NOTIFY_RAW_TABLE") == []


def test_R5_wrong_key_after_valid_signature_is_quarantined_with_success_ack(h, merchant):
    order, headers, body, _ = paid(h, merchant, apiv3_key="X" * 32)
    response = h.notify(merchant["mchid"], headers, body)
    assert response["statusCode"] == 204  # not retryable: WeChat must stop; a person takes it
    events = h.scan("NOTIFY_EVENT_TABLE")
    assert [e["kind"] for e in events] == ["quarantined"] and body.decode() == events[0]["body"]
    assert h.scan("NOTIFY_RAW_TABLE") == [] and h.metric("NotifyQuarantined") == 1


def test_R6_acks_speak_wechat_v3(h, merchant):
    order, headers, body, _ = paid(h, merchant)
    ok = h.notify(merchant["mchid"], headers, body)
    assert ok["statusCode"] in (200, 204)
    headers["Wechatpay-Nonce"] = "tampered"
    bad = h.notify(merchant["mchid"], headers, body)
    assert 400 <= bad["statusCode"] < 600
    payload = json.loads(bad["body"])
    assert set(payload) == {"code", "message"} and payload["code"] == "FAIL"
    assert bad["headers"]["content-type"] == "application/json"


def test_R7_duplicate_delivery_keeps_one_raw_row(h, merchant):
    order, headers, body, resource = paid(h, merchant)
    for _ in range(3):
        assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    rows = h.scan("NOTIFY_RAW_TABLE")
    assert [r["pk"] for r in rows] == [f"wechatpay#{merchant['mchid']}#{resource['transaction_id']}"]
    h.drain()
    assert len(h.scan("LEDGER_TABLE")) == 1


def test_R8_in_between_state_goes_to_events_never_an_empty_key(h, merchant):
    """R8: NOTPAY without a transaction id is an event row, never a raw row with an empty key."""
    order = json.loads(h.create_order(merchant["mchid"])["body"])
    headers, body, _ = h.notification(
        merchant["mchid"], order["out_trade_no"], 100, trade_state="NOTPAY", transaction_id=""
    )
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    assert h.scan("NOTIFY_RAW_TABLE") == []
    assert [e["kind"] for e in h.scan("NOTIFY_EVENT_TABLE")] == ["in_between"]


def test_R9_handled_row_answers_success_at_once_without_enqueue(h, merchant):
    order, headers, body, _ = paid(h, merchant)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    assert h.queue_depth() == 0 and h.metric("NotifyDuplicate") == 1


def test_R10_ingest_only_writes_raw_and_enqueues(h, merchant):
    """R10: ingest does local writes and one enqueue only; the business apply is asynchronous."""
    order, headers, body, _ = paid(h, merchant)
    h.notify(merchant["mchid"], headers, body)
    assert h.order(merchant["mchid"], order["out_trade_no"])["status"] == "WAIT_PAY"  # business is async
    assert h.queue_depth() == 1 and h.scan("LEDGER_TABLE") == []


def test_R11_same_out_trade_no_for_two_merchants_never_crosses(h):
    a = h.add_merchant(mchid="1900000101")
    b = h.add_merchant(mchid="1900000102")
    h.create_order(a["mchid"], "SAME-NO-001", amount_cent=100)
    h.create_order(b["mchid"], "SAME-NO-001", amount_cent=5000)
    headers, body, _ = h.notification(b["mchid"], "SAME-NO-001", 1)  # one cent for the other tenant
    h.notify(b["mchid"], headers, body)
    h.drain()
    assert h.order(a["mchid"], "SAME-NO-001")["status"] == "WAIT_PAY"
    assert h.order(b["mchid"], "SAME-NO-001")["status"] == "WAIT_PAY"
    assert h.metric("ApplyMismatch") == 1 and h.scan("LEDGER_TABLE") == []


def test_R11_callback_on_another_merchants_url_is_quarantined(h):
    a = h.add_merchant(mchid="1900000101")
    b = h.add_merchant(mchid="1900000102")
    h.create_order(b["mchid"], "ORDER-B-0001")
    headers, body, _ = h.notification(b["mchid"], "ORDER-B-0001", 100)
    assert h.notify(a["mchid"], headers, body)["statusCode"] == 204
    assert h.scan("NOTIFY_RAW_TABLE") == [] and h.metric("NotifyQuarantined") == 1


@pytest.mark.parametrize("field,value", [("total", 1), ("currency", "USD")])
def test_R12_amount_or_currency_mismatch_goes_to_person(h, merchant, field, value):
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=100)["body"])
    total = value if field == "total" else 100
    kw = {"currency": value} if field == "currency" else {}
    headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], total, **kw)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    view = h.order(merchant["mchid"], order["out_trade_no"])
    assert view["status"] == "WAIT_PAY" and view["raw"][0]["handled"] == 2
    assert view["raw"][0]["manual_reason"]
    assert h.metric("ApplyMismatch") == 1 and h.metric("ApplyManual") == 1 and h.scan("LEDGER_TABLE") == []


def test_R13_books_the_payer_amount_and_checks_the_order_amount(h, merchant):
    order, headers, body, _ = paid(h, merchant, 1000, payer_total=800)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    (entry,) = h.scan("LEDGER_TABLE")
    assert entry["amount_cent"] == 800 and entry["order_total_cent"] == 1000
    assert h.order(merchant["mchid"], order["out_trade_no"])["paid_cent"] == 800


def test_R14_amounts_are_integer_cents_end_to_end(h, merchant):
    order, headers, body, _ = paid(h, merchant, 1999)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    raw = h.ddb.scan(TableName=h.env["LEDGER_TABLE"])["Items"][0]
    assert raw["amount_cent"] == {"N": "1999"}
    assert isinstance(h.scan("LEDGER_TABLE")[0]["amount_cent"], int)


def test_R14_order_amount_must_be_integer_cents(h, merchant):
    for bad in (19.99, "1999", True, 0):
        response = h.create_order(merchant["mchid"], amount_cent=bad)
        assert response["statusCode"] == 400 and "cents" in response["body"]


def test_R15_order_not_found_is_retried_then_goes_to_person(h, merchant):
    """R15: an order that cannot be found is retried a bounded number of times, then handled=2."""
    headers, body, _ = h.notification(merchant["mchid"], "NO-SUCH-ORDER-1", 100)
    h.notify(merchant["mchid"], headers, body)
    failures = h.drain()
    assert len(failures) == 3  # retried, bounded
    (row,) = h.scan("NOTIFY_RAW_TABLE")
    assert row["handled"] == 2 and "not found" in row["manual_reason"] and row["attempts"] == 4
    assert h.metric("ApplyOrderNotFound") == 1 and h.metric("ApplyManual") == 1


def test_R15_order_created_late_is_booked_on_retry(h, merchant):
    headers, body, _ = h.notification(merchant["mchid"], "LATE-ORDER-001", 100)
    h.notify(merchant["mchid"], headers, body)
    assert h.drain(max_rounds=1)  # first attempt: not found, retried
    h.create_order(merchant["mchid"], "LATE-ORDER-001")
    h.drain()
    assert h.order(merchant["mchid"], "LATE-ORDER-001")["status"] == "PAID"


def test_R16_unknown_state_goes_to_person(h, merchant):
    order = json.loads(h.create_order(merchant["mchid"])["body"])
    headers, body, _ = h.notification(
        merchant["mchid"], order["out_trade_no"], 100, trade_state="SOMETHING_NEW"
    )
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    (row,) = h.scan("NOTIFY_RAW_TABLE")
    assert row["handled"] == 2 and "unknown state" in row["manual_reason"]
    assert h.metric("ApplyUnknownState") == 1
    assert h.order(merchant["mchid"], order["out_trade_no"])["status"] == "WAIT_PAY"


def test_R17_double_payment_is_illegal_with_one_refund_task(h, merchant):
    order, headers, body, _ = paid(h, merchant)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    headers2, body2, second = h.notification(merchant["mchid"], order["out_trade_no"], 100)
    for _ in range(2):
        h.notify(merchant["mchid"], headers2, body2)
    h.drain()
    (task,) = h.scan("REFUND_TASKS_TABLE")
    assert task["transaction_id"] == second["transaction_id"] and task["amount_cent"] == 100
    assert len(h.scan("LEDGER_TABLE")) == 1
    rows = {r["transaction_id"]: r for r in h.scan("NOTIFY_RAW_TABLE")}
    assert rows[second["transaction_id"]]["handled"] == 2
    assert h.metric("ApplyIllegal") == 1 and h.metric("RefundTaskCreated") == 1


def test_R17_duplicate_apply_of_the_same_voucher_is_duplicate(h, merchant):
    from tally import bootstrap

    order, headers, body, resource = paid(h, merchant)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    key = f"wechatpay#{merchant['mchid']}#{resource['transaction_id']}"
    # Put the raw row back to handled=0 as if the worker crashed after commit: re-apply is a no-op.
    h.ddb.update_item(
        TableName=h.env["NOTIFY_RAW_TABLE"],
        Key={"pk": {"S": key}},
        UpdateExpression="SET handled = :z",
        ExpressionAttributeValues={":z": {"N": "0"}},
    )
    assert bootstrap.apply_service().apply(key).value == "DUPLICATE"
    assert len(h.scan("LEDGER_TABLE")) == 1


def test_R18_failed_transaction_writes_nothing_and_raw_stays_pending(h, merchant, monkeypatch):
    """R18: ledger, transition and handled=1 commit together or not at all."""
    from tally import bootstrap

    order, headers, body, resource = paid(h, merchant)
    h.notify(merchant["mchid"], headers, body)
    # A conflicting ledger row for another order makes the transaction's ledger put fail...
    key = f"wechatpay#{merchant['mchid']}#{resource['transaction_id']}"
    service = bootstrap.apply_service()
    real = service.book.t.ddb.transact_write_items

    def boom(**kw):
        raise service.book.t.ddb.exceptions.InternalServerError(
            {"Error": {"Code": "InternalServerError", "Message": "injected"}}, "TransactWriteItems"
        )

    monkeypatch.setattr(service.book.t.ddb, "transact_write_items", boom)
    assert h.drain(max_rounds=1)
    assert h.scan("LEDGER_TABLE") == [] and h.scan("TRANSITIONS_TABLE") == []
    assert h.order(merchant["mchid"], order["out_trade_no"])["status"] == "WAIT_PAY"
    assert h.scan("NOTIFY_RAW_TABLE")[0]["handled"] == 0
    assert h.metric("ApplyFailed") == 1
    monkeypatch.setattr(service.book.t.ddb, "transact_write_items", real)
    h.drain()
    assert h.order(merchant["mchid"], order["out_trade_no"])["status"] == "PAID"
    assert bootstrap.apply_service().apply(key).value == "ALREADY_HANDLED"


def test_R19_lost_compare_and_set_rereads_and_decides_again(h, merchant, monkeypatch):
    from tally import bootstrap

    order, headers, body, resource = paid(h, merchant)
    h.notify(merchant["mchid"], headers, body)
    service = bootstrap.apply_service()
    real_read = service._read_order  # the order (with the journal's chain head: one read, issue #36)
    calls = {"n": 0}

    def racing_read(notice):
        row, head = real_read(notice)
        calls["n"] += 1
        if calls["n"] == 1:  # someone else bumps the order between our read and our write
            service.orders.set_fields(row["pk"], version=row["version"] + 1)
        return row, head

    monkeypatch.setattr(service, "_read_order", racing_read)
    assert service.apply(f"wechatpay#{merchant['mchid']}#{resource['transaction_id']}").value == "BOOKED"
    assert calls["n"] == 2


@pytest.mark.parametrize(
    "case",
    [
        "no headers",
        "wrong serial",
        "bad base64 sig",
        "truncated ciphertext",
        "non-json",
        "huge body",
        "bad base64 event",
    ],
)
def test_bad_input_gets_failure_ack_no_5xx_no_business_row(h, merchant, case):
    order, headers, body, _ = paid(h, merchant)
    if case == "no headers":
        headers = {}
    elif case == "wrong serial":
        headers["Wechatpay-Serial"] = "PUB_KEY_ID_0000000000000000000000000000000000"
    elif case == "bad base64 sig":
        headers["Wechatpay-Signature"] = "%%%not-base64%%%"
    elif case == "non-json":
        headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 100)
        body = b"not json at all"
    elif case == "huge body":
        body = b"{" + b" " * (1024 * 1024) + b"}"
    if case == "truncated ciphertext":
        envelope = json.loads(body)
        envelope["resource"]["ciphertext"] = envelope["resource"]["ciphertext"][:-8]
        resource = envelope["resource"]
        headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 100)
        forged = json.loads(body)
        forged["resource"] = resource
        body = json.dumps(forged).encode()
    before = snapshot(h)
    if case == "bad base64 event":
        handler, _ = h.handlers["NotifyFunction"]
        from tally_local.resources import LambdaContext

        response = handler(
            {
                "routeKey": "POST /notify/wechatpay/{mchid}",
                "rawPath": f"/notify/wechatpay/{merchant['mchid']}",
                "body": "***",
                "isBase64Encoded": True,
                "pathParameters": {"mchid": merchant["mchid"]},
                "headers": headers,
            },
            LambdaContext("NotifyFunction"),
        )
    else:
        response = h.notify(merchant["mchid"], headers, body)
    assert 400 <= response["statusCode"] < 500
    assert json.loads(response["body"])["code"] == "FAIL"
    assert "Traceback" not in response["body"]
    assert snapshot(h) == before and h.queue_depth() == 0


def test_R3_an_api_answer_signed_by_a_rotated_certificate_is_verified_after_one_refresh(h, sim):
    from tally import bootstrap

    m = h.add_merchant(verify_mode="certificate")
    wechatpay_v3_desk(
        bootstrap.merchants()
    ).add_wechatpay(  # certificate mode only: no WeChat Pay public key configured
        mchid=m["mchid"],
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url="http://127.0.0.1:9/n",
        platform_certs=[sim.platform_cert_pem],
    )
    sim.rotate_platform_certificate()  # the channel now signs its answers with a serial we never saw
    response = h.create_order(m["mchid"], prepay=True)
    assert response["statusCode"] == 201, response["body"]
    assert json.loads(response["body"])["code_url"].startswith("weixin://")
    assert h.metric("PlatformCertRefreshed") == 1
