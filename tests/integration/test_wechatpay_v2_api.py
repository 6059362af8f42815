"""WeChat Pay v2 API: unified order (NATIVE → code_url) and order query/close signed with the API key, so v2
orders are prepaid and polled like the others (R21–R23); answers verified, XXE refused."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.wire import TRADE_STATE
from tally.domain.poll import Answer

from tests.integration.pull_helpers import due_now as _due_now
from tests.integration.pull_helpers import expire_now, ledger, run_poller, stored


@pytest.fixture
def v2(h, sim):
    m = sim.wechatpay_v2.register_test_merchant()
    wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
        mchid=m["mch_id"],
        api_key=m["api_key"],
        appid=m["appid"],
        notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{m['mch_id']}",
    )
    yield m
    sim.wechatpay_v2.clear_faults()


def new_v2_order(h, m, amount=100, prepay=True):
    response = h.create_order(m["mch_id"], amount_cent=amount, prepay=prepay, channel="wechatpay_v2")
    assert response["statusCode"] == 201, response
    return json.loads(response["body"])


def due_now(h, order):
    _due_now(h, {"mchid": order["mchid"], "out_trade_no": order["out_trade_no"]})


def calls(sim, out_trade_no):
    """The /pay API calls the (session-wide) simulator saw for one order."""
    return [r for r in sim.wechatpay_v2.requests if r["out_trade_no"] == out_trade_no]


def independent_sign(fields, key, sign_type):
    text = (
        "&".join(f"{k}={fields[k]}" for k in sorted(fields) if k != "sign" and fields[k] != "")
        + "&key="
        + key
    )
    if sign_type == "MD5":
        return hashlib.md5(text.encode()).hexdigest().upper()
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest().upper()


def test_v2_prepay_is_a_signed_native_unified_order(h, sim, v2):
    order = new_v2_order(h, v2, amount=1234)
    assert order["code_url"].startswith("weixin://wxpay/bizpayurl?pr=") and order["api"] == "wechatpay_v2"
    at_sim = sim.wechatpay_v2.orders[(v2["mch_id"], order["out_trade_no"])]
    assert at_sim["total_fee"] == 1234 and at_sim["notify_url"].endswith(
        f"/notify/wechatpay-v2/{v2['mch_id']}"
    )
    (call,) = calls(sim, order["out_trade_no"])
    assert call["path"] == "/pay/unifiedorder" and call["sign_type"] == "HMAC-SHA256"
    # the same order again: no second unified order (the code_url is stored)
    assert (
        h.create_order(
            v2["mch_id"], order["out_trade_no"], amount_cent=1234, prepay=True, channel="wechatpay_v2"
        )["statusCode"]
        == 200  # a retry: the stored order
    )
    assert len(calls(sim, order["out_trade_no"])) == 1


def test_v2_client_signature_is_the_independent_computation():
    fields = {
        "appid": "wxd930ea5d5a258f4f",
        "body": "test",
        "device_info": "1000",
        "mch_id": "10000100",
        "nonce_str": "ibuaiVcKdpRxkhJA",
    }
    key = "192006250b4c09247ec02edce69f6a2d"
    assert (
        wx2.sign(fields, key, "MD5")
        == independent_sign(fields, key, "MD5")
        == "9A0A8659F005D6984697E2CA0A9CF3B7"
    )
    assert wx2.sign(fields, key, "HMAC-SHA256") == independent_sign(fields, key, "HMAC-SHA256")


def test_v2_prepay_refused_by_the_channel_is_a_502_with_a_metric(h, sim, v2):
    sim.wechatpay_v2.inject_fault("error", code="NOAUTH")
    response = h.create_order(v2["mch_id"], amount_cent=100, prepay=True, channel="wechatpay_v2")
    assert response["statusCode"] == 502 and "NOAUTH" in json.loads(response["body"])["error"]["message"]
    assert h.metric("PrepayFailed") == 1


def test_v2_prepay_needs_the_appid(h, sim):
    m = sim.wechatpay_v2.register_test_merchant()
    wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
        mchid=m["mch_id"], api_key=m["api_key"], notify_url="http://127.0.0.1:9/x"
    )
    response = h.create_order(m["mch_id"], amount_cent=100, prepay=True, channel="wechatpay_v2")
    assert response["statusCode"] == 400 and "appid" in json.loads(response["body"])["error"]["message"]


def test_R21_R23_v2_callback_lost_the_poller_books_via_orderquery_then_late_callback_is_duplicate(h, sim, v2):
    """R23: the v2 query answer is keyed `wechatpay#mch_id#transaction_id` like the callback: one ledger entry."""
    order = new_v2_order(h, v2, amount=500)
    tid = sim.wechatpay_v2.pay(v2["mch_id"], order["out_trade_no"], cash_fee=450, drop=True)
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"BOOKED": 1}
    view = h.order(v2["mch_id"], order["out_trade_no"])
    assert view["status"] == "PAID" and view["transaction_id"] == tid
    (entry,) = ledger(h)
    assert (
        entry["pk"] == f"wechatpay#{v2['mch_id']}#{tid}"
        and entry["amount_cent"] == 450
        and entry["source"] == "query"
    )  # R13
    assert [r["path"] for r in calls(sim, order["out_trade_no"])] == ["/pay/unifiedorder", "/pay/orderquery"]
    fields = sim.wechatpay_v2.payment_params(
        v2["mch_id"], order["out_trade_no"], 500, cash_fee=450, transaction_id=tid
    )
    response = h.call(
        "NotifyFunction",
        "POST",
        f"/notify/wechatpay-v2/{v2['mch_id']}",
        sim.wechatpay_v2.build_notification(fields),
        {"content-type": "text/xml"},
        {"mchid": v2["mch_id"]},
    )
    assert response["statusCode"] == 200 and "SUCCESS" in response["body"]
    h.drain()
    assert len(ledger(h)) == 1


def test_R21_v2_waiting_then_expired_is_closed_at_the_channel_then_locally(h, sim, v2):
    order = new_v2_order(h, v2)
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"WAITING": 1}
    expire_now(h, order)
    assert run_poller(h)["outcomes"] == {"CLOSED": 1}
    assert stored(h, order)["status"] == "CLOSED"
    assert sim.wechatpay_v2.orders[(v2["mch_id"], order["out_trade_no"])]["trade_state"] == "CLOSED"
    assert [r["path"] for r in calls(sim, order["out_trade_no"])][-2:] == [
        "/pay/closeorder",
        "/pay/orderquery",
    ]


def test_R22_v2_not_exist_is_not_closed(h, sim, v2):
    order = new_v2_order(h, v2, prepay=False)  # the channel never heard of it
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"NOT_CREATED": 1}
    assert stored(h, order)["status"] == "WAIT_PAY" and stored(h, order)["poll_last"] == "ORDERNOTEXIST"


def test_R22_v2_answer_with_a_bad_sign_is_never_booked(h, sim, v2):
    order = new_v2_order(h, v2)
    sim.wechatpay_v2.pay(v2["mch_id"], order["out_trade_no"], drop=True)
    sim.wechatpay_v2.inject_fault("bad_signature", path_contains="orderquery")
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"PERSON": 1}
    assert "RESPONSE_NOT_VERIFIED" in stored(h, order)["manual_reason"] and ledger(h) == []


def test_R22_v2_systemerror_is_retried_then_transient(h, sim, v2):
    order = new_v2_order(h, v2)
    sim.wechatpay_v2.inject_fault("error", code="SYSTEMERROR", count=10, path_contains="orderquery")
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"RETRY": 1}
    assert (
        sum(r["path"] == "/pay/orderquery" for r in calls(sim, order["out_trade_no"])) == 3
    )  # with_retries: 3 attempts
    assert h.metric("PollQueryFailed") == 1


def test_R22_v2_tables_use_v3_words_and_every_state_has_an_outcome():
    assert set(wx2.QUERY_STATE) <= set(TRADE_STATE)
    assert (
        wx2.QUERY_ERROR["ORDERNOTEXIST"] is Answer.NOT_CREATED
        and wx2.CLOSE_ANSWER["ORDERPAID"] is Answer.PAID
    )


@pytest.mark.parametrize(
    "answer",
    [
        b'<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY x SYSTEM "file:///etc/passwd">]><xml><return_code>&x;'
        b"</return_code></xml>",
        b"<xml><return_code>SUCCESS</return_code><result_code>SUCCESS</result_code><code_url>weixin://x</code_url>"
        b"<mch_id>1900000001</mch_id><sign>00000000000000000000000000000000</sign></xml>",
        b"not xml at all",
    ],
)
def test_v2_client_refuses_xxe_and_unsigned_answers(answer):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = wx2.WeChatPayV2Client(
            f"http://127.0.0.1:{server.server_address[1]}", "1900000001", "k" * 32, "wx1"
        )
        with pytest.raises(wx2.WeChatV2CallError) as caught:
            client.unified_order(
                out_trade_no="XXE-0001",
                total_fee=1,
                body="b",
                notify_url="http://x/",
                time_expire=time.time() + 60,
            )
        assert caught.value.word in ("NOT_XML", "RESPONSE_NOT_VERIFIED")
        assert "root:" not in str(caught.value)
    finally:
        server.shutdown()
        server.server_close()


def test_v2_client_amounts_are_integer_fen():
    client = wx2.WeChatPayV2Client("http://127.0.0.1:9", "1900000001", "k" * 32, "wx1")
    for bad in (1.0, "100", True, 0, -1):
        with pytest.raises(ValueError):
            client.unified_order(out_trade_no="FEN-00001", total_fee=bad, body="b", notify_url="http://x/")
