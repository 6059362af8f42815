"""Refunds on moto through the real handlers and the simulator's refund API (R26–R30)."""

from __future__ import annotations

import json
import time

import pytest
from botocore.exceptions import EndpointConnectionError
from tally import bootstrap
from tally.domain.refunds import AnswerKind
from tally.observability import metrics
from tally.service.refunds import HOLD_ABANDONED_S, task_refund_no
from tally.store.refunds import open_holds

from tests.integration.refund_helpers import KITS, deliver, new_no, order_row, paid_order, refund


@pytest.fixture
def m(h, sim):
    """The test merchant; the simulator holds every refund's outcome until a test settles it."""
    previous = sim.set_refund_behaviour()
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    yield h.add_merchant()
    sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})
    sim._refund_plans.clear()
    flush(h)  # metrics of direct service calls must not leak into the next test


def flush(h):
    """Metrics counted by direct service calls (no handler flushed them) → the harness's metric log."""
    metrics.flush_metrics()
    h._collect_metrics()


def svc():
    return bootstrap.refund_service()


def stored_order(mchid, out_trade_no):
    """The order row as stored (index bookkeeping included), not the public view."""
    return svc().orders.get(mchid, out_trade_no)


def refund_sum(h, kind="REFUND"):
    return sum(e["amount_cent"] for e in h.scan("LEDGER_TABLE") if e["kind"] == kind)


@pytest.fixture(params=sorted(KITS))
def kit(request, h, sim):
    """One channel (WeChat v3, WeChat v2, Alipay): its merchant, a simulator that holds every refund's
    outcome until the test settles it, and its own notification format."""
    k = KITS[request.param](h)
    k.hold()
    yield k
    k.reset()
    flush(h)


def failed_refund(h, kit, otn, amount, no):
    """The refund `no` ends FAIL the way its channel says it: a FAIL/CLOSED notification (WeChat v2/v3) or a
    refusal in the create answer (Alipay: §6.3, its notifications only ever report refunded money)."""
    if kit.fails_by_notification:
        assert refund(h, kit.mid, otn, amount, refund_no=no)[0] == 201
        kit.settle(no, "fail")
        kit.deliver(no)
    else:
        kit.reject_next()
        status, body = refund(h, kit.mid, otn, amount, refund_no=no)
        assert status == 201 and body["status"] == "FAIL", body
    assert svc().show(no)["status"] == "FAIL"


def test_R30_refund_20_30_50_of_100_then_one_cent_is_refused(h, kit):
    """One payment, many refunds (R30); the guard in cents (R27); SUCCESS books each in the ledger (R29).
    Alipay: each notification's refund_fee is the cumulative total (20, 50, 100), checked as such."""
    otn, _ = kit.paid_order(100)
    numbers = []
    for amount in (20, 30, 50):
        status, body = refund(h, kit.mid, otn, amount)
        assert status == 201 and body["status"] == "ACCEPTED", body
        assert (
            body.get("refund_id") or kit.channel == "alipay"
        )  # Alipay has no refund id (out_request_no is it)
        numbers.append(body["refund_no"])
    status, body = refund(h, kit.mid, otn, 1)
    error = body["error"]
    assert status == 409 and error["code"] == "exceeds_refundable" and error["refundable_cent"] == 0
    for no in numbers:
        kit.settle(no, "success")
        kit.deliver(no)
    order = order_row(h, kit.mid, otn)
    assert (order["refundable_cent"], order["refunded_cent"]) == (0, 100)
    assert refund_sum(h) == 100
    assert {svc().show(no)["status"] for no in numbers} == {"SUCCESS"}
    assert refund(h, kit.mid, otn, 1)[0] == 409
    assert len(numbers) == len(set(numbers)) and all(no.startswith("R") for no in numbers)  # generated (R26)
    assert sorted(r[kit.no_field] for r in kit.listed() if r[kit.no_field] in numbers) == sorted(numbers)


def test_R26_same_refund_no_answers_the_existing_refund_without_a_second_reservation(h, kit):
    """Same refund_no twice: one reservation, one refund at the channel (R26, R30)."""
    otn, _ = kit.paid_order(100)
    no = new_no()
    first = refund(h, kit.mid, otn, 40, refund_no=no)
    again = refund(h, kit.mid, otn, 40, refund_no=no)
    assert first[0] == 201 and again[0] == 200 and again[1]["refund_no"] == no
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 60
    assert len(kit.channel_refunds(no)) == 1
    status, body = refund(h, kit.mid, otn, 41, refund_no=no)  # same number, other terms
    assert status == 409 and body["error"]["code"] == "refund_terms_differ" and "already exists" in str(body)
    assert [e["field"] for e in body["error"]["errors"]] == ["amount_cent"]  # the term that differs


@pytest.mark.parametrize("kit", ["wechatpay_v2", "wechatpay_v3"], indirect=True)
def test_R29_fail_releases_once_even_if_the_notification_arrives_three_times(h, kit):
    """(Alipay never notifies a failed refund: its refusals are create answers, tested below.)"""
    otn, _ = kit.paid_order(100)
    status, body = refund(h, kit.mid, otn, 70)
    no = body["refund_no"]
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 30
    kit.settle(no, "fail")
    kit.deliver(no, times=3)  # three copies (v3: each with a new envelope id)
    view = svc().show(no)
    assert view["status"] == "FAIL" and [r["sk"] for r in view["reports"]] == ["CLOSED"]
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 100
    assert h.metric("RefundFailed") == 1 and refund_sum(h) == 0
    # the same report found again by a query changes nothing either
    assert svc().apply_notification(f"wechatpay#{kit.mid}#{no}", "CLOSED").value == "ALREADY_HANDLED"
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 100


def test_R29_a_failed_refund_no_is_spent_a_new_one_works(h, kit):
    otn, _ = kit.paid_order(100)
    no = new_no()
    failed_refund(h, kit, otn, 100, no)
    status, body = refund(h, kit.mid, otn, 100, refund_no=no)
    assert status == 409 and body["error"]["code"] == "refund_no_spent"
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 100  # the refusal reserved nothing
    status, body = refund(h, kit.mid, otn, 100, refund_no=new_no())
    assert status == 201 and body["status"] == "ACCEPTED"
    kit.settle(body["refund_no"], "success")
    kit.deliver(body["refund_no"])
    assert order_row(h, kit.mid, otn)["refunded_cent"] == 100 and refund_sum(h) == 100


@pytest.mark.parametrize("own_number", [False, True], ids=["generated_no", "callers_no"])
def test_R29_notification_arriving_before_the_api_call_returned_is_applied(h, kit, monkeypatch, own_number):
    """The channel notifies SUCCESS while our create call still waits for its answer. With the caller's own
    refund_no the refund row is stored PENDING before the channel call, so the report applies at once. With a
    number we generate the refund is still a hold on the order: the report is deferred (not taken for an
    unknown refund, no person) and applies on its next delivery, once the create call stored the answer."""
    otn, _ = kit.paid_order(100)
    service = svc()
    real = service.channels[kit.channel]

    class NotifiesFirst:
        def __init__(self, inner):
            self.inner = inner

        def create(self, row):
            answer = self.inner.create(row)  # the channel accepted ...
            assert answer.kind is AnswerKind.ACCEPTED
            kit.settle(row["refund_no"], "success")  # ... succeeded, and notified ...
            kit.deliver(row["refund_no"], drained=False)
            if own_number:
                assert h.drain() == []
                assert svc().show(row["refund_no"])["status"] == "SUCCESS"
            else:
                assert h.drain(max_rounds=1) != []  # deferred: the report goes back on the queue
                assert h.metric("RefundManual") == 0
            return answer  # ... before the answer reached us

        def query(self, row):
            return self.inner.query(row)

    monkeypatch.setitem(service.channels, kit.channel, lambda mchid: NotifiesFirst(real(mchid)))
    status, body = refund(h, kit.mid, otn, 25, refund_no="OWN-NUMBER-1" if own_number else None)
    assert status == 201 and body["status"] == ("SUCCESS" if own_number else "ACCEPTED")
    assert body.get("refund_id") or kit.channel == "alipay"
    assert h.drain() == []  # the deferred report's next delivery
    assert svc().show(body["refund_no"])["status"] == "SUCCESS" and h.metric("RefundManual") == 0
    assert refund_sum(h) == 25 and order_row(h, kit.mid, otn)["refundable_cent"] == 75


def test_R26_R28_timeout_after_accepting_leaves_pending_and_the_poll_retries_the_same_refund_no(
    h, kit, monkeypatch
):
    """Sent, outcome unknown: PENDING stays reserved; poll_due re-sends the SAME refund_no (the channel
    answers the same refund), then queries it until the outcome (R29): v3 GET refund, v2 /pay/refundquery,
    Alipay alipay.trade.fastpay.refund.query."""
    monkeypatch.setenv("TALLY_HTTP_TIMEOUT_S", "0.2")
    bootstrap.reset()
    otn, _ = kit.paid_order(100)
    kit.hold_next(after_accept="timeout", hang_s=0.6)
    status, body = refund(h, kit.mid, otn, 60)
    no = body["refund_no"]
    assert status == 201 and body["status"] == "PENDING", body
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 40
    monkeypatch.setenv(
        "TALLY_HTTP_TIMEOUT_S", "10"
    )  # only the first call is to time out, even on a busy machine
    bootstrap.reset()
    assert svc().poll_due() == {}  # not due yet
    # (clock shifts stay under the 300 s signature window the v3 simulator checks against its own clock)
    bootstrap.set_clock(lambda: time.time() + 61)
    assert svc().poll_due() == {"ACCEPTED": 1}
    assert len(kit.channel_refunds(no)) == 1
    if kit.channel == "wechatpay":
        assert svc().show(no)["refund_id"] == kit.channel_refunds(no)[0]["refund_id"]
    bootstrap.set_clock(lambda: time.time() + 125)
    assert svc().poll_due() == {"PROCESSING": 1}  # queried: still processing, backoff
    kit.settle(no, "success")
    assert svc().poll_due() == {}  # next poll is later (backoff)
    bootstrap.set_clock(lambda: time.time() + 250)
    assert svc().poll_due() == {"APPLIED": 1}
    view = svc().show(no)
    assert view["status"] == "SUCCESS" and view["reports"][0]["source"] == "query"
    assert refund_sum(h) == 60 and order_row(h, kit.mid, otn)["refundable_cent"] == 40


def test_R26_R28_crash_after_the_channel_call_leaves_a_hold_the_poller_recovers(h, kit):
    """A number we generate, and the create call dies after the channel took the refund, before storing the
    answer. The reservation stays on the order as a hold, so the amount cannot be refunded twice meanwhile;
    once abandoned (HOLD_ABANDONED_S) the poller stores the refund PENDING and re-sends the same refund_no,
    which the channel answers with the refund it already took: one channel refund, booked once."""
    otn, _ = kit.paid_order(100)
    ddb = svc().store.t.ddb

    def crash(**_):
        raise EndpointConnectionError(endpoint_url="http://dynamodb (the container died here)")

    ddb.meta.events.register("before-call.dynamodb.TransactWriteItems", crash)
    try:
        with pytest.raises(EndpointConnectionError):
            svc().create({"mchid": kit.mid, "out_trade_no": otn, "amount_cent": 60, "reason": "crash"})
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.TransactWriteItems", crash)
    order = stored_order(kit.mid, otn)
    [no] = open_holds(order)
    assert (
        order["refundable_cent"] == 40 and svc().store.get(no) is None and len(kit.channel_refunds(no)) == 1
    )
    assert order_row(h, kit.mid, otn)["refund_holds"] == {no: 60}  # what a person sees
    status, _ = refund(h, kit.mid, otn, 50)
    assert status == 409  # the held 60 cents are not refundable again
    assert svc().poll_due() == {}  # not abandoned yet: a live create call may still store its answer
    bootstrap.set_clock(lambda: time.time() + HOLD_ABANDONED_S + 1)
    assert svc().poll_due() == {"HOLD_RECOVERED": 1, "ACCEPTED": 1}
    flush(h)
    assert h.metric("RefundHoldRecovered") == 1
    assert len(kit.channel_refunds(no)) == 1 and not open_holds(stored_order(kit.mid, otn))
    kit.settle(no, "success")
    kit.deliver(no)
    assert svc().show(no)["status"] == "SUCCESS"
    assert refund_sum(h) == 60 and order_row(h, kit.mid, otn)["refundable_cent"] == 40


def test_R27_answer_transaction_cancelled_by_contention_is_tried_again(h, m, sim):
    """Another refund's write on the same order at the same instant cancels the answer's transaction with
    TransactionConflict (no condition failed): it is tried again, not taken for a closed hold."""
    otn, _ = paid_order(h, m["mchid"], 100)
    ddb = svc().store.t.ddb
    conflicts = []

    def conflict_once(**_):
        if not conflicts:
            conflicts.append(1)
            raise ddb.exceptions.TransactionCanceledException(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "conflict"},
                    "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict"}],
                },
                "TransactWriteItems",
            )

    ddb.meta.events.register("before-call.dynamodb.TransactWriteItems", conflict_once)
    try:
        view, created = svc().create(
            {"mchid": m["mchid"], "out_trade_no": otn, "amount_cent": 30, "reason": "c"}
        )
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.TransactWriteItems", conflict_once)
    assert conflicts and created and view["status"] == "ACCEPTED"
    assert (
        not open_holds(stored_order(m["mchid"], otn))
        and stored_order(m["mchid"], otn)["refundable_cent"] == 70
    )


def test_R27_hold_index_holds_only_open_holds(h, m, sim):
    """Every refund with a generated number passes through the hold index; the poller's visit after the
    hold's abandonment time takes the order off it once the answer was stored, and finds nothing to recover."""
    otn, _ = paid_order(h, m["mchid"], 100)
    status, body = refund(h, m["mchid"], otn, 10)
    assert status == 201 and body["status"] == "ACCEPTED"
    order = stored_order(m["mchid"], otn)
    assert not open_holds(order) and order["holds_open"] == 0 and order.get("hold_pk")
    bootstrap.set_clock(lambda: time.time() + HOLD_ABANDONED_S + 1)
    assert svc().poll_due() == {"PROCESSING": 1}  # the refund's own query; no hold to recover
    order = stored_order(m["mchid"], otn)
    assert "hold_pk" not in order and "hold_due" not in order and order["refundable_cent"] == 90


def test_R29_a_rejected_refund_fails_and_releases(h, kit):
    """A verified, definitive refusal of the create call: FAIL, the reservation released (R29)."""
    otn, _ = kit.paid_order(100)
    kit.reject_next()
    status, body = refund(h, kit.mid, otn, 10)
    assert status == 201 and body["status"] == "FAIL" and kit.reject_code in body["fail_reason"]
    assert order_row(h, kit.mid, otn)["refundable_cent"] == 100 and h.metric("RefundFailed") == 1


def test_R29_abnormal_goes_to_a_person_and_a_later_success_still_books(h, m, sim):
    otn, _ = paid_order(h, m["mchid"], 100)
    no = refund(h, m["mchid"], otn, 50)[1]["refund_no"]
    sim.settle_refund(no, "abnormal")
    deliver(h, m["mchid"], no)
    assert svc().show(no)["status"] == "MANUAL" and h.metric("RefundManual") == 1
    assert [r["refund_no"] for r in svc().manual()] == [no]
    assert order_row(h, m["mchid"], otn)["refundable_cent"] == 50  # still reserved while with a person
    sim.settle_refund(no, "success")  # fixed by a person at the channel
    deliver(h, m["mchid"], no)
    assert svc().show(no)["status"] == "SUCCESS" and refund_sum(h) == 50 and svc().manual() == []


def test_R21_R29_a_refund_without_outcome_until_expiry_goes_to_a_person(h, m):
    otn, _ = paid_order(h, m["mchid"], 100)
    no = refund(h, m["mchid"], otn, 10)[1]["refund_no"]
    bootstrap.set_clock(lambda: time.time() + 8 * 86400)
    assert svc().poll_due() == {"EXPIRED": 1}
    flush(h)
    assert svc().show(no)["status"] == "MANUAL" and h.metric("RefundManual") == 1
    assert svc().poll_due() == {}  # never queried forever


def test_refund_of_an_unpaid_or_unknown_order_is_refused(h, m):
    h.create_order(m["mchid"], "UNPAID-0001", amount_cent=100)
    assert refund(h, m["mchid"], "UNPAID-0001", 10)[0] == 409
    assert refund(h, m["mchid"], "NOSUCH-0001", 10)[0] == 404
    assert refund(h, m["mchid"], "UNPAID-0001", 0)[0] == 400
    assert h.scan("REFUNDS_TABLE") == []


def test_R7_refund_notification_for_an_unknown_refund_no_goes_to_a_person_after_retries(h, m, sim):
    resource = sim.refund_resource(
        m["mchid"], "OUTSIDE-001", "4200000000000000000000000001", "BYHAND0001", 5, 10
    )
    headers, body = sim.build_notification(
        m["mchid"], resource, event_type="REFUND.SUCCESS", associated_data="refund"
    )
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    for _ in range(6):
        h.drain(max_rounds=1)
    (row,) = h.scan("REFUND_RAW_TABLE")
    assert (
        row["pk"] == f"wechatpay#{m['mchid']}#BYHAND0001" and row["sk"] == "SUCCESS" and row["handled"] == 2
    )
    assert h.metric("RefundManual") == 1 and refund_sum(h) == 0


def test_R17_refund_tasks_auto_policy_refunds_once_against_the_task_not_the_order(h, m, sim):
    """An ILLEGAL payment was never booked: its refund reserves on the task (OPEN → REFUNDING), so the
    order's refundable_cent is untouched; the refund_no derives from the task, so re-running is safe."""
    otn, _ = paid_order(h, m["mchid"], 100)
    second = sim.transaction_resource(m["mchid"], otn, 100)  # a second payment of the same order
    sim._by_transaction_id[second["transaction_id"]] = (m["mchid"], otn)
    headers, body = sim.build_notification(m["mchid"], second)
    h.notify(m["mchid"], headers, body)
    h.drain()
    (task,) = h.scan("REFUND_TASKS_TABLE")
    assert task["status"] == "OPEN"
    service = svc()
    service.task_policy = "auto"
    assert service.work_tasks() == {"REFUNDING": 1}
    assert service.work_tasks() == {}  # nothing OPEN any more: never twice
    no = task_refund_no(task["pk"])
    view = service.show(no)
    assert (
        view["status"] == "ACCEPTED"
        and view["hold"] == "task"
        and view["transaction_id"] == second["transaction_id"]
    )
    assert order_row(h, m["mchid"], otn)["refundable_cent"] == 100
    sim.settle_refund(no, "success")
    deliver(h, m["mchid"], no)
    (task,) = h.scan("REFUND_TASKS_TABLE")
    assert task["status"] == "DONE" and task["refund_no"] == no
    assert refund_sum(h) == 100 and order_row(h, m["mchid"], otn)["refundable_cent"] == 100


def test_R17_refund_tasks_manual_policy_hands_each_task_to_a_person_once(h, m, sim):
    otn, _ = paid_order(h, m["mchid"], 100)
    headers, body = sim.build_notification(m["mchid"], sim.transaction_resource(m["mchid"], otn, 100))
    h.notify(m["mchid"], headers, body)
    h.drain()
    assert svc().work_tasks() == {"MANUAL": 1}
    assert svc().work_tasks() == {}
    (task,) = h.scan("REFUND_TASKS_TABLE")
    assert task["status"] == "MANUAL" and h.scan("REFUNDS_TABLE") == []


def test_poller_entry_is_invokable(h, m):
    import dataclasses

    from tally_local.resources import LambdaContext, load_handler

    _, spec = h.handlers["RefundsFunction"]
    scheduled = load_handler(dataclasses.replace(spec, handler="app.scheduled"))
    result = scheduled({"limit": 5}, LambdaContext("RefundsFunction"))
    assert result == {"poll_due": {}, "work_tasks": {}}


def test_get_refund_route(h, m):
    otn, _ = paid_order(h, m["mchid"], 100)
    no = refund(h, m["mchid"], otn, 10)[1]["refund_no"]
    response = h.call("RefundsFunction", "GET", f"/refunds/{no}", b"", {}, {"refund_no": no})
    assert response["statusCode"] == 200 and json.loads(response["body"])["amount_cent"] == 10
    assert (
        h.call("RefundsFunction", "GET", "/refunds/NOPE00", b"", {}, {"refund_no": "NOPE00"})["statusCode"]
        == 404
    )


def test_cli_refund_create_show_list(h, m, sim, monkeypatch, capsys):
    from tally_cli import refund as cli_refund
    from tally_cli.main import main

    monkeypatch.setattr(cli_refund, "connect", lambda args: {"env": h.env})  # in-process moto: no endpoint
    otn, _ = paid_order(h, m["mchid"], 100)
    no = new_no()
    assert (
        main(["refund", "create", m["mchid"], otn, "30", "--reason", "broken", "--refund-no", no, "--local"])
        == 0
    )
    assert capsys.readouterr().out.startswith(f"created refund {no}  accepted by the channel  ¥0.30")
    assert main(["refund", "create", m["mchid"], otn, "30", "--refund-no", no, "--local"]) == 0
    assert capsys.readouterr().out.startswith("existing ")
    assert main(["refund", "create", m["mchid"], otn, "71", "--local"]) == 1
    assert "exceeds refundable 0.70 yuan" in capsys.readouterr().out
    sim.settle_refund(no, "abnormal")
    deliver(h, m["mchid"], no)
    assert main(["refund", "show", no, "--local"]) == 0
    out = capsys.readouterr().out
    assert "with a person" in out and "WITH A PERSON: ABNORMAL" in out and "ABNORMAL  via notify" in out
    assert main(["refund", "list", "--manual", "--local", "--json"]) == 0
    assert [r["refund_no"] for r in json.loads(capsys.readouterr().out)] == [no]
    assert main(["refund", "list", m["mchid"], otn, "--local"]) == 0
    assert no in capsys.readouterr().out
    assert main(["refund", "show", "NOSUCH01", "--local"]) == 1
