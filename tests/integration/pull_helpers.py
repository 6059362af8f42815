"""Pull-path helpers shared by integration test modules (test modules never import from each other): time is
moved by back-dating the order rows (`poll_due`, `expire_at`), the poller runs as its scheduled handler."""

from __future__ import annotations

import time

from tally.store.codec import from_item, names_values, to_item
from tally.store.tables import iso_now, order_key

from tally_local.resources import LambdaContext
from tally_local.ticker import Schedule, scheduled_event


def set_fields(h, mchid, out_trade_no, **fields):
    sets = ", ".join(f"{k} = :{k}" for k in fields)
    h.ddb.update_item(
        TableName=h.env["ORDERS_TABLE"],
        Key=to_item({"pk": order_key(mchid, out_trade_no)}),
        UpdateExpression=f"SET {sets}",
        ExpressionAttributeValues=names_values(**fields),
    )


def due_now(h, order):
    set_fields(h, order["mchid"], order["out_trade_no"], poll_due=iso_now(time.time() - 1))


def expire_now(h, order):
    set_fields(
        h,
        order["mchid"],
        order["out_trade_no"],
        poll_due=iso_now(time.time() - 1),
        expire_at=iso_now(time.time() - 1),
    )


def stored(h, order):
    item = h.ddb.get_item(
        TableName=h.env["ORDERS_TABLE"], Key=to_item({"pk": order_key(order["mchid"], order["out_trade_no"])})
    )
    return from_item(item["Item"])


def run_poller(h):
    handler, spec = h.handlers["PollerFunction"]
    schedule = Schedule("PollerFunction", "EveryMinute", "rate(1 minute)", 60, spec.timeout_s, spec.memory_mb)
    result = handler(scheduled_event(schedule), LambdaContext("PollerFunction", spec.timeout_s))
    h._collect_metrics()
    return result


def ledger(h):
    return h.scan("LEDGER_TABLE")
