"""The merchant API's edge (tally/api, docs/openapi.json, docs/errors.md): every error answer of every orders and
refunds route is one body with a stable code and every field at fault at once; re-posting is idempotent (200 the
same, 409 naming the term that differs, 201 only on creation); answers show no internal keys or raw rows. The
last tests go over real HTTP on localhost through the front door, SigV4-signed as on AWS."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from tally.api import models
from tally.api.codes import ERROR_CODES

from tests.integration.refund_helpers import new_no, paid_order, refund

OTHER = "arn:aws:iam::123456789012:role/another-backend"  # a principal registered for no merchant (R53)


def post(h, function, path, body, caller=None):
    kwargs = {"caller": caller} if caller else {}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = h.call(function, "POST", path, raw, {}, {}, **kwargs)
    return response["statusCode"], json.loads(response["body"])


def get(h, function, path, params, caller=None):
    kwargs = {"caller": caller} if caller else {}
    response = h.call(function, "GET", path, b"", {}, params, **kwargs)
    return response["statusCode"], json.loads(response["body"])


def order_body(mchid, out_trade_no="EDGE000001", **extra):
    return {
        "mchid": mchid,
        "out_trade_no": out_trade_no,
        "amount_cent": 100,
        "description": "edge",
        "prepay": False,
        **extra,
    }


def assert_error(status, body, code):
    """One shape for every error (docs/errors.md): validated by the Error model, the code documented with the
    status it was answered with."""
    assert status == ERROR_CODES[code].status, (status, body)
    models.Error.model_validate(body)
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and isinstance(body["error"]["errors"], list)


@pytest.fixture
def merchant(h):
    return h.add_merchant()


THREE_BAD = [
    (
        "OrdersFunction",
        "/orders",
        {"out_trade_no": "no!", "amount_cent": 1.5, "currency": 156, "description": "x"},
        # cents are integers: never 1.5 (R14)
        {("out_trade_no", "bad_format"), ("amount_cent", "wrong_type"), ("currency", "wrong_type")},
    ),
    (
        "RefundsFunction",
        "/refunds",
        {"out_trade_no": "EDGE000001", "amount_cent": 0, "reason": "x" * 81, "refund_no": "R1"},
        {("amount_cent", "out_of_range"), ("reason", "bad_length"), ("refund_no", "bad_format")},
    ),
]


@pytest.mark.parametrize("function,path,fields,expected", THREE_BAD, ids=["orders", "refunds"])
def test_r14_three_bad_fields_are_three_errors_at_once(h, merchant, function, path, fields, expected):
    status, body = post(h, function, path, {"mchid": merchant["mchid"], **fields})
    assert_error(status, body, "invalid_request")
    assert {(e["field"], e["code"]) for e in body["error"]["errors"]} == expected
    assert h.scan("ORDERS_TABLE") == [] and h.scan("REFUNDS_TABLE") == []


def test_r14_a_misspelt_field_is_refused_not_defaulted(h, merchant):
    """`expire_minute` for `expire_minutes`: without the refusal the order would expire at the default 120 minutes
    and nobody would know; the answer names the key and nothing is stored."""
    status, body = post(h, "OrdersFunction", "/orders", order_body(merchant["mchid"], expire_minute=30))
    assert_error(status, body, "invalid_request")
    assert [(e["field"], e["code"]) for e in body["error"]["errors"]] == [("expire_minute", "unknown_field")]
    assert h.scan("ORDERS_TABLE") == []
    status, body = post(h, "OrdersFunction", "/orders", order_body(merchant["mchid"], expire_minutes=30))
    assert status == 201 and body["expire_minutes"] == 30


def test_r53_every_route_answers_errors_with_a_code(h, merchant):
    """400, 403, 404, 409 on each of the four routes: the same body, a code of docs/errors.md."""
    mchid = merchant["mchid"]
    otn = "EDGE000002"
    assert post(h, "OrdersFunction", "/orders", order_body(mchid, otn))[0] == 201
    cases = [
        (post(h, "OrdersFunction", "/orders", b"{not json"), "invalid_request"),
        (post(h, "OrdersFunction", "/orders", order_body(mchid, otn), caller=OTHER), "forbidden"),
        (post(h, "OrdersFunction", "/orders", order_body("1234567890", "EDGE000003")), "merchant_not_found"),
        (post(h, "OrdersFunction", "/orders", order_body(mchid, otn, amount_cent=101)), "order_terms_differ"),
        (
            get(
                h,
                "OrdersFunction",
                f"/orders/{mchid}/NOSUCH0001",
                {"mchid": mchid, "out_trade_no": "NOSUCH0001"},
            ),
            "order_not_found",
        ),
        (
            get(
                h,
                "OrdersFunction",
                f"/orders/{mchid}/{otn}",
                {"mchid": mchid, "out_trade_no": otn},
                caller=OTHER,
            ),
            "forbidden",
        ),
        (post(h, "RefundsFunction", "/refunds", [1, 2]), "invalid_request"),
        (
            post(
                h,
                "RefundsFunction",
                "/refunds",
                {"mchid": mchid, "out_trade_no": otn, "amount_cent": 1},
                caller=OTHER,
            ),
            "forbidden",
        ),
        (
            post(
                h,
                "RefundsFunction",
                "/refunds",
                {"mchid": mchid, "out_trade_no": "NOSUCH0001", "amount_cent": 1},
            ),
            "order_not_found",
        ),
        (
            post(h, "RefundsFunction", "/refunds", {"mchid": mchid, "out_trade_no": otn, "amount_cent": 1}),
            "order_not_paid",
        ),
        (get(h, "RefundsFunction", "/refunds/RNOSUCH001", {"refund_no": "RNOSUCH001"}), "refund_not_found"),
    ]
    for (status, body), code in cases:
        assert_error(status, body, code)


def test_r7_re_posting_an_order_is_200_the_same_409_naming_the_term(h, merchant):
    mchid = merchant["mchid"]
    status, created = post(h, "OrdersFunction", "/orders", order_body(mchid, "EDGE000004"))
    assert status == 201 and created["status"] == "WAIT_PAY"
    status, again = post(h, "OrdersFunction", "/orders", order_body(mchid, "EDGE000004"))
    assert status == 200 and again == created  # a retry: the stored order, nothing new
    status, body = post(h, "OrdersFunction", "/orders", order_body(mchid, "EDGE000004", currency="USD"))
    assert_error(status, body, "order_terms_differ")
    assert body["error"]["errors"] == [
        {"field": "currency", "code": "differs", "message": "currency differs from the stored order"}
    ]


def test_r17_re_posting_a_paid_order_identically_is_200_with_its_state(h, merchant):
    mchid = merchant["mchid"]
    otn, transaction_id = paid_order(h, mchid, 100)
    status, body = post(
        h, "OrdersFunction", "/orders", order_body(mchid, otn, description="test order", prepay=True)
    )
    assert status == 200 and body["status"] == "PAID" and body["transaction_id"] == transaction_id
    assert body["paid_cent"] == 100


def test_r26_re_posting_a_refund_is_200_the_same_409_naming_the_amount(h, merchant):
    mchid = merchant["mchid"]
    otn, _ = paid_order(h, mchid, 100)
    no = new_no()
    first = refund(h, mchid, otn, 30, refund_no=no)
    again = refund(h, mchid, otn, 30, refund_no=no)
    assert first[0] == 201 and again[0] == 200 and again[1]["refund_no"] == no
    assert again[1]["amount_cent"] == 30 and isinstance(again[1]["amount_cent"], int)
    status, body = refund(h, mchid, otn, 31, refund_no=no)
    assert_error(status, body, "refund_terms_differ")
    assert [(e["field"], e["code"]) for e in body["error"]["errors"]] == [("amount_cent", "differs")]


INTERNAL = {
    "pk",
    "tenant",
    "version",
    "poll_pk",
    "poll_due",
    "poll_count",
    "upd_shard",
    "raw",
    "order_pk",
    "hold",
}


def test_r39_reads_show_public_keys_only_no_raw_rows(h, merchant):
    mchid = merchant["mchid"]
    otn, _ = paid_order(h, mchid, 100)
    status, order = get(h, "OrdersFunction", f"/orders/{mchid}/{otn}", {"mchid": mchid, "out_trade_no": otn})
    assert status == 200 and order["status"] == "PAID"
    assert set(order) <= set(models.OrderDetail.model_fields) and not INTERNAL & set(order), sorted(order)
    assert order["transitions"] and all(
        set(t) <= set(models.Transition.model_fields) for t in order["transitions"]
    )
    no = new_no()
    status, made = refund(h, mchid, otn, 10, refund_no=no)
    status, shown = get(h, "RefundsFunction", f"/refunds/{no}", {"refund_no": no})
    for view in (made, shown):
        assert set(view) <= set(models.Refund.model_fields) and not INTERNAL & set(view), sorted(view)
    assert "reports" not in shown and "hold_pk" not in shown and "poll_due" not in shown
    assert shown["refund_no"] == no and shown["amount_cent"] == 10


# ------------------------------------------------------------------ over real HTTP on localhost


@pytest.fixture
def door(h):
    """The front door of the embedded stack with the real orders handler behind the local IAM check."""
    from tally_local.frontdoor import API_REFERENCE_ROUTE, FrontDoor, api_reference
    from tally_local.sigv4 import local_authorizer

    handler, _ = h.handlers["OrdersFunction"]
    h.create_order(h.add_merchant()["mchid"], "WARMUP0001")  # registers the local backend's grant (R53)
    iam = local_authorizer("us-east-1")
    routes = {
        "POST /orders": handler,
        "GET /orders/{mchid}/{out_trade_no}": handler,
        API_REFERENCE_ROUTE: api_reference,
    }
    front = FrontDoor(
        routes, authorizers={"POST /orders": iam, "GET /orders/{mchid}/{out_trade_no}": iam}
    ).start()
    yield front
    front.stop()


def http(method, url, body=None):
    from tally_local.sigv4 import signed_headers

    data = json.dumps(body).encode() if body is not None else None
    headers = signed_headers(method, url, data, {"content-type": "application/json"})
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - localhost
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_r53_over_http_errors_and_re_posts_keep_their_shape(door):
    bad = {"mchid": "1900000109", "out_trade_no": "x", "amount_cent": "1", "description": ""}
    status, body = http("POST", f"{door.url}/orders", bad)
    assert_error(status, body, "invalid_request")
    assert [e["field"] for e in body["error"]["errors"]] == ["out_trade_no", "amount_cent", "description"]
    good = order_body("1900000109", "HTTP000001")
    assert http("POST", f"{door.url}/orders", good)[0] == 201
    status, again = http("POST", f"{door.url}/orders", good)
    assert status == 200 and again["out_trade_no"] == "HTTP000001"
    status, shown = http("GET", f"{door.url}/orders/1900000109/HTTP000001")
    assert status == 200 and "raw" not in shown and "pk" not in shown


def test_the_local_api_serves_the_openapi_document(door):
    from pathlib import Path

    with urllib.request.urlopen(f"{door.url}/openapi.json", timeout=10) as answer:  # noqa: S310 - localhost
        served = answer.read().decode()
    committed = (Path(__file__).resolve().parents[2] / "docs/openapi.json").read_text(encoding="utf-8")
    assert served == committed and json.loads(served)["openapi"] == "3.1.0"
