"""R22: every row of the WeChat Pay v3 answer tables, one test each; an unmapped word goes to a person.

The expected values are written out here, not read from the tables: a row added to a table without
a row here fails `test_R22_every_table_row_has_a_test`.
"""

from __future__ import annotations

import json

import pytest
from tally.channels.retry import with_retries
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.pull import WeChatPayV3Pull
from tally.domain.poll import BACKOFF_S, Answer, next_due, next_query_in
from tally.service.pull import PullChannels

A = Answer
EXPECTED_STATE = {
    "SUCCESS": A.PAID,
    "REFUND": A.PAID,
    "NOTPAY": A.WAITING,
    "USERPAYING": A.WAITING,
    "ACCEPT": A.WAITING,
    "CLOSED": A.CLOSED,
    "REVOKED": A.CLOSED,
    "PAYERROR": A.CLOSED,
}
EXPECTED_ERROR = {
    "ORDER_NOT_EXIST": A.NOT_CREATED,
    "SYSTEM_ERROR": A.TRANSIENT,
    "BANK_ERROR": A.TRANSIENT,
    "FREQUENCY_LIMITED": A.TRANSIENT,
    "NETWORK": A.TRANSIENT,
    "HTTP_5XX": A.TRANSIENT,
    "SIGN_ERROR": A.PERSON,
    "NO_AUTH": A.PERSON,
    "MCH_NOT_EXISTS": A.PERSON,
    "APPID_MCHID_NOT_MATCH": A.PERSON,
    "PARAM_ERROR": A.PERSON,
    "INVALID_REQUEST": A.PERSON,
    "RULE_LIMIT": A.PERSON,
    "TRADE_ERROR": A.PERSON,
    "RESPONSE_NOT_VERIFIED": A.PERSON,
    "RESPONSE_NOT_JSON": A.PERSON,
}
EXPECTED_CLOSE = {
    "CLOSED_NOW": A.CLOSED,
    "ORDER_CLOSED": A.CLOSED,
    "ORDER_PAID": A.PAID,
    "USER_PAYING": A.WAITING,
    "ORDER_NOT_EXIST": A.NOT_CREATED,
    "SYSTEM_ERROR": A.TRANSIENT,
    "BANK_ERROR": A.TRANSIENT,
    "FREQUENCY_LIMITED": A.TRANSIENT,
    "NETWORK": A.TRANSIENT,
    "HTTP_5XX": A.TRANSIENT,
    "SIGN_ERROR": A.PERSON,
    "NO_AUTH": A.PERSON,
    "MCH_NOT_EXISTS": A.PERSON,
    "PARAM_ERROR": A.PERSON,
    "INVALID_REQUEST": A.PERSON,
    "TRADE_ERROR": A.PERSON,
    "RESPONSE_NOT_VERIFIED": A.PERSON,
    "RESPONSE_NOT_JSON": A.PERSON,
}

ORDER = {
    "pk": "1900000109#T0001",
    "mchid": "1900000109",
    "out_trade_no": "T0001",
    "channel": "wechatpay",
    "status": "WAIT_PAY",
    "amount_cent": 100,
    "currency": "CNY",
}


def transaction(state, **over):
    data = {
        "mchid": "1900000109",
        "appid": "wx1",
        "out_trade_no": "T0001",
        "trade_state": state,
        "amount": {"total": 100, "currency": "CNY", "payer_currency": "CNY"},
    }
    if state in ("SUCCESS", "REFUND", "REVOKED", "PAYERROR"):
        data.update(transaction_id="4200000000000000000000000001", success_time="2024-01-02T10:00:00+08:00")
        data["amount"]["payer_total"] = 90
    data.update(over)
    return data


class FakeClient:
    """Stands in for WeChatPayClient: answers or raises what the test says (the HTTP side is tested
    against the simulator in tests/integration/test_pull.py)."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = []

    def _answer(self, name, *args, **kw):
        self.calls.append((name, args, kw))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        status, data = self.outcome
        raw = b"" if data is None else json.dumps(data).encode()
        return wx.Response(status, data or {}, raw, {"wechatpay-serial": "PUB_KEY_ID_X"})

    def query_by_out_trade_no(self, out_trade_no, *, sub_mchid=None):
        return self._answer("query", out_trade_no, sub_mchid=sub_mchid)

    def close(self, out_trade_no, *, sub_mchid=None):
        return self._answer("close", out_trade_no, sub_mchid=sub_mchid)


class FakeMerchants:
    def __init__(self, client):
        self._client = client
        self.asked = []

    def desk(self, channel):  # the v3 desk's accessors, answered here
        return self

    def wechatpay(self, mchid):
        self.asked.append(mchid)
        return mchid

    def client(self, merchant):
        return self._client


def pull(outcome, order=ORDER):
    client = FakeClient(outcome)
    registry = PullChannels()
    WeChatPayV3Pull(FakeMerchants(client), sleep=lambda s: None).register(registry)
    return registry, client


def error(code, status=400, retryable=False):
    return wx.WeChatCallError(f"HTTP {status} {code}", status=status, code=code, retryable=retryable)


def test_R22_every_table_row_has_a_test():
    assert wx.QUERY_STATE == EXPECTED_STATE
    assert wx.QUERY_ERROR == EXPECTED_ERROR
    assert wx.CLOSE_ANSWER == EXPECTED_CLOSE


@pytest.mark.parametrize("state", sorted(EXPECTED_STATE))
def test_R22_query_state_row(state):
    registry, _ = pull((200, transaction(state)))
    result = registry.query(ORDER)
    assert (result.answer, result.word, result.mapped) == (EXPECTED_STATE[state], state, True)
    if result.answer is Answer.PAID:  # R13/R23: the queried amount is what gets booked
        assert result.notice.source == "query" and result.notice.paid_cent == 90
        assert result.notice.order_total_cent == 100 and result.body


@pytest.mark.parametrize("code", sorted(EXPECTED_ERROR))
def test_R22_query_error_row(code):
    if code == "NETWORK":
        exc = wx.WeChatCallError("timed out", code="NETWORK", retryable=True)
    elif code == "HTTP_5XX":
        exc = wx.WeChatCallError("bad gateway", status=502, retryable=True)
    else:
        exc = error(
            code,
            status=500 if code == "SYSTEM_ERROR" else 404 if code == "ORDER_NOT_EXIST" else 400,
            retryable=EXPECTED_ERROR[code] is Answer.TRANSIENT,
        )
    registry, client = pull(exc)
    result = registry.query(ORDER)
    assert (result.answer, result.word, result.mapped) == (EXPECTED_ERROR[code], code, True)
    retried = EXPECTED_ERROR[code] is Answer.TRANSIENT
    assert len(client.calls) == (3 if retried else 1)  # retries only what says retryable


@pytest.mark.parametrize("word", sorted(EXPECTED_CLOSE))
def test_R22_close_row(word):
    if word == "CLOSED_NOW":
        outcome = (204, None)
    elif word == "USER_PAYING":
        outcome = (202, {"code": "USER_PAYING", "message": "用户支付中"})
    elif word == "NETWORK":
        outcome = wx.WeChatCallError("refused", code="NETWORK", retryable=True)
    elif word == "HTTP_5XX":
        outcome = wx.WeChatCallError("bad gateway", status=503, retryable=True)
    else:
        outcome = error(word, retryable=EXPECTED_CLOSE[word] is Answer.TRANSIENT)
    registry, _ = pull(outcome)
    result = registry.close(ORDER)
    assert (result.answer, result.word, result.mapped) == (EXPECTED_CLOSE[word], word, True)


def test_R22_order_not_exist_is_not_closed():
    assert EXPECTED_ERROR["ORDER_NOT_EXIST"] is not Answer.CLOSED
    assert EXPECTED_CLOSE["ORDER_NOT_EXIST"] is not Answer.CLOSED


@pytest.mark.parametrize(
    "outcome",
    [
        (200, transaction("BRAND_NEW_STATE")),
        error("SOMETHING_NEW", status=403),
        (200, {"mchid": "1900000109", "out_trade_no": "T0001"}),
    ],
)
def test_R22_unmapped_word_goes_to_a_person(outcome):
    registry, _ = pull(outcome)
    result = registry.query(ORDER)
    assert result.answer is Answer.PERSON and result.mapped is False


def test_R22_unmapped_close_word_goes_to_a_person():
    registry, _ = pull((202, {"code": "SOMETHING_NEW"}))
    result = registry.close(ORDER)
    assert result.answer is Answer.PERSON and result.mapped is False


def test_R11_answer_about_another_order_is_never_applied():
    registry, _ = pull((200, transaction("SUCCESS", out_trade_no="OTHER1")))
    assert registry.query(ORDER).answer is Answer.PERSON
    registry, _ = pull((200, transaction("SUCCESS", mchid="1900000999")))
    assert registry.query(ORDER).answer is Answer.PERSON


def test_R22_partner_order_queries_with_the_service_provider_and_sub_merchant():
    client = FakeClient(
        (
            200,
            {
                "sp_mchid": "1900000100",
                "sub_mchid": "1900000109",
                "sp_appid": "wx1",
                "out_trade_no": "T0001",
                "trade_state": "NOTPAY",
                "amount": {"total": 100, "currency": "CNY"},
            },
        )
    )
    merchants = FakeMerchants(client)
    registry = PullChannels()
    WeChatPayV3Pull(merchants, sleep=lambda s: None).register(registry)
    order = {**ORDER, "sp_mchid": "1900000100"}
    assert registry.query(order).answer is Answer.WAITING
    assert merchants.asked == ["1900000100"]  # the service provider's credentials
    assert client.calls[0][2] == {"sub_mchid": "1900000109"}


def test_unknown_channel_goes_to_a_person():
    result = PullChannels().query({**ORDER, "channel": "alipay"})
    assert result.answer is Answer.PERSON and not result.mapped


def test_client_builds_direct_and_partner_paths(monkeypatch):
    """§2.1/§2.2 paths; the canonical URL that is signed is the path with its query, exactly as sent."""
    creds = wx.MerchantCredentials("1900000100", b"k" * 32, None, "SERIAL", wx.PlatformKeys())
    client = wx.WeChatPayClient("http://127.0.0.1:9", creds)
    sent = []
    monkeypatch.setattr(
        client, "exchange", lambda method, path, body, **kw: sent.append((method, path, body))
    )
    client.query_by_out_trade_no("T-0001*x")
    client.query_by_out_trade_no("T-0001", sub_mchid="1900000109")
    client.close("T-0001")
    client.close("T-0001", sub_mchid="1900000109")
    assert sent == [
        ("GET", "/v3/pay/transactions/out-trade-no/T-0001*x?mchid=1900000100", None),
        (
            "GET",
            "/v3/pay/partner/transactions/out-trade-no/T-0001?sp_mchid=1900000100&sub_mchid=1900000109",
            None,
        ),
        ("POST", "/v3/pay/transactions/out-trade-no/T-0001/close", {"mchid": "1900000100"}),
        (
            "POST",
            "/v3/pay/partner/transactions/out-trade-no/T-0001/close",
            {"sp_mchid": "1900000100", "sub_mchid": "1900000109"},
        ),
    ]


def test_retries_with_jitter_only_what_is_retryable():
    sleeps, calls = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise wx.WeChatCallError("busy", code="SYSTEM_ERROR", retryable=True)
        return "ok"

    assert (
        with_retries(flaky, attempts=3, base_s=0.2, cap_s=0.3, sleep=sleeps.append, rand=lambda: 1.0) == "ok"
    )
    assert sleeps == [0.2, 0.3]  # full jitter: rand() * min(cap, base * 2^i)
    calls.clear()

    def fatal():
        calls.append(1)
        raise wx.WeChatCallError("no", code="NO_AUTH")

    with pytest.raises(wx.WeChatCallError):
        with_retries(fatal, attempts=3, sleep=sleeps.append)
    assert len(calls) == 1


def test_R21_backoff_schedule_and_expiry_cap():
    assert BACKOFF_S == (30, 60, 300, 900, 1800)
    assert [next_query_in(n) for n in range(7)] == [30, 60, 300, 900, 1800, 1800, 1800]
    assert next_due(1000, 4, 10_000) == 1000 + 1800
    assert next_due(1000, 4, 1500) == 1500  # never later than the expiry: then the order is closed
