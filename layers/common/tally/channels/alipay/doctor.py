"""Alipay live credential check (R47): `alipay.trade.query` of a trade that cannot exist.

ACQ.TRADE_NOT_EXIST, raised by AlipayClient only after the answer's sign verified with the configured Alipay
key, proves both keys. A wrong app private key is answered 40002 `isv.invalid-signature` (unsigned); an answer
that does not verify means the configured "Alipay public key" is not Alipay's, and when it is the public half
of our own app private key we say so: the commonest mix-up (channel-spec §6)."""

from __future__ import annotations

import secrets
from typing import Any

from tally.channels.alipay import wire as ali
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.doctor import FAIL, PASS, UNKNOWN, Finding, probe_number

CHECK = "alipay.trade.query (a trade that cannot exist)"

NAMED = {
    "isv.invalid-signature": (
        "the app private key is not the key whose public key (or certificate) is uploaded to Alipay",
        "give --app-private-key the private key of the app public key set in Alipay's console for this app_id",
    ),
    "isv.app-cert-sn-invalid": (
        "the app certificate is not the one Alipay issued for this app",
        "give --app-cert the appCertPublicKey_<app_id>.crt downloaded with this key",
    ),
    "isv.alipay-root-cert-sn-invalid": (
        "the root certificate is not Alipay's root bundle",
        "give --root-cert alipayRootCert.crt from Alipay's console",
    ),
    "isv.invalid-app-id": ("the app_id is not an Alipay app", "check --app-id"),
}


def live_check(directory: Any, merchant_id: str, *, download: bool = True) -> list[Finding]:
    merchant = alipay_desk(directory).alipay(merchant_id)
    client = alipay_desk(directory).alipay_client(merchant)
    try:
        client.trade_query(out_trade_no=probe_number(secrets.token_hex(8)))
    except ali.TradeNotExist:
        return [Finding(PASS, CHECK, detail="ACQ.TRADE_NOT_EXIST, sign verified")]
    except ali.AlipayCallError as exc:
        return [_finding(exc, merchant.creds)]
    return [Finding(PASS, CHECK, detail="10000, sign verified")]


def _finding(exc: ali.AlipayCallError, creds: ali.AlipayCredentials) -> Finding:
    detail = str(exc)[:240]
    if exc.retryable:
        return Finding(UNKNOWN, CHECK, "could not check: Alipay or the network failed", detail=detail)
    if exc.sub_code in NAMED:
        item, fix = NAMED[exc.sub_code]
        return Finding(FAIL, CHECK, item, fix, detail)
    if "signature does not verify" in str(exc):  # a signed answer our Alipay key(s) do not verify
        if _is_app_public_key(creds):
            return Finding(
                FAIL,
                CHECK,
                "this is the app public key, not Alipay's",
                "give --alipay-public-key the 支付宝公钥 shown next to your app public key in Alipay's console",
                detail,
            )
        return Finding(
            FAIL,
            CHECK,
            "Alipay's answer does not verify with the configured Alipay public key or certificate",
            "give the 支付宝公钥 (or alipayCertPublicKey_RSA2.crt) of this app_id",
            detail,
        )
    return Finding(
        FAIL, CHECK, f"Alipay refused the query: {exc.sub_code or exc.code}", "see the detail", detail
    )


def _is_app_public_key(creds: ali.AlipayCredentials) -> bool:
    """The configured Alipay public key is the public half of our own app private key."""
    configured = creds.keys.public_key
    if configured is None:
        return False
    return configured.public_numbers() == creds.private_key.public_key().public_numbers()
