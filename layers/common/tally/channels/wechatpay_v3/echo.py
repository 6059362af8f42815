"""WeChat Pay v3's security echo (商户签名验签/加解密测试, docs/channel-spec.md §2.6): a call
that moves no money. `POST /v3/security/echo` with `echo_message` (required) and `notify_url` (optional), header
`Wechatpay-Serial` (required: the WeChat Pay public key id or a platform certificate serial), signed like every
v3 request; with a `notify_url` the channel then sends a signed, encrypted callback whose `event_type` is
`SECURITY_ECHO.SUCCESS` (pay.weixin.qq.com/doc/v3/partner/4019605946), which notify.py verifies, decrypts and
acknowledges. The documentation lists it for service providers', platform merchants' and institutions' credentials.

Not confirmed from the documentation: the answer's fields (the simulator repeats `echo_message`; only the answer's
signature is relied on) and the callback's decrypted content (never read). `encrypted_echo_message` (optional) is
not sent."""

from __future__ import annotations

from typing import Any

from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

ECHO_PATH = "/v3/security/echo"


def security_echo(merchants: Any, merchant_id: str, notify_url: str, message: str) -> str:
    """Ask the channel to echo `message` and call `notify_url` back; the message its verified answer repeats ("" if
    none). errors.NotFound: no v3 merchant `merchant_id`; errors.ChannelError: refused, unreachable, unverified."""
    merchant = wechatpay_v3_desk(merchants).wechatpay(merchant_id)
    client = wechatpay_v3_desk(merchants).client(merchant)
    serial, _key = client.encryption_key()  # the key the answer and the callback are to be signed with
    answer = client.exchange(
        "POST", ECHO_PATH, {"echo_message": message, "notify_url": notify_url}, serial=serial
    )
    data = answer.data if isinstance(answer.data, dict) else {}
    return str(data.get("echo_message") or "")
