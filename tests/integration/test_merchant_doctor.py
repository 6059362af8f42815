"""The live credential doctor (R47, #21 item 1): harmless signed calls to the (simulated) channel over real
HTTP with real RSA/AES name each credential mix-up exactly as the channel answers it; a merchant that fails
is marked not ready and POST /orders answers 409 until a check passes; MerchantNotReady is counted once, on
the transition; a channel outage is "could not check" and changes nothing; the hourly keys run does it too."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from tally import bootstrap
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.observability import metrics
from tally.service.merchants import live_check

from tally_cli.main import main
from tally_local.simulator import _crypto as c
from tests.integration.channel_kit import Alipay, WeChatV2


@pytest.fixture(autouse=True)
def _fresh_metrics(h):
    metrics.flush_metrics()  # whatever an earlier test counted and never flushed
    h.capsys.readouterr()
    h.metric_log.clear()


def not_ready_count(h):
    """MerchantNotReady counted so far (the service calls below run outside a handler: flush them here)."""
    metrics.flush_metrics()
    h._collect_metrics()
    return h.metric("MerchantNotReady")


SCHEDULED = {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


def readd_v3(h, m, **wrong):
    """Configure the v3 merchant again with one credential swapped for a wrong one."""
    good = {
        "mchid": m["mchid"],
        "apiv3_key": m["apiv3_key"],
        "merchant_key_pem": m["merchant_private_key_pem"],
        "merchant_serial": m["merchant_serial"],
        "appid": m["appid"],
        "notify_url": f"http://127.0.0.1:9/notify/wechatpay/{m['mchid']}",
        "platform_certs": [h.sim.platform_cert_pem],
        "public_key": h.sim.public_key_pem,
        "public_key_id": h.sim.public_key_id,
    }
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(**(good | wrong))


def failed_item(report):
    assert report["verdict"] == "fail", report
    return next(f for f in report["findings"] if f["verdict"] == "fail")["item"]


def test_r47_v3_good_credentials_pass_and_mark_ready(h, sim):
    m = h.add_merchant(verify_mode="certificate")
    report = live_check(bootstrap.merchants(), "wechatpay", m["mchid"])
    assert report["verdict"] == "pass" and report["ready"] is True, report
    assert [f["verdict"] for f in report["findings"]] == ["pass", "pass"]  # certificates, then the query
    assert bootstrap.merchants().store.get("wechatpay", m["mchid"])["ready"] is True
    assert not_ready_count(h) == 0


@pytest.mark.parametrize(
    "wrong, named",
    [
        ({"merchant_serial": "0" * 40}, "the merchant serial is not the certificate WeChat has for this key"),
        (
            {"merchant_key_pem": c.private_key_pem(c.new_rsa_key())},
            "the merchant private key is not the key of the merchant API certificate WeChat has",
        ),
        ({"apiv3_key": "K" * 32}, "APIv3 key decrypts nothing WeChat sends"),
    ],
)
def test_r47_v3_each_confusion_is_named(h, sim, wrong, named):
    m = h.add_merchant(verify_mode="certificate")
    readd_v3(h, m, **wrong)
    report = live_check(bootstrap.merchants(), "wechatpay", m["mchid"])
    assert failed_item(report).startswith(named), report
    assert report["ready"] is False and report["turned_not_ready"] is True
    assert not_ready_count(h) == 1


def test_r47_v3_wrong_public_key_is_named(h, sim):
    m = h.add_merchant(verify_mode="public_key")
    other = c.public_key_pem(c.new_rsa_key().public_key())
    readd_v3(h, m, platform_certs=[], public_key=other)
    item = failed_item(live_check(bootstrap.merchants(), "wechatpay", m["mchid"]))
    assert "WeChat Pay public key" in item and "is not WeChat's" in item


def test_r47_not_ready_merchant_order_is_409_then_accepted_after_the_fix(h, sim):
    m = h.add_merchant(verify_mode="certificate")
    readd_v3(h, m, merchant_serial="0" * 40)
    live_check(bootstrap.merchants(), "wechatpay", m["mchid"])
    refused = h.create_order(m["mchid"])
    assert refused["statusCode"] == 409, refused
    assert (
        "merchant serial is not the certificate WeChat has" in json.loads(refused["body"])["error"]["message"]
    )
    # checked again while still wrong: still refused, the alarm metric is NOT counted a second time
    live_check(bootstrap.merchants(), "wechatpay", m["mchid"])
    assert not_ready_count(h) == 1
    readd_v3(h, m)  # the fix: still refused until a check passes
    assert h.create_order(m["mchid"])["statusCode"] == 409
    assert live_check(bootstrap.merchants(), "wechatpay", m["mchid"])["ready"] is True
    assert h.create_order(m["mchid"])["statusCode"] == 201
    assert not_ready_count(h) == 1


def test_r47_channel_outage_is_could_not_check_and_changes_nothing(h, sim):
    m = h.add_merchant(verify_mode="public_key")
    readd_v3(h, m, merchant_serial="0" * 40)
    assert live_check(bootstrap.merchants(), "wechatpay", m["mchid"])["ready"] is False
    readd_v3(h, m)  # fixed, but the channel is down when it is checked: new keys alone do not make it ready
    assert h.create_order(m["mchid"])["statusCode"] == 409
    sim.inject_fault("error", status=500, code="SYSTEM_ERROR", path_contains="/out-trade-no/", count=5)
    report = live_check(bootstrap.merchants(), "wechatpay", m["mchid"])
    assert report["verdict"] == "unknown" and report["ready"] is False
    assert (
        bootstrap.merchants()
        .store.get("wechatpay", m["mchid"])["ready_reason"]
        .startswith("the merchant serial is not")
    )
    sim.clear_faults()
    # and a ready merchant stays ready through an outage: no alarm
    good = h.add_merchant(verify_mode="public_key", mchid="1900007301")
    assert live_check(bootstrap.merchants(), "wechatpay", good["mchid"])["ready"] is True
    sim.inject_fault("error", status=503, code="SYSTEM_ERROR", path_contains="/out-trade-no/", count=5)
    assert live_check(bootstrap.merchants(), "wechatpay", good["mchid"])["verdict"] == "unknown"
    assert bootstrap.merchants().store.get("wechatpay", good["mchid"])["ready"] is True
    assert not_ready_count(h) == 1  # only the first merchant's transition
    sim.clear_faults()


def test_r47_alipay_confusions_are_named(h, sim):
    app_id = Alipay(h).setup()
    directory = bootstrap.merchants()
    assert live_check(directory, "alipay", app_id)["verdict"] == "pass"
    secret = directory.secrets.get(directory.store.get("alipay", app_id)["secret_name"])
    app_key = serialization.load_pem_private_key(secret["app_private_key"].encode(), password=None)
    # the app's own public key given as "Alipay's public key"
    alipay_desk(directory).add_alipay(
        app_id=app_id,
        app_private_key=secret["app_private_key"],
        notify_url="http://127.0.0.1:9/n",
        alipay_public_key=c.public_key_pem(app_key.public_key()),
    )
    assert failed_item(live_check(directory, "alipay", app_id)) == "this is the app public key, not Alipay's"
    # a private key Alipay does not have the public key of: isv.invalid-signature
    alipay_desk(directory).add_alipay(
        app_id=app_id,
        app_private_key=c.private_key_pem(c.new_rsa_key()),
        notify_url="http://127.0.0.1:9/n",
        alipay_public_key=secret["alipay_public_key"],
    )
    report = live_check(directory, "alipay", app_id)
    assert failed_item(report).startswith("the app private key is not the key")
    assert "isv.invalid-signature" in report["findings"][0]["detail"]


def test_r47_v2_wrong_api_key_is_named(h, sim):
    mchid = WeChatV2(h).setup()
    directory = bootstrap.merchants()
    assert live_check(directory, "wechatpay-v2", mchid)["verdict"] == "pass"
    wechatpay_v2_desk(directory).add_wechatpay_v2(
        mchid=mchid, api_key="W" * 32, notify_url="http://127.0.0.1:9/n"
    )
    report = live_check(directory, "wechatpay-v2", mchid)
    assert failed_item(report).startswith("the v2 API key is not the one set for this mchid")
    assert "签名错误" in report["findings"][0]["detail"]


def test_r47_hourly_keys_run_marks_not_ready_once_with_a_work_item(h, sim):
    m = h.add_merchant(verify_mode="public_key")
    readd_v3(h, m, merchant_key_pem=c.private_key_pem(c.new_rsa_key()))
    report = h.invoke("KeysFunction", SCHEDULED)
    assert report["live"][f"wechatpay/{m['mchid']}"] == "fail"
    assert h.invoke("KeysFunction", SCHEDULED)["live"][f"wechatpay/{m['mchid']}"] == "fail"
    assert not_ready_count(h) == 1
    items = [i for i in h.scan("NOTIFY_EVENT_TABLE") if i.get("manual_kind") == "merchant_not_ready"]
    assert len(items) == 1 and "merchant private key" in items[0]["reason"]


def test_r47_cli_check_live_names_the_item_and_exits_1(h, sim, capsys, monkeypatch):
    from tally_cli import merchant as cli_merchant

    monkeypatch.setattr(
        cli_merchant, "connect", lambda args: {"api_url": "http://127.0.0.1:3000", "env": h.env}
    )
    m = h.add_merchant(verify_mode="certificate")
    assert main(["merchant", "check", "wechatpay", m["mchid"], "--live", "--local", "--json"]) == 0, (
        capsys.readouterr().out
    )
    main(["merchant", "check", "wechatpay", m["mchid"], "--live", "--local"])
    assert "ready: orders are taken" in capsys.readouterr().out
    readd_v3(h, m, apiv3_key="K" * 32)
    assert main(["merchant", "check", "wechatpay", m["mchid"], "--live", "--local"]) == 1
    out = capsys.readouterr().out
    assert "APIv3 key decrypts nothing WeChat sends" in out and "NOT READY" in out and "K" * 32 not in out


def test_r47_a_change_at_the_channel_is_caught_the_merchant_resets_its_apiv3_key(h, sim):
    """Nothing changed in Tally: the merchant reset its APIv3 key in WeChat's merchant platform."""
    m = h.add_merchant(verify_mode="certificate")
    assert live_check(bootstrap.merchants(), "wechatpay", m["mchid"])["ready"] is True
    sim.register_merchant(
        m["mchid"],
        "N" * 32,
        m["merchant_public_key_pem"],
        m["merchant_serial"],
        appid=m["appid"],
        verify_mode="certificate",
    )
    report = live_check(bootstrap.merchants(), "wechatpay", m["mchid"])
    assert failed_item(report).startswith("APIv3 key decrypts nothing WeChat sends")
    assert report["turned_not_ready"] is True and not_ready_count(h) == 1
    assert h.create_order(m["mchid"])["statusCode"] == 409


def test_r47_hourly_run_leaves_the_heartbeat_merchant_alone(h, sim):
    bootstrap.heartbeat().api_url = "http://127.0.0.1:9"  # the beat's post fails; its merchant is configured
    h.invoke("HeartbeatFunction", SCHEDULED)
    mchid = bootstrap.settings().heartbeat_mchid
    assert ("wechatpay", mchid) in bootstrap.merchants().store.configured()
    report = h.invoke("KeysFunction", SCHEDULED)
    assert f"wechatpay/{mchid}" not in report["live"]
    assert "ready" not in bootstrap.merchants().store.get("wechatpay", mchid)


def test_r47_a_sub_merchant_is_checked_with_its_providers_credentials(h, sim):
    sp = h.add_merchant(mchid="1900009301", verify_mode="certificate")
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(
        sub_mchid="1900009302", sp_mchid=sp["mchid"]
    )
    report = live_check(bootstrap.merchants(), "wechatpay", "1900009302")
    assert report["verdict"] == "pass", report
    readd_v3(h, sp, merchant_serial="0" * 40)  # the provider's serial is wrong: the sub-merchant's calls fail
    bootstrap.merchants().forget("wechatpay", "1900009302")
    assert failed_item(live_check(bootstrap.merchants(), "wechatpay", "1900009302")).startswith(
        "the merchant serial is not"
    )
    assert h.create_order("1900009302")["statusCode"] == 409
