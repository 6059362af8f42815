"""R39/R41 audit finding L1 (docs/silence.md): notify_event rows are keyed without the merchant.

A WeChat Pay v2 SUCCESS without a transaction id has no envelope id, so its work-queue item is keyed
`{out_trade_no}#SUCCESS#no-txn` (service/ingest.py, _store_payment) and EventStore.put drops any later row
with that key. A v2 tenant signs with its own API key, so it can take that key for another tenant's order
number first: the victim's report then leaves no item (NotifyNoTransactionId is counted, the queue shows
only the attacker's). Strict xfail until the notify path scopes the key by channel and merchant: the fix
turns this test into an XPASS, which fails, so whoever fixes it removes the marker."""

from __future__ import annotations

import pytest
from tally import bootstrap

from tests.integration.channel_kit import WeChatV2, ack_kind


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="L1: notify_event keys of no-transaction-id items omit the merchant",
)
def test_r39_a_tenant_cannot_take_the_queue_key_of_another_tenants_unbooked_payment(h, sim):
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
