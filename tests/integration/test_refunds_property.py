"""Hypothesis on moto (R26, R27, R29): random refunds (the caller's numbers and generated ones, some of
whose create calls crash after the channel took them), channel reports and poller sweeps against one
payment, through the real store transactions; a deterministic in-memory channel keeps each example fast."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

from botocore.exceptions import EndpointConnectionError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tally import bootstrap
from tally.domain.clock import CHINA
from tally.domain.refunds import AnswerKind, ChannelAnswer, ExceedsRefundable, RefundNotice
from tally.service.refunds import HOLD_ABANDONED_S, RefundConflict
from tally.store.refunds import open_holds
from tally.store.tables import iso_now, order_key

REPORTS = {"SUCCESS": "SUCCEED", "CLOSED": "FAIL", "ABNORMAL": "ABNORMAL"}


class AcceptingChannel:
    def create(self, row):
        return ChannelAnswer(
            AnswerKind.ACCEPTED, refund_id=f"F{row['refund_no']}", refund_cent=row["amount_cent"]
        )

    def query(self, row):
        return ChannelAnswer(AnswerKind.RETRY)


def paid_order_row(paid: int) -> tuple[str, str]:
    mchid, otn = "1900000109", f"P{uuid.uuid4().hex[:20]}"
    now = iso_now()
    bootstrap.order_service().orders.create(
        {
            "pk": order_key(mchid, otn),
            "mchid": mchid,
            "out_trade_no": otn,
            "channel": "wechatpay",
            "status": "PAID",
            "amount_cent": paid,
            "paid_cent": paid,
            "refundable_cent": paid,
            "currency": "CNY",
            "version": 1,
            "transaction_id": f"4200{uuid.uuid4().int % 10**20:020d}",
            "created_at": now,
        }
    )
    return mchid, otn


steps = st.lists(
    st.one_of(
        st.tuples(st.just("refund"), st.integers(0, 4), st.integers(1, 50)),
        st.tuples(
            st.just("generated"), st.booleans(), st.integers(1, 50)
        ),  # True: crashes after the channel call
        st.tuples(st.just("report"), st.integers(0, 6), st.sampled_from(sorted(REPORTS))),
        st.tuples(st.just("sweep"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(paid=st.integers(1, 120), plan=steps)
@example(
    paid=100,
    plan=[
        ("generated", True, 60),
        ("refund", 0, 50),
        ("sweep", 0, 0),
        ("report", 0, "SUCCESS"),
        ("generated", False, 40),
        ("report", 1, "CLOSED"),
        ("generated", True, 40),
    ],
)
def test_R27_R29_property_on_moto_refunded_plus_reserved_never_exceeds_paid(h, paid, plan):
    service = bootstrap.refund_service()
    service.channels = {"wechatpay": lambda mchid: AcceptingChannel()}
    service.clock = time.time  # the service outlives one example: so would a shifted clock
    mchid, otn = paid_order_row(paid)
    tag = uuid.uuid4().hex[:8]
    numbers = [f"H{tag}N{i}" for i in range(5)]
    amounts: dict[str, int] = {}
    late = 0.0
    for op, i, arg in plan:
        if op == "refund":
            create(service, mchid, otn, arg, amounts, refund_no=numbers[i])
        elif op == "generated":
            create(service, mchid, otn, arg, amounts, crash=i)
        elif op == "sweep":  # the poller, once the holds are abandoned: they become PENDING and are re-sent
            late += HOLD_ABANDONED_S + 1
            service.clock = lambda late=late: time.time() + late
            service.poll_due()
            amounts.update({r["refund_no"]: r["amount_cent"] for r in service.for_order(mchid, otn)})
        else:
            known = sorted(amounts)
            if known:
                no = known[i % len(known)]
                report(service, mchid, otn, no, amounts[no], arg)
        check(service, mchid, otn, paid)
    service.clock = lambda: time.time() + late + HOLD_ABANDONED_S + 1
    service.poll_due()  # no hold outlives the poller
    amounts.update({r["refund_no"]: r["amount_cent"] for r in service.for_order(mchid, otn)})
    for n, no in enumerate(
        sorted(amounts)
    ):  # every refund gets a final outcome: each reservation ends booked or released
        report(service, mchid, otn, no, amounts[no], "SUCCESS" if n % 2 == 0 else "CLOSED")
    refunds, refundable, booked = check(service, mchid, otn, paid)
    assert not any(r["in_flight"] for r in refunds)
    assert refundable + booked == paid


def create(service, mchid, otn, amount, amounts, refund_no=None, crash=False):
    body = {"mchid": mchid, "out_trade_no": otn, "amount_cent": amount, "reason": "p"}
    if refund_no:
        body["refund_no"] = refund_no
    ddb = service.store.t.ddb

    def die(**_):
        raise EndpointConnectionError(endpoint_url="crash after the channel call")

    if crash:
        ddb.meta.events.register("before-call.dynamodb.TransactWriteItems", die)
    try:
        view, _ = service.create(body)
        amounts[view["refund_no"]] = view["amount_cent"]
    except (ExceedsRefundable, RefundConflict, EndpointConnectionError):
        pass
    finally:
        ddb.meta.events.unregister("before-call.dynamodb.TransactWriteItems", die)


def report(service, mchid, otn, no, amount, status):
    notice = RefundNotice(
        channel="wechatpay",
        refund_no=no,
        refund_id=f"F{no}",
        status=status,
        event=None,
        mchid=mchid,
        sp_mchid=None,
        out_trade_no=otn,
        transaction_id="",
        refund_cent=amount,
        total_cent=amount,
        success_time=datetime.now(CHINA).isoformat(
            timespec="seconds"
        ),  # today: a day recon still looks at (R50)
    )
    service.inbox.record(notice)
    service.apply_notification(notice.raw_key, status)


def check(service, mchid, otn, paid):
    order = bootstrap.order_service().show(mchid, otn)
    refunds = service.for_order(mchid, otn)
    held = sum(int(h["amount_cent"]) for h in open_holds(service.orders.get(mchid, otn)).values())
    reserved = sum(r["amount_cent"] for r in refunds if r["in_flight"]) + held
    booked = sum(r["amount_cent"] for r in refunds if r["status"] == "SUCCESS")
    ledger = sum(e["amount_cent"] for e in service_ledger(otn))
    assert booked + reserved <= paid
    assert order["refundable_cent"] + reserved + booked == paid
    assert ledger == booked == order.get("refunded_cent", 0)
    return refunds, order["refundable_cent"], booked


def service_ledger(otn):
    from tally.store.codec import from_item

    ddb = bootstrap.tables().ddb
    items = ddb.scan(TableName=bootstrap.tables().ledger).get("Items", [])
    return [e for e in map(from_item, items) if e["kind"] == "REFUND" and e["out_trade_no"] == otn]
