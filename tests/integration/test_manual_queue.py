"""The manual queue (R38): every unbooked payment is listed; resolve and replay are recorded on the row."""

import json

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.service.manual import ManualError


@pytest.fixture
def merchant(h):
    return h.add_merchant()


def queue():
    return bootstrap.manual_queue()


def test_R38_mismatch_is_listed_then_resolved_with_who_and_why(h, merchant):
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=100)["body"])
    headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 1)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    (item,) = queue().list()
    assert item["kind"] == "unbooked payment" and "amount" in item["why"] and item["amount_cent"] == 1
    row = queue().resolve(
        item["id"], by="alice", action="refunded-by-hand", why="wrong amount, refunded in portal"
    )
    assert row["resolution"]["by"] == "alice" and row["history"][0]["why"].startswith("wrong amount")
    assert queue().list() == []
    assert row["handled"] == 2  # never pretends it was booked
    with pytest.raises(ManualError):
        queue().resolve(item["id"], by="bob", action="again", why="twice")


def test_R15_order_not_found_replayed_after_the_order_exists(h, merchant):
    headers, body, _ = h.notification(merchant["mchid"], "CREATED-LATER-1", 100)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    (item,) = queue().list()
    assert "not found" in item["why"]
    h.create_order(merchant["mchid"], "CREATED-LATER-1")
    assert queue().replay(item["id"], by="alice", why="order created by support")["outcome"] == "requeued"
    h.drain()
    assert h.order(merchant["mchid"], "CREATED-LATER-1")["status"] == "PAID"
    assert queue().list() == []
    assert queue().show(item["id"])["history"][0]["action"] == "replay"


def test_R5_quarantined_callback_replayed_after_the_key_is_fixed(h, sim):
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
    h.create_order(m["mchid"], "QUARANTINE-01")
    headers, body, _ = h.notification(m["mchid"], "QUARANTINE-01", 100)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    (item,) = queue().list()
    assert item["kind"] == "quarantined"
    with pytest.raises(ManualError, match="quarantined again"):
        queue().replay(item["id"], by="alice", why="try before fixing")
    h.add_merchant()  # the right key
    assert queue().replay(item["id"], by="alice", why="APIv3 key fixed")["outcome"] == "accepted"
    h.drain()
    assert h.order(m["mchid"], "QUARANTINE-01")["status"] == "PAID"
    assert queue().list() == []


def test_R4_signature_rejected_body_is_kept_and_replayable_after_key_rotation(h, sim):
    m = h.add_merchant()
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(  # a stale WeChat Pay public key
        mchid=m["mchid"],
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url="http://127.0.0.1:9/n",
        public_key=m["merchant_public_key_pem"],
        public_key_id=sim.public_key_id,
    )
    h.create_order(m["mchid"], "REJECTED-0001")
    headers, body, _ = h.notification(m["mchid"], "REJECTED-0001", 100)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 401
    assert h.scan("NOTIFY_RAW_TABLE") == []  # R4: nothing applied unverified
    (item,) = queue().list()
    assert item["kind"] == "rejected" and "does not verify" in item["why"]
    assert "expires_at" not in queue().show(item["id"])  # R51: no lifetime while it waits for a person
    h.add_merchant()  # the right public key
    assert queue().replay(item["id"], by="bob", why="public key updated")["outcome"] == "accepted"
    h.drain()
    assert h.order(m["mchid"], "REJECTED-0001")["status"] == "PAID"


def test_manual_cli_lists_and_refuses_bad_ids(h, merchant, monkeypatch, capsys):
    from tally_cli import manual as cli_manual
    from tally_cli.main import main

    monkeypatch.setattr(cli_manual, "connect", lambda args: {"env": h.env})
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=100)["body"])
    headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 7)
    h.notify(merchant["mchid"], headers, body)
    h.drain()
    capsys.readouterr()
    assert main(["manual", "list", "--local"]) == 0
    out = capsys.readouterr().out
    assert "1 item waiting for a person" in out and order["out_trade_no"] in out and "¥0.07" in out
    assert (
        main(["manual", "resolve", "nonsense", "--why", "x", "--action", "y", "--by", "me", "--local"]) == 1
    )
    assert "manual item ids look like" in capsys.readouterr().err
