"""What an Alipay merchant record holds: the row, the app's private key and Alipay's verifying keys (public-key
mode: Alipay's public key; certificate mode: Alipay's certificate(s), the app certificate and the root bundle),
or for a merchant that authorised a service provider's app its app_auth_token; and the directory's Alipay
accessors (`directory.alipay(app_id)`, `alipay_client`, `add_alipay`, `add_alipay_certificate`,
`add_alipay_sub`). service/merchants.MerchantDirectory forwards these names here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tally.channels.alipay import wire as ali
from tally.channels.alipay.channel import CHANNEL, GATEWAY

KIND = CHANNEL.merchant_kind  # "alipay": the merchants table's channel and the secret path


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


def _expiries(merchant: AlipayMerchant) -> dict[str, float]:
    expires = dict(merchant.creds.keys.expires)
    if merchant.creds.app_cert_expires:
        expires["app_cert"] = merchant.creds.app_cert_expires
    return expires


class Desk:
    """The Alipay merchants of one MerchantDirectory."""

    def __init__(self, directory: Any):
        self.directory = directory

    def alipay(self, app_id: str) -> AlipayMerchant:
        d = self.directory
        cached = d.cached(KIND, app_id)
        if cached and d.clock() - cached.loaded_at < d.ttl_s:
            return cached
        row = d.row(KIND, app_id, f"no alipay merchant {app_id}")
        if row.get("mode") == "partner":  # app_auth_token: the provider's app acts for this merchant
            provider = self.alipay(str(row["sp_app_id"]))
            merchant = AlipayMerchant(
                row, provider.creds, d.clock(), app_auth_token=str(d.secret(row)["app_auth_token"])
            )
        else:
            merchant = AlipayMerchant(row, alipay_credentials(d.secret(row), d.clock()), d.clock())
            d.warn_expiring(f"alipay/{app_id}", _expiries(merchant))
        d.keep(KIND, app_id, merchant)
        return merchant

    def alipay_client(self, merchant: AlipayMerchant) -> ali.AlipayClient:
        d = self.directory
        return ali.AlipayClient(
            d.setting(GATEWAY),
            merchant.creds,
            app_auth_token=merchant.app_auth_token,
            timeout_s=d.http_timeout_s,
            clock=d.clock,
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
        d = self.directory
        secret = {
            "channel": KIND,
            "app_id": app_id,
            "app_private_key": app_private_key,
            "alipay_public_key": alipay_public_key,
            "alipay_certificates": [alipay_cert] if alipay_cert else [],
            "app_cert": app_cert,
            "root_cert": root_cert,
        }
        creds = alipay_credentials(secret, d.clock())  # refuse what cannot work before storing it
        row = {
            "pk": f"{KIND}#{app_id}",
            "channel": KIND,
            "mchid": app_id,
            "tenant": tenant or app_id,
            "mode": "direct",
            "key_mode": "cert" if creds.app_cert_sn else "public_key",
            "alipay_cert_sns": sorted(creds.keys.by_sn),
            "notify_url": notify_url,
            "updated_at": d.now_iso(),
        }
        return d.save(KIND, app_id, secret, row)

    def add_alipay_certificate(self, *, app_id: str, alipay_cert: str) -> dict[str, Any]:
        """Rotation (cert mode): Alipay's new certificate joins the configured ones; the old stay valid until
        removed or expired, so callbacks signed with either verify (several valid at once)."""
        d = self.directory
        row = d.store.get(KIND, app_id)
        if row is None or row.get("mode") == "partner":
            raise d.unknown(f"no direct alipay merchant {app_id} (a sub-merchant uses its provider's keys)")
        secret = d.secret(row)
        certs = [c for c in secret.get("alipay_certificates") or [] if c]
        if alipay_cert not in certs:
            certs.append(alipay_cert)
        secret["alipay_certificates"] = certs
        creds = alipay_credentials(secret, d.clock())  # the new certificate must chain to the root bundle
        row = {**row, "alipay_cert_sns": sorted(creds.keys.by_sn), "updated_at": d.now_iso()}
        return d.save(KIND, app_id, secret, row)

    def add_alipay_sub(
        self, *, app_id: str, sp_app_id: str, app_auth_token: str, tenant: str | None = None
    ) -> dict[str, Any]:
        """A merchant that authorised the service provider's app (app_auth_token)."""
        provider = self.alipay(sp_app_id)
        row = {
            "pk": f"{KIND}#{app_id}",
            "channel": KIND,
            "mchid": app_id,
            "tenant": tenant or app_id,
            "mode": "partner",
            "sp_app_id": sp_app_id,
            "notify_url": provider.notify_url,
            "updated_at": self.directory.now_iso(),
        }
        return self.directory.save(KIND, app_id, {"channel": KIND, "app_auth_token": app_auth_token}, row)

    # ------------------------------------------------------------ what service/merchants asks every channel
    def expiries(self, app_id: str) -> dict[str, float]:
        merchant = self.alipay(app_id)
        return {} if merchant.sp_mchid else _expiries(merchant)

    def check_expiry(self, app_id: str) -> list[str]:
        merchant = self.alipay(app_id)
        if merchant.sp_mchid:
            return []  # the provider's app holds the certificates: checked as its own merchant
        return self.directory.warn_expiring(f"alipay/{app_id}", _expiries(merchant))

    def local_check(
        self, app_id: str, add: Callable[[str, bool, str], None], expiry: Callable[[str, float], None]
    ) -> None:
        """`tally merchant check`: the app key signs (and matches the app certificate in cert mode), Alipay's
        verifying keys are present; each certificate's expiry."""
        merchant = self.alipay(app_id)
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


def alipay_desk(directory: Any) -> Desk:
    """This channel's merchant desk over a MerchantDirectory (service/merchants.py `desk`), typed: what a caller
    of this channel's accessors (`alipay_desk(directory).add_...`) holds."""
    desk: Desk = directory.desk(CHANNEL)
    return desk
