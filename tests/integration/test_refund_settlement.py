"""R43 for refunds (issue #18 item 1): every REFUND entry keeps the refund, what went back to the payer, the
coupons' share and the **settlement refund** next to amount_cent, on every path that books a refund (the
notification, the refund query), and reconciles against the simulator's bills with zero diffs. A refund whose
settlement refund cannot be worked out is booked UNKNOWN with a queue item and the alarmed metric.

Real parts: moto, the simulator's signed notifications and refund APIs over HTTP, its bills parsed by the
product's parsers. The simulator splits a refund of a discounted payment like the channels do: the coupons
come back in proportion (kernel.coupon_refund_split), so a refund of 10.00 of a 20.00 order with a 5.00
NOCASH coupon gives 7.50 back to the payer and settles 7.50 (退款金额 = 申请退款金额 − 非充值代金券退款金额)."""

from __future__ import annotations

import json
import random
import time

import pytest
from tally import bootstrap
from tally.store.codec import from_item, to_item

from tests.integration.channel_kit import Alipay
from tests.integration.recon_helpers import new_v2
from tests.integration.refund_helpers import D, deliver, pay_v3, refund, settle_v3_on_d

pytestmark = pytest.mark.usefixtures("refunds_held", "days_of_2024")


@pytest.fixture
def m(h):
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def ledger(h, pk):
    return from_item(h.ddb.get_item(TableName=h.env["LEDGER_TABLE"], Key=to_item({"pk": pk})).get("Item"))


def metric(h, name):
    from tally.observability import metrics

    metrics.flush_metrics()
    h._collect_metrics()
    return h.metric(name)


def unknown_items(mchid):
    return [
        i
        for i in bootstrap.work_queue().list()
        if i["kind"] == "settlement-unknown" and i["merchant"] == mchid
    ]


def test_r43_v3_refunds_of_a_cash_and_a_nocash_coupon_payment_book_their_settlement_refunds_and_reconcile(
    h, m, svc
):
    """CASH coupon (充值型, settled to the merchant): the notification states payer_refund only, and the payment
    had no NOCASH coupon, so the settlement refund is the refund (built with the booked payment). NOCASH coupon
    (免充值): the notification cannot say, so the apply step asks the refund query once (settlement_refund).
    Both entries keep amount_cent = the refund (R12 unchanged); the bill writes 退款金额 = the settlement refund,
    and the day reconciles with zero diffs."""
    mchid = m["mchid"]
    cash = pay_v3(h, mchid, 1000, 900, "CASH")
    nocash = pay_v3(h, mchid, 2000, 1500, "NOCASH")
    status, cash_refund = refund(h, mchid, cash, 500)
    assert status == 201, cash_refund
    status, nocash_refund = refund(h, mchid, nocash, 1000)
    assert status == 201, nocash_refund
    for otn, r in ((cash, cash_refund), (nocash, nocash_refund)):
        settle_v3_on_d(h, mchid, otn, r["refund_no"], r["amount_cent"])
        deliver(h, mchid, r["refund_no"])

    entry = ledger(h, f"wechatpay#{mchid}#{cash_refund['refund_no']}")
    assert entry["kind"] == "REFUND" and entry["amount_cent"] == 500 and entry["bill_date"] == D
    assert entry["settlement_state"] == "KNOWN"
    assert (entry["refund_cent"], entry["settlement_refund_cent"]) == (500, 500)
    assert (entry["payer_refund_cent"], entry["discount_refund_cent"]) == (450, 50)  # the coupon's share back
    entry = ledger(h, f"wechatpay#{mchid}#{nocash_refund['refund_no']}")
    assert entry["amount_cent"] == 1000 and entry["settlement_state"] == "KNOWN"
    assert (entry["settlement_refund_cent"], entry["payer_refund_cent"], entry["discount_refund_cent"]) == (
        750,
        750,
        250,
    )
    assert unknown_items(mchid) == [] and metric(h, "SettlementUnknown") == 0

    run = svc.run("wechatpay", mchid, D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["open_diffs"] == 0 and run["stats"]["matched"] == 4
    assert run["stats"]["legacy_refunds"] == 0 and run["stats"]["settlement_unknown"] == 0
    assert run["totals"]["refund_cent"] == 500 + 750  # Σ 退款金额: the settlement refunds


def test_r43_a_refund_whose_settlement_refund_cannot_be_known_is_booked_unknown_with_one_item(h, m, svc):
    """A NOCASH payment's refund notification, and the refund query fails: the money went back, so it is
    booked (UNKNOWN, amount_cent as always) with one settlement-unknown item and SettlementUnknown; the same
    notification again books nothing and adds no item. Recon matches it on amount_cent, explicitly counted."""
    mchid = m["mchid"]
    otn = pay_v3(h, mchid, 2000, 1500, "NOCASH")
    status, r = refund(h, mchid, otn, 1000)
    assert status == 201, r
    no = r["refund_no"]
    settle_v3_on_d(h, mchid, otn, no, 1000)
    h.sim.inject_fault("error", path_contains=f"/v3/refund/domestic/refunds/{no}", status=500, count=5)
    deliver(h, mchid, no)

    entry = ledger(h, f"wechatpay#{mchid}#{no}")
    assert entry["amount_cent"] == 1000 and entry["settlement_state"] == "UNKNOWN"
    assert "settlement_refund_cent" not in entry
    assert bootstrap.refund_service().show(no, mchid)["status"] == "SUCCESS"
    (item,) = unknown_items(mchid)
    assert item["amount_cent"] == 1000 and item["order"] == otn
    assert "settlement refund unknown" in item["reason"] and "NOCASH" in item["reason"]
    assert metric(h, "SettlementUnknown") == 1

    h.sim.clear_faults()
    deliver(h, mchid, no)  # WeChat retries the notification
    assert [i["id"] for i in unknown_items(mchid)] == [item["id"]]
    assert metric(h, "SettlementUnknown") == 1

    run = svc.run("wechatpay", mchid, D, pass_="T+1")
    assert run["stats"]["settlement_unknown"] == 1  # matched on amount_cent (1000 ≠ 退款金额 7.50): a diff
    assert run["stats"]["by_class"] == {"AMOUNT_DIFFERS": 1}, run["stats"]


def pay_v2(h, sim, mch, total, cash_fee, coupon_type):
    response = h.create_order(mch["mch_id"], amount_cent=total, prepay=True, channel="wechatpay_v2")
    assert response["statusCode"] == 201, response
    otn = json.loads(response["body"])["out_trade_no"]
    when = "20240501100000"
    tid = sim.wechatpay_v2.pay(
        mch["mch_id"], otn, drop=True, time_end=when, cash_fee=cash_fee, coupon_type=coupon_type
    )
    fields = sim.wechatpay_v2.payment_params(
        mch["mch_id"],
        otn,
        total,
        transaction_id=tid,
        time_end=when,
        cash_fee=cash_fee,
        coupon_type=coupon_type,
    )
    answer = h.call(
        "NotifyFunction",
        "POST",
        f"/notify/wechatpay-v2/{mch['mch_id']}",
        sim.wechatpay_v2.build_notification(fields),
        {"content-type": "text/xml"},
        {"mchid": mch["mch_id"]},
    )
    assert answer["statusCode"] == 200, answer
    assert h.drain() == []
    return otn


def test_r43_a_v2_refund_with_coupon_refund_fee_books_its_settlement_refund_from_the_query_and_reconciles(
    h, sim, svc
):
    """v2, a NO_CASH coupon of 5.00 on 20.00: the refund's notification is lost, the poller's /pay/refundquery
    answer states refund_fee_0 10.00, settlement_refund_fee_0 7.50, coupon_refund_fee_0 2.50: the entry keeps
    them; the v2 bill (/pay/downloadbill) writes 退款金额 7.50 and 应结订单金额 15.00; zero diffs."""
    mch = new_v2(h, sim)
    otn = pay_v2(h, sim, mch, 2000, 1500, "NO_CASH")
    payment = ledger(
        h, f"wechatpay#{mch['mch_id']}#{sim.wechatpay_v2.orders[(mch['mch_id'], otn)]['transaction_id']}"
    )
    assert (payment["settlement_cent"], payment["nocash_promotion_cent"]) == (1500, 500)
    status, r = refund(h, mch["mch_id"], otn, 1000)
    assert status == 201, r
    no = r["refund_no"]
    sim.wechatpay_v2.settle_refund(no, "success")
    with sim.wechatpay_v2._lock:
        sim.wechatpay_v2.refund_desk.refunds[no]["success_time"] = f"{D} 15:00:00"
    answer = sim.wechatpay_v2.refund_desk._refund_status(mch["mch_id"], {"out_refund_no": no})
    assert (answer["settlement_refund_fee_0"], answer["coupon_refund_fee_0"]) == ("750", "250")

    bootstrap.set_clock(lambda: time.time() + 61)  # the refund is due for its query
    assert bootstrap.refund_service().poll_due() == {"APPLIED": 1}
    entry = ledger(h, f"wechatpay#{mch['mch_id']}#{no}")
    assert entry["source"] == "query" and entry["settlement_state"] == "KNOWN" and entry["bill_date"] == D
    assert (entry["amount_cent"], entry["settlement_refund_cent"]) == (1000, 750)
    assert (entry["payer_refund_cent"], entry["discount_refund_cent"]) == (750, 250)

    run = svc.run("wechatpay", mch["mch_id"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["bill_source"] == "v2" and run["open_diffs"] == 0 and run["stats"]["matched"] == 2
    assert run["totals"]["payment_cent"] == 1500 and run["totals"]["refund_cent"] == 750


def test_r43_an_alipay_refund_of_a_discounted_trade_books_its_settlement_refund_and_reconciles(h, svc):
    """Alipay, 20.00 with a 4.00 merchant discount (MDISCOUNT; 商家实收 16.00): the refund notification names
    only the trade's cumulative refund_fee, so the apply step asks alipay.trade.fastpay.refund.query with
    query_options refund_detail_item_list (ALIPAYACCOUNT 8.00, MDISCOUNT 2.00 of a 10.00 refund): settlement
    refund 8.00, send_back_fee 8.00; the bill's refund row writes 商家实收 −8.00; zero diffs."""
    driver = Alipay(h)
    app = driver.setup()
    response = h.create_order(app, amount_cent=2000, prepay=True, channel="alipay")
    assert response["statusCode"] == 201, response
    otn = json.loads(response["body"])["out_trade_no"]
    paid_at = f"{D} 10:00:00"
    trade_no = h.sim.alipay.pay(app, otn, drop=True, paid_at=paid_at, receipt_amount=1600)
    params = h.sim.alipay.notification_params(
        app, otn, 2000, trade_no=trade_no, receipt_amount=1600, gmt_payment=paid_at, gmt_create=paid_at
    )
    assert driver.notify(app, h.sim.alipay.build_notification(params), {})["body"] == "success"
    assert h.drain() == []
    assert ledger(h, f"alipay#{app}#{trade_no}")["settlement_cent"] == 1600

    status, r = refund(h, app, otn, 1000)
    assert status == 201, r
    no = r["refund_no"]
    h.sim.alipay.settle_refund(no, "success")
    with h.sim.alipay._lock:
        (desk_refund,) = [x for x in h.sim.alipay.refund_desk.refunds.values() if x["out_request_no"] == no]
        desk_refund["gmt_refund"] = f"{D} 15:00:00.000"
        desk_refund["gmt_refund_pay"] = f"{D} 15:00:00"
    h.sim.alipay.bills.add_refund(app, otn, 1000, no, refunded_at=f"{D} 15:00:00")
    assert driver.notify(app, h.sim.alipay.refund_notification(no), {})["body"] == "success"
    assert h.drain() == []

    entry = ledger(h, f"alipay#{app}#{no}")
    assert entry["amount_cent"] == 1000 and entry["settlement_state"] == "KNOWN" and entry["bill_date"] == D
    assert (entry["settlement_refund_cent"], entry["payer_refund_cent"], entry["discount_refund_cent"]) == (
        800,
        800,
        200,
    )
    run = svc.run("alipay", app, D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["open_diffs"] == 0 and run["stats"]["matched"] == 2


def test_r43_a_refund_recorded_by_a_person_of_a_plain_payment_settles_in_full(h, m):
    """A person records the outcome (no report): a payment without discounts settles the refund in full, so
    the entry is KNOWN without asking anyone."""
    mchid = m["mchid"]
    otn = pay_v3(h, mchid, 800, 800)
    status, r = refund(h, mchid, otn, 300)
    assert status == 201, r
    key = f"{mchid}#{r['refund_no']}"
    outcome, _ = bootstrap.refund_service().record_outcome(key, True, by="ops", reason="seen on the platform")
    assert outcome.value == "APPLIED"
    entry = ledger(h, f"wechatpay#{mchid}#{r['refund_no']}")
    assert entry["settlement_state"] == "KNOWN"
    assert (entry["settlement_refund_cent"], entry["payer_refund_cent"], entry["discount_refund_cent"]) == (
        300,
        300,
        0,
    )
