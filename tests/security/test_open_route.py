"""The open notify route (issue #15.2, R40): unauthenticated input costs bounded work and storage, every
channel keeps its rejected bodies the same bounded way, and no input answers 500 without a metric."""

from __future__ import annotations

import hashlib
import json

import pytest
from tally.observability import M
from tally.service import ingest

from tests.integration.channel_kit import Alipay, WeChatV2, ack_kind


@pytest.fixture
def merchant(h):
    return h.add_merchant()


def rejected(h):
    rows = h.scan("NOTIFY_EVENT_TABLE")
    return [r for r in rows if r.get("kind") == "rejected"], [
        r for r in rows if r.get("kind") == "rejected_count"
    ]


def item_bytes(row) -> int:
    return len(json.dumps(row, ensure_ascii=False).encode())


def test_r40_junk_to_a_configured_merchant_costs_bounded_rows(h, merchant):
    """Issue #15.2: 200 junk requests made 200 full-body rows and 200 queue items. Now at most
    REJECTED_KEPT open rows per merchant+cause, the rest counted on one aggregate row."""
    headers, body, _ = h.notification(merchant["mchid"], "JUNK000001", 100)
    n = ingest.REJECTED_KEPT + 15
    for i in range(n):
        junk = body[:-1] + f',"pad":"{i:06d}{"x" * 6000}"}}'.encode()  # 6 KB, signature no longer holds
        assert h.notify(merchant["mchid"], headers, junk)["statusCode"] == 401
    kept, (aggregate,) = rejected(h)
    assert len(kept) == ingest.REJECTED_KEPT
    assert aggregate["rejections"] == n and aggregate["cause"] == "bad_signature"
    for row in kept:
        assert row["cause"] == "bad_signature" and row["manual_kind"] == "rejected"
        assert (
            row["body_len"] > 6000
            and row.get("body") is None
            and 4000 < len(row["body_prefix"].encode()) <= 4096
        )
        assert row["aggregate_pk"] == aggregate["pk"] and item_bytes(row) < 8 * 1024
    assert h.metric(M.NOTIFY_REJECTED) == n


def test_r40_a_prefix_only_rejected_row_is_refused_for_replay_with_the_reason(h, merchant):
    """A kept prefix is not the channel's body: replaying it must say so, not raise a KeyError."""
    from tally import bootstrap
    from tally.service.manual import ManualError

    headers, body, _ = h.notification(merchant["mchid"], "JUNK000002", 100)
    junk = body[:-1] + f',"pad":"{"x" * 6000}"}}'.encode()
    assert h.notify(merchant["mchid"], headers, junk)["statusCode"] == 401
    (row,), _ = rejected(h)
    with pytest.raises(ManualError, match="cannot be replayed"):
        bootstrap.manual_queue().replay("event:" + row["pk"], by="alice", why="key fixed")
    (still,), _ = rejected(h)
    assert still["manual_kind"] == "rejected"  # still in front of a person


def test_r40_a_small_rejected_body_is_kept_whole_and_hashed(h, merchant):
    headers, body, _ = h.notification(merchant["mchid"], "JUNK000002", 100)
    stale = {**headers, "Wechatpay-Timestamp": str(int(headers["Wechatpay-Timestamp"]) - 3600)}
    assert h.notify(merchant["mchid"], stale, body)["statusCode"] == 401
    (row,), _ = rejected(h)
    assert row["cause"] == "stale_timestamp" and row["body"] == body.decode()
    assert row["body_sha256"] == hashlib.sha256(body).hexdigest() and row["body_len"] == len(body)


def test_r40_non_utf8_body_of_140kb_is_refused_without_a_500(h, merchant):
    """Issue #15.2: decoded with replacement characters, a 140 KB+ non-UTF-8 body passed DynamoDB's 400 KB
    item limit and the handler answered 500 with no Tally metric."""
    headers, _, _ = h.notification(merchant["mchid"], "JUNK000003", 100)
    body = b"\xff\xfe" * 100_000  # 200 KB
    response = h.notify(merchant["mchid"], headers, body)
    assert response["statusCode"] == 401
    (row,), _ = rejected(h)
    assert row.get("body") is None and row["body_len"] == len(body) and item_bytes(row) < 20 * 1024
    assert h.metric(M.NOTIFY_FAILED) == 0


def test_r40_correctly_signed_oversized_non_utf8_body_is_quarantined_bounded(h, merchant, sim):
    """A body WeChat's key signs but nobody can parse, 200 KB of non-UTF-8: quarantined (R5), stored as
    bounded evidence, answered with success, never 500."""
    body = b'{"id":"EV-BIG","event_type":"TRANSACTION.SUCCESS","junk":"' + b"\xff" * 200_000 + b'"}'
    headers = sim._signed_headers(sim.merchant(merchant["mchid"]), body)
    response = h.notify(merchant["mchid"], headers, body)
    assert response["statusCode"] == 204
    (row,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r.get("kind") == "quarantined"]
    assert row.get("body") is None and row["body_truncated"] and row["body_len"] == len(body)
    assert item_bytes(row) < 20 * 1024 and h.metric(M.NOTIFY_FAILED) == 0


def test_r40_alipay_and_v2_rejected_bodies_are_kept_like_v3(h, sim):
    """Issue #15.2: the README and runbook said so; Alipay and v2 rejected bodies were not kept at all."""
    ali = Alipay(h)
    app_id = ali.setup()
    body, _, _ = ali.callback(app_id, "ALIREJ0001", 100)
    tampered, _ = ali.tamper(body, {})
    assert ack_kind("alipay", ali.notify(app_id, tampered, {})) == "failure"
    v2 = WeChatV2(h)
    mch = v2.setup()
    body, _, _ = v2.callback(mch, "V2REJ00001", 100)
    tampered, _ = v2.tamper(body, {})
    assert ack_kind("wechatpay_v2", v2.notify(mch, tampered, {})) == "failure"
    kept, aggregates = rejected(h)
    assert {(r["channel"], r["mchid"], r["cause"]) for r in kept} == {
        ("alipay", app_id, "bad_signature"),
        ("wechatpay_v2", mch, "bad_signature"),
    }
    assert all(r["body"] and r["body_sha256"] for r in kept) and len(aggregates) == 2


@pytest.mark.parametrize(
    "path,params,kind",
    [
        ("/notify/wechatpay/1900000109", {"mchid": "1900000109"}, "wechatpay_v3"),
        ("/notify/alipay/2021000000000001", {"app_id": "2021000000000001"}, "alipay"),
        ("/notify/wechatpay-v2/1900000109", {"mchid": "1900000109"}, "wechatpay_v2"),
    ],
)
def test_r40_an_unexpected_error_is_a_failure_ack_with_an_alarmed_metric(h, monkeypatch, path, params, kind):
    """No input answers 500 without a metric: the handler edge catches, counts NotifyFailed (alarmed) and
    answers the channel's own failure ACK, so the channel retries."""

    def broken(self, channel, request, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(ingest.IngestService, "notify", broken)
    response = h.call("NotifyFunction", "POST", path, b"x=1", {}, params)
    assert response["statusCode"] == 500 and ack_kind(kind, response) == "failure"
    assert h.metric(M.NOTIFY_FAILED) == 1
