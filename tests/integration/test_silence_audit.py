"""Findings of the `except` audit (docs/silence.md, "except clauses reviewed"): each test fails without its fix.

Real parts: moto, the signed simulator, the poller's Lambda handler."""

from __future__ import annotations

import json
import time

import pytest
from tally import bootstrap
from tally.store.codec import from_item, names_values, to_item
from tally.store.tables import iso_now, order_key

from tally_local.resources import LambdaContext
from tally_local.ticker import Schedule, scheduled_event


@pytest.fixture
def m(h):
    return h.add_merchant()


def run_poller(h):
    handler, spec = h.handlers["PollerFunction"]
    schedule = Schedule("PollerFunction", "EveryMinute", "rate(1 minute)", 60, spec.timeout_s, spec.memory_mb)
    result = handler(scheduled_event(schedule), LambdaContext("PollerFunction", spec.timeout_s))
    h._collect_metrics()
    return result


def order_row(h, mchid, out_trade_no):
    item = h.ddb.get_item(
        TableName=h.env["ORDERS_TABLE"], Key=to_item({"pk": order_key(mchid, out_trade_no)})
    )
    return from_item(item["Item"])


def due_now(h, mchid, out_trade_no):
    h.ddb.update_item(
        TableName=h.env["ORDERS_TABLE"],
        Key=to_item({"pk": order_key(mchid, out_trade_no)}),
        UpdateExpression="SET poll_due = :d",
        ExpressionAttributeValues=names_values(d=iso_now(time.time() - 1)),
    )


def test_r38_an_order_whose_poll_raises_every_time_goes_to_a_person(h, m, monkeypatch):
    """Before: PollService._poll_safely counted PollFailed and left the order due, so an order whose poll
    raised every time (a channel answer our parser chokes on, a bug) was polled and alarmed forever and
    never became a work-queue item. Now five failures in a row hand it to a person like five failed calls."""
    response = h.create_order(m["mchid"], amount_cent=100, prepay=False)
    assert response["statusCode"] == 201, response
    order = json.loads(response["body"])
    registry = bootstrap.pull_channels()
    real = registry._entries["wechatpay"]

    def poison(order, fast=False):
        raise KeyError("trade_state")  # an answer shape the parser did not expect

    monkeypatch.setitem(registry._entries, "wechatpay", (poison, real[1]))
    outcomes = []
    for _ in range(6):
        due_now(h, order["mchid"], order["out_trade_no"])
        outcomes += list(run_poller(h)["outcomes"])
        if outcomes[-1] == "PERSON":
            break
    assert outcomes == ["FAILED"] * 4 + ["PERSON"]
    row = order_row(h, order["mchid"], order["out_trade_no"])
    assert row["poll_pk"].startswith("manual#") and "KeyError" in row["manual_reason"]
    assert row["status"] == "WAIT_PAY"  # nothing decided about the money: a person looks
    assert h.metric("PollFailed") == 5 and h.metric("PollManual") == 1
    items = bootstrap.work_queue().list({})
    assert any(i["order"] == order["out_trade_no"] and i["kind"] == "order" for i in items), items


def test_r38_one_refund_whose_poll_raises_does_not_stop_the_others(h, sim, monkeypatch):
    """Audit finding L3 (docs/silence.md): RefundService.poll_due caught only RetryLater, so one refund whose
    poll raises (a channel answer the client chokes on, a bug) aborted the whole run: every refund after it was
    not polled and the poller handler never reached work_tasks, every minute, since the poison row was never
    rescheduled. Now each refund is isolated: counted (RefundPollFailed), rescheduled, the others polled."""
    from tally.service.refunds import RefundService

    from tests.integration.refund_helpers import WeChatV3Kit, new_no, refund

    kit = WeChatV3Kit(h)
    kit.hold()  # the channel accepts and keeps the refunds processing: both stay ACCEPTED, due later
    try:
        numbers = []
        for _ in range(2):
            otn, _ = kit.paid_order(100)
            status, body = refund(h, kit.mid, otn, 100, refund_no=new_no())
            assert status == 201 and body["status"] == "ACCEPTED", body
            numbers.append(body["refund_no"])
        poison = numbers[0]
        real = RefundService._poll_one

        def poll_one(self, row, now_s):
            if row["refund_no"] == poison:
                raise KeyError("amount")  # an answer shape the client did not expect
            return real(self, row, now_s)

        monkeypatch.setattr(RefundService, "_poll_one", poll_one)
        bootstrap.set_clock(lambda: time.time() + 61)
        done = bootstrap.refund_service().poll_due(50)  # must not raise: the other refund is still polled
        assert sum(n for k, n in done.items() if not k.startswith("HOLD_")) == 2, done
    finally:
        bootstrap.set_clock(time.time)
        kit.reset()


def test_r38_a_refund_whose_poll_raises_every_time_goes_to_a_person(h, sim, monkeypatch):
    """L3, the other half: five failed polls of one refund in a row make it MANUAL (a "refund" work-queue item
    whose reason says why), like F1's orders; before, it was polled and alarmed until its expiry."""
    from tally.service.refunds import POLL_MAX_ERRORS, RefundService

    from tests.integration.refund_helpers import WeChatV3Kit, new_no, refund

    kit = WeChatV3Kit(h)
    kit.hold()
    try:
        otn, _ = kit.paid_order(100)
        status, body = refund(h, kit.mid, otn, 100, refund_no=new_no())
        assert status == 201 and body["status"] == "ACCEPTED", body
        poison = body["refund_no"]

        def poll_one(self, row, now_s):
            raise KeyError("amount")

        monkeypatch.setattr(RefundService, "_poll_one", poll_one)
        outcomes: list[str] = []
        for n in range(1, POLL_MAX_ERRORS + 2):
            bootstrap.set_clock(lambda n=n: time.time() + n * 7200)  # past every backoff step
            done = bootstrap.refund_service().poll_due(50)
            outcomes += [k for k, c in done.items() if not k.startswith("HOLD_") for _ in range(c)]
        assert outcomes == ["FAILED"] * (POLL_MAX_ERRORS - 1) + ["PERSON"], outcomes  # then out of the index
        shown = bootstrap.refund_service().show(poison, kit.mid)
        assert shown["status"] == "MANUAL", shown
        from tally.observability import metrics

        metrics.flush_metrics()  # direct calls are not wrapped by a handler's log_metrics
        h._collect_metrics()
        assert h.metric("RefundPollFailed") == POLL_MAX_ERRORS and h.metric("RefundManual") == 1
        items = [i for i in bootstrap.work_queue().list({}) if i["kind"] == "refund"]
        assert any("polling raised KeyError" in i["reason"] for i in items), items
    finally:
        bootstrap.set_clock(time.time)
        kit.reset()


def test_r38_a_refund_whose_merchant_credentials_are_gone_is_loud_then_with_a_person(h, sim):
    """L4 (docs/silence.md): a due refund whose merchant has no credentials any more was rescheduled with no
    metric until its expiry (days). Now each poll counts RefundNoChannel (alarmed) and five in a row make it
    MANUAL, a "refund" work-queue item that says why."""
    from tally.observability import metrics
    from tally.service.refunds import POLL_MAX_ERRORS

    from tests.integration.refund_helpers import WeChatV3Kit, new_no, refund

    kit = WeChatV3Kit(h)
    kit.hold()
    try:
        otn, _ = kit.paid_order(100)
        status, body = refund(h, kit.mid, otn, 100, refund_no=new_no())
        assert status == 201 and body["status"] == "ACCEPTED", body
        h.ddb.delete_item(
            TableName=h.env["MERCHANTS_TABLE"], Key=to_item({"pk": f"wechatpay#{kit.mid}"})
        )  # removed
        outcomes: list[str] = []
        for n in range(1, POLL_MAX_ERRORS + 2):
            bootstrap.set_clock(lambda n=n: time.time() + n * 7200)
            done = bootstrap.refund_service().poll_due(50)
            outcomes += [k for k, c in done.items() if not k.startswith("HOLD_") for _ in range(c)]
        assert outcomes == ["NO_CHANNEL"] * (POLL_MAX_ERRORS - 1) + ["PERSON"], outcomes
        assert bootstrap.refund_service().show(body["refund_no"], kit.mid)["status"] == "MANUAL"
        metrics.flush_metrics()
        h._collect_metrics()
        assert h.metric("RefundNoChannel") == POLL_MAX_ERRORS and h.metric("RefundManual") == 1
        items = [i for i in bootstrap.work_queue().list({}) if i["kind"] == "refund"]
        assert any("no channel client" in i["reason"] for i in items), items
    finally:
        bootstrap.set_clock(time.time)
        kit.reset()


def _lost_refund_report(h, kit):
    """A refund the channel settled and reported, whose worker message was lost (or died in the ApplyDLQ)."""
    from tests.integration.refund_helpers import new_no, refund

    otn, _ = kit.paid_order(100)
    status, body = refund(h, kit.mid, otn, 100, refund_no=new_no())
    assert status == 201 and body["status"] == "ACCEPTED", body
    kit.settle(body["refund_no"], "success")
    kit.deliver(body["refund_no"], drained=False)
    h.sqs.purge_queue(QueueUrl=h.env["APPLY_QUEUE_URL"])  # the message is gone: only the raw row is left
    return body["refund_no"]


def test_r25_a_refund_report_whose_message_was_lost_is_requeued_by_the_sweeper(h, sim):
    """Audit L2 (docs/silence.md): refund_raw had no pending index and no sweeper, so a report whose message
    ended in the ApplyDLQ stayed at handled=0 with no item. Now the sweeper re-queues it like a payment."""
    from tests.integration.refund_helpers import WeChatV3Kit

    kit = WeChatV3Kit(h)
    kit.hold()
    try:
        refund_no = _lost_refund_report(h, kit)
        assert bootstrap.refund_service().show(refund_no, kit.mid)["status"] == "ACCEPTED"
        bootstrap.set_clock(lambda: time.time() + 6 * 60)  # older than the sweeper's 5 minutes
        assert bootstrap.sweep_service().run().requeued == 1
        assert h.drain() == []
        assert bootstrap.refund_service().show(refund_no, kit.mid)["status"] == "SUCCESS"
        assert bootstrap.sweep_service().run().requeued == 0  # applied: out of the index
    finally:
        bootstrap.set_clock(time.time)
        kit.reset()


def test_r41_a_refund_report_that_is_never_applied_goes_to_a_person_after_three_requeues(h, sim):
    """L2, the other half: re-queued max_sweeps (3) times and still at handled=0, the report is parked at
    handled=2: a work-queue item `refund-report` (RefundReportManual, SweepGaveUp)."""
    from tally.observability import metrics

    from tests.integration.refund_helpers import WeChatV3Kit

    kit = WeChatV3Kit(h)
    kit.hold()
    try:
        refund_no = _lost_refund_report(h, kit)
        bootstrap.set_clock(lambda: time.time() + 6 * 60)
        sweeper = bootstrap.sweep_service()
        sweeper.every_s = 0  # re-queue every run (in production at most once per 5 minutes)
        runs = []
        for _ in range(4):
            report = sweeper.run()
            runs.append((report.requeued, report.to_person))
            h.sqs.purge_queue(QueueUrl=h.env["APPLY_QUEUE_URL"])  # every re-queued message dies too
        assert runs == [(1, 0), (1, 0), (1, 0), (0, 1)], runs
        items = [i for i in bootstrap.work_queue().list({}) if i["kind"] == "refund-report"]
        assert len(items) == 1 and "re-queues" in items[0]["reason"] and items[0]["amount_cent"] == 100, items
        assert bootstrap.refund_service().show(refund_no, kit.mid)["status"] == "ACCEPTED"  # nothing decided
        metrics.flush_metrics()
        h._collect_metrics()
        assert h.metric("RefundReportManual") == 1 and h.metric("SweepGaveUp") == 1
    finally:
        bootstrap.set_clock(time.time)
        kit.reset()
