"""WeChat Pay v3 live credential check (R47): harmless signed calls, each answer verified.

1. Certificate mode: GET /v3/certificates. 401 SIGN_ERROR names the merchant serial or key; an encrypted
   certificate that does not decrypt names the APIv3 key ("decrypts nothing WeChat sends").
2. GET /v3/pay/transactions/out-trade-no/{a number that cannot exist}: 404 ORDER_NOT_EXIST (or any answer)
   whose Wechatpay-Signature verifies with the configured platform certificate / public key proves the merchant
   key and serial (WeChat accepted the signature) and the platform key (we verified WeChat's).
Error answers are read here, not through WeChatPayClient.exchange, because the doctor must verify the signature
of the 404 too (channel-spec §1.2: every answer is signed).
"""

from __future__ import annotations

import json
import secrets
import urllib.parse
from typing import Any

from tally import httpclient
from tally.channels.doctor import FAIL, PASS, UNKNOWN, Finding, probe_number
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.channel import API_BASE
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

CHECK_CERTS = "GET /v3/certificates (download and decrypt the platform certificates)"
CHECK_QUERY = "GET /v3/pay/transactions/out-trade-no/… (query an order that cannot exist)"


def live_check(directory: Any, merchant_id: str, *, download: bool = True) -> list[Finding]:
    merchant = wechatpay_v3_desk(directory).wechatpay(merchant_id)
    creds = merchant.creds
    client = wx.WeChatPayClient(
        directory.setting(API_BASE), creds, timeout_s=directory.http_timeout_s, clock=directory.clock
    )
    findings = []
    cert_mode = any(not s.startswith(wx.PUBLIC_KEY_ID_PREFIX) for s in creds.platform.by_serial)
    if download and cert_mode and not merchant.sp_mchid:
        findings.append(_certificates(client))
    findings.append(_query(client, creds, merchant.sp_mchid and merchant_id))
    return findings


def _certificates(client: wx.WeChatPayClient) -> Finding:
    try:
        downloaded = client.certificates()
    except wx.DecryptError as exc:
        return Finding(
            FAIL,
            CHECK_CERTS,
            "APIv3 key decrypts nothing WeChat sends (the encrypted platform certificate does not decrypt)",
            "set the APIv3 key of this mchid (商户平台 > API安全 > APIv3密钥) with `tally merchant add wechatpay "
            "--apiv3-key`",
            str(exc)[:200],
        )
    except wx.WeChatCallError as exc:
        return _refused(CHECK_CERTS, exc.status, exc.code, str(exc), exc.retryable)
    return Finding(PASS, CHECK_CERTS, detail=", ".join(sorted(s for s, _ in downloaded)))


def _query(client: wx.WeChatPayClient, creds: wx.MerchantCredentials, sub_mchid: str | None) -> Finding:
    no = probe_number(secrets.token_hex(8))
    me = urllib.parse.quote(creds.mchid, safe="")
    if sub_mchid:
        path = f"/v3/pay/partner/transactions/out-trade-no/{no}?sp_mchid={me}&sub_mchid={sub_mchid}"
    else:
        path = f"/v3/pay/transactions/out-trade-no/{no}?mchid={me}"
    ts, nonce = int(client.clock()), wx.nonce_str()
    headers = {
        "Authorization": wx.authorization(
            creds.mchid, creds.serial, creds.private_key, "GET", path, "", ts, nonce
        ),
        "Accept": "application/json",
        "User-Agent": "tally/0.1",
    }
    if creds.public_key_id:
        headers["Wechatpay-Serial"] = creds.public_key_id
    try:
        answer = httpclient.request(
            "GET", client.base_url + path, headers=headers, timeout_s=client.timeout_s, limit=1 << 16
        )
        status, raw, answer_headers = answer.status, answer.body, answer.headers
    except httpclient.StatusError as err:
        status, raw, answer_headers = err.status, err.body, err.headers
    except OSError as err:
        return Finding(
            UNKNOWN, CHECK_QUERY, "could not check: WeChat Pay did not answer", detail=str(err)[:200]
        )
    code, message = _code(raw)
    if status >= 500 or status == 429 or code in {"SYSTEM_ERROR", "FREQUENCY_LIMITED"}:
        return Finding(
            UNKNOWN,
            CHECK_QUERY,
            "could not check: WeChat Pay answered an error of its own",
            detail=f"HTTP {status} {code} {message}"[:200],
        )
    if status == 401 or code == "SIGN_ERROR":
        return _refused(CHECK_QUERY, status, code, message, False)
    lowered = {k.lower(): v for k, v in answer_headers.items()}
    try:
        wx.verify_signed(lowered, raw, creds.platform, client.clock())
    except wx.WeChatSignatureError as exc:
        return _unverified(exc, lowered.get("wechatpay-serial", ""))
    if status in (200, 404):
        return Finding(PASS, CHECK_QUERY, detail=f"HTTP {status} {code or 'OK'}, signature verified")
    return Finding(
        FAIL,
        CHECK_QUERY,
        f"WeChat Pay refused the query: {code or status} {message}"[:200],
        "see the code in channel-spec.md §2.1; the merchant cannot take orders like this",
        f"HTTP {status} {code} {message}"[:200],
    )


def _code(raw: bytes) -> tuple[str, str]:
    try:
        detail = json.loads(raw)
        return str(detail.get("code", "")), str(detail.get("message", ""))[:200]
    except (ValueError, AttributeError):
        return "", raw[:120].decode("utf-8", "replace")


def _refused(check: str, status: int, code: str, message: str, retryable: bool) -> Finding:
    detail = f"HTTP {status} {code} {message}"[:240]
    if retryable or status >= 500 or code == "NETWORK" or (not status and not code):
        return Finding(UNKNOWN, check, "could not check: WeChat Pay or the network failed", detail=detail)
    if code == "SIGN_ERROR" and "序列号" in message:
        return Finding(
            FAIL,
            check,
            "the merchant serial is not the certificate WeChat has for this key",
            "give --merchant-serial the serial of apiclient_cert.pem, the certificate of apiclient_key.pem "
            "(`openssl x509 -noout -serial -in apiclient_cert.pem`)",
            detail,
        )
    if code == "SIGN_ERROR":
        return Finding(
            FAIL,
            check,
            "the merchant private key is not the key of the merchant API certificate WeChat has",
            "give --merchant-key the apiclient_key.pem downloaded with the certificate whose serial is "
            "--merchant-serial",
            detail,
        )
    if code == "RESPONSE_NOT_VERIFIED":
        return Finding(
            FAIL,
            check,
            "WeChat's answer does not verify with the configured platform certificate or public key",
            "configure the platform certificates (or the WeChat Pay public key and its PUB_KEY_ID_) of this mchid",
            detail,
        )
    return Finding(FAIL, check, f"WeChat Pay refused the call: {code or status}", "see the detail", detail)


def _unverified(exc: wx.WeChatSignatureError, serial: str) -> Finding:
    public_key = serial.startswith(wx.PUBLIC_KEY_ID_PREFIX)
    if exc.unknown_serial:
        item = f"WeChat signs with {serial[:64]}, which this merchant is not configured with: " + (
            "the public key id (PUB_KEY_ID_) is not this mchid's"
            if public_key
            else "the platform certificates are not this mchid's"
        )
    else:
        item = (
            f"the {'WeChat Pay public key' if public_key else 'platform certificate'} configured for "
            f"{serial[:64]} is not WeChat's (its signature does not verify)"
        )
    return Finding(
        FAIL,
        CHECK_QUERY,
        item,
        "download the WeChat Pay public key (or platform certificates) of this mchid from 商户平台 and "
        "`tally merchant add wechatpay` again",
        exc.reason[:200] if hasattr(exc, "reason") else str(exc)[:200],
    )
