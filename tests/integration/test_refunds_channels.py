"""Refunds on Alipay and WeChat Pay v2: what only those channels do (R26–R30), and an independent check of the
simulator's Alipay refund signatures with the PyPI python-alipay-sdk."""

from __future__ import annotations

import time
import urllib.request

import pytest
from alipay import AliPay
from tally import bootstrap
from tally.channels.alipay import wire as ali
from tally.observability import metrics

from tests.integration.channel_kit import Alipay
from tests.integration.refund_helpers import AlipayKit, WeChatV2Kit, new_no, order_row, refund


@pytest.fixture
def alipay_kit(h, sim):
    k = AlipayKit(h)
    k.hold()
    yield k
    k.reset()
    metrics.flush_metrics()
    h._collect_metrics()


def svc():
    return bootstrap.refund_service()


def test_R29_alipay_cumulative_refund_fee_out_of_order_notifications_both_book(h, alipay_kit):
    """Two refunds succeed (cumulative 20, then 50); the second's notification (refund_fee 50) arrives first.
    Each is matched on out_biz_no and checked by cumulative bounds, so both book, once."""
    kit = alipay_kit
    otn, _ = kit.paid_order(100)
    first = refund(h, kit.mid, otn, 20)[1]["refund_no"]
    second = refund(h, kit.mid, otn, 30)[1]["refund_no"]
    kit.settle(first, "success")
    kit.settle(second, "success")
    assert ali.parse_form(kit.sim.alipay.refund_notification(second))["refund_fee"] == "0.50"
    kit.deliver(second)
    kit.deliver(first, times=2)  # Alipay retries: the second copy is a duplicate
    assert [svc().show(no)["status"] for no in (first, second)] == ["SUCCESS", "SUCCESS"]
    order = order_row(h, kit.mid, otn)
    assert (order["refunded_cent"], order["refundable_cent"]) == (50, 50)
    assert sum(e["amount_cent"] for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND") == 50


def test_R29_alipay_cumulative_beyond_our_books_goes_to_a_person(h, alipay_kit, sim):
    """A signed notification for our refund_no whose cumulative refund_fee exceeds everything we booked or
    hold for the order (money refunded outside Tally?): MANUAL, nothing booked, the reservation kept."""
    kit = alipay_kit
    otn, trade_no = kit.paid_order(100)
    no = refund(h, kit.mid, otn, 20)[1]["refund_no"]
    params = sim.alipay.refund_params(kit.mid, otn, trade_no, 100, 60, no)  # 0.60 refunded, we know of 0.20
    assert Alipay(h).notify(kit.mid, sim.alipay.build_notification(params), {})["body"] == "success"
    assert h.drain() == []
    view = svc().show(no)
    assert view["status"] == "MANUAL" and "cumulative refunded 0.60 yuan > ours" in view["manual_reason"]
    assert h.metric("RefundManual") == 1
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 80  # still held, with a person
    assert not [e for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND"]


def test_R29_alipay_refund_notification_is_never_a_payment_even_when_it_closes_the_trade(h, alipay_kit):
    """A full refund notifies TRADE_CLOSED + refund_fee (§5.3): a refund report, the order stays PAID."""
    kit = alipay_kit
    otn, _ = kit.paid_order(100)
    no = refund(h, kit.mid, otn, 100)[1]["refund_no"]
    kit.settle(no, "success")
    assert ali.parse_form(kit.sim.alipay.refund_notification(no))["trade_status"] == "TRADE_CLOSED"
    kit.deliver(no)
    assert svc().show(no)["status"] == "SUCCESS"
    order = order_row(h, kit.mid, otn)
    assert order["status"] == "PAID" and order["refunded_cent"] == 100
    assert len(h.scan("NOTIFY_RAW_TABLE")) == 1  # only the payment


def test_R28_alipay_system_error_is_retried_with_the_same_out_request_no(h, alipay_kit):
    """ACQ.SYSTEM_ERROR: the refund stays PENDING (reserved); the poller re-sends the same out_request_no."""
    kit = alipay_kit
    otn, _ = kit.paid_order(100)
    kit.sim.alipay.set_refund_behaviour(count=1, reject="ACQ.SYSTEM_ERROR")
    status, body = refund(h, kit.mid, otn, 30)
    assert status == 201 and body["status"] == "PENDING" and "last_poll_note" not in body  # internal
    assert svc().show(body["refund_no"])["last_poll_note"].startswith("create:")
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 70
    bootstrap.set_clock(lambda: time.time() + 61)
    assert svc().poll_due() == {"ACCEPTED": 1}
    assert len(kit.channel_refunds(body["refund_no"])) == 1


def test_R22_alipay_unmapped_refusal_goes_to_a_person_not_to_fail(h, alipay_kit):
    kit = alipay_kit
    otn, _ = kit.paid_order(100)
    kit.sim.alipay.set_refund_behaviour(count=1, reject="ACQ.SOMETHING_NEW")
    status, body = refund(h, kit.mid, otn, 30)
    assert status == 201 and body["status"] == "MANUAL"  # the reason is the operator's (svc().show)
    assert "ACQ.SOMETHING_NEW" in svc().show(body["refund_no"])["manual_reason"]
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 70 and h.metric("RefundManual") == 1


def test_R29_wechatpay_v2_abnormal_goes_to_a_person_then_success_books(h, sim):
    kit = WeChatV2Kit(h)
    kit.hold()
    try:
        otn, _ = kit.paid_order(100)
        no = refund(h, kit.mid, otn, 50)[1]["refund_no"]
        kit.settle(no, "abnormal")
        kit.deliver(no)
        assert svc().show(no)["status"] == "MANUAL"
        kit.settle(no, "success")
        kit.deliver(no)
        view = svc().show(no)
        assert view["status"] == "SUCCESS" and [r["sk"] for r in view["reports"]] == ["ABNORMAL", "SUCCESS"]
    finally:
        kit.reset()


def test_cli_refund_create_on_alipay_and_wechatpay_v2(h, sim, monkeypatch, capsys):
    from tally_cli import refund as cli_refund
    from tally_cli.main import main

    monkeypatch.setattr(cli_refund, "connect", lambda args: {"env": h.env})
    for kit_class in (AlipayKit, WeChatV2Kit):
        kit = kit_class(h)
        kit.hold()
        try:
            otn, _ = kit.paid_order(100)
            no = new_no()
            assert main(["refund", "create", kit.mid, otn, "30", "--refund-no", no, "--local"]) == 0
            assert capsys.readouterr().out.startswith(f"created refund {no}  accepted by the channel  ¥0.30")
        finally:
            kit.reset()


# ---------------------------------------------------------------- an independent checker: python-alipay-sdk


def _post_form(url: str, form: str) -> str:
    req = urllib.request.Request(
        url,
        data=form.encode(),
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded;charset=utf-8"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - the simulator on 127.0.0.1
        return resp.read().decode("utf-8")


def test_R2_simulator_alipay_refund_api_and_notification_signatures_verify_with_python_alipay_sdk(sim):
    """python-alipay-sdk 3.4.0 signs alipay.trade.refund / fastpay.refund.query requests the simulator
    accepts, verifies the simulator's signed answers (`_verify_and_return_sync_response`, the SDK's own
    response check), and verifies the refund notification (`AliPay.verify`)."""
    m = sim.alipay.register_test_merchant("public_key")
    owner = m["app_id"]
    sim.alipay.precreate(
        owner,
        owner,
        {"out_trade_no": "SDK-REFUND-1", "total_amount": "1.00", "subject": "t"},
        "http://127.0.0.1:9/notify",
    )
    trade_no = sim.alipay.pay(owner, "SDK-REFUND-1", drop=True)
    sim.alipay.set_refund_behaviour(count=1, outcome="hold", drop=True)
    sdk = AliPay(
        appid=owner,
        app_private_key_string=m["app_private_key_pem"],
        alipay_public_key_string=m["alipay_public_key_pem"],
    )
    gateway = sim.url + "/gateway.do"

    def call(method, biz):
        raw = _post_form(gateway, sdk.sign_data(sdk.build_body(method, biz)))
        return sdk._verify_and_return_sync_response(raw, method.replace(".", "_") + "_response")

    answer = call(
        "alipay.trade.refund", {"trade_no": trade_no, "refund_amount": "0.40", "out_request_no": "SDKRF1"}
    )
    assert answer["code"] == "10000" and answer["fund_change"] == "N" and answer["trade_no"] == trade_no
    queried = call("alipay.trade.fastpay.refund.query", {"trade_no": trade_no, "out_request_no": "SDKRF1"})
    assert queried["refund_amount"] == "0.40" and "refund_status" not in queried
    sim.alipay.settle_refund("SDKRF1", "success", notify=False)
    queried = call("alipay.trade.fastpay.refund.query", {"trade_no": trade_no, "out_request_no": "SDKRF1"})
    assert queried["refund_status"] == "REFUND_SUCCESS"
    unknown = call("alipay.trade.fastpay.refund.query", {"trade_no": trade_no, "out_request_no": "NOSUCH"})
    assert unknown == {"code": "10000", "msg": "Success"}  # §6.4: no refund data, still 10000
    data = ali.parse_form(sim.alipay.refund_notification("SDKRF1"))
    assert (data["out_biz_no"], data["refund_fee"]) == ("SDKRF1", "0.40") and data["gmt_refund"]
    signature = data.pop("sign")
    assert sdk.verify(dict(data), signature) is True
    data["refund_fee"] = "0.01"
    assert sdk.verify(dict(data), signature) is False
