"""Fuzzing the merchant API (issue #15.5, R40): `/orders` and `/refunds` answer every body with a 4xx or a
success, never a 500 or an exception, and nothing outside the amount bounds is ever stored."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tally.domain.money import MAX_CENT

from tests.fuzz.strategies import ANY_JSON, deep

HOSTILE_AMOUNTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -0, 1, MAX_CENT, MAX_CENT + 1, 2**53 + 1, 2**63, 10**40]),
    st.floats(allow_nan=False),
    st.sampled_from(["1", "-0.00", "1e3", None, True, [], {}]),
)
ORDER_FIELDS = st.fixed_dictionaries(
    {
        "mchid": st.sampled_from(["1900000109", "1900000999", "", "x" * 40]),
        "out_trade_no": st.one_of(st.sampled_from(["FUZZ000001", "FUZZ000002"]), st.text(max_size=40)),
        "amount_cent": HOSTILE_AMOUNTS,
    },
    optional={
        "description": st.one_of(st.text(max_size=200), ANY_JSON),
        "expire_minutes": HOSTILE_AMOUNTS,
        "prepay": st.one_of(st.booleans(), ANY_JSON),
        "channel": st.sampled_from(["wechatpay", "alipay", "wechatpay_v2", "other", ""]),
        "currency": st.sampled_from(["CNY", "USD", "cny", ""]),
        "refund_no": st.one_of(st.text(max_size=70), ANY_JSON),
        "reason": st.one_of(st.text(max_size=100), ANY_JSON),
        "nested": ANY_JSON,
    },
)
BODIES = st.one_of(
    ORDER_FIELDS.map(lambda d: json.dumps(d).encode()),
    ANY_JSON.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=300),
    st.sampled_from([deep(100_000, "list"), deep(2_000, "dict"), b"{" * 9 + b"}" * 9, b"\xff" * 20_000]),
)
ANSWERS = {200, 201, 400, 404, 409, 422, 503}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES, route=st.sampled_from([("OrdersFunction", "/orders"), ("RefundsFunction", "/refunds")]))
def test_r40_orders_and_refunds_answer_every_body_without_a_500(h, body, route):
    function, path = route
    if not getattr(h, "_fuzz_merchant", False):
        h.add_merchant()
        h._fuzz_merchant = True
    response = h.call(function, "POST", path, body, {}, {})
    assert response["statusCode"] in ANSWERS, (response, body[:200])
    json.loads(response["body"])  # always a JSON answer
    for order in h.scan("ORDERS_TABLE"):
        assert isinstance(order["amount_cent"], int) and 1 <= order["amount_cent"] <= MAX_CENT
