"""Bounds and conflicts (issue #15.4, R40): amounts in [1, 10**11] cents, JSON depth and size answered 400,
a re-registered out_trade_no with other terms is a 409 naming the term, and no sign in a received amount."""

from __future__ import annotations

import json

import pytest
from tally.domain.money import MAX_CENT

from tests.integration.channel_kit import Alipay, ack_kind
from tests.integration.refund_helpers import paid_order, refund


def create(h, **body):
    payload = {"mchid": "1900000109", "description": "bounds", "prepay": False, **body}
    response = h.call("OrdersFunction", "POST", "/orders", json.dumps(payload).encode(), {}, {})
    return response["statusCode"], json.loads(response["body"])


@pytest.fixture
def merchant(h):
    return h.add_merchant()


@pytest.mark.parametrize("amount,status", [(2**63, 400), (10**40, 400), (MAX_CENT + 1, 400), (MAX_CENT, 201)])
def test_r40_order_amount_is_bounded(h, merchant, amount, status):
    """Issue #15.4: 2**63 was prepaid, paid and booked; 10**40 then made GET /orders answer 500."""
    code, body = create(h, out_trade_no=f"BIG{len(str(amount)):04d}X", amount_cent=amount)
    assert code == status, body
    if status == 400:
        assert body["error"]["code"] == "invalid_request" and h.scan("ORDERS_TABLE") == []
        [amount] = body["error"]["errors"]
        assert amount["field"] == "amount_cent" and str(MAX_CENT) in amount["message"]


def test_r40_refund_amount_is_bounded(h, merchant):
    otn, _ = paid_order(h, merchant["mchid"], 100)
    for amount in (0, -1, MAX_CENT + 1, 2**63):
        status, body = refund(h, merchant["mchid"], otn, amount)
        assert status == 400 and [e["field"] for e in body["error"]["errors"]] == ["amount_cent"]


@pytest.mark.parametrize("function,path", [("OrdersFunction", "/orders"), ("RefundsFunction", "/refunds")])
@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # deep: a RecursionError answered 500 on main
        b'{"a":' * 50 + b"1" + b"}" * 50,
        json.dumps({"mchid": "1900000109", "pad": "x" * 40_000}).encode(),  # over the size limit
    ],
)
def test_r40_json_depth_and_size_are_400(h, merchant, function, path, body):
    response = h.call(function, "POST", path, body, {}, {})
    assert response["statusCode"] == 400, response
    error = json.loads(response["body"])["error"]
    assert error["code"] == "invalid_request" and error["errors"][0]["field"] == "body"


def test_r40_strings_with_brackets_are_not_depth(h, merchant):
    code, _ = create(h, out_trade_no="BRACKETS01", amount_cent=100, description="[[[[[[[[[[{{{{{{{{{{")
    assert code == 201


@pytest.mark.parametrize(
    "term,change",
    [
        ("amount_cent", {"amount_cent": 101}),
        ("description", {"description": "another thing"}),
        ("expire_minutes", {"expire_minutes": 30}),
        ("prepay", {"prepay": True}),
        ("currency", {"currency": "USD"}),
    ],
)
def test_r40_re_registering_with_other_terms_is_a_409_naming_the_term(h, merchant, sim, term, change):
    """Issue #15.4: the same out_trade_no with another description, expiry or prepay answered 201 with the
    old terms; now 409 naming the term. The same terms again is a retry: 200, the same order."""
    first = {"out_trade_no": "TERMS00001", "amount_cent": 100, "expire_minutes": 120}
    assert create(h, **first)[0] == 201
    assert create(h, **first)[0] == 200  # a retry
    code, body = create(h, **{**first, **change})
    assert code == 409 and body["error"]["code"] == "order_terms_differ", body
    assert [(e["field"], e["code"]) for e in body["error"]["errors"]] == [(term, "differs")]
    assert h.order("1900000109", "TERMS00001")["amount_cent"] == 100


@pytest.mark.parametrize("receipt", ["-0.00", "-1.00", "+1.00"])
def test_r40_alipay_signed_amount_is_refused_not_booked(h, sim, receipt):
    """Issue #15.4: Alipay `receipt_amount` "-0.00" booked 0 and marked the order PAID."""
    ali = Alipay(h)
    mid = ali.setup()
    ali.order(mid, 100, "SIGNED0001")
    body, _, _ = ali.callback(mid, "SIGNED0001", 100, paid=receipt)
    assert ack_kind("alipay", ali.notify(mid, body, {})) == "success"  # signed: kept for a person (R5)
    h.drain()
    assert h.order(mid, "SIGNED0001")["status"] == "WAIT_PAY" and h.scan("LEDGER_TABLE") == []
    (event,) = [e for e in h.scan("NOTIFY_EVENT_TABLE") if e["kind"] == "quarantined"]
    assert "sign" in event["reason"]


def test_r40_wechatpay_negative_payer_total_is_refused(h, merchant):
    h.create_order(merchant["mchid"], "NEGATIVE01", amount_cent=100, prepay=False)
    headers, body, _ = h.notification(merchant["mchid"], "NEGATIVE01", 100, payer_total=-1)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    assert h.order(merchant["mchid"], "NEGATIVE01")["status"] == "WAIT_PAY" and h.scan("LEDGER_TABLE") == []


@pytest.mark.parametrize("function,path", [("OrdersFunction", "/orders"), ("RefundsFunction", "/refunds")])
def test_r40_an_unexpected_error_on_the_api_is_a_500_with_an_alarmed_metric(h, monkeypatch, function, path):
    from tally.observability import M
    from tally.service.orders import OrderService
    from tally.service.refunds import RefundService

    def broken(self, request):
        raise RuntimeError("boom")

    monkeypatch.setattr(OrderService, "register", broken)
    monkeypatch.setattr(RefundService, "create", broken)
    body = {"mchid": "1900000109", "out_trade_no": "BROKEN0001", "amount_cent": 1}
    if function == "OrdersFunction":
        body["description"] = "x"  # a refund has no description: the API refuses a key it does not know
    response = h.call(function, "POST", path, json.dumps(body).encode(), {}, {})
    assert response["statusCode"] == 500
    assert json.loads(response["body"])["error"]["code"] == "internal_error"
    assert h.metric(M.API_FAILED) == 1
