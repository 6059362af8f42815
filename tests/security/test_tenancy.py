"""R53: a signed caller acts only for the merchants its principal is registered with, for reads as well as
writes. The handlers get the caller as API Gateway's IAM authorizer hands it over
(`requestContext.authorizer.iam.userArn`); locally the front door verifies SigV4 the way API Gateway does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from tally import bootstrap
from tally.domain.callers import principal_of
from tally.service.callers import InvalidGrant

from tally_local.frontdoor import FrontDoor
from tally_local.lambda_io import http_event
from tally_local.resources import LambdaContext
from tally_local.sigv4 import LOCAL_BACKEND_ARN, IamAuthorizer, signed_headers
from tests.integration.refund_helpers import paid_order, refund

ROLE_A = "arn:aws:iam::123456789012:role/backend-a"
SESSION_A = "arn:aws:sts::123456789012:assumed-role/backend-a/i-0abc"
MERCHANT_B = "1900000222"


@pytest.fixture
def two(h):
    a = h.add_merchant()
    b = h.add_merchant(mchid=MERCHANT_B)
    bootstrap.callers().allow(ROLE_A, [a["mchid"]], by="test")
    return a["mchid"], b["mchid"]


def _order(h, caller, mchid, no, **extra):
    body = {
        "mchid": mchid,
        "out_trade_no": no,
        "amount_cent": 100,
        "description": "t",
        "prepay": False,
        **extra,
    }
    response = h.call("OrdersFunction", "POST", "/orders", json.dumps(body).encode(), {}, {}, caller=caller)
    return response["statusCode"], json.loads(response["body"])


def test_R53_a_caller_creates_orders_only_for_its_own_merchant(h, two):
    a, b = two
    assert _order(h, SESSION_A, a, "OWN00001")[0] == 201  # the role's session acts as the role
    status, body = _order(h, SESSION_A, b, "THEIRS001")
    assert status == 403 and body["error"]["code"] == "forbidden" and body["error"]["message"].endswith(b)
    assert bootstrap.order_service().orders.get(b, "THEIRS001") is None  # nothing stored for B
    assert h.metric("ApiForbidden") == 1


def test_R53_a_caller_cannot_read_another_merchants_order(h, two):
    a, b = two
    assert _order(h, LOCAL_BACKEND_ARN, b, "BORDER01")[0] == 201
    path = f"/orders/{b}/BORDER01"
    response = h.call(
        "OrdersFunction", "GET", path, b"", {}, {"mchid": b, "out_trade_no": "BORDER01"}, caller=ROLE_A
    )
    assert response["statusCode"] == 403 and "BORDER01" not in response["body"]


def test_R53_a_caller_cannot_refund_or_read_another_merchants_refund(h, two):
    a, b = two
    otn, _ = paid_order(h, b, 300)  # B's own backend (the tests' caller acts for every merchant)
    status, made = refund(h, b, otn, 100, refund_no="RB0000001")
    assert status in (200, 201), made
    body = json.dumps({"mchid": b, "out_trade_no": otn, "amount_cent": 200, "reason": "x"}).encode()
    response = h.call("RefundsFunction", "POST", "/refunds", body, {}, {}, caller=ROLE_A)
    assert response["statusCode"] == 403
    assert bootstrap.order_service().show(b, otn)["refundable_cent"] == 200  # nothing reserved
    for query in ({"mchid": b}, {}):
        event_params = {"refund_no": "RB0000001"}
        handler, _ = h.handlers["RefundsFunction"]
        event = http_event("GET", "/refunds/RB0000001", b"", {}, event_params, caller=ROLE_A)
        event["queryStringParameters"] = query
        answer = handler(event, LambdaContext("RefundsFunction"))
        assert answer["statusCode"] == 403 and "RB0000001" not in answer["body"], query


def test_R53_a_combine_order_naming_another_merchants_sub_order_is_refused(h, two):
    a, b = two
    body = {
        "combine": True,
        "mchid": a,
        "combine_out_trade_no": "C000001",
        "sub_orders": [{"mchid": b, "out_trade_no": "S1", "amount_cent": 100}],
    }
    response = h.call("OrdersFunction", "POST", "/orders", json.dumps(body).encode(), {}, {}, caller=ROLE_A)
    assert response["statusCode"] == 403 and h.scan("ORDERS_TABLE") == []


def test_R53_a_request_without_a_verified_caller_is_refused(h, two):
    a, _ = two
    assert _order(h, None, a, "NOCALLER1")[0] == 403
    assert h.scan("ORDERS_TABLE") == []


def test_R53_a_revoked_grant_takes_effect_in_the_same_container(h, two):
    a, _ = two
    assert _order(h, ROLE_A, a, "BEFORE001")[0] == 201
    bootstrap.callers().disallow(ROLE_A, by="test")
    assert _order(h, ROLE_A, a, "AFTER0001")[0] == 403


def test_R53_grants_name_real_principals_and_merchant_ids(aws):
    callers = bootstrap.callers()
    for principal, merchants in (("root", ["1"]), (ROLE_A, []), (ROLE_A, ["1,merchant=2"])):
        with pytest.raises(InvalidGrant):
            callers.allow(principal, merchants, by="test")
    assert callers.allow(ROLE_A, ["1900000109"], by="test") == ["1900000109"]
    assert callers.principals()[0]["merchants"] == ["1900000109"]


def test_R53_an_assumed_role_session_is_its_role_in_every_partition():
    assert principal_of(SESSION_A) == ROLE_A
    assert (
        principal_of("arn:aws-cn:sts::123456789012:assumed-role/r/s") == "arn:aws-cn:iam::123456789012:role/r"
    )
    assert principal_of("arn:aws:iam::123456789012:user/u") == "arn:aws:iam::123456789012:user/u"


# ---------------------------------------------------------------- the front door's SigV4 check (as API Gateway)


@pytest.fixture
def door():
    iam = IamAuthorizer("us-east-1")
    iam.add("AKIDA", "secret-a", ROLE_A)
    seen: list[dict] = []

    def echo(event, context):
        seen.append(event)
        return {"statusCode": 200, "body": "{}"}

    front = FrontDoor({"POST /orders": echo}, authorizers={"POST /orders": iam}).start()
    yield front, seen
    front.stop()


def _post(url, data, headers):
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_R53_the_local_front_door_verifies_sigv4_like_api_gateway(door):
    front, seen = door
    url, body = front.url + "/orders", b'{"mchid":"1"}'
    good = signed_headers(
        "POST", url, body, {"content-type": "application/json"}, access_key="AKIDA", secret_key="secret-a"
    )
    assert _post(url, body, good) == 200
    assert seen[-1]["requestContext"]["authorizer"]["iam"]["userArn"] == ROLE_A
    wrong_secret = signed_headers("POST", url, body, {}, access_key="AKIDA", secret_key="guess")
    unknown_key = signed_headers("POST", url, body, {}, access_key="AKIDX", secret_key="secret-a")
    other_region = signed_headers(
        "POST", url, body, {}, access_key="AKIDA", secret_key="secret-a", region="eu-west-1"
    )
    stale = dict(good)
    stale["X-Amz-Date"] = (datetime.now(UTC) - timedelta(minutes=6)).strftime("%Y%m%dT%H%M%SZ")
    for headers, data in (
        ({"content-type": "application/json"}, body),  # unsigned
        (good, b'{"mchid":"2"}'),  # the body changed after signing
        (wrong_secret, body),
        (unknown_key, body),
        (other_region, body),
        (stale, body),
        ({**good, "Authorization": good["Authorization"][:-4] + "0000"}, body),
    ):
        assert _post(url, data, headers) == 403
    assert len(seen) == 1  # the function never ran for a refused signature
