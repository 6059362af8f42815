"""Alipay and WeChat Pay v2 wire formats, cross-checked by independent code (python-alipay-sdk, spec vectors)."""

import hashlib
import hmac
import json

import pytest
from alipay import AliPay, DCAliPay
from tally.channels.alipay import wire as ali
from tally.channels.wechatpay_v2 import wire as wx2

from tally_local.simulator import ChannelSimulator


@pytest.fixture(scope="module")
def asim():
    sim = ChannelSimulator(fixed_keys=True, time_scale=0.001).start()
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def pk_merchant(asim):
    return asim.alipay.register_test_merchant("public_key")


@pytest.fixture(scope="module")
def cert_merchant(asim):
    return asim.alipay.register_test_merchant("cert")


def cert_keys(m):
    return ali.AlipayKeys.from_pems(alipay_certs=[m["alipay_cert_pem"]], root_cert=m["root_cert_pem"])


# ---------------------------------------------------------------- Alipay: independent checker


def test_R2_simulator_notifications_verify_with_python_alipay_sdk_public_key_mode(asim, pk_merchant):
    """python-alipay-sdk 3.4.0 AliPay.verify(data without sign, sign) accepts what the simulator signs,
    and our verify accepts the same body (subject with %, + and Chinese: decoded exactly once)."""
    m = pk_merchant
    params = asim.alipay.notification_params(m["app_id"], "ORDER-1", 12345, subject="100%25 + 折扣 a&b=c")
    body = asim.alipay.build_notification(params)
    decoded = ali.parse_form(body)
    assert decoded["subject"] == "100%25 + 折扣 a&b=c"
    sdk = AliPay(
        appid=m["app_id"],
        app_private_key_string=m["app_private_key_pem"],
        alipay_public_key_string=m["alipay_public_key_pem"],
    )
    data = dict(decoded)
    signature = data.pop("sign")
    assert sdk.verify(data, signature) is True
    assert (
        ali.verify_notification(decoded, ali.AlipayKeys.from_pems(m["alipay_public_key_pem"])) == "public_key"
    )
    data["total_amount"] = "0.01"
    assert sdk.verify(data, signature) is False


def test_cert_mode_notifications_verify_with_python_alipay_sdk_and_sns_agree(asim, cert_merchant):
    """Certificate mode: DCAliPay (the SDK) derives the same root SN and app cert SN as our code (§5.5),
    skipping the ECDSA root, and verifies the simulator's cert-mode notification."""
    m = cert_merchant
    sdk = DCAliPay(
        appid=m["app_id"],
        app_private_key_string=m["app_private_key_pem"],
        app_public_key_cert_string=m["app_cert_pem"],
        alipay_public_key_cert_string=m["alipay_cert_pem"],
        alipay_root_cert_string=m["root_cert_pem"],
    )
    assert sdk.alipay_root_cert_sn == ali.root_cert_sn(m["root_cert_pem"]) == asim.alipay.root_cert_sn
    assert "_" not in sdk.alipay_root_cert_sn  # the ECDSA root is skipped
    assert sdk.app_cert_sn == ali.cert_sn(ali.load_certificates(m["app_cert_pem"])[0])
    params = ali.parse_form(
        asim.alipay.build_notification(asim.alipay.notification_params(m["app_id"], "O-2", 100))
    )
    data = dict(params)
    assert sdk.verify(data, data.pop("sign")) is True
    assert ali.verify_notification(params, cert_keys(m)) == asim.alipay.alipay_cert_sn


def test_R3_cert_mode_and_public_key_mode_side_by_side_and_rotation(asim, cert_merchant, pk_merchant):
    """Migration: a merchant configured with both keys accepts either signer; after a certificate rotation
    both certificates stay valid; an alipay_cert_sn hint picks the certificate, an unknown one is refused."""
    old_pem = asim.alipay.alipay_cert_pem()
    asim.alipay.rotate_alipay_cert()
    keys = ali.AlipayKeys.from_pems(
        pk_merchant["alipay_public_key_pem"],
        [old_pem, asim.alipay.alipay_cert_pem()],
        cert_merchant["root_cert_pem"],
    )
    assert len(keys.by_sn) == 2
    params = asim.alipay.notification_params(cert_merchant["app_id"], "O-3", 100)
    for signer in ("public_key", "cert"):
        for hint in (False, True):
            signed = asim.alipay.sign_notification(params, signer=signer, include_cert_sn=hint)
            assert ali.verify_notification(signed, keys)
    forged = {**asim.alipay.sign_notification(params, signer="cert"), "alipay_cert_sn": "0" * 32}
    with pytest.raises(ali.SignatureError, match="unknown alipay_cert_sn"):
        ali.verify_notification(forged, keys)


def test_alipay_certificate_must_chain_to_the_root_bundle(asim, cert_merchant):
    other = ChannelSimulator(time_scale=0.001)  # another "Alipay" with its own CA
    with pytest.raises(ValueError, match="does not chain"):
        ali.AlipayKeys.from_pems(
            alipay_certs=[other.alipay.alipay_cert_pem()], root_cert=cert_merchant["root_cert_pem"]
        )


@pytest.mark.parametrize("change", ["sign_type RSA", "no sign", "value", "extra param", "gbk charset claim"])
def test_R4_alipay_signature_failures(asim, pk_merchant, change):
    keys = ali.AlipayKeys.from_pems(pk_merchant["alipay_public_key_pem"])
    params = asim.alipay.sign_notification(
        asim.alipay.notification_params(pk_merchant["app_id"], "O-4", 100, subject="中文")
    )
    if change == "sign_type RSA":
        params["sign_type"] = "RSA"
    elif change == "no sign":
        params.pop("sign")
    elif change == "value":
        params["receipt_amount"] = "0.01"
    elif change == "extra param":
        params["refund_fee"] = "1.00"
    else:
        params["charset"] = "gbk"
    with pytest.raises(ali.SignatureError):
        ali.verify_notification(params, keys)


def test_alipay_gbk_body_is_decoded_once_with_its_charset(asim, pk_merchant):
    params = asim.alipay.notification_params(
        pk_merchant["app_id"], "O-5", 100, subject="测试商品", charset="gbk"
    )
    body = asim.alipay.build_notification(params)
    decoded = ali.parse_form(body)
    assert decoded["subject"] == "测试商品"
    assert ali.verify_notification(decoded, ali.AlipayKeys.from_pems(pk_merchant["alipay_public_key_pem"]))


@pytest.mark.parametrize(
    "text,cents",
    [
        ("0.01", 1),
        ("100", 10000),
        ("100.1", 10010),
        ("99999999.99", 9999999999),
        ("  1.00", 100),
        ("0.00", 0),
    ],
)
def test_R14_alipay_amounts_convert_exactly(text, cents):
    value = ali.amount_cents({"x": text}, "x")
    assert value == cents and isinstance(value, int)


@pytest.mark.parametrize(
    "text", ["1e2", "-1", "0.001", "", "   ", "1,00", "NaN", "Infinity", "0x10", "１.00", None, 1.5]
)
def test_R14_alipay_inexact_or_negative_amounts_are_refused(text):
    with pytest.raises(ali.ParseError):
        ali.amount_cents({"x": text}, "x")


def test_R13_alipay_notice_compares_total_and_books_receipt_amount(asim, pk_merchant):
    params = asim.alipay.notification_params(pk_merchant["app_id"], "O-6", 1000, receipt_amount=800)
    notice = ali.to_payment_notice(params)
    assert (notice.order_total_cent, notice.paid_cent, notice.transaction_id) == (
        1000,
        800,
        params["trade_no"],
    )
    assert notice.success_time.endswith("+08:00")
    params.pop("receipt_amount")
    with pytest.raises(ali.ParseError, match="receipt_amount"):
        ali.to_payment_notice(params)


def test_R11_alipay_app_auth_token_notice_names_the_merchant_and_the_provider():
    notice = ali.to_payment_notice(
        {
            "app_id": "2021000000000009",
            "auth_app_id": "2021000000000001",
            "trade_no": "T1",
            "out_trade_no": "O-7",
            "trade_status": "TRADE_SUCCESS",
            "total_amount": "1.00",
            "receipt_amount": "1.00",
        }
    )
    assert (notice.mchid, notice.sp_mchid) == ("2021000000000001", "2021000000000009")


def test_alipay_trade_status_table_is_explicit():
    from tally.channels import outcome_of
    from tally.domain.notifications import Outcome

    assert {s: outcome_of("alipay", s) for s in ali.TRADE_STATUS} == {
        "TRADE_SUCCESS": Outcome.PAID,
        "TRADE_FINISHED": Outcome.PAID,
        "TRADE_CLOSED": Outcome.CLOSED,
        "WAIT_BUYER_PAY": Outcome.IN_BETWEEN,
    }
    assert outcome_of("alipay", "TRADE_PENDING") is None


def test_refund_notification_is_recognised(asim, pk_merchant):
    params = asim.alipay.refund_params(pk_merchant["app_id"], "O-8", "T8", 1000, 300, "RF-1")
    assert ali.is_refund(params) and not ali.is_refund({"trade_status": "TRADE_SUCCESS"})


# ---------------------------------------------------------------- Alipay: response verification (§6.1)


def test_signed_response_content_is_the_exact_value_text():
    raw = (
        '{"alipay_trade_query_response" : {"code":"10000","subject":"a } { \\" b","n":{"x":[1,{}]}},'
        '"sign":"abc","alipay_cert_sn":"sn"}'
    )
    content, node, top = ali.signed_response_content(raw, "alipay.trade.query")
    assert content == '{"code":"10000","subject":"a } { \\" b","n":{"x":[1,{}]}}'
    assert node == "alipay_trade_query_response" and top["sign"] == "abc"


def test_response_with_a_duplicated_root_node_is_refused():
    raw = '{"alipay_trade_query_response":{"code":"10000"},"alipay_trade_query_response":{"code":"10000"},"sign":"x"}'
    with pytest.raises(ali.AlipayCallError, match="duplicated"):
        ali.signed_response_content(raw, "alipay.trade.query")


@pytest.mark.parametrize("mode", ["public_key", "cert"])
def test_client_precreate_query_close_against_the_simulator(asim, mode, pk_merchant, cert_merchant):
    m = pk_merchant if mode == "public_key" else cert_merchant
    if mode == "cert":
        keys = ali.AlipayKeys.from_pems(
            alipay_certs=[asim.alipay.alipay_cert_pem(i) for i in range(len(asim.alipay.certs))],
            root_cert=m["root_cert_pem"],
        )
        creds = ali.AlipayCredentials(
            m["app_id"],
            ali.load_private_key(m["app_private_key_pem"]),
            keys,
            app_cert_sn=ali.cert_sn(ali.load_certificates(m["app_cert_pem"])[0]),
        )
    else:
        creds = ali.AlipayCredentials(
            m["app_id"],
            ali.load_private_key(m["app_private_key_pem"]),
            ali.AlipayKeys.from_pems(m["alipay_public_key_pem"]),
        )
    client = ali.AlipayClient(asim.url + "/gateway.do", creds)
    qr = client.precreate(
        out_trade_no=f"PC-{mode}", amount_cent=1234, subject="t", notify_url="http://127.0.0.1:9/n"
    )
    assert qr.startswith("https://qr.alipay.com/")
    with pytest.raises(ali.TradeNotExist) as err:  # not scanned yet: "not paid", never "closed" (§6.2)
        client.trade_query(out_trade_no=f"PC-{mode}")
    assert not err.value.retryable
    trade_no = asim.alipay.scan(m["app_id"], f"PC-{mode}")
    assert client.trade_query(out_trade_no=f"PC-{mode}")["trade_status"] == "WAIT_BUYER_PAY"
    assert client.trade_close(trade_no=trade_no)["out_trade_no"] == f"PC-{mode}"
    answer = client.trade_query(out_trade_no=f"PC-{mode}")
    notice = client.query_notice(answer, mchid=m["app_id"])
    assert (notice.trade_state, notice.source, notice.order_total_cent) == ("TRADE_CLOSED", "query", 1234)


def test_client_refuses_a_forged_response(asim, pk_merchant):
    other = ali.AlipayKeys.from_pems(
        asim.alipay.alipay_cert_pem().split("-----END CERTIFICATE-----")[0] and _other_public_key()
    )
    creds = ali.AlipayCredentials(
        pk_merchant["app_id"], ali.load_private_key(pk_merchant["app_private_key_pem"]), other
    )
    client = ali.AlipayClient(asim.url + "/gateway.do", creds)
    with pytest.raises(ali.AlipayCallError, match="does not verify"):
        client.precreate(
            out_trade_no="FORGED-1", amount_cent=1, subject="t", notify_url="http://127.0.0.1:9/n"
        )


def _other_public_key():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


# ---------------------------------------------------------------- WeChat Pay v2


SPEC = {
    "appid": "wxd930ea5d5a258f4f",
    "body": "test",
    "device_info": "1000",
    "mch_id": "10000100",
    "nonce_str": "ibuaiVcKdpRxkhJA",
}
SPEC_KEY = "192006250b4c09247ec02edce69f6a2d"


def test_v2_signatures_match_the_spec_vectors():
    """channel-spec §4 test vectors, and an independent computation with hashlib/hmac."""
    assert wx2.sign(SPEC, SPEC_KEY, "MD5") == "9A0A8659F005D6984697E2CA0A9CF3B7"
    assert (
        wx2.sign(SPEC, SPEC_KEY, "HMAC-SHA256")
        == "6A9AE1657590FD6257D693A078E1C3E4BB6BA4DC30B23E0EE2496E54170DACD6"
    )
    string_a = (
        "appid=wxd930ea5d5a258f4f&body=test&device_info=1000&mch_id=10000100&nonce_str=ibuaiVcKdpRxkhJA"
    )
    assert wx2.string_to_sign({**SPEC, "empty": "", "sign": "X"}, SPEC_KEY) == f"{string_a}&key={SPEC_KEY}"
    independent = hmac.new(
        SPEC_KEY.encode(), f"{string_a}&key={SPEC_KEY}".encode(), hashlib.sha256
    ).hexdigest()
    assert wx2.verify({**SPEC, "sign": independent.upper()}, SPEC_KEY) == "HMAC-SHA256"
    assert wx2.verify({**SPEC, "sign": "9a0a8659f005d6984697e2ca0a9cf3b7"}, SPEC_KEY) == "MD5"


@pytest.mark.parametrize("sign", ["", "9A0A8659F005D6984697E2CA0A9CF3B8", "SHORT", "X" * 64])
def test_R4_v2_bad_signatures_are_refused(sign):
    with pytest.raises(wx2.SignatureError):
        wx2.verify({**SPEC, "sign": sign}, SPEC_KEY)


def test_v2_simulator_notifications_verify(asim):
    for sign_type in ("MD5", "HMAC-SHA256"):
        m = asim.wechatpay_v2.register_test_merchant(sign_type=sign_type)
        body = asim.wechatpay_v2.build_notification(
            asim.wechatpay_v2.payment_params(m["mch_id"], "O-9", 100, attach="<&>]]>")
        )
        params = wx2.parse_xml(body)
        assert params["attach"] == "<&>]]>" and wx2.verify(params, m["api_key"]) == sign_type


@pytest.mark.parametrize(
    "body",
    [
        b'<?xml version="1.0"?><!DOCTYPE foo [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><xml><a>&xxe;</a></xml>',
        b'<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;">]><xml><a>&lol1;</a></xml>',
        b'<!doctype xml SYSTEM "http://127.0.0.1:1/x.dtd"><xml/>',
        b"<xml><a>1</a><a>2</a></xml>",
        b"<xml><a><b/></a></xml>",
        b"<root/>",
        b"<xml>",
        b"",
        b'<?xml version="1.0" encoding="GBK"?><xml><a>1</a></xml>',  # expat raises ValueError here, not ParseError
        b'<?xml version="1.0" encoding="x-nope"?><xml><a>1</a></xml>',
    ],
)
def test_v2_hardened_xml_refuses_dtds_entities_and_odd_shapes(body):
    with pytest.raises(wx2.XmlError):
        wx2.parse_xml(body)


def test_v2_refund_req_info_decrypts_with_md5_of_the_key(asim):
    m = asim.wechatpay_v2.register_test_merchant()
    refund = {
        "out_refund_no": "RF-9",
        "refund_status": "SUCCESS",
        "refund_fee": "100",
        "transaction_id": "4200",
    }
    params = wx2.parse_xml(asim.wechatpay_v2.refund_notification(m["mch_id"], refund))
    assert wx2.decrypt_req_info(params["req_info"], m["api_key"]) == refund
    with pytest.raises(wx2.SignatureError):
        wx2.decrypt_req_info(params["req_info"], "Y" * 32)


def test_v2_notice_amounts_and_partner_ids():
    fields = {
        "mch_id": "1900000109",
        "sub_mch_id": "1900000201",
        "out_trade_no": "O-10",
        "result_code": "SUCCESS",
        "transaction_id": "4200000001",
        "total_fee": "1000",
        "cash_fee": "800",
        "time_end": "20240501120000",
    }
    notice = wx2.to_payment_notice(fields)
    assert (notice.mchid, notice.sp_mchid, notice.order_total_cent, notice.paid_cent) == (
        "1900000201",
        "1900000109",
        1000,
        800,
    )
    assert notice.channel == "wechatpay" and notice.success_time == "2024-05-01T12:00:00+08:00"
    for bad in ("1.00", "-1", "1e2", ""):
        with pytest.raises(wx2.ParseError):
            wx2.to_payment_notice({**fields, "total_fee": bad})


def test_v2_acks_are_xml():
    assert wx2.ack_success() == (
        200,
        "<xml><return_code><![CDATA[SUCCESS]]></return_code><return_msg><![CDATA[OK]]></return_msg></xml>",
    )
    status, body = wx2.ack_failure(401, "rejected")
    assert status == 401 and wx2.parse_xml(body.encode()) == {"return_code": "FAIL", "return_msg": "rejected"}
    assert json.dumps(ali.ack_success()) == '[200, "success"]'
