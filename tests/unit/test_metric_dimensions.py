"""Channel and merchant metric dimensions, bounded by configuration (docs/metrics.md).

R38: an alarm watches the service-only series; a count with dimensions must still land in it, and no traffic
(a flood of made-up merchant ids on the notify URL) may grow the number of series.
"""

import json

import pytest
from tally import observability as obs
from tally.observability import MAX_LISTED_MERCHANTS, OTHER, M, channel_words, count, metrics
from tally.settings import metric_merchants

from tally_local.lambda_io import emf_metrics, emf_series

SERVICE = {"service": "tally"}


@pytest.fixture()
def emitted(capsys):
    """Flush what the code counted and return the EMF text; the allow-list is restored afterwards."""
    before = obs._listed
    metrics.clear_metrics()
    capsys.readouterr()

    def flush() -> str:
        metrics.flush_metrics()
        return capsys.readouterr().out

    yield flush
    obs.configure_merchants(sorted(before))
    metrics.clear_metrics()


def blobs(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{") and '"_aws"' in line]


def test_R38_listed_merchant_blob_carries_the_three_bounded_dimension_sets(emitted):
    obs.configure_merchants(["1900000001"])
    count(M.NOTIFY_ACCEPTED, channel="wechatpay", merchant="1900000001")
    (blob,) = blobs(emitted())
    directive = blob["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Tally"
    assert directive["Dimensions"] == [
        ["service"],
        ["service", "channel"],
        ["service", "channel", "merchant"],
    ]
    assert (blob["service"], blob["channel"], blob["merchant"]) == ("tally", "wechatpay", "1900000001")
    assert blob["NotifyAccepted"] == [1.0]


def test_R38_unlisted_merchant_and_unknown_channel_become_other(emitted):
    obs.configure_merchants(["1900000001"])
    count(M.NOTIFY_REJECTED, channel="paypal", merchant="9999999999")
    count(M.APPLY_BOOKED, channel="wechatpay_v2", merchant="1900000001")  # the v2 API's name in orders
    series = {(n, tuple(sorted(d.items()))) for n, _, d in emf_series(emitted())}
    assert ("NotifyRejected", (("channel", OTHER), ("merchant", OTHER), ("service", "tally"))) in series
    assert (
        "ApplyBooked",
        (("channel", "wechatpay-v2"), ("merchant", "1900000001"), ("service", "tally")),
    ) in series
    assert not any(
        dict(d).get("merchant") == "9999999999" or dict(d).get("channel") == "paypal" for _, d in series
    )


def test_no_allow_list_means_no_merchant_dimension_at_all(emitted):
    obs.configure_merchants([])
    count(M.APPLY_BOOKED, channel="alipay", merchant="2021000000000001")
    (blob,) = blobs(emitted())
    assert blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"], ["service", "channel"]]
    assert "merchant" not in blob


def test_count_without_dimensions_is_the_service_only_blob_as_before(emitted):
    count(M.PENDING_STALE, 3)
    (blob,) = blobs(emitted())
    assert blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    assert blob["PendingOver10m"] == [3.0] and "channel" not in blob


def test_R38_a_flood_of_1000_merchant_ids_stays_within_allow_list_plus_one(emitted):
    listed = ["1900000001", "1900000002", "2021000000000001"]
    obs.configure_merchants(listed)
    channels = ["wechatpay", "alipay", "wechatpay-v2", "x-evil", None]
    for i in range(1000):
        count(M.NOTIFY_REJECTED, channel=channels[i % len(channels)], merchant=f"attacker{i:04d}")
    for mchid in listed:
        count(M.NOTIFY_ACCEPTED, channel="wechatpay", merchant=mchid)
    text = emitted()
    merchants = {d["merchant"] for _, _, d in emf_series(text) if "merchant" in d}
    assert merchants <= set(listed) | {OTHER} and len(merchants) <= len(listed) + 1
    assert {d["channel"] for _, _, d in emf_series(text) if "channel" in d} <= set(channel_words()) | {OTHER}
    # bounded by configuration: one blob per (channel, merchant) cell that saw traffic, never per request
    assert len(blobs(text)) <= (len(channel_words()) + 1) * (len(listed) + 1)
    # and nothing lost: the service-only series the alarm watches holds every one of the 1,000
    assert sum(v for n, v, d in emf_series(text) if n == "NotifyRejected" and d == SERVICE) == 1000
    assert sum(v for n, v in emf_metrics(text) if n == "NotifyRejected") == 1000


def test_allow_list_is_capped_and_read_from_the_environment():
    assert metric_merchants({"TALLY_METRIC_MERCHANTS": " 1900000001, ,2021000000000001 "}) == (
        "1900000001",
        "2021000000000001",
    )
    assert metric_merchants({}) == ()
    before = obs._listed
    try:
        kept = obs.configure_merchants([f"m{i}" for i in range(MAX_LISTED_MERCHANTS + 30)])
        assert len(kept) == MAX_LISTED_MERCHANTS
    finally:
        obs.configure_merchants(sorted(before))


def test_many_counts_in_one_cell_are_one_summed_value_with_their_dimension_sets(emitted):
    """Counts are summed per invocation (observability._pending): 150 counts are one value of 150, never the
    Powertools early flush at 100 values, and the cell keeps its dimension sets."""
    obs.configure_merchants(["1900000001"])
    for _ in range(150):
        count(M.APPLY_BOOKED, channel="wechatpay", merchant="1900000001")
    text = emitted()
    assert len(blobs(text)) == 1 and blobs(text)[0]["ApplyBooked"] == [150.0]
    for blob in blobs(text):
        assert blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"][-1] == ["service", "channel", "merchant"]
    assert sum(v for n, v, d in emf_series(text) if n == "ApplyBooked" and d == SERVICE) == 150
