"""Service-provider mode (R11), refunds never re-applied as payments, Alipay prepay, key rotation."""

import json
import time

from tally import bootstrap
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.store.tables import iso_now

from tests.integration.channel_kit import Alipay, WeChatV2, ack_kind


def test_R11_partner_mode_two_sub_merchants_same_out_trade_no_one_cent_for_the_other(h, sim):
    """WeChat v3 service-provider mode: the URL carries sp_mchid (its key decrypts), the resource's
    sub_mchid selects the order. Two sub-merchants use the same out_trade_no; a one-cent callback for
    the other tenant never touches either order (R11, R12)."""
    sp = h.add_merchant(mchid="1900009001")["mchid"]
    directory = bootstrap.merchants()
    for sub in ("1900009101", "1900009102"):
        wechatpay_v3_desk(directory).add_wechatpay_partner(sub_mchid=sub, sp_mchid=sp)
    h.create_order("1900009101", "SAME-SP-001", amount_cent=100)
    h.create_order("1900009102", "SAME-SP-001", amount_cent=5000)
    assert h.order("1900009101", "SAME-SP-001")["sp_mchid"] == sp
    # one cent, named for sub-merchant 102 (whose order is 50.00)
    resource = sim.partner_transaction_resource(sp, "1900009102", "SAME-SP-001", 1)
    headers, body = sim.build_notification(sp, resource)
    assert h.notify(sp, headers, body)["statusCode"] == 204
    (raw,) = h.scan("NOTIFY_RAW_TABLE")
    assert (raw["mchid"], raw["sp_mchid"], raw["order_pk"]) == ("1900009102", sp, "1900009102#SAME-SP-001")
    h.drain()
    assert h.order("1900009101", "SAME-SP-001")["status"] == "WAIT_PAY"
    assert h.order("1900009102", "SAME-SP-001")["status"] == "WAIT_PAY"
    assert h.metric("ApplyMismatch") == 1 and h.scan("LEDGER_TABLE") == []
    # the right amount for 101 books 101 only
    resource = sim.partner_transaction_resource(sp, "1900009101", "SAME-SP-001", 100)
    headers, body = sim.build_notification(sp, resource)
    h.notify(sp, headers, body)
    h.drain()
    assert h.order("1900009101", "SAME-SP-001")["status"] == "PAID"
    assert h.order("1900009102", "SAME-SP-001")["status"] == "WAIT_PAY"


def test_R11_R22_partner_prepay_and_poll_with_colliding_out_trade_no(h, sim):
    """Service-provider prepay (`/v3/pay/partner/transactions/native`, signed by sp_mchid) for two sub-merchants
    that use the same out_trade_no; a one-cent partner callback for one touches neither; the poller queries
    each with `?sp_mchid=&sub_mchid=` and books only the one that is paid (R11, R12, R22, R23)."""
    from tests.integration.pull_helpers import run_poller, set_fields

    sp = h.add_merchant(mchid="1900009011")["mchid"]
    a, b = "1900009111", "1900009112"
    for sub in (a, b):
        wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(
            sub_mchid=sub, sp_mchid=sp, sub_appid="wxsub0000000001"
        )
    codes = {}
    for sub, amount in ((a, 100), (b, 5000)):
        response = h.create_order(sub, "SAME-SP-PRE1", amount_cent=amount, prepay=True)
        assert response["statusCode"] == 201, response
        codes[sub] = json.loads(response["body"])["code_url"]
    assert codes[a] != codes[b] and codes[a].startswith("weixin://wxpay/bizpayurl?pr=")
    at_sim = {sub: sim.get_order(sub, "SAME-SP-PRE1") for sub in (a, b)}
    assert {
        (o["sp_mchid"], o["sub_mchid"], o["amount"]["total"], o["sub_appid"]) for o in at_sim.values()
    } == {(sp, a, 100, "wxsub0000000001"), (sp, b, 5000, "wxsub0000000001")}
    assert at_sim[a]["notify_url"].endswith(f"/notify/wechatpay/{sp}")  # the provider's URL decrypts
    # one cent reported for b: neither order moves
    resource = sim.partner_transaction_resource(sp, b, "SAME-SP-PRE1", 1)
    assert h.notify(sp, *sim.build_notification(sp, resource))["statusCode"] == 204
    h.drain()
    assert h.metric("ApplyMismatch") == 1 and h.scan("LEDGER_TABLE") == []
    # a pays (callback lost): the poller's partner query books a, and only a
    tid = sim.pay_partner(sp, a, "SAME-SP-PRE1", drop=True)
    for sub in (a, b):
        set_fields(h, sub, "SAME-SP-PRE1", poll_due=iso_now(time.time() - 1))
    run_poller(h)
    assert (
        h.order(a, "SAME-SP-PRE1")["status"] == "PAID" and h.order(a, "SAME-SP-PRE1")["transaction_id"] == tid
    )
    assert h.order(b, "SAME-SP-PRE1")["status"] == "WAIT_PAY"
    (entry,) = h.scan("LEDGER_TABLE")
    assert entry["amount_cent"] == 100
    queried = [
        r["path"] for r in sim.requests if r["path"].startswith("/v3/pay/partner/transactions/out-trade-no/")
    ]
    assert f"/v3/pay/partner/transactions/out-trade-no/SAME-SP-PRE1?sp_mchid={sp}&sub_mchid={b}" in queried


def test_R11_partner_callback_naming_another_provider_goes_to_a_person(h, sim):
    """The order row stores sp_mchid: a sub-merchant order reported under another provider is a mismatch."""
    sp = h.add_merchant(mchid="1900009001")["mchid"]
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid="1900009101", sp_mchid=sp)
    h.create_order("1900009101", "SP-ORDER-02", amount_cent=100)
    h.add_merchant(mchid="1900009101")  # the sub-merchant also as a direct merchant: a direct callback...
    headers, body, _ = h.notification("1900009101", "SP-ORDER-02", 100)
    h.notify("1900009101", headers, body)
    h.drain()
    assert h.order("1900009101", "SP-ORDER-02")["status"] == "WAIT_PAY"
    assert "service provider" in h.scan("NOTIFY_RAW_TABLE")[0]["manual_reason"]


def test_R11_alipay_app_auth_token_merchants(h, sim):
    """An ISV app acts for two merchants (app_auth_token) that share an out_trade_no: the notification's
    auth_app_id selects the order, app_id (the ISV) is checked as the provider."""
    ali = Alipay(h)
    isv = ali.setup()
    a, b = "2021000000000101", "2021000000000102"
    for sub in (a, b):
        token = sim.alipay.authorize(isv, sub)
        alipay_desk(bootstrap.merchants()).add_alipay_sub(app_id=sub, sp_app_id=isv, app_auth_token=token)
    ali.order(a, 100, "SAME-ISV-01")
    ali.order(b, 5000, "SAME-ISV-01")
    assert h.order(a, "SAME-ISV-01")["sp_mchid"] == isv
    body, _, _ = ali.callback(isv, "SAME-ISV-01", 1, auth_app_id=b)  # one cent for b, sent to the ISV's URL
    assert ack_kind("alipay", ali.notify(isv, body, {})) == "success"
    h.drain()
    assert (
        h.order(a, "SAME-ISV-01")["status"] == "WAIT_PAY"
        and h.order(b, "SAME-ISV-01")["status"] == "WAIT_PAY"
    )
    body, _, _ = ali.callback(isv, "SAME-ISV-01", 100, auth_app_id=a)
    ali.notify(isv, body, {})
    h.drain()
    assert h.order(a, "SAME-ISV-01")["status"] == "PAID" and h.order(b, "SAME-ISV-01")["status"] == "WAIT_PAY"


def test_alipay_order_with_prepay_calls_precreate_through_the_providers_app(h, sim):
    ali = Alipay(h)
    isv = ali.setup()
    token = sim.alipay.authorize(isv, "2021000000000201")
    alipay_desk(bootstrap.merchants()).add_alipay_sub(
        app_id="2021000000000201", sp_app_id=isv, app_auth_token=token
    )
    direct = ali.setup()
    for mid in (direct, "2021000000000201"):
        response = h.create_order(mid, f"QR-{mid[-4:]}-001", amount_cent=1234, prepay=True, channel="alipay")
        assert response["statusCode"] == 201, response
        assert json.loads(response["body"])["qr_code"].startswith("https://qr.alipay.com/")
    assert sim.alipay.orders[("2021000000000201", "QR-0201-001")]["app_id"] == isv


def test_R29_R30_alipay_refund_notification_is_stored_in_refund_raw_never_applied_as_a_payment(h, sim):
    """A refund notification (refund_fee, gmt_refund, out_biz_no: §5.3) goes to refund_raw keyed
    (alipay#out_biz_no, REFUND_SUCCESS), its refund_fee kept as the cumulative total; never a payment."""
    ali = Alipay(h)
    mid = ali.setup()
    otn = ali.order(mid, 1000)
    body, _, tx = ali.callback(mid, otn, 1000)
    ali.notify(mid, body, {})
    h.drain()
    refund = sim.alipay.refund_params(mid, otn, tx, 1000, 300, "RF-0001")
    for _ in range(2):
        assert ack_kind("alipay", ali.notify(mid, sim.alipay.build_notification(refund), {})) == "success"
    (row,) = h.scan("REFUND_RAW_TABLE")
    assert (row["pk"], row["sk"], row["cumulative_cent"]) == (f"alipay#{mid}#RF-0001", "REFUND_SUCCESS", 300)
    assert "refund_cent" not in row and row["transaction_id"] == tx
    assert not [e for e in h.scan("NOTIFY_EVENT_TABLE") if "refund" in str(e.get("kind"))]
    assert len(h.scan("NOTIFY_RAW_TABLE")) == 1 and len(h.scan("LEDGER_TABLE")) == 1
    assert h.metric("RefundNotifyAccepted") == 1 and h.metric("RefundNotifyDuplicate") == 1


def test_R29_R30_wechatpay_v2_refund_req_info_is_decrypted_and_stored_in_refund_raw(h, sim):
    v2 = WeChatV2(h)
    mid = v2.setup()
    refund = {
        "out_refund_no": "RF-V2-1",
        "refund_id": "50300",
        "refund_status": "SUCCESS",
        "refund_fee": "100",
        "total_fee": "300",
        "transaction_id": "42",
        "out_trade_no": "V2-ORDER-1",
        "success_time": "2026-11-30 10:00:00",
    }
    body = sim.wechatpay_v2.refund_notification(mid, refund)
    assert ack_kind("wechatpay_v2", v2.notify(mid, body, {})) == "success"
    (row,) = h.scan("REFUND_RAW_TABLE")  # keyed like v3's: one refund number space (R30)
    assert (
        row["pk"] == f"wechatpay#{mid}#RF-V2-1"
        and row["sk"] == "SUCCESS"
        and h.scan("NOTIFY_EVENT_TABLE") == []
    )
    forged = sim.wechatpay_v2.refund_notification(mid, refund, api_key="Z" * 32)
    assert ack_kind("wechatpay_v2", v2.notify(mid, forged, {})) == "failure"
    assert h.scan("NOTIFY_RAW_TABLE") == []


def test_simulated_channels_deliver_over_http_with_retries(h, sim):
    """The Alipay and v2 look-alikes POST to a real HTTP endpoint, retry until the channel's success ACK."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            answers["n"] += 1
            ok = answers["n"] % 2 == 0  # every first attempt fails
            body = (
                (b"success" if ok else b"fail")
                if self.path.startswith("/a")
                else (
                    b"<xml><return_code>SUCCESS</return_code></xml>"
                    if ok
                    else b"<xml><return_code>FAIL</return_code></xml>"
                )
            )
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        m = sim.alipay.register_test_merchant()
        sim.alipay.precreate(
            m["app_id"],
            m["app_id"],
            {"out_trade_no": "HTTP-1", "total_amount": "1.00", "subject": "s"},
            f"http://127.0.0.1:{port}/a",
        )
        trade_no = sim.alipay.pay(m["app_id"], "HTTP-1")
        done = sim.alipay.wait_delivered(trade_no, timeout=10)
        assert done[0]["attempt"] == 2  # retried after 4 min × time_scale
        v2 = sim.wechatpay_v2.register_test_merchant()
        sim.wechatpay_v2._unifiedorder(
            v2["mch_id"],
            {
                "mch_id": v2["mch_id"],
                "out_trade_no": "HTTP-2",
                "total_fee": "100",
                "notify_url": f"http://127.0.0.1:{port}/w",
            },
        )
        tx = sim.wechatpay_v2.pay(v2["mch_id"], "HTTP-2")
        assert sim.wechatpay_v2.wait_delivered(tx, timeout=10)[0]["attempt"] == 2
    finally:
        server.shutdown()


def test_certificate_expiring_within_7_days_raises_the_metric(h, sim):
    """PlatformCertExpiring is counted when credentials load (alarmed in template.yaml)."""
    import datetime as dt

    ali = Alipay(h)
    ali.mode = "cert"
    sim.alipay.rotate_alipay_cert(not_after=dt.datetime.now(dt.UTC) + dt.timedelta(days=3))
    mid = ali.setup()
    assert h.metric("PlatformCertExpiring") == 0
    body, _, _ = ali.callback(mid, "EXPIRY-01", 100)
    ali.notify(mid, body, {})  # the notify function loads the credentials: one count, one warning
    assert h.metric("PlatformCertExpiring") == 1
    sim.alipay.rotate_alipay_cert()  # a healthy certificate for the tests that follow


def test_R3_downloaded_platform_certificates_survive_a_credentials_reload(h, sim):
    """Rotation: certificates downloaded after a miss stay cached next to the configured ones when the
    secret is re-read (TTL), so the next callback on the new serial needs no second download."""
    m = h.add_merchant(verify_mode="certificate")
    new_serial = sim.rotate_platform_certificate()
    order = json.loads(h.create_order(m["mchid"])["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 100, serial=new_serial)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    directory = bootstrap.merchants()
    directory.clock = lambda: time.time() + 3600  # past the TTL: the secret is read again
    reloaded = wechatpay_v3_desk(directory).wechatpay(m["mchid"])
    assert new_serial in reloaded.creds.platform.by_serial and len(reloaded.creds.platform.by_serial) >= 3
    directory.clock = time.time
    assert wechatpay_v3_desk(directory).refresh_platform_certificates([m["mchid"]], max_age_s=0) == {
        m["mchid"]: True
    }
