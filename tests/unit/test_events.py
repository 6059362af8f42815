"""Downstream events (R20): which change is which event, and the id is stable."""

from tally.domain.events import events_for_change

ORDER = {
    "pk": "1900000109#O1",
    "mchid": "1900000109",
    "out_trade_no": "O1",
    "channel": "wechatpay",
    "amount_cent": 100,
    "currency": "CNY",
    "status": "WAIT_PAY",
}


def test_R20_paid_transition_is_order_paid_with_a_stable_id():
    paid = {**ORDER, "status": "PAID", "transaction_id": "4200", "paid_cent": 100}
    (event,) = events_for_change(ORDER, paid)
    assert event.detail_type == "OrderPaid" and event.detail["transaction_id"] == "4200"
    assert event.event_id == "OrderPaid:1900000109#O1:4200" == event.detail["event_id"]
    assert events_for_change(ORDER, paid) == [event]  # the same change again: the same id


def test_R20_no_status_change_no_event():
    assert events_for_change(ORDER, {**ORDER, "code_url": "weixin://x"}) == []
    assert events_for_change(None, ORDER) == []  # creation is not an event consumers need
    assert events_for_change(ORDER, None) == []


def test_R20_closed_and_refund_outcomes():
    (closed,) = events_for_change(ORDER, {**ORDER, "status": "CLOSED"})
    assert closed.detail_type == "OrderClosed"
    refund = {"refund_no": "R1", "status": "ACCEPTED", "amount_cent": 20}
    assert events_for_change(refund, {**refund, "status": "SUCCESS"})[0].detail_type == "RefundSucceeded"
    assert events_for_change(refund, {**refund, "status": "FAIL"})[0].event_id == "RefundFailed:R1"
