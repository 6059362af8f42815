"""Refund numbers are scoped per merchant (issue #15 item 1, R39): the refunds table is keyed
`mchid#refund_no`, the refund's ledger entry `channel#mchid#refund_no`, so two merchants may use the same own
refund number; no answer to one names anything of the other. Rows stored before the change (`pk = refund_no`,
ledger `channel#refund_no`) keep working: `RefundStore.find` reads them, the named create checks them
(docs/contracts.md "Refund keys")."""

from __future__ import annotations

import json

import pytest
from tally import bootstrap
from tally.store.codec import to_item

from tests.integration.refund_helpers import AlipayKit, WeChatV3Kit, new_no, order_row, refund


def svc():
    return bootstrap.refund_service()


@pytest.fixture
def kits(h, sim):
    v3, ali = WeChatV3Kit(h), AlipayKit(h)
    v3.hold()
    ali.hold()
    yield v3, ali
    v3.reset()
    ali.reset()


def test_r39_two_merchants_book_refunds_with_the_same_refund_no(h, kits):
    """Both book, each sees only its own, the ledger holds one entry per merchant. On main the second merchant
    got a 409 (the table was keyed by refund_no alone)."""
    v3, ali = kits
    no = new_no()
    otn_a, _ = v3.paid_order(1000)
    otn_b, _ = ali.paid_order(300)
    status_a, body_a = refund(h, v3.mid, otn_a, 400, refund_no=no)
    status_b, body_b = refund(h, ali.mid, otn_b, 300, refund_no=no)
    assert (status_a, status_b) == (201, 201), (body_a, body_b)
    for kit in (v3, ali):
        kit.settle(no, "success")
        kit.deliver(no)
    a, b = svc().show(no, mchid=v3.mid), svc().show(no, mchid=ali.mid)
    assert (a["status"], a["amount_cent"], a["out_trade_no"]) == ("SUCCESS", 400, otn_a)
    assert (b["status"], b["amount_cent"], b["out_trade_no"]) == ("SUCCESS", 300, otn_b)
    assert order_row(h, v3.mid, otn_a)["refunded_cent"] == 400
    assert order_row(h, ali.mid, otn_b)["refunded_cent"] == 300
    entries = {e["pk"]: e["amount_cent"] for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND"}
    assert entries == {f"wechatpay#{v3.mid}#{no}": 400, f"alipay#{ali.mid}#{no}": 300}
    # each merchant's list of refunds of its order holds its own only
    assert [r["amount_cent"] for r in svc().for_order(v3.mid, otn_a)] == [400]
    # a merchant that never used the number does not find it; the operator is asked to name the merchant
    with pytest.raises(LookupError):
        svc().show(no, mchid="1900000999")
    with pytest.raises(LookupError, match="several merchants"):
        svc().show(no)
    # the downstream events are two, not one deduplicated away (`RefundSucceeded:<mchid>#<refund_no>`)
    from tally.domain.events import events_for_change

    ids = {
        events_for_change({"status": "ACCEPTED"}, r)[0].event_id
        for r in h.scan("REFUNDS_TABLE")
        if r["refund_no"] == no
    }
    assert ids == {f"RefundSucceeded:{v3.mid}#{no}", f"RefundSucceeded:{ali.mid}#{no}"}


def test_r39_a_conflict_on_a_reused_refund_no_names_only_the_callers_own_refund(h, kits):
    """Merchant B reuses its own number for other terms: the 409 names B's own order and amount, never A's."""
    v3, ali = kits
    no = new_no()
    otn_a, _ = v3.paid_order(1000)
    otn_b, _ = ali.paid_order(500)
    assert refund(h, v3.mid, otn_a, 700, refund_no=no)[0] == 201
    assert refund(h, ali.mid, otn_b, 200, refund_no=no)[0] == 201
    status, body = refund(h, ali.mid, otn_b, 250, refund_no=no)
    text = json.dumps(body)
    assert status == 409, body
    assert otn_b in text and "2.00" in text
    assert otn_a not in text and v3.mid not in text and "7.00" not in text
    # the same request again is the same refund (idempotent, R26), for each merchant
    assert refund(h, ali.mid, otn_b, 200, refund_no=no)[0] == 200
    assert refund(h, v3.mid, otn_a, 700, refund_no=no)[0] == 200
    assert order_row(h, v3.mid, otn_a)["refundable_cent"] == 300
    assert order_row(h, ali.mid, otn_b)["refundable_cent"] == 300


def _as_legacy(h, mchid: str, refund_no: str) -> dict:
    """The refund row re-stored the way it was before keys were scoped: `pk = refund_no`."""
    table = h.env["REFUNDS_TABLE"]
    (row,) = [r for r in h.scan("REFUNDS_TABLE") if r["pk"] == f"{mchid}#{refund_no}"]
    h.ddb.delete_item(TableName=table, Key=to_item({"pk": row["pk"]}))
    legacy = {**row, "pk": refund_no}
    h.ddb.put_item(TableName=table, Item=to_item(legacy))
    return legacy


def test_upgrade_rows_keyed_by_refund_no_alone_are_still_read_booked_and_guarded(h, kits):
    """The upgrade choice (docs/contracts.md "Refund keys"): no new table, a key-compatible read. A refund stored
    before the change is found by its merchant only, answers a retry of its own request, cannot be created twice
    under the new key, and its outcome books once under its old ledger key; another merchant may use the number."""
    v3, ali = kits
    no = new_no()
    otn, _ = v3.paid_order(800)
    assert refund(h, v3.mid, otn, 300, refund_no=no)[0] == 201
    _as_legacy(h, v3.mid, no)
    assert svc().show(no, mchid=v3.mid)["status"] == "ACCEPTED"
    assert svc().show(no)["status"] == "ACCEPTED"  # the operator's lookup (index by_refund_no)
    with pytest.raises(LookupError):
        svc().show(no, mchid=ali.mid)
    # the merchant's retry is the same refund (the transaction's `legacy_free` check fails: no second
    # reservation, no second row under the new key), though enough is left to reserve it again
    status, body = refund(h, v3.mid, otn, 300, refund_no=no)
    assert (status, body["status"]) == (200, "ACCEPTED")
    assert order_row(h, v3.mid, otn)["refundable_cent"] == 500
    status, body = refund(h, v3.mid, otn, 100, refund_no=no)  # other terms: 409, nothing reserved
    assert status == 409 and order_row(h, v3.mid, otn)["refundable_cent"] == 500
    assert [r["pk"] for r in h.scan("REFUNDS_TABLE") if r["refund_no"] == no] == [no]
    # another merchant's same number is its own refund
    otn_b, _ = ali.paid_order(200)
    assert refund(h, ali.mid, otn_b, 200, refund_no=no)[0] == 201
    # the channel's outcome books the legacy row, once, under its old ledger key
    v3.settle(no, "success")
    v3.deliver(no, times=2)
    assert svc().show(no, mchid=v3.mid)["status"] == "SUCCESS"
    assert order_row(h, v3.mid, otn)["refunded_cent"] == 300
    entries = [e for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND" and e["mchid"] == v3.mid]
    assert [(e["pk"], e["amount_cent"]) for e in entries] == [(f"wechatpay#{no}", 300)]
