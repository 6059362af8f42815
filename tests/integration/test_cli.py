"""The `tally` command: merchant add, order show, offline verify (same code as the notify function)."""

import json

import pytest

from tally_cli import merchant as cli_merchant
from tally_cli import order as cli_order
from tally_cli.main import main
from tally_cli.order import render_order
from tally_local.samples import SAMPLE_TIMESTAMP


@pytest.fixture
def sample(tmp_path, sim):
    m = sim.register_test_merchant()
    resource = sim.transaction_resource(m["mchid"], "CLI-ORDER-0001", 250)
    headers, body = sim.build_notification(m["mchid"], resource, timestamp=SAMPLE_TIMESTAMP)
    (tmp_path / "headers.json").write_text(json.dumps(headers))
    (tmp_path / "body.json").write_bytes(body)
    (tmp_path / "pub.pem").write_text(sim.public_key_pem)
    (tmp_path / "cert.pem").write_text(sim.platform_cert_pem)
    return m, resource, tmp_path


def verify_args(tmp, m, *extra):
    return [
        "verify",
        "wechatpay",
        "--headers",
        str(tmp / "headers.json"),
        "--body",
        str(tmp / "body.json"),
        "--apiv3-key",
        m["apiv3_key"],
        "--now",
        str(SAMPLE_TIMESTAMP),
        *extra,
    ]


def test_verify_decrypts_a_good_callback(sample, sim, capsys):
    m, resource, tmp = sample
    code = main(
        verify_args(
            tmp, m, "--public-key", str(tmp / "pub.pem"), "--public-key-id", sim.public_key_id, "--json"
        )
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and out["resource"] == resource


@pytest.mark.parametrize("problem", ["wrong key", "stale", "tampered", "no key for serial"])
def test_verify_explains_why_a_callback_was_rejected_R4_R5(sample, sim, capsys, problem):
    m, _, tmp = sample
    args = verify_args(tmp, m, "--public-key", str(tmp / "pub.pem"), "--public-key-id", sim.public_key_id)
    if problem == "wrong key":
        args[args.index("--apiv3-key") + 1] = "Y" * 32
    elif problem == "stale":
        args[args.index("--now") + 1] = str(SAMPLE_TIMESTAMP + 600)
    elif problem == "tampered":
        (tmp / "body.json").write_bytes((tmp / "body.json").read_bytes().replace(b'"id":"', b'"id":"X'))
    elif problem == "no key for serial":
        args = verify_args(tmp, m, "--platform-cert", str(tmp / "cert.pem"))
    assert main(args) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAILED: ")
    assert m["apiv3_key"] not in out  # no secret in the output


def test_merchant_add_and_order_show_against_local_state(h, tmp_path, monkeypatch, capsys, sim):
    m = sim.register_test_merchant()
    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:3000", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    local = {**state, "env": h.env}  # in-process moto: no endpoint to point at
    for module in (cli_merchant, cli_order):
        monkeypatch.setattr(module, "connect", lambda args: local)
    key = tmp_path / "key.pem"
    key.write_text(m["merchant_private_key_pem"])
    pub = tmp_path / "pub.pem"
    pub.write_text(sim.public_key_pem)
    code = main(
        [
            "merchant",
            "add",
            "wechatpay",
            "--mchid",
            m["mchid"],
            "--apiv3-key",
            m["apiv3_key"],
            "--merchant-key",
            str(key),
            "--merchant-serial",
            m["merchant_serial"],
            "--appid",
            m["appid"],
            "--public-key",
            str(pub),
            "--public-key-id",
            sim.public_key_id,
            "--local",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and m["apiv3_key"] not in out and "notify/wechatpay/" + m["mchid"] in out
    h.create_order(m["mchid"], "CLI-SHOW-0001", amount_cent=1234)
    assert main(["order", "show", m["mchid"], "CLI-SHOW-0001", "--local", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["status"] == "WAIT_PAY" and view["amount_cent"] == 1234
    assert "amount ¥12.34" in render_order(view)
    assert "refunds reserved" not in render_order(view)
    held = render_order({**view, "refund_holds": {"R20261130000000ABCDEFGHIJKL": 60}})  # docs/runbook.md
    assert "refunds reserved, answer not stored yet: R20261130000000ABCDEFGHIJKL ¥0.60" in held
    assert main(["order", "show", m["mchid"], "NOPE-000001", "--local"]) == 1
    assert "no order" in capsys.readouterr().err


def test_merchant_add_refuses_incomplete_keys(h, tmp_path, sim, capsys, monkeypatch):
    monkeypatch.setattr(cli_merchant, "connect", lambda args: {"api_url": "http://x", "env": h.env})
    m = sim.register_test_merchant()
    key = tmp_path / "key.pem"
    key.write_text(m["merchant_private_key_pem"])
    code = main(
        [
            "merchant",
            "add",
            "wechatpay",
            "--mchid",
            m["mchid"],
            "--apiv3-key",
            "short",
            "--merchant-key",
            str(key),
            "--merchant-serial",
            "X",
            "--public-key",
            str(key),
            "--public-key-id",
            "PUB_KEY_ID_1",
            "--local",
        ]
    )
    assert code == 1 and "tally:" in capsys.readouterr().err
