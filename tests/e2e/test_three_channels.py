"""The embedded stack runs WeChat Pay v3, Alipay and WeChat Pay v2 side by side: real HTTP callbacks from the
simulator through the front door, the SQS pump and the worker into the ledger."""

import time

import pytest
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tally_local.stack import EmbeddedStack


@pytest.fixture
def stack(monkeypatch):
    for var in ("AWS_ENDPOINT_URL",):
        monkeypatch.delenv(var, raising=False)
    with EmbeddedStack(
        api_port=0,
        time_scale=0.001,
        state_dir="/tmp/tally-e2e-channels",
        simulator_options={"fixed_keys": True},
    ) as running:
        from tally import bootstrap

        bootstrap.reset()
        yield running
    from tally import bootstrap

    bootstrap.reset()


def test_three_channels_side_by_side_end_to_end(stack):
    from tally import bootstrap

    sim, api = stack.simulator, stack.api_url.rstrip("/")
    directory, orders = bootstrap.merchants(), bootstrap.order_service()
    wx = sim.register_test_merchant("public_key")
    wechatpay_v3_desk(directory).add_wechatpay(
        mchid=wx["mchid"],
        apiv3_key=wx["apiv3_key"],
        merchant_key_pem=wx["merchant_private_key_pem"],
        merchant_serial=wx["merchant_serial"],
        appid=wx["appid"],
        notify_url=f"{api}/notify/wechatpay/{wx['mchid']}",
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    ali = sim.alipay.register_test_merchant("cert")
    alipay_desk(directory).add_alipay(
        app_id=ali["app_id"],
        app_private_key=ali["app_private_key_pem"],
        notify_url=f"{api}/notify/alipay/{ali['app_id']}",
        alipay_cert=ali["alipay_cert_pem"],
        app_cert=ali["app_cert_pem"],
        root_cert=ali["root_cert_pem"],
    )
    v2 = sim.wechatpay_v2.register_test_merchant(sign_type="HMAC-SHA256")
    wechatpay_v2_desk(directory).add_wechatpay_v2(
        mchid=v2["mch_id"], api_key=v2["api_key"], notify_url=f"{api}/notify/wechatpay-v2/{v2['mch_id']}"
    )

    orders.create(
        {"mchid": wx["mchid"], "out_trade_no": "E2E-WX-0001", "amount_cent": 101, "description": "wx"}
    )
    made = orders.create(
        {
            "mchid": ali["app_id"],
            "out_trade_no": "E2E-ALI-001",
            "amount_cent": 202,
            "description": "ali",
            "channel": "alipay",
        }
    )
    assert made["qr_code"].startswith("https://qr.alipay.com/")
    orders.create(
        {
            "mchid": v2["mch_id"],
            "out_trade_no": "E2E-V2-0001",
            "amount_cent": 303,
            "description": "v2",
            "channel": "wechatpay_v2",
            "prepay": False,
        }
    )
    sim.wechatpay_v2._unifiedorder(
        v2["mch_id"],
        {
            "mch_id": v2["mch_id"],
            "out_trade_no": "E2E-V2-0001",
            "total_fee": "303",
            "notify_url": f"{api}/notify/wechatpay-v2/{v2['mch_id']}",
        },
    )

    sim.wait_delivered(sim.pay(wx["mchid"], "E2E-WX-0001"), timeout=15)
    sim.alipay.wait_delivered(sim.alipay.pay(ali["app_id"], "E2E-ALI-001", receipt_amount=200), timeout=15)
    sim.wechatpay_v2.wait_delivered(sim.wechatpay_v2.pay(v2["mch_id"], "E2E-V2-0001"), timeout=15)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        stack.drain(timeout=5)
        views = [
            orders.show(m, o)
            for m, o in (
                (wx["mchid"], "E2E-WX-0001"),
                (ali["app_id"], "E2E-ALI-001"),
                (v2["mch_id"], "E2E-V2-0001"),
            )
        ]
        if all(v["status"] == "PAID" for v in views):
            break
        time.sleep(0.1)
    assert [v["status"] for v in views] == ["PAID", "PAID", "PAID"]
    assert [v["paid_cent"] for v in views] == [101, 200, 303]  # Alipay books receipt_amount (R13)
    assert [v["raw"][0]["pk"].split("#")[0] for v in views] == ["wechatpay", "alipay", "wechatpay"]
