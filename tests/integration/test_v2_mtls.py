"""WeChat Pay v2 refunds in production need mutual TLS (issue #16): the merchant secret carries the API client
certificate, the refund client presents it, and the simulator's TLS listener (real certificates made with
`cryptography`, ssl.CERT_REQUIRED) refuses a refund without it."""

from __future__ import annotations

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk

from tests.integration.refund_helpers import WeChatV2Kit, refund


@pytest.fixture
def over_tls(h, sim, monkeypatch, tmp_path):
    url = sim.start_tls()
    ca = tmp_path / "wechat-ca.pem"
    ca.write_text(sim.tls_ca.pem)
    monkeypatch.setenv("WECHATPAY_API_BASE", url)
    monkeypatch.setenv("TALLY_WECHATPAY_CA_FILE", str(ca))
    return url


def _configure(h, kit, cert=None, key=None):
    wechatpay_v2_desk(bootstrap.merchants()).add_wechatpay_v2(
        mchid=kit.mid,
        api_key=h.sim.wechatpay_v2.merchants[kit.mid].api_key,
        notify_url=f"http://127.0.0.1:9/notify/wechatpay-v2/{kit.mid}",
        client_cert_pem=cert,
        client_key_pem=key,
    )
    bootstrap.reset()


def test_a_v2_refund_presents_the_merchant_s_api_client_certificate(h, over_tls):
    kit = WeChatV2Kit(h)
    kit.hold()
    try:
        otn, _ = kit.paid_order(100)
        cert, key = h.sim.wechatpay_v2.issue_client_cert(kit.mid)
        _configure(h, kit)  # no client certificate in the secret: the TLS handshake is refused
        status, body = refund(h, kit.mid, otn, 30, refund_no="R-MTLS-NONE")
        assert body.get("status") != "ACCEPTED" and kit.channel_refunds("R-MTLS-NONE") == [], (status, body)
        _configure(h, kit, cert, key)
        status, body = refund(h, kit.mid, otn, 40, refund_no="R-MTLS-1")
        assert (status, body["status"]) == (201, "ACCEPTED"), body
        assert [r["refund_fee"] for r in kit.channel_refunds("R-MTLS-1")] == [40]
    finally:
        kit.reset()


def test_another_merchant_s_certificate_is_refused_by_the_channel(h, over_tls):
    kit = WeChatV2Kit(h)
    other = WeChatV2Kit(h)
    kit.hold()
    try:
        otn, _ = kit.paid_order(100)
        h.sim.wechatpay_v2.issue_client_cert(kit.mid)
        cert, key = h.sim.wechatpay_v2.issue_client_cert(other.mid)
        _configure(h, kit, cert, key)  # a valid certificate from the same CA, but not this merchant's
        status, body = refund(h, kit.mid, otn, 30, refund_no="R-MTLS-OTHER")
        assert body.get("status") != "ACCEPTED" and kit.channel_refunds("R-MTLS-OTHER") == [], (status, body)
    finally:
        kit.reset()


def test_a_certificate_that_cannot_work_is_refused_before_it_is_stored(h, sim):
    sim.start_tls()
    kit = WeChatV2Kit(h)
    cert, _ = sim.wechatpay_v2.issue_client_cert(kit.mid)
    _, other_key = sim.wechatpay_v2.issue_client_cert(kit.mid)
    with pytest.raises(ValueError, match="does not belong"):
        _configure(h, kit, cert, other_key)
    with pytest.raises(ValueError, match="both"):
        _configure(h, kit, cert, None)


def test_tally_merchant_add_wechatpay_v2_takes_the_client_certificate(h, sim, tmp_path, capsys):
    import json

    import boto3

    from tests.integration.stack_helpers import cli as _cli
    from tests.integration.stack_helpers import deploy_stack as _deploy_stack

    sim.start_tls()
    m = sim.wechatpay_v2.register_test_merchant(None, "MD5")
    cert, key = sim.wechatpay_v2.issue_client_cert(m["mch_id"])
    (tmp_path / "apiclient_cert.pem").write_text(cert)
    (tmp_path / "apiclient_key.pem").write_text(key)
    (tmp_path / "apikey.txt").write_text(m["api_key"])
    _deploy_stack("tally", h.env)
    argv = [
        "merchant",
        "add",
        "wechatpay-v2",
        "--mchid",
        m["mch_id"],
        "--api-key",
        f"@{tmp_path / 'apikey.txt'}",
    ]
    argv += [
        "--client-cert",
        str(tmp_path / "apiclient_cert.pem"),
        "--client-key",
        str(tmp_path / "apiclient_key.pem"),
    ]
    assert _cli(*argv, "--stack", "tally") == 0
    assert "PRIVATE KEY" not in capsys.readouterr().out
    name = f"tally/tally/merchants/wechatpay_v2/{m['mch_id']}"
    stored = json.loads(boto3.client("secretsmanager").get_secret_value(SecretId=name)["SecretString"])
    assert (stored["client_cert"], stored["client_key"]) == (cert, key)
    merchant = wechatpay_v2_desk(bootstrap.merchants()).wechatpay_v2(m["mch_id"])
    assert merchant.client_cert == cert
