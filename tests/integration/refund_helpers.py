"""Shared helpers for the refund tests: a paid order through the real notify + worker path."""

from __future__ import annotations

import json
import uuid

from tally import bootstrap


def paid_order(h, mchid: str, amount: int = 100) -> tuple[str, str]:
    """An order created with prepay at the simulator, paid there, and booked through notify + worker."""
    out_trade_no = f"T{uuid.uuid4().hex[:20]}"
    response = h.create_order(mchid, out_trade_no, amount_cent=amount, prepay=True)
    assert response["statusCode"] == 201, response
    transaction_id = h.sim.pay(mchid, out_trade_no, drop=True)
    headers, body = h.sim.build_notification(mchid, h.sim.transaction_view(mchid, out_trade_no))
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []
    assert h.order(mchid, out_trade_no)["status"] == "PAID"
    return out_trade_no, transaction_id


def refund(h, mchid: str, out_trade_no: str, amount: int, refund_no: str | None = None, reason: str = "test"):
    body = {"mchid": mchid, "out_trade_no": out_trade_no, "amount_cent": amount, "reason": reason}
    if refund_no:
        body["refund_no"] = refund_no
    response = h.call("RefundsFunction", "POST", "/refunds", json.dumps(body).encode(), {}, {})
    return response["statusCode"], json.loads(response["body"])


def deliver(h, mchid: str, out_refund_no: str, times: int = 1) -> None:
    """The simulator's signed REFUND.<status> notification, delivered `times` times, then applied."""
    for _ in range(times):
        headers, body = h.sim.refund_notification(out_refund_no)
        assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []


def order_row(h, mchid: str, out_trade_no: str) -> dict:
    return bootstrap.order_service().show(mchid, out_trade_no)


def new_no() -> str:
    return f"RN{uuid.uuid4().hex[:24]}"
