"""The files in events/ (for `sam local invoke`) drive the real handlers, so they can never rot."""

import json
import pathlib

from tally import bootstrap
from tally.domain.callers import principal_of

from tally_local.resources import LambdaContext
from tally_local.samples import SAMPLE_CALLER, SAMPLE_ORDER, SAMPLE_TIMESTAMP, SAMPLE_TRANSACTION

EVENTS = pathlib.Path(__file__).resolve().parents[2] / "events"


def load(name):
    return json.loads((EVENTS / name).read_text())


def invoke(h, function, name):
    handler, _ = h.handlers[function]
    return handler(load(name), LambdaContext(function))


def test_every_function_has_a_sample_event(handlers):
    assert {p.name for p in EVENTS.glob("*.json")} >= {
        "notify_wechatpay.json",
        "orders_create.json",
        "worker_sqs.json",
    }


def test_sample_events_book_a_payment_R7_R18(h):
    m = h.add_merchant()
    bootstrap.callers().allow(
        principal_of(SAMPLE_CALLER), [m["mchid"]], by="test"
    )  # the sample's backend (R53)
    bootstrap.set_clock(lambda: SAMPLE_TIMESTAMP + 1)  # judge the window by the sample's own time
    assert invoke(h, "OrdersFunction", "orders_create.json")["statusCode"] == 201
    assert invoke(h, "NotifyFunction", "notify_wechatpay.json")["statusCode"] == 204
    assert invoke(h, "WorkerFunction", "worker_sqs.json") == {"batchItemFailures": []}
    view = bootstrap.order_service().show(m["mchid"], SAMPLE_ORDER)
    assert view["status"] == "PAID" and view["transaction_id"] == SAMPLE_TRANSACTION


def test_sample_notify_event_is_stale_on_a_real_clock_R4(h):
    h.add_merchant()
    bootstrap.set_clock(lambda: SAMPLE_TIMESTAMP + 301)
    assert invoke(h, "NotifyFunction", "notify_wechatpay.json")["statusCode"] == 401
