"""The pull path for Alipay (R21–R24): alipay.trade.query / close through the same poller and transit."""

import json

from tests.integration.channel_kit import Alipay
from tests.integration.pull_helpers import due_now, expire_now, ledger, run_poller, stored


def alipay_order(h, sim, amount=100):
    app_id = Alipay(h).setup()
    response = h.create_order(app_id, amount_cent=amount, prepay=True, channel="alipay")
    assert response["statusCode"] == 201, response
    return app_id, json.loads(response["body"])


def test_R21_R23_alipay_callbacks_lost_the_poller_books_the_receipt_amount_once(h, sim):
    app_id, order = alipay_order(h, sim, 1000)
    trade_no = sim.alipay.pay(app_id, order["out_trade_no"], receipt_amount=900, drop=True)
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"BOOKED": 1}
    view = h.order(app_id, order["out_trade_no"])
    assert view["status"] == "PAID" and view["transaction_id"] == trade_no
    (entry,) = ledger(h)
    assert (
        entry["pk"] == f"alipay#{app_id}#{trade_no}"
        and entry["amount_cent"] == 900
        and entry["source"] == "query"
    )


def test_R22_alipay_trade_not_exist_is_waiting_never_closed(h, sim):
    app_id, order = alipay_order(h, sim)
    due_now(h, order)  # the buyer has not scanned: ACQ.TRADE_NOT_EXIST
    assert run_poller(h)["outcomes"] == {"NOT_CREATED": 1}
    assert stored(h, order)["status"] == "WAIT_PAY" and "poll_pk" in stored(h, order)


def test_R21_alipay_expired_scanned_but_unpaid_is_closed_at_the_channel_then_locally(h, sim):
    app_id, order = alipay_order(h, sim)
    sim.alipay.scan(app_id, order["out_trade_no"])  # WAIT_BUYER_PAY at Alipay
    expire_now(h, order)
    run_poller(h)
    assert stored(h, order)["status"] == "CLOSED"
    assert sim.alipay.orders[(app_id, order["out_trade_no"])]["status"] == "TRADE_CLOSED"
    assert ledger(h) == []
