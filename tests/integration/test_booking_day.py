"""R50: money is never booked silently onto a day reconciliation has finished with, or onto a future day.

A tenant the channel knows can sign a SUCCESS itself (issue #38 finding 1); before R50 it was booked on the
day it claimed, a day whose recon never runs again. Now it is parked for a person with an alarmed metric."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest
from tally import bootstrap
from tally.domain.clock import CHINA
from tally.observability import metrics

from tests.integration.pull_helpers import expire_now, run_poller, stored
from tests.integration.refund_helpers import deliver, paid_order, refund


def _china(days: int) -> str:
    return (datetime.now(CHINA) + timedelta(days=days)).replace(microsecond=0).isoformat()


def _flush(h):
    metrics.flush_metrics()
    h._collect_metrics()


@pytest.mark.parametrize(
    "success_time",
    [_china(-10), "2099-01-01T10:00:00+08:00"],
    ids=["ten_days_ago_on_a_finished_day", "in_2099"],
)
def test_R50_a_payment_on_a_finished_or_future_day_is_parked_not_booked(h, success_time):
    """R50 (issue #38 finding 1): 88.00 reported as paid 10 days ago (its recon finished) or in 2099 is
    not booked: the raw row waits for a person with the reason, ApplyManual (alarmed) and
    ApplyDayOutOfWindow count it, the ledger has nothing and the order is still unpaid."""
    m = h.add_merchant()
    order = json.loads(h.create_order(m["mchid"], amount_cent=8800)["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 8800, success_time=success_time)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    view = h.order(m["mchid"], order["out_trade_no"])
    assert view["status"] == "WAIT_PAY" and h.scan("LEDGER_TABLE") == []
    (raw,) = view["raw"]
    assert raw["handled"] == 2 and "not booked" in raw["manual_reason"]
    assert h.metric("ApplyDayOutOfWindow") == 1 and h.metric("ApplyManual") == 1


@pytest.mark.parametrize(
    "success_time",
    [_china(-10), "2099-01-01T10:00:00+08:00"],
    ids=["ten_days_ago_on_a_finished_day", "in_2099"],
)
def test_R50_a_success_for_a_closed_order_on_a_finished_or_future_day_is_parked_before_any_refund_task(
    h, success_time
):
    """R50 before R17 (issue #38 finding 1, paid after close): a SUCCESS the tenant signs itself for an order that
    is already CLOSED, dated 10 days ago or in 2099, was ILLEGAL "paid while CLOSED" and became a refund task for
    money no channel took, before the booking day was looked at. The day is looked at first: the raw row waits
    for a person "not booked", ApplyDayOutOfWindow and ApplyManual count it; no refund task, no ledger entry."""
    m = h.add_merchant()
    order = json.loads(h.create_order(m["mchid"], amount_cent=8800, prepay=True)["body"])
    expire_now(h, order)
    assert run_poller(h)["outcomes"] == {"CLOSED": 1} and stored(h, order)["status"] == "CLOSED"
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 8800, success_time=success_time)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    view = h.order(m["mchid"], order["out_trade_no"])
    assert view["status"] == "CLOSED"
    assert h.scan("REFUND_TASKS_TABLE") == [] and h.scan("LEDGER_TABLE") == []
    (raw,) = view["raw"]
    assert raw["handled"] == 2 and "not booked" in raw["manual_reason"]
    assert h.metric("ApplyDayOutOfWindow") == 1 and h.metric("ApplyManual") == 1
    assert h.metric("RefundTaskCreated") == 0 and h.metric("ApplyIllegal") == 0


def test_R50_a_second_payment_on_a_finished_day_is_parked_before_any_refund_task(h):
    """R50 before R17 (double payment): a second SUCCESS for a PAID order dated on a finished day goes to a
    person, not to a refund task; the first payment's entry is the only one."""
    m = h.add_merchant()
    order = json.loads(h.create_order(m["mchid"], amount_cent=8800)["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 8800)
    h.notify(m["mchid"], headers, body)
    assert h.drain() == []
    headers, body, second = h.notification(m["mchid"], order["out_trade_no"], 8800, success_time=_china(-10))
    h.notify(m["mchid"], headers, body)
    assert h.drain() == []
    assert h.scan("REFUND_TASKS_TABLE") == [] and len(h.scan("LEDGER_TABLE")) == 1
    rows = {r["transaction_id"]: r for r in h.scan("NOTIFY_RAW_TABLE")}
    parked = rows[second["transaction_id"]]
    assert parked["handled"] == 2 and "not booked" in parked["manual_reason"]
    assert h.metric("ApplyDayOutOfWindow") == 1 and h.metric("RefundTaskCreated") == 0


def test_R17_money_paid_after_close_on_a_day_recon_still_looks_at_is_a_refund_task(h):
    """R17, unchanged by R50: a SUCCESS for a CLOSED order dated yesterday is ILLEGAL with one refund task."""
    m = h.add_merchant()
    order = json.loads(h.create_order(m["mchid"], amount_cent=8800, prepay=True)["body"])
    expire_now(h, order)
    assert run_poller(h)["outcomes"] == {"CLOSED": 1}
    headers, body, paid = h.notification(m["mchid"], order["out_trade_no"], 8800, success_time=_china(-1))
    h.notify(m["mchid"], headers, body)
    assert h.drain() == []
    (task,) = h.scan("REFUND_TASKS_TABLE")
    assert task["transaction_id"] == paid["transaction_id"] and task["amount_cent"] == 8800
    assert h.scan("LEDGER_TABLE") == [] and h.metric("ApplyDayOutOfWindow") == 0


def test_R50_a_payment_of_yesterday_is_still_booked(h):
    """R50's window is reconciliation's: a day whose T+2 and T+3 passes are still due books as always."""
    m = h.add_merchant()
    order = json.loads(h.create_order(m["mchid"], amount_cent=8800)["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 8800, success_time=_china(-1))
    h.notify(m["mchid"], headers, body)
    assert h.drain() == []
    assert h.order(m["mchid"], order["out_trade_no"])["status"] == "PAID"
    assert h.metric("ApplyDayOutOfWindow") == 0


def test_R50_a_refund_reported_succeeding_on_a_finished_day_stays_held_for_a_person(h, sim):
    """R50 (issue #38 finding 1, refunds): a refund's bill date comes from its report; one dated on a day whose
    recon is finished is not booked: the refund goes to a person (MANUAL), the amount stays reserved, the report
    is parked, RefundDayOutOfWindow counts it."""
    previous = sim.set_refund_behaviour()
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    try:
        m = h.add_merchant()
        otn, _ = paid_order(h, m["mchid"], 10000)
        no = refund(h, m["mchid"], otn, 6000)[1]["refund_no"]
        sim.settle_refund(no, "success")
        with sim._lock:
            sim._refunds[no]["success_time"] = _china(-10)
        deliver(h, m["mchid"], no)
    finally:
        sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})
        sim._refund_plans.clear()
    _flush(h)
    shown = bootstrap.refund_service().show(no)
    assert shown["status"] == "MANUAL" and "not booked" in shown["manual_reason"]
    assert [e for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND"] == []
    assert bootstrap.order_service().show(m["mchid"], otn)["refundable_cent"] == 4000  # still reserved
    assert [r["handled"] for r in h.scan("REFUND_RAW_TABLE")] == [2]
    assert h.metric("RefundDayOutOfWindow") == 1


def test_R50_the_booking_window_follows_the_channels_clock():
    """R50, pure: T+3 is the last pass, so a day three days back is finished; ten minutes ahead is skew."""
    from tally.domain.booking_day import booking_day_refusal

    now = time.time()
    assert booking_day_refusal(_china(-2), now) is None
    assert "finished" in booking_day_refusal(_china(-3), now)
    assert "future" in booking_day_refusal(_china(1), now)
    ahead = (datetime.now(CHINA) + timedelta(minutes=5)).isoformat()
    assert booking_day_refusal(ahead, now) is None
    assert booking_day_refusal(None, now) is None and booking_day_refusal("garbage", now) is None
