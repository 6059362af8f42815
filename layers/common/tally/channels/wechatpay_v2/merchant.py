"""What a WeChat Pay v2 merchant record holds: the row, the 32-character API key and, for /secapi/ refunds,
the API client certificate (mutual TLS); and the directory's v2 accessors (`directory.wechatpay_v2(mchid)`,
`wechatpay_v2_client`, `add_wechatpay_v2`). service/merchants.MerchantDirectory forwards these names here.
"""

from __future__ import annotations

import secrets as _secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v2.channel import CHANNEL
from tally.channels.wechatpay_v3.channel import API_BASE

KIND = CHANNEL.merchant_kind  # "wechatpay_v2": its own merchant rows and secrets (v2 stores v3's channel)


@dataclass
class WeChatV2Merchant:
    row: dict[str, Any]
    api_key: str
    loaded_at: float
    client_cert: str | None = None  # apiclient_cert.pem: /secapi/ (refunds) needs mutual TLS
    client_key: str | None = None

    @property
    def notify_url(self) -> str:
        return str(self.row.get("notify_url") or "")

    @property
    def appid(self) -> str:
        return str(self.row.get("appid") or "")


def v2_api_key(secret: dict[str, Any]) -> str:
    key = str(secret.get("api_key") or "")
    if len(key) != 32 or not key.isascii():
        raise ValueError("the WeChat Pay v2 API key must be 32 ASCII characters")
    return key


class Desk:
    """The v2 merchants of one MerchantDirectory."""

    def __init__(self, directory: Any):
        self.directory = directory

    def wechatpay_v2(self, mchid: str) -> WeChatV2Merchant:
        d = self.directory
        cached = d.cached(KIND, mchid)
        if cached and d.clock() - cached.loaded_at < d.ttl_s:
            return cached
        row = d.row(KIND, mchid, f"no wechatpay v2 merchant {mchid}")
        secret = d.secret(row)
        merchant = WeChatV2Merchant(
            row, v2_api_key(secret), d.clock(), secret.get("client_cert"), secret.get("client_key")
        )
        d.keep(KIND, mchid, merchant)
        return merchant

    def wechatpay_v2_client(self, merchant: WeChatV2Merchant) -> wx2.WeChatPayV2Client:
        """The v2 API (same host as v3): unified order and order query/close, signed with the API key."""
        d = self.directory
        return wx2.WeChatPayV2Client(
            d.setting(API_BASE),
            str(merchant.row["mchid"]),
            merchant.api_key,
            merchant.appid,
            timeout_s=d.http_timeout_s,
        )

    def add_wechatpay_v2(
        self,
        *,
        mchid: str,
        api_key: str,
        notify_url: str,
        appid: str = "",
        tenant: str | None = None,
        client_cert_pem: str | None = None,
        client_key_pem: str | None = None,
        bill_source: str | None = None,
    ) -> dict[str, Any]:
        if bill_source not in (None, "v2", "v3"):
            raise ValueError("bill_source is v2 (/pay/downloadbill) or v3 (the v3 bill, R44)")
        secret = {"channel": KIND, "mchid": mchid, "api_key": api_key}
        v2_api_key(secret)
        if client_cert_pem or client_key_pem:  # refunds: the API client certificate for /secapi/ mutual TLS
            from tally.channels.wechatpay_v2.refunds import check_client_certificate

            cert_pem, key_pem = client_cert_pem or "", client_key_pem or ""
            check_client_certificate(cert_pem, key_pem)  # refuses a missing half
            secret |= {"client_cert": cert_pem, "client_key": key_pem}
        row = {
            "pk": f"{KIND}#{mchid}",
            "channel": KIND,
            "mchid": mchid,
            "appid": appid,
            "tenant": tenant or mchid,
            "mode": "direct",
            "notify_url": notify_url,
            "updated_at": self.directory.now_iso(),
        }
        if bill_source:
            row["bill_source"] = (
                bill_source  # which trade bill recon downloads (channels/wechatpay_v2/bills.py)
            )
        return self.directory.save(KIND, mchid, secret, row)

    # ------------------------------------------------------------ what service/merchants asks every channel
    def expiries(self, mchid: str) -> dict[str, float]:
        return {}  # an API key, no certificate

    def check_expiry(self, mchid: str) -> list[str]:
        return []  # an API key, no certificate

    def local_check(
        self, mchid: str, add: Callable[[str, bool, str], None], expiry: Callable[[str, float], None]
    ) -> None:
        """`tally merchant check`: the API key signs and verifies both sign types and decrypts a req_info."""
        merchant = self.wechatpay_v2(mchid)
        fields = {"mch_id": mchid, "nonce_str": _secrets.token_hex(8), "out_trade_no": "TALLY-CHECK"}
        for sign_type in ("MD5", "HMAC-SHA256"):
            signed = {**fields, "sign": wx2.sign(fields, merchant.api_key, sign_type)}
            add(
                f"API key signs and verifies ({sign_type})",
                wx2.verify(signed, merchant.api_key) == sign_type,
                "",
            )
        refund = {"out_refund_no": "TALLY-CHECK", "refund_status": "SUCCESS"}
        add(
            "API key decrypts a test req_info",
            wx2.decrypt_req_info(wx2.encrypt_req_info(refund, merchant.api_key), merchant.api_key) == refund,
            "AES-256-ECB with md5(API key)",
        )


def wechatpay_v2_desk(directory: Any) -> Desk:
    """This channel's merchant desk over a MerchantDirectory (service/merchants.py `desk`), typed: what a caller
    of this channel's accessors (`wechatpay_v2_desk(directory).add_...`) holds."""
    desk: Desk = directory.desk(CHANNEL)
    return desk
