"""The store classes that took over service/'s AWS calls (issue #19 item 3), on moto: the booking transaction
is all-or-nothing and names the condition that failed; one exception type for every cancelled transaction;
the manual queue's conditional writes; Secrets Manager; EventBridge."""

from __future__ import annotations

import time

import pytest
from tally import bootstrap
from tally.domain.notifications import PaymentNotice
from tally.domain.orders import Event, Status
from tally.service.ingest import raw_row
from tally.store import payments
from tally.store.events import EventBus, stream_images
from tally.store.manual import ManualStore, NotWaiting
from tally.store.payments import PaymentStore
from tally.store.secrets import SecretStore
from tally.store.tables import OrderStore, RawStore, TransactionFailed, iso_now, order_key

MCHID = "1900000109"


def _notice(no: str, tx: str, paid: int = 100) -> PaymentNotice:
    return PaymentNotice(
        channel="wechatpay",
        transaction_id=tx,
        out_trade_no=no,
        mchid=MCHID,
        sp_mchid=None,
        trade_state="SUCCESS",
        order_total_cent=100,
        paid_cent=paid,
        currency="CNY",
        success_time="2026-12-01T10:00:00+08:00",
    )


def _order(no: str) -> dict:
    return {
        "pk": order_key(MCHID, no),
        "mchid": MCHID,
        "out_trade_no": no,
        "channel": "wechatpay",
        "status": Status.WAIT_PAY.value,
        "amount_cent": 100,
        "currency": "CNY",
        "version": 0,
        "paid_cent": 0,
        "refundable_cent": 0,
    }


@pytest.fixture
def stores(aws):
    t = bootstrap.tables()
    return t, RawStore(t), OrderStore(t), PaymentStore(t)


def _arrive(raw: RawStore, orders: OrderStore, no: str, tx: str) -> tuple[PaymentNotice, dict]:
    notice = _notice(no, tx)
    assert raw.put_new(raw_row(notice, time.time(), body=None, headers=None)) is None
    assert orders.create(_order(no)) is None
    order = orders.get(MCHID, no)
    assert order is not None
    return notice, dict(order)


def test_r18_book_writes_order_transition_raw_and_ledger_together(stores):
    t, raw, orders, book = stores
    notice, order = _arrive(raw, orders, "SB-1", "4200000000000000000000000001")
    book.book(notice, order, Event.PAY, Status.PAID, iso_now(), bill_date="2026-12-01")
    paid = orders.get(MCHID, "SB-1")
    assert paid is not None and paid["status"] == "PAID" and paid["paid_cent"] == 100 and paid["version"] == 1
    assert "poll_pk" not in paid
    row = raw.get(notice.raw_key)
    assert row is not None and row["handled"] == 1 and row["outcome"] == "BOOKED"
    entry = t.get(t.ledger, notice.raw_key)
    assert entry is not None and entry["amount_cent"] == 100 and entry["bill_date"] == "2026-12-01"
    assert [r["to_status"] for r in orders.transitions(order["pk"])] == ["PAID"]


def test_r18_a_cancelled_booking_writes_nothing_and_names_the_failed_items(stores):
    t, raw, orders, book = stores
    notice, order = _arrive(raw, orders, "SB-2", "4200000000000000000000000002")
    raw.mark_handled(notice.raw_key, "DUPLICATE", iso_now())  # another worker finished the raw row
    with pytest.raises(TransactionFailed) as failed:
        book.book(notice, order, Event.PAY, Status.PAID, iso_now(), bill_date="2026-12-01")
    assert failed.value.failed == [payments.RAW]
    assert t.get(t.ledger, notice.raw_key) is None and orders.transitions(order["pk"]) == []
    still = orders.get(MCHID, "SB-2")
    assert still is not None and still["status"] == "WAIT_PAY" and still["version"] == 0


def test_r19_a_stale_order_image_fails_the_compare_and_set_position(stores):
    _, raw, orders, book = stores
    notice, order = _arrive(raw, orders, "SB-3", "4200000000000000000000000003")
    orders.set_fields(order["pk"], version=1)  # someone changed the order after we read it
    with pytest.raises(TransactionFailed) as failed:
        book.book(notice, order, Event.PAY, Status.PAID, iso_now(), bill_date="2026-12-01")
    assert failed.value.failed == [payments.ORDER]


def test_r17_park_illegal_inserts_the_refund_task_once(stores):
    t, raw, orders, book = stores
    notice, order = _arrive(raw, orders, "SB-4", "4200000000000000000000000004")
    task = book.park_illegal(notice, order, "PAY on CLOSED", iso_now())
    row = raw.get(notice.raw_key)
    assert row is not None and row["handled"] == 2 and row["refund_task"] == task
    assert t.get(t.refund_tasks, task) is not None
    with pytest.raises(TransactionFailed) as again:
        book.park_illegal(notice, order, "PAY on CLOSED", iso_now())
    assert payments.PARKED_RAW in again.value.failed and payments.REFUND_TASK in again.value.failed


def test_one_exception_type_for_every_cancelled_transaction():
    from tally.store import refunds, tables

    assert refunds.TransactionFailed is tables.TransactionFailed is TransactionFailed


def test_manual_store_refuses_a_row_not_waiting_for_a_person(stores):
    t, raw, orders, _ = stores
    notice, _ = _arrive(raw, orders, "SB-5", "4200000000000000000000000005")
    manual = ManualStore(t)
    entry = {"at": iso_now(), "by": "ops", "action": "resolve: junk", "why": "test"}
    with pytest.raises(NotWaiting):  # handled=0: not with a person
        manual.resolve_raw(notice.raw_key, entry)
    assert raw.send_to_person(notice.raw_key, "amount mismatch", iso_now())
    assert [r["pk"] for r in manual.raw_waiting()] == [notice.raw_key]
    resolved = manual.resolve_raw(notice.raw_key, entry)
    assert resolved["resolution"]["by"] == "ops" and "pending_pk" not in resolved
    assert manual.raw_waiting() == []
    with pytest.raises(NotWaiting):  # once only
        manual.resolve_raw(notice.raw_key, entry)


def test_secret_store_creates_then_versions_and_finds_nothing_missing(aws):
    secrets = SecretStore(bootstrap._client("secretsmanager"))
    assert secrets.find("tally/test/none") is None
    secrets.put("tally/test/one", {"k": "1"})
    secrets.put("tally/test/one", {"k": "2"})
    assert secrets.get("tally/test/one") == {"k": "2"}


def test_event_bus_puts_and_stream_images_decode(aws):
    from tally.domain.events import DownstreamEvent

    bus = EventBus(bootstrap._client("events"), bootstrap.settings().event_bus_name)
    event = DownstreamEvent("e1", "OrderPaid", {"event_id": "e1", "amount_cent": 100})
    assert bus.put([event]) == 0
    record = {"dynamodb": {"NewImage": {"pk": {"S": "a"}, "n": {"N": "3"}}}}
    assert stream_images(record) == (None, {"pk": "a", "n": 3})
