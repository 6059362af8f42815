"""Merchant configuration: a row in the merchants table, credentials in Secrets Manager."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tally import errors
from tally.channels import registry as channel_registry
from tally.channels.alipay import wire as ali
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v3 import wire as wx
from tally.domain.recon import CHINA
from tally.observability import M, count, logger
from tally.store.keys import PlatformCertStore
from tally.store.secrets import SecretStore
from tally.store.tables import MerchantStore, iso_now


class UnknownMerchant(errors.NotFound, LookupError):
    pass


EXPIRY_WARNING_S = 7 * 86400  # a certificate expiring sooner raises PlatformCertExpiring


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


@dataclass
class AlipayMerchant:
    row: dict[str, Any]
    creds: ali.AlipayCredentials
    loaded_at: float
    app_auth_token: str | None = None  # set for a merchant that authorised a service provider's app

    @property
    def notify_url(self) -> str:
        return str(self.row.get("notify_url") or "")

    @property
    def sp_mchid(self) -> str | None:
        return self.row.get("sp_app_id") if self.row.get("mode") == "partner" else None


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


KEPT_ON_UPDATE = ("settlement_lag", "fund_accounts")  # R45: a re-add keeps the fund-flow figures


class MerchantDirectory:
    """Credentials parsed once per container (loading a PEM key costs ~30 ms), cached for `ttl_s`."""

    def __init__(
        self,
        store: MerchantStore,
        secrets: SecretStore,
        secret_prefix: str,
        api_base: str,
        *,
        clock: Callable[[], float] = time.time,
        ttl_s: float = 300,
        refresh_every_s: float = 60,
        http_timeout_s: float = 3.0,
        alipay_gateway: str = "https://openapi.alipay.com/gateway.do",
        certs: PlatformCertStore | None = None,
    ):
        self.store = store
        self.certs = (
            certs  # store/keys.PlatformCertStore: certificates the schedule downloaded, for every container
        )
        self.secrets = secrets
        self.secret_prefix = secret_prefix
        self.api_base = api_base
        self.clock = clock
        self.ttl_s = ttl_s
        self.refresh_every_s = refresh_every_s
        self.http_timeout_s = http_timeout_s
        self.alipay_gateway = alipay_gateway
        self._cache: dict[str, Merchant] = {}
        self._other: dict[str, Any] = {}  # "alipay#app_id", "wechatpay_v2#mchid"
        self._lock = threading.Lock()

    def wechatpay(self, mchid: str) -> Merchant:
        cached = self._cache.get(mchid)
        if cached and self.clock() - cached.loaded_at < self.ttl_s:
            return cached
        row = self.store.get(wx.CHANNEL, mchid)
        if row is None:
            raise UnknownMerchant(f"no wechatpay merchant {mchid}")
        if row.get("mode") == "partner":
            # A sub-merchant acts through its service provider's credentials (decrypt, sign, verify).
            provider = self.wechatpay(str(row["sp_mchid"]))
            merchant = Merchant(row, provider.creds, self.clock(), provider.last_refresh)
        else:
            secret = self._secret(row)
            merchant = Merchant(row, credentials_from_secret(secret), self.clock())
            if cached is not None:  # keep certificates downloaded since (rotation: several valid at once)
                for serial, key in cached.creds.platform.by_serial.items():
                    merchant.creds.platform.by_serial.setdefault(serial, key)
                for serial, when in cached.creds.platform.expires.items():
                    merchant.creds.platform.expires.setdefault(serial, when)
                merchant.last_refresh = cached.last_refresh
            self._add_stored_certificates(mchid, row, merchant)
            self.warn_expiring(f"wechatpay/{mchid}", merchant.creds.platform.expires)
        with self._lock:
            self._cache[mchid] = merchant
        return merchant

    def _add_stored_certificates(self, mchid: str, row: dict[str, Any], merchant: Merchant) -> None:
        """Platform certificates the schedule downloaded (store/keys.py): every container verifies with them
        without a download of its own. Pure public-key merchants have none (one read saved)."""
        if self.certs is None or (row.get("public_key_id") and not row.get("platform_serials")):
            return
        stored = self.certs.get(mchid)
        now = self.clock()
        for serial, cert in sorted((stored or {}).get("certs", {}).items()):
            if cert["not_after"] > now and serial not in merchant.creds.platform.by_serial:
                merchant.creds.platform.add_pem(cert["pem"], serial_hint=serial)
        if stored:
            merchant.last_refresh = max(merchant.last_refresh, float(stored["refreshed_at"]))

    def _secret(self, row: dict[str, Any]) -> dict[str, Any]:
        return self.secrets.get(row["secret_name"])

    def warn_expiring(self, who: str, expires: dict[str, float]) -> list[str]:
        """Count PlatformCertExpiring for every certificate that expires within 7 days (alarmed)."""
        now = self.clock()
        soon = [name for name, when in expires.items() if when - now < EXPIRY_WARNING_S]
        for name in soon:
            count(M.CERT_EXPIRING)
            logger.warning(
                "certificate expires within 7 days",
                extra={
                    "merchant": who,
                    "certificate": name,
                    "days_left": round((expires[name] - now) / 86400, 1),
                },
            )
        return soon

    # ------------------------------------------------------------ Alipay

    def alipay(self, app_id: str) -> AlipayMerchant:
        key = f"{ali.CHANNEL}#{app_id}"
        cached = self._other.get(key)
        if cached and self.clock() - cached.loaded_at < self.ttl_s:
            return cached
        row = self.store.get(ali.CHANNEL, app_id)
        if row is None:
            raise UnknownMerchant(f"no alipay merchant {app_id}")
        if row.get("mode") == "partner":  # app_auth_token: the provider's app acts for this merchant
            provider = self.alipay(str(row["sp_app_id"]))
            merchant = AlipayMerchant(
                row, provider.creds, self.clock(), app_auth_token=str(self._secret(row)["app_auth_token"])
            )
        else:
            merchant = AlipayMerchant(row, alipay_credentials(self._secret(row), self.clock()), self.clock())
            expires = dict(merchant.creds.keys.expires)
            if merchant.creds.app_cert_expires:
                expires["app_cert"] = merchant.creds.app_cert_expires
            self.warn_expiring(f"alipay/{app_id}", expires)
        with self._lock:
            self._other[key] = merchant
        return merchant

    def alipay_client(self, merchant: AlipayMerchant) -> ali.AlipayClient:
        return ali.AlipayClient(
            self.alipay_gateway,
            merchant.creds,
            app_auth_token=merchant.app_auth_token,
            timeout_s=self.http_timeout_s,
            clock=self.clock,
        )

    def add_alipay(
        self,
        *,
        app_id: str,
        app_private_key: str,
        notify_url: str,
        alipay_public_key: str | None = None,
        alipay_cert: str | None = None,
        app_cert: str | None = None,
        root_cert: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        secret = {
            "channel": ali.CHANNEL,
            "app_id": app_id,
            "app_private_key": app_private_key,
            "alipay_public_key": alipay_public_key,
            "alipay_certificates": [alipay_cert] if alipay_cert else [],
            "app_cert": app_cert,
            "root_cert": root_cert,
        }
        creds = alipay_credentials(secret, self.clock())  # refuse what cannot work before storing it
        row = {
            "pk": f"{ali.CHANNEL}#{app_id}",
            "channel": ali.CHANNEL,
            "mchid": app_id,
            "tenant": tenant or app_id,
            "mode": "direct",
            "key_mode": "cert" if creds.app_cert_sn else "public_key",
            "alipay_cert_sns": sorted(creds.keys.by_sn),
            "notify_url": notify_url,
            "updated_at": iso_now(self.clock()),
        }
        return self._save(ali.CHANNEL, app_id, secret, row)

    def add_alipay_certificate(self, *, app_id: str, alipay_cert: str) -> dict[str, Any]:
        """Rotation (cert mode): Alipay's new certificate joins the configured ones; the old stay valid until
        removed or expired, so callbacks signed with either verify (several valid at once)."""
        row = self.store.get(ali.CHANNEL, app_id)
        if row is None or row.get("mode") == "partner":
            raise UnknownMerchant(
                f"no direct alipay merchant {app_id} (a sub-merchant uses its provider's keys)"
            )
        secret = self._secret(row)
        certs = [c for c in secret.get("alipay_certificates") or [] if c]
        if alipay_cert not in certs:
            certs.append(alipay_cert)
        secret["alipay_certificates"] = certs
        creds = alipay_credentials(secret, self.clock())  # the new certificate must chain to the root bundle
        row = {**row, "alipay_cert_sns": sorted(creds.keys.by_sn), "updated_at": iso_now(self.clock())}
        return self._save(ali.CHANNEL, app_id, secret, row)

    def add_alipay_sub(
        self, *, app_id: str, sp_app_id: str, app_auth_token: str, tenant: str | None = None
    ) -> dict[str, Any]:
        """A merchant that authorised the service provider's app (app_auth_token)."""
        provider = self.alipay(sp_app_id)
        row = {
            "pk": f"{ali.CHANNEL}#{app_id}",
            "channel": ali.CHANNEL,
            "mchid": app_id,
            "tenant": tenant or app_id,
            "mode": "partner",
            "sp_app_id": sp_app_id,
            "notify_url": provider.notify_url,
            "updated_at": iso_now(self.clock()),
        }
        return self._save(
            ali.CHANNEL, app_id, {"channel": ali.CHANNEL, "app_auth_token": app_auth_token}, row
        )

    # ------------------------------------------------------------ WeChat Pay v2

    def wechatpay_v2(self, mchid: str) -> WeChatV2Merchant:
        key = f"{wx2.API}#{mchid}"
        cached = self._other.get(key)
        if cached and self.clock() - cached.loaded_at < self.ttl_s:
            return cached
        row = self.store.get(wx2.API, mchid)
        if row is None:
            raise UnknownMerchant(f"no wechatpay v2 merchant {mchid}")
        secret = self._secret(row)
        merchant = WeChatV2Merchant(
            row, v2_api_key(secret), self.clock(), secret.get("client_cert"), secret.get("client_key")
        )
        with self._lock:
            self._other[key] = merchant
        return merchant

    def wechatpay_v2_client(self, merchant: WeChatV2Merchant) -> wx2.WeChatPayV2Client:
        """The v2 API (same host as v3): unified order and order query/close, signed with the API key."""
        return wx2.WeChatPayV2Client(
            self.api_base,
            str(merchant.row["mchid"]),
            merchant.api_key,
            merchant.appid,
            timeout_s=self.http_timeout_s,
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
        secret = {"channel": wx2.API, "mchid": mchid, "api_key": api_key}
        v2_api_key(secret)
        if client_cert_pem or client_key_pem:  # refunds: the API client certificate for /secapi/ mutual TLS
            from tally.channels.wechatpay_v2.refunds import check_client_certificate

            cert_pem, key_pem = client_cert_pem or "", client_key_pem or ""
            check_client_certificate(cert_pem, key_pem)  # refuses a missing half
            secret |= {"client_cert": cert_pem, "client_key": key_pem}
        row = {
            "pk": f"{wx2.API}#{mchid}",
            "channel": wx2.API,
            "mchid": mchid,
            "appid": appid,
            "tenant": tenant or mchid,
            "mode": "direct",
            "notify_url": notify_url,
            "updated_at": iso_now(self.clock()),
        }
        if bill_source:
            row["bill_source"] = (
                bill_source  # which trade bill recon downloads (channels/wechatpay_v2/bills.py)
            )
        return self._save(wx2.API, mchid, secret, row)

    def add_wechatpay_partner(
        self, *, sub_mchid: str, sp_mchid: str, sub_appid: str = "", tenant: str | None = None
    ) -> dict[str, Any]:
        """A sub-merchant of a WeChat Pay service provider: no own secret, the provider's keys act (R11)."""
        provider = self.wechatpay(sp_mchid)
        row = {
            "pk": f"{wx.CHANNEL}#{sub_mchid}",
            "channel": wx.CHANNEL,
            "mchid": sub_mchid,
            "appid": provider.appid,
            "sub_appid": sub_appid or None,
            "tenant": tenant or sub_mchid,
            "mode": "partner",
            "sp_mchid": sp_mchid,
            "notify_url": provider.notify_url,
            "updated_at": iso_now(self.clock()),
        }
        self.store.put(row)
        self._cache.pop(sub_mchid, None)
        return row

    def _save(
        self, channel: str, merchant_id: str, secret: dict[str, Any], row: dict[str, Any]
    ) -> dict[str, Any]:
        name = f"{self.secret_prefix}{channel}/{merchant_id}"
        self.secrets.put(name, secret)
        row["secret_name"] = name
        self._keep_readiness(channel, merchant_id, row)
        self.store.put(row)
        self._other.pop(f"{channel}#{merchant_id}", None)
        return row

    def _keep_readiness(self, kind: str, merchant_id: str, row: dict[str, Any]) -> None:
        """R47: new credentials do not make a not-ready merchant ready: only a passing live check does."""
        before = self.store.get(kind, merchant_id) or {}
        for name in ("ready", "ready_reason", "checked_at", *KEPT_ON_UPDATE):
            if name in before:
                row.setdefault(name, before[name])

    def forget(self, kind: str, merchant_id: str) -> None:
        """Drop this container's cached merchant (its row changed: readiness, R47)."""
        with self._lock:
            if kind == wx.CHANNEL:
                self._cache.pop(merchant_id, None)
            self._other.pop(f"{kind}#{merchant_id}", None)

    # ------------------------------------------------------------ key rotation, off the hot path

    def refresh_platform_certificates(
        self, mchids: list[str], max_age_s: float = 12 * 3600
    ) -> dict[str, bool]:
        """The schedule's job (functions/keys): download WeChat platform certificates for cert-mode merchants
        whose stored set is older than `max_age_s`, merge them with the stored ones that are still valid
        (several valid at once: an old certificate stays until it expires) and store them for every container
        (store/keys.py). A callback rarely meets an unknown serial; R3's on-miss download stays the fallback.
        Returns {mchid: downloaded}; a failed download counts PlatformCertRefreshFailed (alarmed)."""
        done = {}
        for mchid in mchids:
            merchant = self.wechatpay(mchid)
            if merchant.sp_mchid:
                continue  # a sub-merchant uses its provider's certificates
            if all(s.startswith(wx.PUBLIC_KEY_ID_PREFIX) for s in merchant.creds.platform.by_serial):
                continue  # public-key mode: nothing to download (§1.4)
            stored = self.certs.get(mchid) if self.certs is not None else None
            last = float(stored["refreshed_at"]) if stored else merchant.last_refresh
            if self.clock() - last < max_age_s:
                continue
            downloaded = self._download(merchant)
            done[mchid] = downloaded is not None
            if downloaded is None:
                count(M.CERT_REFRESH_FAILED)
                continue
            now = self.clock()
            merchant.last_refresh = now
            keep = {
                serial: cert
                for serial, cert in ((stored or {}).get("certs") or {}).items()
                if cert["not_after"] > now
            }
            for serial, pem in downloaded:
                keep[serial] = {"pem": pem, "not_after": int(wx.certificate_expiry(pem))}
            if self.certs is not None:
                self.certs.put(mchid, keep, now)
            count(M.CERT_REFRESHED)
            self.warn_expiring(f"wechatpay/{mchid}", merchant.creds.platform.expires)
        return done

    def check_expiry(self, channel: str, merchant_id: str) -> list[str]:
        """Count PlatformCertExpiring for every certificate of a merchant that expires within 7 days, whether or
        not a callback loaded it lately (the schedule calls this daily-ish): WeChat platform certificates,
        Alipay certificates and the Alipay app certificate (cert mode)."""
        if channel == wx.CHANNEL:
            merchant = self.wechatpay(merchant_id)
            return (
                []
                if merchant.sp_mchid
                else self.warn_expiring(f"wechatpay/{merchant_id}", merchant.creds.platform.expires)
            )
        if channel == ali.CHANNEL:
            found = self.alipay(merchant_id)
            if found.sp_mchid:
                return []  # the provider's app holds the certificates: checked as its own merchant
            expires = dict(found.creds.keys.expires)
            if found.creds.app_cert_expires:
                expires["app_cert"] = found.creds.app_cert_expires
            return self.warn_expiring(f"alipay/{merchant_id}", expires)
        return []  # WeChat Pay v2: an API key, no certificate

    def client(self, merchant: Merchant) -> wx.WeChatPayClient:
        return wx.WeChatPayClient(
            self.api_base,
            merchant.creds,
            timeout_s=self.http_timeout_s,
            clock=self.clock,
            refresh_keys=lambda: self.refresh_platform_keys(merchant),
        )

    def refresh_platform_keys(self, merchant: Merchant, *, force: bool = False) -> bool:
        """One download of the platform certificates (R3), at most once a minute per merchant."""
        now = self.clock()
        if not force and now - merchant.last_refresh < self.refresh_every_s:
            return False
        merchant.last_refresh = now
        downloaded = self._download(merchant)
        if downloaded is None:
            return False
        count(M.CERT_REFRESHED)
        self.warn_expiring(
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
        except (wx.ChannelError, wx.DecryptError, ValueError, KeyError) as exc:
            logger.warning(
                "platform certificate download failed",
                extra={"mchid": merchant.creds.mchid, "error": str(exc)[:300]},
            )
            return None
        for serial, pem in downloaded:
            merchant.creds.platform.add_pem(pem, serial_hint=serial)
        return downloaded

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
        secret = {
            "channel": wx.CHANNEL,
            "mchid": mchid,
            "apiv3_key": apiv3_key,
            "merchant_private_key": merchant_key_pem,
            "merchant_serial": merchant_serial,
            "platform_certificates": list(platform_certs),
            "public_key": public_key,
            "public_key_id": public_key_id,
        }
        credentials_from_secret(secret)  # refuse a configuration that cannot work before storing it
        name = f"{self.secret_prefix}{wx.CHANNEL}/{mchid}"
        self.secrets.put(name, secret)
        row = {
            "pk": f"{wx.CHANNEL}#{mchid}",
            "channel": wx.CHANNEL,
            "mchid": mchid,
            "appid": appid,
            "tenant": tenant or mchid,
            "mode": "direct",
            "secret_name": name,
            "notify_url": notify_url,
            "public_key_id": public_key_id,
            "updated_at": iso_now(self.clock()),
            "platform_serials": sorted(wx.PlatformKeys.from_pems(platform_certs).by_serial),
        }
        self._keep_readiness(wx.CHANNEL, mchid, row)
        self.store.put(row)
        self._cache.pop(mchid, None)
        return row


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


def alipay_credentials(secret: dict[str, Any], now: float) -> ali.AlipayCredentials:
    """Public-key mode (alipay_public_key) and/or certificate mode (alipay cert + app cert + root bundle)."""
    certs = [c for c in secret.get("alipay_certificates") or [] if c]
    if certs and not (secret.get("app_cert") and secret.get("root_cert")):
        raise ValueError(
            "certificate mode needs the Alipay certificate, the app certificate and the root bundle"
        )
    keys = ali.AlipayKeys.from_pems(secret.get("alipay_public_key"), certs, secret.get("root_cert"), now=now)
    app_cert_sn = app_cert_expires = app_public_key = None
    if secret.get("app_cert"):
        app_cert = ali.load_certificates(secret["app_cert"])[0]
        app_cert_sn, app_cert_expires = ali.cert_sn(app_cert), app_cert.not_valid_after_utc.timestamp()
        app_public_key = ali._rsa_public(app_cert.public_key())
    return ali.AlipayCredentials(
        app_id=str(secret["app_id"]),
        private_key=ali.load_private_key(secret["app_private_key"]),
        keys=keys,
        app_cert_sn=app_cert_sn,
        app_cert_expires=app_cert_expires,
        app_public_key=app_public_key,
    )


def v2_api_key(secret: dict[str, Any]) -> str:
    key = str(secret.get("api_key") or "")
    if len(key) != 32 or not key.isascii():
        raise ValueError("the WeChat Pay v2 API key must be 32 ASCII characters")
    return key


def check_merchant(directory: MerchantDirectory, channel: str, merchant_id: str) -> list[dict[str, Any]]:
    """Prove a stored configuration works before it takes payments (`tally merchant check`).

    Each check: {"check", "ok", "detail"}. Only local proofs with the stored keys: a test resource is
    encrypted and decrypted, test signatures made and verified where the channel's key material allows,
    and every certificate's expiry is reported (fails within 7 days). Secrets never appear in details."""
    import secrets as _secrets

    checks: list[dict[str, Any]] = []
    now = directory.clock()
    # the CLI's word (wechatpay, alipay, wechatpay-v2) or a channel name → the one spelling
    found = channel_registry.by_route(channel) or channel_registry.by_merchant_kind(channel)
    name = found.name if found else ""

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    def expiry(name: str, when: float) -> None:
        days = (when - now) / 86400
        add(f"expiry {name}", when - now >= EXPIRY_WARNING_S, f"{days:.1f} days left")

    # one name per role across the branches; each assignment below narrows it to its channel's type
    merchant: Merchant | AlipayMerchant | WeChatV2Merchant
    creds: wx.MerchantCredentials | ali.AlipayCredentials
    if name == "wechatpay_v3":
        merchant = directory.wechatpay(merchant_id)
        creds = merchant.creds
        probe = {"mchid": merchant_id, "out_trade_no": "TALLY-CHECK", "trade_state": "SUCCESS"}
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
    elif name == "alipay":
        merchant = directory.alipay(merchant_id)
        creds = merchant.creds
        content = ali.sign_content(
            {"app_id": creds.app_id, "method": "tally.merchant.check", "charset": "utf-8"}, exclude=("sign",)
        )
        signature = ali.rsa2_sign(creds.private_key, content)
        if creds.app_public_key is not None:
            add(
                "app private key matches the app certificate",
                ali.rsa2_verify(creds.app_public_key, content.encode(), signature),
                f"app_cert_sn {creds.app_cert_sn}, alipay_root_cert_sn {creds.keys.root_sn}",
            )
        else:
            add(
                "app private key signs (RSA2)",
                bool(signature),
                "public-key mode: only Alipay holds the app public key to verify it",
            )
        add(
            "Alipay verifying keys",
            bool(creds.keys.public_key or creds.keys.by_sn),
            ", ".join(
                (["public key"] if creds.keys.public_key else []) + [f"cert {sn}" for sn in creds.keys.by_sn]
            ),
        )
        if merchant.app_auth_token:
            add("app_auth_token", True, f"acts through provider app {merchant.sp_mchid}")
        for sn, when in sorted(creds.keys.expires.items()):
            expiry(f"Alipay certificate {sn}", when)
        if creds.app_cert_expires:
            expiry("app certificate", creds.app_cert_expires)
    elif name == "wechatpay_v2":
        merchant = directory.wechatpay_v2(merchant_id)
        fields = {"mch_id": merchant_id, "nonce_str": _secrets.token_hex(8), "out_trade_no": "TALLY-CHECK"}
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
    else:
        raise ValueError(f"unknown channel {channel!r}: wechatpay, alipay or wechatpay-v2")
    return checks


# ------------------------------------------------------------------ the merchant list (CLI and console)


def cli_word(merchant_kind: str) -> str:
    """A merchants row's channel as the CLI spells it (`tally merchant add wechatpay-v2`): the channel's route."""
    channel = channel_registry.by_merchant_kind(merchant_kind)
    return channel.route if channel else merchant_kind


def list_merchants(directory: MerchantDirectory) -> list[dict[str, Any]]:
    """One line per configured merchant. Certificate expiry comes from the loaded credentials (the secret is
    read to learn which certificates it holds; nothing of it is returned)."""
    out = []
    for channel, merchant_id in directory.store.configured():
        row = directory.store.get(channel, merchant_id) or {}
        item = {
            "channel": cli_word(channel),
            "id": merchant_id,
            "mode": row.get("mode", "direct"),
            "provider": row.get("sp_mchid") or row.get("sp_app_id"),
            "key_mode": row.get("key_mode") or ("public_key" if row.get("public_key_id") else None),
            "tenant": row.get("tenant"),
            "appid": row.get("appid") or None,
            "notify_url": row.get("notify_url"),
            "updated_at": row.get("updated_at"),
            "certificates": [],
            "cert_expiry": None,
        }
        try:
            expires = _expiries(directory, channel, merchant_id, item["mode"])
        except Exception as exc:  # noqa: BLE001 - the list still shows the merchant, with why expiry is unknown
            item["cert_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            expires = {}
        item["certificates"] = [
            {"name": name, "not_after": _china(when)}
            for name, when in sorted(expires.items(), key=lambda kv: kv[1])
        ]
        item["cert_expiry"] = item["certificates"][0]["not_after"] if item["certificates"] else None
        out.append(item)
    return out


def _expiries(directory: MerchantDirectory, channel: str, merchant_id: str, mode: str) -> dict[str, float]:
    if mode == "partner":
        return {}  # the provider's certificates act: see the provider's line
    found = channel_registry.by_merchant_kind(channel)
    name = found.name if found else ""
    if name == "wechatpay_v3":
        return dict(directory.wechatpay(merchant_id).creds.platform.expires)
    if name == "alipay":
        alipay = directory.alipay(merchant_id)
        expires = dict(alipay.creds.keys.expires)
        if alipay.creds.app_cert_expires:
            expires["app_cert"] = alipay.creds.app_cert_expires
        return expires
    return {}  # WeChat Pay v2: an API key, no certificate


def _china(epoch_s: float) -> str:
    return datetime.fromtimestamp(float(epoch_s), CHINA).isoformat(timespec="seconds")


# ------------------------------------------------------------ the live doctor and readiness (R47)


class MerchantNotReady(errors.Conflict):
    """R47: the merchant's credentials failed the live check with its channel: POST /orders answers 409."""

    code = "merchant_not_ready"


def not_ready_reason(row: dict[str, Any]) -> str | None:
    """The reason a merchant row may not take an order (None: it may). A row never checked may (R47 marks a
    merchant not ready only on a failed check)."""
    if row.get("ready") is False:
        return str(row.get("ready_reason") or "the live credential check failed")
    return None


def live_check(
    directory: MerchantDirectory, channel: str, merchant_id: str, *, download: bool = True
) -> dict[str, Any]:
    """`tally merchant check --live`, `merchant add` and the hourly keys run: harmless signed calls to the channel
    with the stored credentials (channels/<name>/doctor.py), then the merchant's readiness (R47):

    - a FAIL marks it not ready with the named item and its fix (POST /orders answers 409 with it); a ready
      (or never checked) merchant turning not ready counts MerchantNotReady once, on that transition (alarmed);
    - every call PASS marks it ready;
    - UNKNOWN (5xx, timeout, rate limit) leaves readiness as it was: "could not check", not a credential fault.
    """
    from tally.channels.doctor import FAIL, PASS, UNKNOWN, Finding, verdict_of

    found = channel_registry.by_route(channel) or channel_registry.by_merchant_kind(channel)
    if found is None:
        raise ValueError(f"unknown channel {channel!r}: wechatpay, alipay or wechatpay-v2")
    try:
        findings = found.live_check(directory, merchant_id, download=download)
    except UnknownMerchant:
        raise
    except Exception as exc:  # noqa: BLE001 - an unexpected failure is "could not check", never a verdict
        findings = [
            Finding(UNKNOWN, "live check", "could not check: the check itself failed", detail=str(exc)[:200])
        ]
    verdict = verdict_of(findings)
    kind, who = found.merchant_kind, f"{found.route}/{merchant_id}"
    report: dict[str, Any] = {
        "channel": found.route,
        "merchant": merchant_id,
        "verdict": verdict,
        "findings": [f.as_dict() for f in findings],
        "ready": None,
        "turned_not_ready": False,
    }
    if verdict == UNKNOWN:
        row = directory.store.get(kind, merchant_id) or {}
        report["ready"] = row.get("ready")
        logger.warning(
            "live credential check could not check", extra={"merchant": who, "findings": report["findings"]}
        )
        return report
    failed = next((f for f in findings if f.verdict == FAIL), None)
    reason = f"{failed.item}: {failed.fix}" if failed else ""
    before = directory.store.set_readiness(
        kind, merchant_id, ready=verdict == PASS, reason=reason[:500], checked_at=iso_now(directory.clock())
    )
    directory.forget(kind, merchant_id)
    report["ready"] = verdict == PASS
    if verdict == FAIL and before is not False:
        report["turned_not_ready"] = True
        count(M.MERCHANT_NOT_READY)
        logger.error(
            "merchant turned not ready: its credentials fail the live check",
            extra={"merchant": who, "reason": reason[:300]},
        )
    return report
