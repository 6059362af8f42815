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
