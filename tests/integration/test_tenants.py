"""Adversarial tenants (issue #15, R39): a tenant configures its own verification keys, so on its own URL it can
sign anything. A report it signs may change only its own money (or its sub-merchants' when it is their
authorised provider); anything else is parked as a suspected forgery — a queue item with an alarm — and the
other tenant's rows do not change, nor is a key the genuine report needs taken by the parked one."""

from __future__ import annotations

import json
import re

import pytest
from tally import bootstrap
from tally.observability import M, metrics

from tests.integration.channel_kit import Alipay, WeChatV2, ack_kind
from tests.integration.refund_helpers import (
    AlipayKit,
    WeChatV2Kit,
    WeChatV3Kit,
    new_no,
    order_row,
    paid_order,
    refund,
)


def svc():
    return bootstrap.refund_service()


def forgeries(h):
    return [r for r in h.scan("NOTIFY_EVENT_TABLE") if r.get("manual_kind") == "suspected_forgery"]


def tenant_state(h, mchid, otn, refund_no):
    """What the victim tenant owns: its order's money fields, its refund, its ledger entries."""
    order = order_row(h, mchid, otn)
    view = svc().show(refund_no, mchid=mchid)
    return (
        {k: order.get(k) for k in ("status", "refundable_cent", "refunded_cent", "paid_cent")},
        {k: view.get(k) for k in ("status", "poll_due", "amount_cent", "fail_reason", "manual_reason")},
        sorted(json.dumps(e, sort_keys=True) for e in h.scan("LEDGER_TABLE") if e.get("mchid") == mchid),
    )


@pytest.fixture
def v3(h, sim):
    k = WeChatV3Kit(h)
    k.hold()
    yield k
    k.reset()
    metrics.flush_metrics()
    h._collect_metrics()


def test_r39_provider_refund_closed_for_a_direct_merchants_refund_is_parked(h, sim, v3):
    """Issue #15.1: provider X posts, on its own URL, REFUND.CLOSED naming direct merchant M as sub_mchid. On
    main this turned M's ACCEPTED refund FAIL and released its reservation (M refunds again; the channel pays
    both: the ledger 10.00 short). Now: parked, M's refund untouched, the genuine SUCCESS still books."""
    otn, tid = v3.paid_order(1000)
    status, body = refund(h, v3.mid, otn, 1000, refund_no=new_no())
    assert status == 201 and body["status"] == "ACCEPTED"
    no = body["refund_no"]
    before = tenant_state(h, v3.mid, otn, no)
    provider = h.add_merchant(mchid="1900077001")["mchid"]
    resource = sim.refund_resource(provider, otn, tid, no, 1000, 1000, refund_status="CLOSED")
    resource["sp_mchid"] = resource.pop("mchid")
    resource["sub_mchid"] = v3.mid
    headers, raw = sim.build_notification(
        provider, resource, event_type="REFUND.CLOSED", associated_data="refund"
    )
    assert h.notify(provider, headers, raw)["statusCode"] == 204
    assert h.drain() == []
    assert tenant_state(h, v3.mid, otn, no) == before
    (parked,) = forgeries(h)
    assert (parked["channel"], parked["claimed_mchid"], parked["refund_no"]) == ("wechatpay", v3.mid, no)
    assert parked["mchid"] == provider  # filed under the merchant whose keys signed it (issue #38 finding 6)
    assert parked["cause"] == "provider_not_authorised" and parked["amount_cent"] == 1000
    assert h.metric(M.REPORT_FORGED) == 1
    # the genuine report, arriving later, finds its key free and books
    v3.settle(no, "success")
    v3.deliver(no)
    assert svc().show(no, mchid=v3.mid)["status"] == "SUCCESS"
    assert order_row(h, v3.mid, otn)["refunded_cent"] == 1000


def test_r39_alipay_isv_app_not_authorised_by_the_merchant_cannot_book_its_refund(h, sim):
    """Issue #15.1: ISV app X posts `app_id=X, auth_app_id=Y` for Y's refund, though Y never authorised X."""
    kit = AlipayKit(h)
    kit.hold()
    try:
        otn, _ = kit.paid_order(500)
        no = refund(h, kit.mid, otn, 500)[1]["refund_no"]
        before = tenant_state(h, kit.mid, otn, no)
        isv = Alipay(h).setup()
        kit.settle(no, "success")  # the channel did refund: only the forged report is wrong
        params = sim.alipay.refund_notification_params(no)
        params["app_id"] = isv
        params["auth_app_id"] = kit.mid
        body = sim.alipay.build_notification(params)
        assert Alipay(h).notify(isv, body, {})["body"] == "success"
        assert h.drain() == []
        assert tenant_state(h, kit.mid, otn, no) == before
        (parked,) = forgeries(h)
        assert (parked["claimed_mchid"], parked["cause"]) == (kit.mid, "provider_not_authorised")
        assert parked["mchid"] == isv
        kit.deliver(no)  # the genuine one, on Y's own URL, books
        assert svc().show(no, mchid=kit.mid)["status"] == "SUCCESS"
    finally:
        kit.reset()


def test_r39_alipay_isv_payment_for_an_unauthorising_merchant_leaves_the_key_free(h, sim):
    """The payment path refused the forged ISV payment, but its raw row took `alipay#<trade_no>`: Y's genuine
    notification then counted as a duplicate and was never booked. Parked at ingest: nothing is stored under
    the payment's key."""
    ali = Alipay(h)
    y = ali.setup()
    isv = ali.setup()
    ali.order(y, 100, "ISV-FORGE-01")
    params = ali.params(y, "ISV-FORGE-01", 100)
    forged = dict(params, app_id=isv, auth_app_id=y)
    assert ali.notify(isv, sim.alipay.build_notification(forged), {})["body"] == "success"
    h.drain()
    assert h.scan("NOTIFY_RAW_TABLE") == []
    (parked,) = forgeries(h)
    assert parked["mchid"] == isv
    assert (parked["claimed_mchid"], parked["out_trade_no"], parked["cause"]) == (
        y,
        "ISV-FORGE-01",
        "provider_not_authorised",
    )
    assert ali.notify(y, sim.alipay.build_notification(params), {})["body"] == "success"
    h.drain()
    assert h.order(y, "ISV-FORGE-01")["status"] == "PAID"


def test_r39_v2_merchant_cannot_push_another_tenants_refund_to_manual(h, sim, v3):
    """Issue #15.1: a v2 callback is authenticated by the merchant's own key only; merchant A names B's refund
    number. On main B's refund went MANUAL and left the poll index. Now it stays ACCEPTED and polled."""
    otn, tid = v3.paid_order(300)
    no = refund(h, v3.mid, otn, 300, refund_no=new_no())[1]["refund_no"]
    before = tenant_state(h, v3.mid, otn, no)
    a = WeChatV2(h).setup()
    fields = {
        "transaction_id": tid,
        "out_trade_no": otn,
        "refund_id": "50000000000000000000000000001",
        "out_refund_no": no,
        "total_fee": "300",
        "refund_fee": "300",
        "settlement_refund_fee": "300",
        "refund_status": "CHANGE",
    }
    body = sim.wechatpay_v2.refund_notification(a, fields)
    assert ack_kind("wechatpay_v2", WeChatV2(h).notify(a, body, {})) == "success"
    h.drain()
    for _ in range(6):  # not-found retries must not end on B's refund either
        h.drain()
    assert tenant_state(h, v3.mid, otn, no) == before
    assert svc().show(no, mchid=v3.mid)["status"] == "ACCEPTED"
    assert no in {r["refund_no"] for r in svc().due(1000)} or before[1]["poll_due"]


def test_r39_refund_no_reused_by_another_tenant_reveals_nothing(h, sim, v3):
    """Issue #15.1: a 409 on a reused refund_no named the other tenant's order and amount."""
    otn, _ = v3.paid_order(700)
    no = new_no()
    assert refund(h, v3.mid, otn, 700, refund_no=no)[0] == 201
    other = h.add_merchant(mchid="1900066001")["mchid"]
    other_otn, _ = paid_order(h, other, 100)
    status, body = refund(h, other, other_otn, 100, refund_no=no)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "<time>", json.dumps(body))  # a time's .700 is not the amount
    assert otn not in text and "700" not in text and v3.mid not in text
    if status == 409:
        assert "refund_no" in body["error"]
    # the number of one tenant never answers to another tenant's lookup
    with pytest.raises(LookupError):
        svc().show(no, mchid=other) if status == 409 else svc().show(no, mchid="1900000999")


@pytest.mark.parametrize("kit_cls", [WeChatV3Kit, WeChatV2Kit])
def test_r39_report_for_another_order_of_the_same_tenant_is_parked(h, sim, kit_cls):
    """A report whose out_trade_no is not the refund's order is a forgery too (or a channel bug): parked."""
    kit = kit_cls(h)
    kit.hold()
    try:
        otn, tid = kit.paid_order(200)
        no = refund(h, kit.mid, otn, 200, refund_no=new_no())[1]["refund_no"]
        before = tenant_state(h, kit.mid, otn, no)
        if kit_cls is WeChatV3Kit:
            resource = sim.refund_resource(kit.mid, "OTHERORDER01", tid, no, 200, 200, refund_status="CLOSED")
            headers, raw = sim.build_notification(
                kit.mid, resource, event_type="REFUND.CLOSED", associated_data="refund"
            )
            assert h.notify(kit.mid, headers, raw)["statusCode"] == 204
        else:
            fields = {
                "transaction_id": tid,
                "out_trade_no": "OTHERORDER01",
                "refund_id": "50000000000000000000000000002",
                "out_refund_no": no,
                "total_fee": "200",
                "refund_fee": "200",
                "refund_status": "REFUNDCLOSE",
            }
            body = sim.wechatpay_v2.refund_notification(kit.mid, fields)
            assert ack_kind("wechatpay_v2", WeChatV2(h).notify(kit.mid, body, {})) == "success"
        assert h.drain() == []
        assert tenant_state(h, kit.mid, otn, no) == before
        (parked,) = forgeries(h)
        assert parked["cause"] == "order_mismatch"
    finally:
        kit.reset()


def test_r39_a_transaction_id_preempted_by_another_tenant_still_books_the_genuine_payment(h, sim):
    """Issue #15 (preempted transaction ids): tenant X, signing with its own keys, reports Y's real transaction
    id for X's own order first. Raw keys were `channel#transaction_id`, so Y's genuine report found the key
    taken: answered as a duplicate on main, parked for a person since session 4. Raw keys are now scoped per
    merchant (`channel#mchid#transaction_id`): X's claim takes X's key, Y's payment books by itself."""
    x = h.add_merchant(mchid="1900055001")["mchid"]
    y = h.add_merchant(mchid="1900055002")["mchid"]
    h.create_order(x, "XORDER0001", amount_cent=100, prepay=False)
    h.create_order(y, "YORDER0001", amount_cent=100, prepay=False)
    real = "4200000000202612010000000001"
    headers, body, _ = h.notification(x, "XORDER0001", 100, transaction_id=real)
    assert h.notify(x, headers, body)["statusCode"] == 204
    h.drain()
    headers, body, _ = h.notification(y, "YORDER0001", 100, transaction_id=real)
    assert h.notify(y, headers, body)["statusCode"] == 204
    h.drain()
    assert forgeries(h) == []
    order = h.order(y, "YORDER0001")
    assert (order["status"], order["paid_cent"], order["transaction_id"]) == ("PAID", 100, real)
    (entry,) = [e for e in h.scan("LEDGER_TABLE") if e.get("mchid") == y]
    assert (entry["pk"], entry["amount_cent"]) == (f"wechatpay#{y}#{real}", 100)
    # Y's channel retrying the same report is a duplicate of Y's own row (R9), still one entry
    headers, body, _ = h.notification(y, "YORDER0001", 100, transaction_id=real)
    assert h.notify(y, headers, body)["statusCode"] == 204
    h.drain()
    assert [e["pk"] for e in h.scan("LEDGER_TABLE") if e.get("mchid") == y] == [entry["pk"]]


def test_r39_a_transaction_id_reported_for_two_orders_of_one_tenant_is_parked(h, sim):
    """Within one merchant the key still holds one transaction: a report naming it for another order of the same
    merchant is not a duplicate of the first: parked as a suspected forgery (a queue item, alarm ReportForged)."""
    y = h.add_merchant(mchid="1900055003")["mchid"]
    h.create_order(y, "YORDER0002", amount_cent=100, prepay=False)
    h.create_order(y, "YORDER0003", amount_cent=100, prepay=False)
    real = "4200000000202612010000000002"
    headers, body, _ = h.notification(y, "YORDER0002", 100, transaction_id=real)
    assert h.notify(y, headers, body)["statusCode"] == 204
    h.drain()
    headers, body, _ = h.notification(y, "YORDER0003", 100, transaction_id=real)
    assert h.notify(y, headers, body)["statusCode"] == 204
    h.drain()
    (parked,) = forgeries(h)
    assert (parked["mchid"], parked["out_trade_no"], parked["cause"]) == (
        y,
        "YORDER0003",
        "transaction_of_another_order",
    )
    assert h.metric(M.REPORT_FORGED) == 1
    assert h.order(y, "YORDER0003")["status"] != "PAID"
