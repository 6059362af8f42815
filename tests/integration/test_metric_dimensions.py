"""Per-channel / per-merchant metrics through the real handlers (docs/metrics.md).

R38: the alarms watch the service-only series; the per-channel and per-merchant series come on top, bounded.
"""

import pytest
from tally import observability as obs

from tests.integration.channel_kit import DRIVERS

CHANNEL_OF = {"wechatpay_v3": "wechatpay", "alipay": "alipay", "wechatpay_v2": "wechatpay-v2"}


@pytest.fixture
def allow_list():
    before = obs._listed
    yield obs.configure_merchants
    obs.configure_merchants(sorted(before))


@pytest.mark.parametrize("driver", [d for d in DRIVERS if d.name in CHANNEL_OF], ids=lambda d: d.name)
def test_R38_ack_outcomes_per_channel_and_merchant_and_the_alarmed_series_whole(h, driver, allow_list):
    d = driver(h)
    mid = d.setup()
    allow_list([mid])
    channel = CHANNEL_OF[d.name]
    out_trade_no = d.order(mid)
    body, headers, _ = d.callback(mid, out_trade_no, 100)
    d.notify(mid, body, headers)
    d.notify(mid, body, headers)  # the channel's retry before the worker ran: a duplicate ACK
    d.notify(mid, *d.tamper(body, headers))
    assert h.drain() == []

    for name in ("NotifyAccepted", "NotifyDuplicate", "NotifyRejected"):
        assert h.series(name) == 1, name  # the series the alarms and the old dashboard read
        assert h.series(name, channel=channel) == 1, name
        assert h.series(name, channel=channel, merchant=mid) == 1, name
    # after ingest the data model's channel: v2 notices share v3's ("wechatpay"), docs/metrics.md
    booked_channel = "alipay" if channel == "alipay" else "wechatpay"
    assert h.series("ApplyBooked") == 1
    assert h.series("ApplyBooked", channel=booked_channel, merchant=mid) == 1


def test_R38_unknown_merchant_flood_on_the_notify_url_adds_no_series(h, allow_list):
    """Anyone can call /notify/wechatpay/{anything}: the merchant id in the URL is untrusted input."""
    listed = h.add_merchant()["mchid"]
    allow_list([listed])
    for i in range(200):
        h.notify(f"99{i:08d}", {}, b"{}")
    assert h.series("NotifyRejected") == 200
    merchants = {dims["merchant"] for name, _, dims in h.series_log if "merchant" in dims}
    assert merchants == {"other"}
    assert h.series("NotifyRejected", channel="wechatpay", merchant="other") == 200
