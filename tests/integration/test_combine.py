"""WeChat Pay v3 combine payments (合单, issue #21 item 2): POST /orders with sub-orders → one combine prepay at
the simulator; its one TRANSACTION.SUCCESS notification (real RSA signature, real AES-GCM) split into one raw
row and one booking per sub-order, under duplicates and a lost notification (the poller's combine query);
partner mode; a forged sub-order for another merchant parked (R39)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tests.integration.pull_helpers import due_now, ledger, run_poller

pytestmark = pytest.mark.usefixtures("days_of_2024")


@pytest.fixture(autouse=True)
def _no_faults_left(sim):
    yield
    sim.clear_faults()


def no(prefix="C"):
    return f"{prefix}{uuid.uuid4().hex[:20]}"


def combine_order(h, mchid, amounts, subs=None, **extra):
    subs = subs or [
        {"out_trade_no": no("S"), "amount_cent": a, "description": f"part {i}"} for i, a in enumerate(amounts)
    ]
    body = {"combine": True, "mchid": mchid, "combine_out_trade_no": no(), "sub_orders": subs, **extra}
    response = h.call("OrdersFunction", "POST", "/orders", json.dumps(body).encode(), {}, {})
    return response["statusCode"], json.loads(response["body"])


def payments(h):
    return sorted(e["amount_cent"] for e in ledger(h) if e["kind"] == "PAYMENT")


def test_r7_r9_combine_of_three_sub_orders_books_each_once_under_duplicates(h, sim):
    m = h.add_merchant()
    status, combo = combine_order(h, m["mchid"], [100, 250, 30])
    assert status == 201, combo
    assert combo["code_url"].startswith("weixin://") and combo["amount_cent"] == 380
    subs = combo["sub_orders"]
    assert [s["combine_out_trade_no"] for s in subs] == [combo["combine_out_trade_no"]] * 3
    assert len({s["code_url"] for s in subs}) == 1  # one QR code pays them all
    again = combine_order(
        h,
        m["mchid"],
        [],
        subs=[{k: s[k] for k in ("out_trade_no", "amount_cent", "description")} for s in subs],
        combine_out_trade_no=combo["combine_out_trade_no"],
    )
    assert again[0] == 200 and again[1]["code_url"] == combo["code_url"]  # a retry: the same order, 200

    tids = sim.pay_combine(m["mchid"], combo["combine_out_trade_no"], drop=True)
    headers, body = sim.combine_notification(m["mchid"], combo["combine_out_trade_no"])
    for _ in range(3):  # the same notification three times
        assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    assert payments(h) == [30, 100, 250]
    rows = h.scan("NOTIFY_RAW_TABLE")
    assert sorted(r["pk"] for r in rows) == sorted(
        f"wechatpay#{m['mchid']}#{t}" for t in tids
    )  # one raw row per sub-order, scoped by its merchant (R39)
    for sub, tid in zip(subs, tids, strict=True):
        view = h.order(m["mchid"], sub["out_trade_no"])
        assert view["status"] == "PAID" and view["transaction_id"] == tid
    headers, body = sim.combine_notification(m["mchid"], combo["combine_out_trade_no"])  # a new delivery
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == [] and payments(h) == [30, 100, 250]


def test_r21_r23_combine_notification_lost_the_pollers_combine_query_books_every_sub_order(h, sim):
    m = h.add_merchant()
    combo = combine_order(h, m["mchid"], [100, 200, 300])[1]
    tids = sim.pay_combine(m["mchid"], combo["combine_out_trade_no"], drop=True)  # the notification is lost
    for sub in combo["sub_orders"]:
        due_now(h, sub)
    result = run_poller(h)
    assert result["outcomes"] == {"BOOKED": 3}
    assert payments(h) == [100, 200, 300]
    asked = [r["path"] for r in sim.requests if "combine-transactions/out-trade-no" in r["path"]]
    assert len(asked) == 3 and all(combo["combine_out_trade_no"] in p for p in asked)
    views = [h.order(m["mchid"], s["out_trade_no"]) for s in combo["sub_orders"]]
    assert [v["transaction_id"] for v in views] == tids
    assert all([r["source"] for r in v["raw"]] == ["query"] for v in views)
    headers, body = sim.combine_notification(m["mchid"], combo["combine_out_trade_no"])  # it comes late
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == [] and payments(h) == [100, 200, 300]


def test_r11_partner_combine_books_each_sub_merchants_order_under_its_own_merchant(h, sim):
    sp = h.add_merchant()["mchid"]
    a, b = (f"{p}{time.time_ns() % 10**8:08d}" for p in ("19", "18"))
    for sub in (a, b):
        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid=sub, sp_mchid=sp)
    subs = [
        {"mchid": a, "out_trade_no": no("A"), "amount_cent": 120},
        {"mchid": b, "out_trade_no": no("B"), "amount_cent": 80},
    ]
    status, combo = combine_order(h, sp, [], subs=subs, description="two shops")
    assert status == 201, combo
    assert [(s["mchid"], s["sp_mchid"]) for s in combo["sub_orders"]] == [(a, sp), (b, sp)]
    sim.pay_combine(sp, combo["combine_out_trade_no"], drop=True)
    headers, body = sim.combine_notification(sp, combo["combine_out_trade_no"])
    assert h.notify(sp, headers, body)["statusCode"] == 204
    assert h.drain() == []
    assert h.order(a, subs[0]["out_trade_no"])["status"] == "PAID"
    assert h.order(b, subs[1]["out_trade_no"])["status"] == "PAID"
    assert sorted((e["mchid"], e["amount_cent"]) for e in ledger(h) if e["kind"] == "PAYMENT") == sorted(
        [(a, 120), (b, 80)]
    )


def test_r39_combine_refuses_a_sub_order_of_a_merchant_that_is_not_its_own(h, sim):
    m, other = h.add_merchant(), h.add_merchant(mchid=f"17{time.time_ns() % 10**8:08d}")
    subs = [
        {"out_trade_no": no("S"), "amount_cent": 100},
        {"mchid": other["mchid"], "out_trade_no": no("X"), "amount_cent": 5},
    ]
    status, answer = combine_order(h, m["mchid"], [], subs=subs)
    assert status == 404 and answer["error"]["code"] == "merchant_not_found"
    assert "not a sub-merchant" in answer["error"]["message"]
    assert h.scan("ORDERS_TABLE") == []  # refused before anything was stored


def test_r39_a_forged_sub_order_for_another_merchant_is_parked_and_the_genuine_ones_booked(h, sim):
    m, victim = h.add_merchant(), h.add_merchant(mchid=f"16{time.time_ns() % 10**8:08d}")
    h.create_order(victim["mchid"], "VICTIM-0001", amount_cent=500)
    combo = combine_order(h, m["mchid"], [100, 200])[1]
    sim.pay_combine(m["mchid"], combo["combine_out_trade_no"], drop=True)
    forged = {"mchid": victim["mchid"], "out_trade_no": "VICTIM-0001", "total": 500}
    headers, body = sim.combine_notification(m["mchid"], combo["combine_out_trade_no"], forge_sub=forged)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204  # signed by m: answered, never retried
    assert h.drain() == []
    assert payments(h) == [100, 200]
    assert h.order(victim["mchid"], "VICTIM-0001")["status"] == "WAIT_PAY"  # hostile input changed nothing
    forged = [e for e in h.scan("NOTIFY_EVENT_TABLE") if e.get("manual_kind") or e.get("cause")]
    assert any("VICTIM-0001" == e.get("out_trade_no") for e in forged)


def test_r34_r36_recon_matches_combine_sub_orders_as_ordinary_bill_rows(h, sim, svc):
    m = h.add_merchant(mchid=f"15{time.time_ns() % 10**8:08d}")
    combo = combine_order(h, m["mchid"], [100, 2550, 1])[1]
    sim.pay_combine(
        m["mchid"], combo["combine_out_trade_no"], drop=True, success_time="2024-05-01T10:00:00+08:00"
    )
    headers, body = sim.combine_notification(m["mchid"], combo["combine_out_trade_no"])
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    run = svc.run("wechatpay", m["mchid"], "2024-05-01", pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert (
        run["totals"]["rows"] == 3 and run["totals"]["payment_cent"] == 2651 and run["stats"]["matched"] == 3
    )
