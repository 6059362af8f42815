"""R43 + R44 + R45, the issue's done-when: a simulated week with coupons on every channel — WeChat Pay v3 CASH and
NOCASH promotions, v2 CASH and NO_CASH coupons, Alipay merchant discounts — through the simulator (real HTTP,
signed callbacks, the channels' bills and fund flows in their own layouts) and the real recon on moto: trade bill
and fund flow, every day, zero false differences. Planted: a fee charged one fen off, a settlement credit that
never lands, a v2 payment the channel has and we lack; each is found, on its day, in its leg, and nothing else."""

from __future__ import annotations

import json
import random
from datetime import date, timedelta

import pytest
from tally import bootstrap

from tests.integration.recon_helpers import alipay_pay, new_v2

pytestmark = pytest.mark.usefixtures("days_of_2024")

START = date(2024, 6, 3)
DAYS = [(START + timedelta(days=n)).isoformat() for n in range(7)]
FEE_DAY, CREDIT_DAY, V2_DAY = DAYS[2], DAYS[4], DAYS[5]


@pytest.fixture(autouse=True)
def _clean(sim):
    yield
    sim.bills.fundflow.faults.clear()
    sim.alipay.bills.fundflow.faults.clear()
    sim.wechatpay_v2.bills.fundflow.faults.clear()


def v3_pay(h, mchid, total, when, **kw):
    otn = f"W{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=total, prepay=True)["statusCode"] == 201
    h.sim.pay(mchid, otn, drop=True, success_time=when, **kw)
    resource = h.sim.get_order(mchid, otn)["transaction"]
    headers, body = h.sim.build_notification(mchid, resource)
    assert h.notify(mchid, headers, body)["statusCode"] == 204


def v2_pay(h, sim, m, total, cash, coupon_type, time_end, *, deliver=True):
    response = h.create_order(m["mch_id"], amount_cent=total, prepay=True, channel="wechatpay_v2")
    assert response["statusCode"] == 201, response
    otn = json.loads(response["body"])["out_trade_no"]
    tid = sim.wechatpay_v2.pay(
        m["mch_id"], otn, drop=True, cash_fee=cash, coupon_type=coupon_type, time_end=time_end
    )
    if deliver:
        fields = sim.wechatpay_v2.payment_params(
            m["mch_id"],
            otn,
            total,
            cash_fee=cash,
            coupon_type=coupon_type,
            transaction_id=tid,
            time_end=time_end,
        )
        body = sim.wechatpay_v2.build_notification(fields)
        path = f"/notify/wechatpay-v2/{m['mch_id']}"
        answer = h.call(
            "NotifyFunction", "POST", path, body, {"content-type": "text/xml"}, {"mchid": m["mch_id"]}
        )
        assert answer["statusCode"] == 200, answer
    return tid


@pytest.mark.slow  # a simulated week (~30 s): make test runs it, make check does not
def test_r45_a_simulated_week_with_coupons_reconciles_with_zero_diffs(h, sim, svc):
    from tests.integration.channel_kit import Alipay

    v3 = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    v2 = new_v2(h, sim)
    app = Alipay(h).setup()
    missing_v2 = None
    for n, day in enumerate(DAYS):
        base = 1000 + 100 * n
        v3_pay(h, v3, base + 500, f"{day}T09:00:00+08:00", payer_total=base)  # a CASH coupon: settled whole
        v3_pay(
            h, v3, base + 300, f"{day}T12:00:00+08:00", payer_total=base, coupon_type="NOCASH"
        )  # less 3.00
        v3_pay(h, v3, base + 7, f"{day}T23:59:59+08:00")  # no coupon, the last second of the day
        compact = day.replace("-", "")
        v2_pay(h, sim, v2, base + 200, base, "NO_CASH", f"{compact}100000")  # settlement_total_fee = base
        v2_pay(h, sim, v2, base + 100, base, "CASH", f"{compact}110000")  # settled whole
        if day == V2_DAY:  # planted: the channel has it, we never got the callback
            missing_v2 = v2_pay(h, sim, v2, 4321, 4321, "CASH", f"{compact}150000", deliver=False)
        alipay_pay(h, app, base + 80, f"{day} 10:00:00", receipt=base)  # an 0.80 merchant discount
        alipay_pay(h, app, base, f"{day} 18:00:00")
    assert h.drain() == []

    merchants = [("wechatpay", v3), ("wechatpay", v2["mch_id"]), ("alipay", app)]
    trade, fund = {}, {}
    for channel, mchid in merchants:
        for day in DAYS:
            trade[(mchid, day)] = svc.run(channel, mchid, day)
    for channel, mchid in merchants:
        for day in DAYS:
            if (mchid, day) == (v3, FEE_DAY):  # planted: the fee charged one fen off (fund days L and L+1)
                sim.bills.fundflow.fault("fee_off_by_one", count=2)
            if (mchid, day) == (app, CREDIT_DAY):  # planted: a settlement credit that never lands (lag T)
                sim.alipay.bills.fundflow.fault("drop_credit")
            fund[(mchid, day)] = svc.fund_flow(channel, mchid, day)
            sim.bills.fundflow.faults.clear()
            sim.alipay.bills.fundflow.faults.clear()

    # the trade bills: every coupon day MATCHED on settlement amounts (R43); only the planted v2 payment differs
    assert {k: r["status"] for k, r in trade.items() if r["status"] != "MATCHED"} == {
        (v2["mch_id"], V2_DAY): "DIFFS"
    }
    # the fund flows: AGREED everywhere but the planted days
    verdicts = {k: r["fund_verdict"] for k, r in fund.items() if r.get("fund_verdict") != "AGREED"}
    assert verdicts == {
        (v3, FEE_DAY): "FUND_DIFFERS",
        (app, CREDIT_DAY): "FUND_DIFFERS",
        (v2["mch_id"], V2_DAY): "FUND_DIFFERS",  # the ledger lacks what the trade bill and the money have
    }, {k: fund[k]["reason"] for k in verdicts}
    assert fund[(v2["mch_id"], DAYS[0])]["fund_source"] == "v2"

    # every open difference of the week is a planted one, and each planted one is there
    found = set()
    for channel, mchid in merchants:
        for day in DAYS:
            for d in svc.show(channel, mchid, day)["diffs"]:
                if d["handle_status"] == "OPEN":
                    found.add((mchid, day, d["cls"], d["item"]))
    assert found == {
        (v3, FEE_DAY, "SETTLEMENT_DIFFERS", "FEE"),  # the fee error
        (app, CREDIT_DAY, "SETTLEMENT_DIFFERS", "SETTLEMENT"),  # the missing settlement credit
        (
            v2["mch_id"],
            V2_DAY,
            "CHANNEL_ONLY",
            "PAYMENT",
        ),  # the missing v2 payment (its day's trade-bill sums
        # differ by exactly that row: the same money, no second difference, R48) …
        (v2["mch_id"], V2_DAY, "SETTLEMENT_DIFFERS", "SETTLEMENT"),  # … and its money, which did land
        # (its fee is no difference: the FEE entries are booked from the bill's rows, its row included)
    }, found
    channel_only = [
        d for d in svc.show("wechatpay", v2["mch_id"], V2_DAY)["diffs"] if d["cls"] == "CHANNEL_ONLY"
    ]
    assert [d["transaction_id"] for d in channel_only] == [missing_v2]
    money = next(d for d in svc.show("wechatpay", v2["mch_id"], V2_DAY)["diffs"] if d["item"] == "SETTLEMENT")
    assert money["channel_amount_cent"] - money["local_amount_cent"] == 4321
    fee = next(d for d in svc.show("wechatpay", v3, FEE_DAY)["diffs"] if d["item"] == "FEE")
    assert fee["channel_amount_cent"] - fee["local_amount_cent"] == 1
    credit = next(d for d in svc.show("alipay", app, CREDIT_DAY)["diffs"] if d["item"] == "SETTLEMENT")
    assert credit["local_amount_cent"] - credit["channel_amount_cent"] == 1000 + 100 * 4  # the first credit

    # the statements say it the way finance reads it (R45): the three-way verdict per merchant and day
    service = bootstrap.ledger_day_service()
    words = {}
    for day in DAYS:
        for row in service.statement(day):
            if row["merchant"] in (v3, v2["mch_id"], app):
                words[(row["merchant"], day)] = (row["verdict"], row["differs"])
    assert {k: v for k, v in words.items() if v != ("AGREES", "")} == {
        (v3, FEE_DAY): ("DIFFERS", "fund flow"),
        (app, CREDIT_DAY): ("DIFFERS", "fund flow"),
        (v2["mch_id"], V2_DAY): ("DIFFERS", "trade bill, fund flow"),
    }
    assert len(words) == 21

    # R49: every view of every day of the week shows the same payments, fees and net, fees positive
    from tests.integration.money_helpers import assert_views_agree

    for day in DAYS:
        assert_views_agree(day, merchants)
