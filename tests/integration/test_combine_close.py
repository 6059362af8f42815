"""Closing WeChat Pay v3 combine orders (合单关单, issue #21): an expired combine sub-order is closed by the poller
with POST /v3/combine-transactions/out-trade-no/{combine_out_trade_no}/close (real HTTP, real RSA signatures to
the simulator; its single-order close refuses a combine's sub-order), every sub-order then moves WAIT_PAY → CLOSED
by the same transition a single close makes (R21, R22); paid before the close → booked, not closed (R23); a
payment reported after the close is the single close race's case: with a person plus one refund task per
sub-order (R17); partner mode names each sub-merchant (R11)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tests.integration.pull_helpers import expire_now, ledger, run_poller, stored


@pytest.fixture(autouse=True)
def _no_faults_left(sim):
    yield
    sim.clear_faults()


def no(prefix="K"):
    return f"{prefix}{uuid.uuid4().hex[:20]}"


def combine_order(h, mchid, subs):
    body = {"combine": True, "mchid": mchid, "combine_out_trade_no": no(), "sub_orders": subs}
    response = h.call("OrdersFunction", "POST", "/orders", json.dumps(body).encode(), {}, {})
    assert response["statusCode"] == 201, response
    return json.loads(response["body"])


def subs_of(*amounts, mchid=None):
    return [
        {"out_trade_no": no("S"), "amount_cent": a, **({"mchid": mchid} if mchid else {})} for a in amounts
    ]


def closes(sim, combo):
    """The simulator's answers to close calls about this combine order or one of its sub-orders: (kind, status)."""
    numbers = [combo["combine_out_trade_no"], *(s["out_trade_no"] for s in combo["sub_orders"])]
    return [
        ("combine" if "combine-transactions" in r["path"] else "single", r["status"])
        for r in list(sim.requests)
        if r["path"].split("?")[0].endswith("/close") and any(f"/{n}/" in r["path"] for n in numbers)
    ]


def test_r21_r22_expired_combine_closed_with_the_combine_close_each_sub_order_closed_once(h, sim):
    m = h.add_merchant()
    combo = combine_order(h, m["mchid"], subs_of(100, 250, 30))
    for sub in combo["sub_orders"]:
        expire_now(h, sub)
    assert run_poller(h)["outcomes"] == {"CLOSED": 3}
    # the first sub-order's close closes the combine (204); each sibling's own close is told ORDER_CLOSED; never
    # the single-order close
    assert sorted(closes(sim, combo)) == [("combine", 204), ("combine", 400), ("combine", 400)]
    for sub in combo["sub_orders"]:
        assert sim.get_order(m["mchid"], sub["out_trade_no"])["trade_state"] == "CLOSED"
        row = stored(h, sub)
        assert row["status"] == "CLOSED" and "poll_pk" not in row
        (transition,) = h.order(m["mchid"], sub["out_trade_no"])["transitions"]
        assert (transition["event"], transition["from_status"], transition["to_status"]) == (
            "CLOSE",
            "WAIT_PAY",
            "CLOSED",
        )  # the transition a single close makes
    assert ledger(h) == [] and h.metric("PollClosed") == 3
    assert run_poller(h)["orders_read"] == 0  # closed orders leave the poll index


def test_r21_r23_combine_paid_just_before_expiry_is_booked_not_closed(h, sim):
    m = h.add_merchant()
    combo = combine_order(h, m["mchid"], subs_of(100, 200))
    tids = sim.pay_combine(m["mchid"], combo["combine_out_trade_no"], drop=True)  # the notification is lost
    for sub in combo["sub_orders"]:
        expire_now(h, sub)
    assert run_poller(h)["outcomes"] == {"BOOKED": 2}  # close answers ORDER_PAID; the query books each
    assert closes(sim, combo) == [("combine", 400), ("combine", 400)]
    assert sorted(e["amount_cent"] for e in ledger(h) if e["kind"] == "PAYMENT") == [100, 200]
    assert [stored(h, s)["transaction_id"] for s in combo["sub_orders"]] == tids


def test_r17_combine_payment_reported_after_the_close_goes_to_a_person_with_a_refund_task_each(h, sim):
    """The single close race (the demo day's payment after close): the buyer paid while the order was being
    closed; the notification comes after every sub-order is CLOSED. Nothing is booked, each sub-order's
    payment is with a person (handled=2) and has exactly one refund task, the orders stay CLOSED."""
    m = h.add_merchant()
    combo = combine_order(h, m["mchid"], subs_of(100, 250, 30))
    for sub in combo["sub_orders"]:
        expire_now(h, sub)
    assert run_poller(h)["outcomes"] == {"CLOSED": 3}
    headers, body = sim.combine_notification(m["mchid"], combo["combine_out_trade_no"], paid_anyway=True)
    for _ in range(2):  # WeChat retries: still one task each
        assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    assert ledger(h) == []
    rows = h.scan("NOTIFY_RAW_TABLE")
    assert len(rows) == 3 and {r["handled"] for r in rows} == {2}
    tasks = h.scan("REFUND_TASKS_TABLE")
    assert sorted(t["amount_cent"] for t in tasks) == [30, 100, 250]
    assert sorted(t["transaction_id"] for t in tasks) == sorted(r["transaction_id"] for r in rows)
    assert all(stored(h, s)["status"] == "CLOSED" for s in combo["sub_orders"])
    assert h.metric("ApplyIllegal") == 3 and h.metric("RefundTaskCreated") == 3


def test_r11_partner_combine_close_names_each_sub_merchant(h, sim):
    sp = h.add_merchant()["mchid"]
    a, b = (f"{p}{time.time_ns() % 10**8:08d}" for p in ("14", "13"))
    for sub in (a, b):
        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid=sub, sp_mchid=sp)
    combo = combine_order(h, sp, subs_of(120, mchid=a) + subs_of(80, mchid=b))
    for sub in combo["sub_orders"]:
        expire_now(h, sub)
    assert run_poller(h)["outcomes"] == {"CLOSED": 2}
    assert sorted(closes(sim, combo)) == [("combine", 204), ("combine", 400)]  # signed by the provider
    for sub, owner in zip(combo["sub_orders"], (a, b), strict=True):
        assert sim.get_order(owner, sub["out_trade_no"])["trade_state"] == "CLOSED"
        assert stored(h, sub)["status"] == "CLOSED"


def test_r21_the_simulator_refuses_a_single_close_of_a_combine_sub_order(h, sim):
    """What makes the tests above prove the combine close is used: the single close is refused for a sub-order,
    and Tally's answer to a refused close is a person (R21), never a silent close."""
    from tally_local.simulator.kernel import SimulatorError

    m = h.add_merchant()
    combo = combine_order(h, m["mchid"], subs_of(100))
    (sub,) = combo["sub_orders"]
    with pytest.raises(SimulatorError) as refused:
        sim.close_order(m["mchid"], sub["out_trade_no"])
    assert refused.value.code == "INVALID_REQUEST"
    assert sim.get_order(m["mchid"], sub["out_trade_no"])["trade_state"] == "NOTPAY"


def test_r11_a_combine_answer_about_another_combine_order_closes_nothing(h, sim, monkeypatch):
    """The combine query answers about another combine order (a signed answer, but not about this one): the
    close names nothing from it; the sub-order goes to a person with the poller's metrics, and neither combine
    order is touched at the channel or here."""
    from tally.channels.wechatpay_v3 import combine

    m = h.add_merchant()
    mine, other = (combine_order(h, m["mchid"], subs_of(100)) for _ in range(2))
    real_query = combine.query
    monkeypatch.setattr(
        combine, "query", lambda client, no: real_query(client, other["combine_out_trade_no"])
    )
    (sub,) = mine["sub_orders"]
    expire_now(h, sub)
    assert run_poller(h)["outcomes"] == {"PERSON": 1}
    assert closes(sim, mine) == [] and closes(sim, other) == []
    row = stored(h, sub)
    assert row["status"] == "WAIT_PAY" and row["poll_pk"].startswith("manual#")
    assert "OTHER_COMBINE" in row["manual_reason"]
    assert h.metric("PollCloseFailed") == 1 and h.metric("PollManual") == 1
    for combo in (mine, other):
        (s,) = combo["sub_orders"]
        assert sim.get_order(m["mchid"], s["out_trade_no"])["trade_state"] == "NOTPAY"
