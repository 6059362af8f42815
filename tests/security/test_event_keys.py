"""R39/R41 audit finding L1 (docs/silence.md): notify_event rows were keyed without the merchant.

A WeChat Pay v2 SUCCESS without a transaction id has no envelope id, so its work-queue item was keyed
`{out_trade_no}#SUCCESS#no-txn` (service/ingest.py, _store_payment) and EventStore.put dropped any later row
with that key. A v2 tenant signs with its own API key, so it could take that key for another tenant's order
number first: the victim's report then left no item. Now event keys are `{kind}#{channel}#{mchid}#…`
(store/tables.py `event_key`), a person's item meeting another row on its key is kept under a key of its own,
and a replayed quarantined body that reads as paid without a transaction id does not resolve its item."""

from __future__ import annotations

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tests.integration.channel_kit import WeChatV2, ack_kind


def test_r39_r41_a_tenant_cannot_take_the_queue_key_of_another_tenants_unbooked_payment(h, sim):
    v2 = WeChatV2(h)
    attacker, victim = v2.setup(), v2.setup()
    out_trade_no = v2.order(victim, amount=100)
    for mid in (
        attacker,
        victim,
    ):  # the attacker first, with the victim's order number, signed by its own key
        body, headers, _ = v2.callback(mid, out_trade_no, 100, transaction_id="")
        assert ack_kind("wechatpay_v2", v2.notify(mid, body, headers)) == "success"
    items = [
        i
        for i in bootstrap.work_queue().list({})
        if i["kind"] == "no-transaction-id" and i["merchant"] == victim
    ]
    assert len(items) == 1, "the victim's paid report without a transaction id has no work-queue item"


def test_r41_a_quarantined_body_replayed_as_paid_without_a_transaction_id_keeps_its_item(h, sim):
    """L1 (b): the replay's outcome was `in_between`, which resolved the quarantine item, and the
    no-transaction-id item was put under the quarantined row's own key (dropped): nothing booked, no item."""
    from tally.service.manual import ManualError

    m = h.add_merchant()
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(  # someone configured the wrong APIv3 key
        mchid=m["mchid"],
        apiv3_key="W" * 32,
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url="http://127.0.0.1:9/n",
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    h.create_order(m["mchid"], "QUARANTINE-NOTXN")
    resource = sim.transaction_resource(m["mchid"], "QUARANTINE-NOTXN", 100)
    resource["transaction_id"] = ""  # SUCCESS without the id that keys a raw row
    headers, body = sim.build_notification(m["mchid"], resource)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    (item,) = bootstrap.manual_queue().list()
    assert item["kind"] == "quarantined"
    h.add_merchant()  # the right key: the body now reads as SUCCESS with "transaction_id": ""
    with pytest.raises(ManualError, match="without a transaction id"):
        bootstrap.manual_queue().replay(item["id"], by="alice", why="APIv3 key fixed")
    kinds = sorted(i["kind"] for i in bootstrap.work_queue().list({}) if i["merchant"] == m["mchid"])
    assert kinds == ["no-transaction-id", "quarantined"], kinds  # both still open: nothing was booked
    assert h.order(m["mchid"], "QUARANTINE-NOTXN")["status"] == "WAIT_PAY"


def test_r41_two_different_items_meeting_on_one_key_are_both_kept(h):
    """EventStore.put kept the first row of a key and dropped the second silently; a redelivery of the same
    event (new signature headers, same body) is still one row."""
    from tally.store.tables import EventStore

    events = EventStore(bootstrap.tables())
    first = {"manual_kind": "quarantined", "channel": "wechatpay", "mchid": "M1", "reason": "r", "body": "a"}
    assert events.put("quarantined#wechatpay#M1#E1", "quarantined", 1e9, **first, headers={"n": "1"})
    assert events.put("quarantined#wechatpay#M1#E1", "quarantined", 1e9, **first, headers={"n": "2"}) is None
    other = events.put("quarantined#wechatpay#M1#E1", "quarantined", 1e9, **{**first, "body": "b"})
    assert other and other.startswith("quarantined#wechatpay#M1#E1#")
    rows = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r["pk"].startswith("quarantined#wechatpay#M1#E1")]
    assert sorted(r["body"] for r in rows) == ["a", "b"]
    assert next(r for r in rows if r["body"] == "b")["collided_with"] == "quarantined#wechatpay#M1#E1"
