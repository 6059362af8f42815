"""What a WeChat Pay v3 merchant record holds (channel-spec §1.4): the row, the credentials parsed from its
secret (APIv3 key, merchant key and serial, platform certificates or the WeChat Pay public key), and the
directory's v3 accessors (`directory.wechatpay(mchid)`, `directory.client(merchant)`, `add_wechatpay`,
`add_wechatpay_partner`, the platform-certificate download of R3 and of the keys function).

service/merchants.MerchantDirectory keeps the generic part (the cache, the secret store, readiness, expiry
warnings) and forwards these names here (`Desk`); it never sees a v3 field.
"""

from __future__ import annotations

import json
import secrets as _secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.channel import API_BASE, CHANNEL

KIND = (
    CHANNEL.merchant_kind
)  # the merchants table's channel; the secret path tally/merchants/wechatpay/<mchid>


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

    @property
    def sp_mchid(self) -> str | None:
        """The service provider whose credentials act for this sub-merchant (partner mode), else None."""
        return self.row.get("sp_mchid") if self.row.get("mode") == "partner" else None


def credentials_from_secret(secret: dict[str, Any]) -> wx.MerchantCredentials:
    key = str(secret.get("apiv3_key") or "").encode()
    if len(key) != 32:
        raise ValueError("the APIv3 key must be 32 characters")
    platform = wx.PlatformKeys.from_pems(
        secret.get("platform_certificates") or [], secret.get("public_key"), secret.get("public_key_id")
    )
    if not platform.by_serial:
        raise ValueError("give platform certificate(s) or a WeChat Pay public key with its PUB_KEY_ID_")
    if secret.get("public_key_id") and not str(secret["public_key_id"]).startswith(wx.PUBLIC_KEY_ID_PREFIX):
        raise ValueError("a WeChat Pay public key id starts with PUB_KEY_ID_")
    return wx.MerchantCredentials(
        mchid=str(secret["mchid"]),
        apiv3_key=key,
        private_key=wx.load_private_key(secret["merchant_private_key"]),
        serial=str(secret["merchant_serial"]),
        platform=platform,
        public_key_id=secret.get("public_key_id"),
    )


class Desk:
    """The v3 merchants of one MerchantDirectory (`directory`: the cache, the stores, the clock)."""

    def __init__(self, directory: Any):
        self.directory = directory

    # ------------------------------------------------------------ the record
    def wechatpay(self, mchid: str) -> Merchant:
        d = self.directory
        cached = d.cached(KIND, mchid)
        if cached and d.clock() - cached.loaded_at < d.ttl_s:
            return cached
        row = d.row(KIND, mchid, f"no wechatpay merchant {mchid}")
        if row.get("mode") == "partner":
            # A sub-merchant acts through its service provider's credentials (decrypt, sign, verify).
            provider = self.wechatpay(str(row["sp_mchid"]))
            merchant = Merchant(row, provider.creds, d.clock(), provider.last_refresh)
        else:
            secret = d.secret(row)
            merchant = Merchant(row, credentials_from_secret(secret), d.clock())
            if cached is not None:  # keep certificates downloaded since (rotation: several valid at once)
                for serial, key in cached.creds.platform.by_serial.items():
                    merchant.creds.platform.by_serial.setdefault(serial, key)
                for serial, when in cached.creds.platform.expires.items():
                    merchant.creds.platform.expires.setdefault(serial, when)
                merchant.last_refresh = cached.last_refresh
            self._add_stored_certificates(mchid, row, merchant)
            d.warn_expiring(f"wechatpay/{mchid}", merchant.creds.platform.expires)
        d.keep(KIND, mchid, merchant)
        return merchant

    def _add_stored_certificates(self, mchid: str, row: dict[str, Any], merchant: Merchant) -> None:
        """Platform certificates the schedule downloaded (store/keys.py): every container verifies with them
        without a download of its own. Pure public-key merchants have none (one read saved)."""
        certs = self.directory.certs
        if certs is None or (row.get("public_key_id") and not row.get("platform_serials")):
            return
        stored = certs.get(mchid)
        now = self.directory.clock()
        for serial, cert in sorted((stored or {}).get("certs", {}).items()):
            if cert["not_after"] > now and serial not in merchant.creds.platform.by_serial:
                merchant.creds.platform.add_pem(cert["pem"], serial_hint=serial)
        if stored:
            merchant.last_refresh = max(merchant.last_refresh, float(stored["refreshed_at"]))

    def client(self, merchant: Merchant) -> wx.WeChatPayClient:
        d = self.directory
        return wx.WeChatPayClient(
            d.setting(API_BASE),
            merchant.creds,
            timeout_s=d.http_timeout_s,
            clock=d.clock,
            refresh_keys=lambda: self.refresh_platform_keys(merchant),
        )

    # ------------------------------------------------------------ configuring one
    def add_wechatpay(
        self,
        *,
        mchid: str,
        apiv3_key: str,
        merchant_key_pem: str,
        merchant_serial: str,
        appid: str,
        notify_url: str,
        platform_certs: Sequence[str] = (),
        public_key: str | None = None,
        public_key_id: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        d = self.directory
        secret = {
            "channel": KIND,
            "mchid": mchid,
            "apiv3_key": apiv3_key,
            "merchant_private_key": merchant_key_pem,
            "merchant_serial": merchant_serial,
            "platform_certificates": list(platform_certs),
            "public_key": public_key,
            "public_key_id": public_key_id,
        }
        credentials_from_secret(secret)  # refuse a configuration that cannot work before storing it
        row = {
            "pk": f"{KIND}#{mchid}",
            "channel": KIND,
            "mchid": mchid,
            "appid": appid,
            "tenant": tenant or mchid,
            "mode": "direct",
            "notify_url": notify_url,
            "public_key_id": public_key_id,
            "updated_at": d.now_iso(),
            "platform_serials": sorted(wx.PlatformKeys.from_pems(platform_certs).by_serial),
        }
        return d.save(KIND, mchid, secret, row)

    def add_wechatpay_partner(
        self, *, sub_mchid: str, sp_mchid: str, sub_appid: str = "", tenant: str | None = None
    ) -> dict[str, Any]:
        """A sub-merchant of a WeChat Pay service provider: no own secret, the provider's keys act (R11)."""
        provider = self.wechatpay(sp_mchid)
        row = {
            "pk": f"{KIND}#{sub_mchid}",
            "channel": KIND,
            "mchid": sub_mchid,
            "appid": provider.appid,
            "sub_appid": sub_appid or None,
            "tenant": tenant or sub_mchid,
            "mode": "partner",
            "sp_mchid": sp_mchid,
            "notify_url": provider.notify_url,
            "updated_at": self.directory.now_iso(),
        }
        return self.directory.put_row(KIND, sub_mchid, row)

    # ------------------------------------------------------------ key rotation, off the hot path
    def refresh_platform_certificates(
        self, mchids: list[str], max_age_s: float = 12 * 3600
    ) -> dict[str, bool]:
        """The schedule's job (functions/keys): download WeChat platform certificates for cert-mode merchants
        whose stored set is older than `max_age_s`, merge them with the stored ones that are still valid
        (several valid at once: an old certificate stays until it expires) and store them for every container
        (store/keys.py). A callback rarely meets an unknown serial; R3's on-miss download stays the fallback.
        Returns {mchid: downloaded}; a failed download counts PlatformCertRefreshFailed (alarmed)."""
        d = self.directory
        done = {}
        for mchid in mchids:
            merchant = self.wechatpay(mchid)
            if merchant.sp_mchid:
                continue  # a sub-merchant uses its provider's certificates
            if all(s.startswith(wx.PUBLIC_KEY_ID_PREFIX) for s in merchant.creds.platform.by_serial):
                continue  # public-key mode: nothing to download (§1.4)
            stored = d.certs.get(mchid) if d.certs is not None else None
            last = float(stored["refreshed_at"]) if stored else merchant.last_refresh
            if d.clock() - last < max_age_s:
                continue
            downloaded = self._download(merchant)
            done[mchid] = downloaded is not None
            if downloaded is None:
                d.refresh_failed()
                continue
            now = d.clock()
            merchant.last_refresh = now
            keep = {
                serial: cert
                for serial, cert in ((stored or {}).get("certs") or {}).items()
                if cert["not_after"] > now
            }
            for serial, pem in downloaded:
                keep[serial] = {"pem": pem, "not_after": int(wx.certificate_expiry(pem))}
            if d.certs is not None:
                d.certs.put(mchid, keep, now)
            d.refreshed()
            d.warn_expiring(f"wechatpay/{mchid}", merchant.creds.platform.expires)
        return done

    def refresh_platform_keys(self, merchant: Merchant, *, force: bool = False) -> bool:
        """One download of the platform certificates (R3), at most once a minute per merchant."""
        d = self.directory
        now = d.clock()
        if not force and now - merchant.last_refresh < d.refresh_every_s:
            return False
        merchant.last_refresh = now
        downloaded = self._download(merchant)
        if downloaded is None:
            return False
        d.refreshed()
        d.warn_expiring(
            f"wechatpay/{merchant.creds.mchid}",
            {
                s: merchant.creds.platform.expires[s]
                for s, _ in downloaded
                if s in merchant.creds.platform.expires
            },
        )
        return True

    def _download(self, merchant: Merchant) -> list[tuple[str, str]] | None:
        """GET /v3/certificates (verified, decrypted with the APIv3 key); each certificate joins the verifying keys."""
        try:
            downloaded = self.client(merchant).certificates()
        except (wx.WeChatCallError, wx.DecryptError, ValueError, KeyError) as exc:
            self.directory.log_warning(
                "platform certificate download failed",
                mchid=merchant.creds.mchid,
                error=str(exc)[:300],
            )
            return None
        for serial, pem in downloaded:
            merchant.creds.platform.add_pem(pem, serial_hint=serial)
        return downloaded

    # ------------------------------------------------------------ what service/merchants asks every channel
    def expiries(self, mchid: str) -> dict[str, float]:
        """Every certificate's expiry (epoch s): a sub-merchant has none of its own (its provider's act)."""
        merchant = self.wechatpay(mchid)
        return {} if merchant.sp_mchid else dict(merchant.creds.platform.expires)

    def check_expiry(self, mchid: str) -> list[str]:
        merchant = self.wechatpay(mchid)
        return (
            []
            if merchant.sp_mchid
            else self.directory.warn_expiring(f"wechatpay/{mchid}", merchant.creds.platform.expires)
        )

    def local_check(
        self, mchid: str, add: Callable[[str, bool, str], None], expiry: Callable[[str, float], None]
    ) -> None:
        """`tally merchant check`: the APIv3 key decrypts a test resource, the merchant key signs, platform
        keys are present; each platform certificate's expiry."""
        merchant = self.wechatpay(mchid)
        creds = merchant.creds
        probe = {"mchid": mchid, "out_trade_no": "TALLY-CHECK", "trade_state": "SUCCESS"}
        nonce = _secrets.token_hex(6)
        sealed = wx.aes_gcm_encrypt(creds.apiv3_key, nonce, "transaction", json.dumps(probe).encode())
        opened = wx.open_resource(
            {
                "resource": {
                    "algorithm": "AEAD_AES_256_GCM",
                    "nonce": nonce,
                    "associated_data": "transaction",
                    "ciphertext": sealed,
                }
            },
            creds.apiv3_key,
        )
        add("APIv3 key decrypts a test resource", opened == probe, "AEAD_AES_256_GCM round trip")
        signature = wx.rsa_sign(creds.private_key, b"tally merchant check\n")
        add("merchant key signs", bool(signature), f"serial {creds.serial}")
        add("platform keys", bool(creds.platform.by_serial), ", ".join(sorted(creds.platform.by_serial)))
        if merchant.sp_mchid:
            add("service provider", True, f"sub-merchant of {merchant.sp_mchid}")
        for serial, when in sorted(creds.platform.expires.items()):
            expiry(f"platform certificate {serial}", when)


def wechatpay_v3_desk(directory: Any) -> Desk:
    """This channel's merchant desk over a MerchantDirectory (service/merchants.py `desk`), typed: what a caller
    of this channel's accessors (`wechatpay_v3_desk(directory).add_...`) holds."""
    desk: Desk = directory.desk(CHANNEL)
    return desk
