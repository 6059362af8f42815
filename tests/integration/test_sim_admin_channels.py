"""The simulator's Alipay and WeChat Pay v2 admin API (/_sim/alipay/…, /_sim/wechatpay-v2/…, same JSON style
as the v3 one), and key rotation mid-run: a new Alipay certificate (new alipay_cert_sn) and a changed v2 API
key, with Tally configured before and after (R3, R4)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tally import bootstrap
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tests.integration.channel_kit import Alipay, WeChatV2, ack_kind


def admin(sim, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        sim.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def test_alipay_admin_merchants_authorize_rotate_faults_over_http(sim):
    status, m = admin(sim, "POST", "/_sim/alipay/merchants", {"mode": "cert"})
    assert status == 201 and m["mode"] == "cert" and "app_cert_pem" in m and "app_private_key_pem" in m
    _, isv = admin(sim, "POST", "/_sim/alipay/merchants", {"mode": "public_key"})
    status, token = admin(
        sim,
        "POST",
        "/_sim/alipay/authorize",
        {"isv_app_id": isv["app_id"], "merchant_app_id": "2021000000000999"},
    )
    assert status == 200 and token["app_auth_token"].startswith("202501BB")
    status, listed = admin(sim, "GET", "/_sim/alipay/merchants")
    by_id = {x["app_id"]: x for x in listed["merchants"]}
    assert (
        by_id[isv["app_id"]]["authorised_merchants"] == ["2021000000000999"]
        and by_id[m["app_id"]]["mode"] == "cert"
    )
    before = listed["alipay_cert_sn"]
    status, rotated = admin(sim, "POST", "/_sim/alipay/rotate", {})
    assert status == 200 and rotated["alipay_cert_sn"] != before == sim.alipay.certs[-2].sn
    assert admin(sim, "GET", "/_sim/alipay/merchants")[1]["alipay_cert_sn"] == rotated["alipay_cert_sn"]
    status, fault = admin(
        sim, "POST", "/_sim/alipay/faults", {"kind": "error", "method": "alipay.trade.query"}
    )
    assert status == 201 and fault["count"] == 1 and sim.alipay.faults
    assert admin(sim, "DELETE", "/_sim/alipay/faults")[0] == 204 and sim.alipay.faults == []
    assert admin(sim, "POST", "/_sim/alipay/faults", {"kind": "melt"})[0] == 400
    assert admin(sim, "GET", "/_sim/alipay/nothing")[0] == 404


def test_wechatpay_v2_admin_merchants_pay_rotate_faults_over_http(sim):
    status, m = admin(sim, "POST", "/_sim/wechatpay-v2/merchants", {"sign_type": "HMAC-SHA256"})
    assert status == 201 and len(m["api_key"]) == 32 and m["sign_type"] == "HMAC-SHA256"
    listed = admin(sim, "GET", "/_sim/wechatpay-v2/merchants")[1]["merchants"]
    assert {"mch_id": m["mch_id"], "appid": m["appid"], "sign_type": "HMAC-SHA256"} in listed
    assert all("api_key" not in x for x in listed)
    sim.wechatpay_v2._unifiedorder(
        m["mch_id"],
        {
            "mch_id": m["mch_id"],
            "out_trade_no": "ADMIN-V2-1",
            "total_fee": "100",
            "notify_url": "http://127.0.0.1:9/x",
        },
    )
    status, paid = admin(
        sim,
        "POST",
        "/_sim/wechatpay-v2/pay",
        {"mch_id": m["mch_id"], "out_trade_no": "ADMIN-V2-1", "drop": True},
    )
    assert status == 200 and paid["transaction_id"].startswith("42000")
    status, rotated = admin(sim, "POST", "/_sim/wechatpay-v2/rotate", {"mch_id": m["mch_id"]})
    assert status == 200 and rotated["api_key"] != m["api_key"] and len(rotated["api_key"]) == 32
    assert sim.wechatpay_v2.merchant(m["mch_id"]).api_key == rotated["api_key"]
    assert admin(sim, "POST", "/_sim/wechatpay-v2/faults", {"kind": "error", "code": "SYSTEMERROR"})[0] == 201
    assert admin(sim, "DELETE", "/_sim/wechatpay-v2/faults")[0] == 204 and sim.wechatpay_v2.faults == []
    assert (
        admin(sim, "POST", "/_sim/wechatpay-v2/rotate", {"mch_id": m["mch_id"], "api_key": "short"})[0] == 400
    )


def test_v3_admin_pay_for_a_partner_order(h, sim):
    sp = h.add_merchant(mchid="1900008001")["mchid"]
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid="1900008101", sp_mchid=sp)
    assert h.create_order("1900008101", "ADMIN-SP-01", amount_cent=700, prepay=True)["statusCode"] == 201
    status, paid = admin(
        sim,
        "POST",
        "/_sim/pay",
        {"sp_mchid": sp, "mchid": "1900008101", "out_trade_no": "ADMIN-SP-01", "drop": True},
    )
    assert status == 200
    order = sim.get_order("1900008101", "ADMIN-SP-01")
    assert order["transaction"]["transaction_id"] == paid["transaction_id"]
    assert (order["transaction"]["sp_mchid"], order["transaction"]["sub_mchid"]) == (sp, "1900008101")


def test_R3_alipay_certificate_rotated_mid_run_both_certificates_verify_once_added(h, sim):
    """Alipay rotates its certificate (new alipay_cert_sn): a callback signed with the new one is refused (fail,
    Alipay retries) until `tally merchant add-cert` adds it; then old- and new-signed callbacks both verify."""
    ali = Alipay(h)
    ali.mode = "cert"
    mid = ali.setup()
    otn_old, otn_new = ali.order(mid, 100), ali.order(mid, 200)
    old_body = sim.alipay.build_notification(ali.params(mid, otn_old, 100), include_cert_sn=True)
    new_sn = admin(sim, "POST", "/_sim/alipay/rotate", {})[1]["alipay_cert_sn"]
    new_body = sim.alipay.build_notification(ali.params(mid, otn_new, 200), include_cert_sn=True)
    assert f"alipay_cert_sn={new_sn}" in new_body.decode()
    assert (
        ack_kind("alipay", ali.notify(mid, new_body, {})) == "failure"
    )  # unknown certificate: Alipay retries
    row = alipay_desk(bootstrap.merchants()).add_alipay_certificate(
        app_id=mid, alipay_cert=sim.alipay.alipay_cert_pem()
    )
    assert new_sn in row["alipay_cert_sns"] and len(row["alipay_cert_sns"]) == 2
    assert ack_kind("alipay", ali.notify(mid, new_body, {})) == "success"  # the retry now verifies
    assert (
        ack_kind("alipay", ali.notify(mid, old_body, {})) == "success"
    )  # and the old certificate still does
    h.drain()
    assert h.order(mid, otn_old)["status"] == "PAID" and h.order(mid, otn_new)["status"] == "PAID"


def test_R4_wechatpay_v2_api_key_changed_mid_run(h, sim):
    """The merchant changes its v2 API key at WeChat: callbacks signed with the new key are refused (FAIL, WeChat
    retries) until Tally has the new key; then the retry is accepted and the old key no longer verifies."""
    v2 = WeChatV2(h)
    mid = v2.setup()
    otn = v2.order(mid, 300)
    old_body, _, _ = v2.callback(mid, otn, 300)
    new_key = admin(sim, "POST", "/_sim/wechatpay-v2/rotate", {"mch_id": mid})[1]["api_key"]
    new_body, _, _ = v2.callback(mid, otn, 300)
    assert ack_kind("wechatpay_v2", v2.notify(mid, new_body, {})) == "failure"
    wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
        mchid=mid, api_key=new_key, notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{mid}"
    )
    assert ack_kind("wechatpay_v2", v2.notify(mid, new_body, {})) == "success"
    assert (
        ack_kind("wechatpay_v2", v2.notify(mid, old_body, {})) == "failure"
    )  # a leaked old key is worthless
    h.drain()
    assert h.order(mid, otn)["status"] == "PAID" and len(h.scan("LEDGER_TABLE")) == 1
