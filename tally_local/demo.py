"""The demo merchant `make run` sets up on both sides: the simulator (the channel) and Tally."""

from __future__ import annotations

from typing import Any

from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk


def seed_demo(stack: Any) -> dict[str, str]:
    """Register the committed TEST-ONLY merchant with the simulator and add it to Tally."""
    from tally import bootstrap

    sim = stack.simulator
    merchant = sim.register_test_merchant("public_key")
    bootstrap.reset()  # the stack's environment is in place now
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=merchant["mchid"],
        apiv3_key=merchant["apiv3_key"],
        merchant_key_pem=merchant["merchant_private_key_pem"],
        merchant_serial=merchant["merchant_serial"],
        appid=merchant["appid"],
        notify_url=f"{stack.api_url}/notify/wechatpay/{merchant['mchid']}",
        platform_certs=[sim.platform_cert_pem],
        public_key=sim.public_key_pem,
        public_key_id=sim.public_key_id,
    )
    # every event of the demo merchant is delivered, signed, to the simulator's merchant receiver (docs/webhooks.md)
    hook = bootstrap.webhook_endpoints().add(merchant["mchid"], f"{sim.url}/merchant/hooks/demo")
    return {"mchid": merchant["mchid"], "appid": merchant["appid"], "webhook": hook["endpoint_id"]}
