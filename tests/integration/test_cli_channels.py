"""`tally verify alipay|wechatpay-v2`, `tally merchant add alipay|wechatpay-v2`, `tally merchant check`."""

import json

import pytest
from tally.channels.alipay.merchant import alipay_desk

from tally_cli import merchant as cli_merchant
from tally_cli.main import main


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return str(path)


@pytest.mark.parametrize("mode", ["public_key", "cert"])
def test_verify_alipay_prints_the_normalised_notification_in_cents(tmp_path, sim, capsys, mode):
    m = sim.alipay.register_test_merchant(mode)
    body = sim.alipay.build_notification(
        sim.alipay.notification_params(m["app_id"], "CLI-A-1", 12345, receipt_amount=12000)
    )
    keys = (
        ["--alipay-public-key", write(tmp_path, "pk.pem", m["alipay_public_key_pem"])]
        if mode == "public_key"
        else [
            "--alipay-cert",
            write(tmp_path, "a.crt", m["alipay_cert_pem"]),
            "--root-cert",
            write(tmp_path, "r.crt", m["root_cert_pem"]),
        ]
    )
    assert main(["verify", "alipay", "--body", write(tmp_path, "body", body), *keys, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["outcome"] == "PAID"
    assert (out["notice"]["order_total_cent"], out["notice"]["paid_cent"]) == (12345, 12000)
    tampered = body.replace(b"total_amount=123.45", b"total_amount=1.45")
    assert main(["verify", "alipay", "--body", write(tmp_path, "bad", tampered), *keys]) == 1
    assert capsys.readouterr().out.startswith("FAILED: sign does not verify")


def test_verify_wechatpay_v2_payment_and_refund(tmp_path, sim, capsys):
    m = sim.wechatpay_v2.register_test_merchant(sign_type="HMAC-SHA256")
    body = sim.wechatpay_v2.build_notification(sim.wechatpay_v2.payment_params(m["mch_id"], "CLI-V2-1", 990))
    key_file = write(tmp_path, "key", m["api_key"])
    assert (
        main(
            [
                "verify",
                "wechatpay-v2",
                "--body",
                write(tmp_path, "b", body),
                "--api-key",
                "@" + key_file,
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["sign_type"] == "HMAC-SHA256" and out["notice"]["order_total_cent"] == 990
    refund = sim.wechatpay_v2.refund_notification(
        m["mch_id"], {"out_refund_no": "RF-CLI", "refund_fee": "10"}
    )
    assert (
        main(["verify", "wechatpay-v2", "--body", write(tmp_path, "r", refund), "--api-key", m["api_key"]])
        == 0
    )
    assert "RF-CLI" in capsys.readouterr().out
    assert main(["verify", "wechatpay-v2", "--body", write(tmp_path, "b", body), "--api-key", "W" * 32]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAILED:") and m["api_key"] not in out


def test_merchant_add_and_check_every_channel(h, sim, tmp_path, capsys, monkeypatch):
    """`merchant add` stores the configuration (no secret printed); `merchant check` proves it works."""
    monkeypatch.setattr(
        cli_merchant, "connect", lambda args: {"api_url": "http://127.0.0.1:3000", "env": h.env}
    )
    pk = sim.alipay.register_test_merchant("public_key")
    assert (
        main(
            [
                "merchant",
                "add",
                "alipay",
                "--app-id",
                pk["app_id"],
                "--app-private-key",
                write(tmp_path, "k1", pk["app_private_key_pem"]),
                "--alipay-public-key",
                write(tmp_path, "p1", pk["alipay_public_key_pem"]),
                "--local",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"/notify/alipay/{pk['app_id']}" in out and "PRIVATE" not in out
    cert = sim.alipay.register_test_merchant("cert")
    assert (
        main(
            [
                "merchant",
                "add",
                "alipay",
                "--app-id",
                cert["app_id"],
                "--app-private-key",
                write(tmp_path, "k2", cert["app_private_key_pem"]),
                "--alipay-cert",
                write(tmp_path, "c2", cert["alipay_cert_pem"]),
                "--app-cert",
                write(tmp_path, "a2", cert["app_cert_pem"]),
                "--root-cert",
                write(tmp_path, "r2", cert["root_cert_pem"]),
                "--local",
            ]
        )
        == 0
    )
    v2 = sim.wechatpay_v2.register_test_merchant()
    assert (
        main(
            [
                "merchant",
                "add",
                "wechatpay-v2",
                "--mchid",
                v2["mch_id"],
                "--api-key",
                v2["api_key"],
                "--local",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert v2["api_key"] not in out and f"/notify/wechatpay-v2/{v2['mch_id']}" in out
    h.add_merchant(verify_mode="certificate")
    for channel, mid in (
        ("alipay", pk["app_id"]),
        ("alipay", cert["app_id"]),
        ("wechatpay-v2", v2["mch_id"]),
        ("wechatpay", "1900000109"),
    ):
        assert main(["merchant", "check", channel, mid, "--local", "--json"]) == 0, capsys.readouterr()
        result = json.loads(capsys.readouterr().out)
        assert result["ok"] and result["checks"]
        assert v2["api_key"] not in json.dumps(result)
    names = [c["check"] for c in json.loads(_check(capsys, "alipay", cert["app_id"]))["checks"]]
    assert "app private key matches the app certificate" in names and any(
        n.startswith("expiry") for n in names
    )


def test_merchant_check_fails_on_a_certificate_expiring_within_7_days(h, sim, tmp_path, capsys, monkeypatch):
    import datetime as dt

    monkeypatch.setattr(
        cli_merchant, "connect", lambda args: {"api_url": "http://127.0.0.1:3000", "env": h.env}
    )
    sim.alipay.rotate_alipay_cert(not_after=dt.datetime.now(dt.UTC) + dt.timedelta(days=2))
    try:
        m = sim.alipay.register_test_merchant("cert")
        from tally import bootstrap

        alipay_desk(bootstrap.merchants()).add_alipay(
            app_id=m["app_id"],
            app_private_key=m["app_private_key_pem"],
            notify_url="http://127.0.0.1:9/n",
            alipay_cert=m["alipay_cert_pem"],
            app_cert=m["app_cert_pem"],
            root_cert=m["root_cert_pem"],
        )
        assert main(["merchant", "check", "alipay", m["app_id"], "--local"]) == 1
        assert "FAIL expiry Alipay certificate" in capsys.readouterr().out
    finally:
        sim.alipay.rotate_alipay_cert()


def test_merchant_add_alipay_refuses_half_a_certificate_configuration(h, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli_merchant, "connect", lambda args: {"api_url": "http://x", "env": h.env})
    assert (
        main(
            [
                "merchant",
                "add",
                "alipay",
                "--app-id",
                "2021000000000001",
                "--app-private-key",
                write(tmp_path, "k", "x"),
                "--alipay-cert",
                write(tmp_path, "c", "x"),
                "--local",
            ]
        )
        == 1
    )
    assert "certificate mode needs" in capsys.readouterr().err


def _check(capsys, channel, mid):
    assert main(["merchant", "check", channel, mid, "--local", "--json"]) == 0
    return capsys.readouterr().out
