"""WeChat Pay v2 live credential check (R47): /pay/orderquery of a number that cannot exist.

The answer ORDERNOTEXIST, after WeChatPayV2Client verified its sign with our API key, proves the key both
ways. A wrong API key is answered `return_code` FAIL, `return_msg` 签名错误 (channel-spec §4)."""

from __future__ import annotations

import secrets
from typing import Any

from tally.channels.doctor import FAIL, PASS, UNKNOWN, Finding, probe_number
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk

CHECK = "POST /pay/orderquery (query an order that cannot exist)"
TRANSIENT = {"NETWORK", "HTTP_5XX", "SYSTEMERROR"}


def live_check(directory: Any, merchant_id: str, *, download: bool = True) -> list[Finding]:
    client = wechatpay_v2_desk(directory).wechatpay_v2_client(
        wechatpay_v2_desk(directory).wechatpay_v2(merchant_id)
    )
    try:
        client.order_query(probe_number(secrets.token_hex(8)))
    except wx2.WeChatV2CallError as exc:
        return [_finding(exc)]
    return [Finding(PASS, CHECK, detail="SUCCESS, sign verified")]


def _finding(exc: wx2.WeChatV2CallError) -> Finding:
    detail = str(exc)[:240]
    if exc.word == "ORDERNOTEXIST":
        return Finding(PASS, CHECK, detail="ORDERNOTEXIST, sign verified with the API key")
    if exc.retryable or exc.word in TRANSIENT or exc.word.startswith("HTTP_5"):
        return Finding(UNKNOWN, CHECK, "could not check: WeChat Pay or the network failed", detail=detail)
    if exc.word == "RETURN_FAIL" and "签名错误" in detail:
        return Finding(
            FAIL,
            CHECK,
            "the v2 API key is not the one set for this mchid (WeChat answers 签名错误)",
            "copy the API key (商户平台 > API安全 > API密钥, not the APIv3 key) into `tally merchant add "
            "wechatpay-v2 --api-key`",
            detail,
        )
    if exc.word == "RESPONSE_NOT_VERIFIED":
        return Finding(
            FAIL,
            CHECK,
            "WeChat's answer does not verify with the configured v2 API key",
            "set the API key of this mchid again (`tally merchant add wechatpay-v2 --api-key`)",
            detail,
        )
    return Finding(FAIL, CHECK, f"WeChat Pay refused the query: {exc.word}", "see the detail", detail)
