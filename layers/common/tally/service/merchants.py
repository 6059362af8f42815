"""Merchant configuration: a row in the merchants table, credentials in Secrets Manager."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tally.channels import wechatpay_v3 as wx
from tally.observability import M, count, logger
from tally.store.tables import MerchantStore, iso_now


class UnknownMerchant(LookupError):
    pass


@dataclass
class Merchant:
    row: dict[str, Any]
    creds: wx.MerchantCredentials
    loaded_at: float
    last_refresh: float = 0.0

    @property
    def notify_url(self) -> str:
        return str(self.row.get("notify_url") or "")

    @property
    def appid(self) -> str:
        return str(self.row.get("appid") or "")


class MerchantDirectory:
    """Credentials parsed once per container (loading a PEM key costs ~30 ms), cached for `ttl_s`."""

    def __init__(self, store: MerchantStore, secrets: Any, secret_prefix: str, api_base: str,
                 *, clock: Callable[[], float] = time.time, ttl_s: float = 300, refresh_every_s: float = 60,
                 http_timeout_s: float = 3.0):
        self.store = store
        self.secrets = secrets
        self.secret_prefix = secret_prefix
        self.api_base = api_base
        self.clock = clock
        self.ttl_s = ttl_s
        self.refresh_every_s = refresh_every_s
        self.http_timeout_s = http_timeout_s
        self._cache: dict[str, Merchant] = {}
        self._lock = threading.Lock()

    def wechatpay(self, mchid: str) -> Merchant:
        cached = self._cache.get(mchid)
        if cached and self.clock() - cached.loaded_at < self.ttl_s:
            return cached
        row = self.store.get(wx.CHANNEL, mchid)
        if row is None:
            raise UnknownMerchant(f"no wechatpay merchant {mchid}")
        secret = json.loads(self.secrets.get_secret_value(SecretId=row["secret_name"])["SecretString"])
        merchant = Merchant(row, credentials_from_secret(secret), self.clock())
        with self._lock:
            self._cache[mchid] = merchant
        return merchant

    def client(self, merchant: Merchant) -> wx.WeChatPayClient:
        return wx.WeChatPayClient(self.api_base, merchant.creds, timeout_s=self.http_timeout_s, clock=self.clock)

    def refresh_platform_keys(self, merchant: Merchant) -> bool:
        """One download of the platform certificates (R3), at most once a minute per merchant."""
        now = self.clock()
        if now - merchant.last_refresh < self.refresh_every_s:
            return False
        merchant.last_refresh = now
        try:
            downloaded = self.client(merchant).certificates()
        except wx.ChannelError as exc:
            logger.warning("platform certificate refresh failed", extra={"mchid": merchant.creds.mchid,
                                                                         "error": str(exc)})
            return False
        for serial, pem in downloaded:
            merchant.creds.platform.by_serial[serial] = wx.load_verifying_key(pem)[1]
        count(M.CERT_REFRESHED)
        return True

    def add_wechatpay(self, *, mchid: str, apiv3_key: str, merchant_key_pem: str, merchant_serial: str,
                      appid: str, notify_url: str, platform_certs: list[str] = (), public_key: str | None = None,
                      public_key_id: str | None = None, tenant: str | None = None) -> dict[str, Any]:
        secret = {
            "channel": wx.CHANNEL, "mchid": mchid, "apiv3_key": apiv3_key,
            "merchant_private_key": merchant_key_pem, "merchant_serial": merchant_serial,
            "platform_certificates": list(platform_certs), "public_key": public_key, "public_key_id": public_key_id,
        }
        credentials_from_secret(secret)  # refuse a configuration that cannot work before storing it
        name = f"{self.secret_prefix}{wx.CHANNEL}/{mchid}"
        _put_secret(self.secrets, name, json.dumps(secret))
        row = {
            "pk": f"{wx.CHANNEL}#{mchid}", "channel": wx.CHANNEL, "mchid": mchid, "appid": appid,
            "tenant": tenant or mchid, "mode": "direct", "secret_name": name, "notify_url": notify_url,
            "public_key_id": public_key_id, "updated_at": iso_now(self.clock()),
            "platform_serials": sorted(wx.PlatformKeys.from_pems(platform_certs).by_serial),
        }
        self.store.put(row)
        self._cache.pop(mchid, None)
        return row


def credentials_from_secret(secret: dict[str, Any]) -> wx.MerchantCredentials:
    key = str(secret.get("apiv3_key") or "").encode()
    if len(key) != 32:
        raise ValueError("the APIv3 key must be 32 characters")
    platform = wx.PlatformKeys.from_pems(secret.get("platform_certificates") or [], secret.get("public_key"),
                                         secret.get("public_key_id"))
    if not platform.by_serial:
        raise ValueError("give platform certificate(s) or a WeChat Pay public key with its PUB_KEY_ID_")
    if secret.get("public_key_id") and not str(secret["public_key_id"]).startswith(wx.PUBLIC_KEY_ID_PREFIX):
        raise ValueError("a WeChat Pay public key id starts with PUB_KEY_ID_")
    return wx.MerchantCredentials(
        mchid=str(secret["mchid"]), apiv3_key=key, private_key=wx.load_private_key(secret["merchant_private_key"]),
        serial=str(secret["merchant_serial"]), platform=platform, public_key_id=secret.get("public_key_id"),
    )


def _put_secret(secrets: Any, name: str, value: str) -> None:
    try:
        secrets.create_secret(Name=name, SecretString=value)
    except secrets.exceptions.ResourceExistsException:
        secrets.put_secret_value(SecretId=name, SecretString=value)
