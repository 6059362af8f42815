"""What the provable-books tests share (docs/audit.md): a payment booked through notify, tomorrow's seal run,
and the tampering an auditor's verify must name."""

from __future__ import annotations

import json
import time

from tally import bootstrap
from tally.domain.journal import shanghai_day
from tally.store.codec import to_item

SCHEDULED = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


def pay(h, mchid, amount):
    order = json.loads(h.create_order(mchid, amount_cent=amount)["body"])
    headers, body, resource = h.notification(mchid, order["out_trade_no"], amount)
    assert h.notify(mchid, headers, body)["statusCode"] in (200, 204)
    return order, resource


def seal_tomorrow(h) -> dict:
    """The SealFunction's scheduled run as it happens at 00:30 the next day: seals today, verifies again."""
    bootstrap.set_clock(lambda: time.time() + 86400)
    try:
        return h.invoke("SealFunction", SCHEDULED)
    finally:
        bootstrap.set_clock(time.time)


def paid_and_sealed(h, mchid, amounts=(101, 202, 303)) -> str:
    """Payments today, then tomorrow's seal run: the day is sealed (signed, locked); returns the day."""
    for amount in amounts:
        pay(h, mchid, amount)
    assert h.drain() == []
    day = shanghai_day(time.time())
    result = seal_tomorrow(h)
    sealed = {s["merchant"]: s["records"] for s in result["sealed"]}
    assert sealed[mchid] >= len(amounts)  # the payments, and the merchant's configuration when made that day
    return day


def change_ledger_amount(h, entry, amount_cent: int) -> None:
    """Someone with write access changes a booked ledger entry's amount after the seal."""
    h.ddb.update_item(
        TableName=h.env["LEDGER_TABLE"],
        Key=to_item({"pk": entry["pk"]}),
        UpdateExpression="SET amount_cent = :a",
        ExpressionAttributeValues={":a": {"N": str(amount_cent)}},
    )
