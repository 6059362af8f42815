"""Key rotation off the hot path (R3): the keys function's hourly run downloads WeChat platform certificates
into the merchants table so every container verifies with them, keeps several valid at once, and counts
PlatformCertExpiring for any certificate (WeChat, Alipay, app) expiring within 7 days."""

from __future__ import annotations

import datetime as dt
import json
import time

from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.store.codec import from_item, to_item
from tally.store.keys import PREFIX, PlatformCertStore

from tally_local.simulator import _crypto as c
from tests.integration.channel_kit import Alipay

SCHEDULED = {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


def downloads(sim, mchid):
    return sum(1 for r in sim.requests if r["path"] == "/v3/certificates" and r["mchid"] == mchid)


def stored_item(h, mchid):
    item = h.ddb.get_item(TableName=h.env["MERCHANTS_TABLE"], Key=to_item({"pk": PREFIX + mchid}))
    return from_item(item.get("Item"))


def cold_container():
    bootstrap.reset()  # a new container: nothing cached, the tables are the same


def test_R3_scheduled_refresh_stores_certificates_every_container_verifies_with(h, sim):
    m = h.add_merchant(verify_mode="certificate", mchid="1900007001")
    new_serial = sim.rotate_platform_certificate()
    report = h.invoke("KeysFunction", SCHEDULED)
    assert "wechatpay/1900007001" in report["downloaded"] and report["failed"] == []
    item = stored_item(h, m["mchid"])
    assert new_serial in item["certs"] and len(item["certs"]) >= 2  # the old one too: several valid at once
    assert set(item) == {"pk", "kind", "certs", "refreshed_at"}  # public material only
    assert all(
        set(cert) == {"pem", "not_after"} and "PRIVATE" not in cert["pem"] for cert in item["certs"].values()
    )
    assert (
        bootstrap.tables().merchants and ("wechatpay", m["mchid"]) in bootstrap.merchants().store.configured()
    )
    assert not any(mid.startswith("platform_certs") for _, mid in bootstrap.merchants().store.configured())
    # a cold container verifies a callback on the new serial without downloading anything itself
    cold_container()
    before = downloads(sim, m["mchid"])
    order = json.loads(h.create_order(m["mchid"])["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 100, serial=new_serial)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert downloads(sim, m["mchid"]) == before
    # the next hourly run reads one item and downloads nothing (stored set younger than 12 h)
    assert h.invoke("KeysFunction", SCHEDULED)["downloaded"] == []
    assert downloads(sim, m["mchid"]) == before
    assert h.metric("PlatformCertRefreshed") == 1


def test_R3_refresh_keeps_stored_certificates_until_they_expire(h, sim):
    m = h.add_merchant(verify_mode="certificate", mchid="1900007002")
    valid = c.make_certificate(c.new_rsa_key(), "no longer served but valid")
    expired = c.make_certificate(
        c.new_rsa_key(),
        "expired",
        not_before=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        not_after=dt.datetime(2021, 1, 1, tzinfo=dt.UTC),
    )
    old, gone = c.serial_hex(valid), c.serial_hex(expired)
    PlatformCertStore(bootstrap.tables()).put(
        m["mchid"],
        {
            old: {"pem": c.certificate_pem(valid), "not_after": int(valid.not_valid_after_utc.timestamp())},
            gone: {
                "pem": c.certificate_pem(expired),
                "not_after": int(expired.not_valid_after_utc.timestamp()),
            },
        },
        refreshed_at=0,
    )
    cold_container()
    loaded = wechatpay_v3_desk(bootstrap.merchants()).wechatpay(m["mchid"]).creds.platform.by_serial
    assert old in loaded and gone not in loaded
    assert h.invoke("KeysFunction", SCHEDULED)["failed"] == []
    kept = stored_item(h, m["mchid"])["certs"]
    assert old in kept and gone not in kept and sim.platform_serial in kept


def test_public_key_merchants_and_sub_merchants_download_nothing(h, sim):
    pk = h.add_merchant(verify_mode="public_key", mchid="1900007003")
    # a pure public-key merchant (no platform certificate configured)
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid="1900007004",
        apiv3_key=pk["apiv3_key"],
        merchant_key_pem=pk["merchant_private_key_pem"],
        merchant_serial=pk["merchant_serial"],
        appid=pk["appid"],
        notify_url="http://127.0.0.1:9/n",
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(
        sub_mchid="1900007005", sp_mchid="1900007004"
    )
    h.invoke("KeysFunction", SCHEDULED)
    assert stored_item(h, "1900007004") is None and stored_item(h, "1900007005") is None


def test_R38_failed_scheduled_download_counts_an_alarmed_metric_and_the_others_go_on(h, sim):
    bad = h.add_merchant(verify_mode="certificate", mchid="1900007006")
    good = h.add_merchant(verify_mode="certificate", mchid="1900007007")
    sim.inject_fault("error", status=500, code="SYSTEM_ERROR", path_contains="/v3/certificates", count=1)
    report = h.invoke("KeysFunction", SCHEDULED)
    assert (
        report["failed"] == [f"wechatpay/{bad['mchid']}"]
        and f"wechatpay/{good['mchid']}" in report["downloaded"]
    )
    assert h.metric("PlatformCertRefreshFailed") == 1
    assert stored_item(h, bad["mchid"]) is None and stored_item(h, good["mchid"]) is not None
    sim.clear_faults()


def test_expiring_certificates_are_counted_by_the_schedule_without_any_callback(h, sim):
    """WeChat (a stored certificate with 3 days left) and Alipay cert mode (Alipay certificate with 3 days left):
    PlatformCertExpiring counted by the hourly run, whichever container loaded what."""
    m = h.add_merchant(verify_mode="certificate", mchid="1900007008")
    soon = c.make_certificate(
        c.new_rsa_key(),
        "expiring",
        not_after=dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=3),
    )
    PlatformCertStore(bootstrap.tables()).put(
        m["mchid"],
        {
            c.serial_hex(soon): {
                "pem": c.certificate_pem(soon),
                "not_after": int(soon.not_valid_after_utc.timestamp()),
            },
        },
        refreshed_at=int(time.time()),
    )
    ali = Alipay(h)
    ali.mode = "cert"
    sim.alipay.rotate_alipay_cert(not_after=dt.datetime.now(dt.UTC) + dt.timedelta(days=3))
    app_id = ali.setup()
    sim.alipay.rotate_alipay_cert()  # a healthy certificate for the tests that follow
    cold_container()
    report = h.invoke("KeysFunction", SCHEDULED)
    assert report["expiring"][f"wechatpay/{m['mchid']}"] == [c.serial_hex(soon)]
    assert len(report["expiring"][f"alipay/{app_id}"]) == 1
    assert h.metric("PlatformCertExpiring") >= 2
