"""WeChat Pay API v3: notification verify/decrypt/parse, ACKs, and the signed API client.

Wire formats: docs/channel-spec.md §1 (notifications) and §2 (API, request signing).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import secrets
import string
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tally import errors, httpclient
from tally.channels.wechatpay_v3.channel import CHANNEL as SPEC
from tally.channels.wechatpay_v3.headers import REPLAY_HEADERS
from tally.channels.wechatpay_v3.settlement import wechat_v3_notice_fields
from tally.domain.money import MoneyError, cents, received_cents
from tally.domain.notifications import Outcome, PaymentNotice
from tally.domain.poll import Answer

STORED = SPEC.stored  # "wechatpay" (channels/registry.py: v2 stores it too)
SIGNATURE_TYPE = "WECHATPAY2-SHA256-RSA2048"
PROBE_PREFIX = "WECHATPAY/SIGNTEST/"
PUBLIC_KEY_ID_PREFIX = "PUB_KEY_ID_"

# trade_state → outcome (R16, R22). Anything not here is unknown: it goes to a person.
TRADE_STATE: dict[str, Outcome] = {
    "SUCCESS": Outcome.PAID,
    "REFUND": Outcome.PAID,  # paid, then (partly) refunded: still paid for the ledger
    "CLOSED": Outcome.CLOSED,
    "REVOKED": Outcome.REVOKED,
    "PAYERROR": Outcome.PAY_ERROR,
    "NOTPAY": Outcome.IN_BETWEEN,
    "USERPAYING": Outcome.IN_BETWEEN,
    "ACCEPT": Outcome.IN_BETWEEN,
}

# ---- the pull side (R21, R22): one explicit table from what a query or close answers to an Answer.
# Local pseudo-codes: NETWORK (no HTTP answer: timeout, refused), HTTP_5XX (a 5xx without a JSON code),
# RESPONSE_NOT_VERIFIED (a 2xx whose signature does not verify: possibly forged, §2.1).
# Anything not in these tables is unmapped: it goes to a person, with a metric (R22).
QUERY_STATE: dict[str, Answer] = {  # trade_state of a 200 query answer (§2.1)
    "SUCCESS": Answer.PAID,
    "REFUND": Answer.PAID,  # paid, then (partly) refunded: the money did arrive
    "NOTPAY": Answer.WAITING,
    "USERPAYING": Answer.WAITING,
    "ACCEPT": Answer.WAITING,
    "CLOSED": Answer.CLOSED,
    "REVOKED": Answer.CLOSED,  # MICROPAY revoked: ended unpaid (event REVOKE)
    "PAYERROR": Answer.CLOSED,  # MICROPAY failed: ended unpaid (event PAY_ERROR)
}
QUERY_ERROR: dict[str, Answer] = {  # error code of a failed query
    "ORDER_NOT_EXIST": Answer.NOT_CREATED,  # never "closed" on its own (R22)
    "SYSTEM_ERROR": Answer.TRANSIENT,
    "BANK_ERROR": Answer.TRANSIENT,
    "FREQUENCY_LIMITED": Answer.TRANSIENT,
    "NETWORK": Answer.TRANSIENT,
    "HTTP_5XX": Answer.TRANSIENT,
    "SIGN_ERROR": Answer.PERSON,  # our key or serial is wrong: configuration
    "NO_AUTH": Answer.PERSON,
    "MCH_NOT_EXISTS": Answer.PERSON,
    "APPID_MCHID_NOT_MATCH": Answer.PERSON,
    "PARAM_ERROR": Answer.PERSON,
    "INVALID_REQUEST": Answer.PERSON,
    "RULE_LIMIT": Answer.PERSON,
    "TRADE_ERROR": Answer.PERSON,
    "RESPONSE_NOT_VERIFIED": Answer.PERSON,
    "RESPONSE_NOT_JSON": Answer.PERSON,
}
CLOSE_ANSWER: dict[
    str, Answer
] = {  # what a close call answers (§2.2); CLOSED/PAID are then confirmed by a query
    "CLOSED_NOW": Answer.CLOSED,  # 204 No Content
    "ORDER_CLOSED": Answer.CLOSED,  # already closed
    "ORDER_PAID": Answer.PAID,  # paid before we could close it: query and book
    "USER_PAYING": Answer.WAITING,  # 202: the user is paying right now; close again next run
    "ORDER_NOT_EXIST": Answer.NOT_CREATED,
    "SYSTEM_ERROR": Answer.TRANSIENT,
    "BANK_ERROR": Answer.TRANSIENT,
    "FREQUENCY_LIMITED": Answer.TRANSIENT,
    "NETWORK": Answer.TRANSIENT,
    "HTTP_5XX": Answer.TRANSIENT,
    "SIGN_ERROR": Answer.PERSON,
    "NO_AUTH": Answer.PERSON,
    "MCH_NOT_EXISTS": Answer.PERSON,
    "PARAM_ERROR": Answer.PERSON,
    "INVALID_REQUEST": Answer.PERSON,
    "TRADE_ERROR": Answer.PERSON,
    "RESPONSE_NOT_VERIFIED": Answer.PERSON,
    "RESPONSE_NOT_JSON": Answer.PERSON,
}


class WeChatSignatureError(errors.SignatureError):
    """The message is not proven to come from WeChat Pay (R4). `probe` marks SIGNTEST traffic."""

    def __init__(
        self,
        reason: str,
        *,
        cause: str = "bad_signature",
        probe: bool = False,
        unknown_serial: str | None = None,
    ):
        super().__init__(reason, cause=cause)
        self.probe = probe
        self.unknown_serial = unknown_serial


class DecryptError(errors.ParseError):
    """Signed by WeChat but not decryptable or not parseable: not retryable (R5)."""


class WeChatCallError(errors.ChannelError):
    """A WeChat API call failed. `retryable` says whether the same call may succeed later."""

    def __init__(self, message: str, *, status: int = 0, code: str = "", retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.code = code
        self.retryable = retryable

    @property
    def word(self) -> str:
        """The code the answer tables are keyed by (a local pseudo-code when the channel gave none)."""
        if self.code:
            return self.code
        return "HTTP_5XX" if self.status >= 500 else (f"HTTP_{self.status}" if self.status else "NETWORK")


@dataclass(frozen=True)
class Response:
    """A verified answer: the parsed JSON plus the exact bytes and headers (kept with a raw row)."""

    status: int
    data: Any
    raw: bytes
    headers: dict[str, str]


# ---------------------------------------------------------------- keys


def load_verifying_key(pem: str | bytes) -> tuple[str | None, rsa.RSAPublicKey]:
    """A platform certificate (→ its serial and key) or a bare public key PEM (→ None, key)."""
    data = pem.encode() if isinstance(pem, str) else pem
    if b"BEGIN CERTIFICATE" in data:
        cert = x509.load_pem_x509_certificate(data)
        return certificate_serial(cert), _rsa(cert.public_key())
    return None, _rsa(serialization.load_pem_public_key(data))


@functools.lru_cache(maxsize=64)  # parsing validates the RSA key (~57 ms of CPU): once per key and container
def load_private_key(pem: str | bytes) -> rsa.RSAPrivateKey:
    """An RSA private key from its PEM (a key object is immutable: one parse serves every client built with it)."""
    data = pem.encode() if isinstance(pem, str) else pem
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("merchant key must be an RSA private key")
    return key


def certificate_serial(cert: x509.Certificate) -> str:
    return format(cert.serial_number, "X")


def certificate_expiry(pem: str | bytes) -> float:
    data = pem.encode() if isinstance(pem, str) else pem
    return x509.load_pem_x509_certificate(data).not_valid_after_utc.timestamp()


def _rsa(key: object) -> rsa.RSAPublicKey:
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("expected an RSA public key")
    return key


@dataclass
class PlatformKeys:
    """The keys WeChat signs with, by `Wechatpay-Serial`: certificates and/or a public key (§1.4)."""

    by_serial: dict[str, rsa.RSAPublicKey] = field(default_factory=dict)
    expires: dict[str, float] = field(default_factory=dict)  # certificate serial → not-valid-after (epoch s)

    @classmethod
    def from_pems(
        cls, certificates: Sequence[str] = (), public_key: str | None = None, public_key_id: str | None = None
    ) -> PlatformKeys:
        keys = cls()
        for pem in certificates:
            keys.add_pem(pem)
        if public_key and public_key_id:
            keys.by_serial[public_key_id] = load_verifying_key(public_key)[1]
        return keys

    def add_pem(self, pem: str, serial_hint: str | None = None) -> str | None:
        """Add a certificate (or bare key under `serial_hint`); several stay valid at once (rotation)."""
        serial, key = load_verifying_key(pem)
        serial = serial or serial_hint
        if serial:
            self.by_serial[serial] = key
            if "BEGIN CERTIFICATE" in (pem if isinstance(pem, str) else pem.decode()):
                self.expires[serial] = certificate_expiry(pem)
        return serial

    def get(self, serial: str) -> rsa.RSAPublicKey | None:
        return self.by_serial.get(serial) or self.by_serial.get(serial.upper())


# ---------------------------------------------------------------- signatures


def signed_message(timestamp: str, nonce: str, body: bytes) -> bytes:
    """`timestamp\nnonce\nbody\n` (§1.3), the body copied once (a chain of `+` copies it at each step)."""
    return b"".join((timestamp.encode(), b"\n", nonce.encode(), b"\n", body, b"\n"))


def rsa_sign(private_key: rsa.RSAPrivateKey, message: bytes) -> str:
    return base64.b64encode(private_key.sign(message, padding.PKCS1v15(), hashes.SHA256())).decode()


_PKCS1V15 = padding.PKCS1v15()  # stateless descriptors: built once, not per callback
_SHA256 = hashes.SHA256()


def rsa_verify(public_key: rsa.RSAPublicKey, message: bytes, signature_b64: str) -> bool:
    try:
        signature = binascii.a2b_base64(signature_b64, strict_mode=True)  # C: no regex pass
        public_key.verify(signature, message, _PKCS1V15, _SHA256)
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def verify_signed(
    headers: Mapping[str, str], body: bytes, keys: PlatformKeys, now: float, window_s: int = 300
) -> str:
    """Verify `Wechatpay-*` headers over the raw body (R1, R2). Returns the serial used."""
    signature = headers.get("wechatpay-signature") or ""
    timestamp = headers.get("wechatpay-timestamp") or ""
    nonce = headers.get("wechatpay-nonce") or ""
    serial = headers.get("wechatpay-serial") or ""
    sig_type = headers.get("wechatpay-signature-type") or SIGNATURE_TYPE
    if signature.startswith(PROBE_PREFIX):
        raise WeChatSignatureError("signature probe (WECHATPAY/SIGNTEST/)", probe=True)
    if not (signature and timestamp and nonce and serial):
        raise WeChatSignatureError(
            "missing Wechatpay-Signature/Timestamp/Nonce/Serial header", cause="missing_signature"
        )
    if sig_type != SIGNATURE_TYPE:
        raise WeChatSignatureError(
            f"unsupported signature type {sig_type[:40]!r}", cause="unsupported_sign_type"
        )
    # ASCII digits only ("²".isdigit() is True) and a sane length (a 10**5-digit number overflows a float).
    if (
        not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12)
        or abs(now - int(timestamp)) >= window_s
    ):
        raise WeChatSignatureError(
            f"timestamp {timestamp[:20]!r} outside the {window_s}s window", cause="stale_timestamp"
        )
    key = keys.get(serial)
    if key is None:
        raise WeChatSignatureError(
            f"unknown serial {serial[:64]!r}", cause="unknown_serial", unknown_serial=serial
        )
    if not rsa_verify(key, signed_message(timestamp, nonce, body), signature):
        raise WeChatSignatureError(f"signature does not verify with serial {serial}")
    return serial


# ---------------------------------------------------------------- decryption and parsing


@functools.lru_cache(maxsize=256)
def _aead(apiv3_key: bytes) -> AESGCM:
    """One AESGCM per APIv3 key (a merchant's), built once per container rather than per callback."""
    return AESGCM(apiv3_key)


def aes_gcm_decrypt(apiv3_key: bytes, nonce: str, associated_data: str, ciphertext_b64: str) -> bytes:
    if len(apiv3_key) != 32:
        raise DecryptError("APIv3 key must be 32 bytes")
    try:
        data = binascii.a2b_base64(ciphertext_b64, strict_mode=True)
        return _aead(apiv3_key).decrypt(nonce.encode(), data, associated_data.encode())
    except InvalidTag:
        raise DecryptError("AEAD tag mismatch: wrong APIv3 key or tampered resource") from None
    except (binascii.Error, ValueError) as exc:
        raise DecryptError(f"undecryptable resource: {exc}") from None


def encrypt_sensitive(public_key: rsa.RSAPublicKey, text: str) -> str:
    """A sensitive request field (a bank account, a real name) for WeChat: RSA-OAEP with the platform key,
    base64; the request names that key's serial in `Wechatpay-Serial`."""
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    return base64.b64encode(public_key.encrypt(text.encode(), oaep)).decode()


def aes_gcm_encrypt(apiv3_key: bytes, nonce: str, associated_data: str, plaintext: bytes) -> str:
    return base64.b64encode(
        AESGCM(apiv3_key).encrypt(nonce.encode(), plaintext, associated_data.encode())
    ).decode()


# the C scanner json.loads ends in (a default decoder's: json.loads without keyword arguments uses one too)
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _json_text(text: str) -> Any:
    """`json.loads(text)`: an object that fills the text to its end is taken from the scanner json.loads ends
    in, without its Python frames and two whitespace regexes (~1.5 µs a parse, issue #20); anything else
    (leading or trailing whitespace, extra data, any error) is json.loads' own answer or refusal."""
    if text[:1] == "{":
        try:
            value, end = _scan(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def _json(data: bytes) -> Any:
    """`json.loads(data)` without its encoding sniff when `data` opens like the UTF-8 object every WeChat body
    is: for such bytes json.loads decodes UTF-8 with "surrogatepass" too, so the result and every refusal are
    the same (tests/unit/test_notify_hot_path.py); anything else takes json.loads' own path."""
    if data[:1] == b"{" and data[1:2] != b"\x00":
        return _json_text(data.decode("utf-8", "surrogatepass"))
    return json.loads(data)


def body_text(body: bytes) -> str | None:
    """The body decoded once, strictly (what a raw row stores, service/ingest.stored_body), or None when it is
    not UTF-8: then each stage decodes the bytes its own way, as before."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def parse_envelope(body: bytes, text: str | None = None) -> dict[str, Any]:
    """`text`: `body_text(body)` when the caller has it (the same string the bytes decode to: json.loads on it
    answers as on the bytes, whose surrogatepass decoding a strict decoding equals whenever it succeeds)."""
    try:
        # _json's own test of the bytes: "{\x00…" is UTF-16 to json.loads' sniff, never this UTF-8 text
        if text is not None and body[:1] == b"{" and body[1:2] != b"\x00":
            envelope = _json_text(text)
        else:
            envelope = _json(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # untrusted depth: no crash
        raise DecryptError(f"body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("resource"), dict):
        raise DecryptError("body has no resource object")
    return envelope


def open_resource(envelope: dict[str, Any], apiv3_key: bytes) -> dict[str, Any]:
    resource = envelope["resource"]
    if resource.get("algorithm") != "AEAD_AES_256_GCM":
        raise DecryptError(f"unsupported algorithm {str(resource.get('algorithm'))[:40]!r}")
    nonce, ciphertext = resource.get("nonce"), resource.get("ciphertext")
    associated_data = resource.get("associated_data") or ""
    if not isinstance(nonce, str) or not isinstance(ciphertext, str):
        raise DecryptError("resource lacks nonce or ciphertext")
    if not isinstance(associated_data, str):
        raise DecryptError("resource associated_data is not a string")
    plain = aes_gcm_decrypt(apiv3_key, nonce, associated_data, ciphertext)
    try:
        decoded = _json(plain)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DecryptError(f"decrypted resource is not JSON: {str(exc)[:200]}") from None
    if not isinstance(decoded, dict):
        raise DecryptError("decrypted resource is not an object")
    return decoded


def to_payment_notice(resource: dict[str, Any], source: str = "notify") -> PaymentNotice:
    """A transaction resource (notification or query answer, direct or partner shape). The checks run in the
    order the fields are named here: the first field that lacks or mistypes is the one the refusal names."""
    try:
        amount = resource.get("amount") or {}
        partner = "sp_mchid" in resource
        total = received_cents(amount["total"])
        transaction_id = resource.get("transaction_id") or ""
        success_time = resource.get("success_time")
        if not isinstance(transaction_id, str) or not (success_time is None or isinstance(success_time, str)):
            raise TypeError("transaction_id and success_time must be strings")
        trade_state = _text(resource["trade_state"])
        out_trade_no = _text(resource["out_trade_no"])
        mchid = _text(resource["sub_mchid"] if partner else resource["mchid"])
        sp_mchid = _text(resource["sp_mchid"]) if partner else None
        paid = received_cents(amount.get("payer_total", total))
        currency = _text(amount.get("currency") or "CNY")
    except (KeyError, TypeError, AttributeError, MoneyError) as exc:  # AttributeError: amount not an object
        raise DecryptError(f"transaction resource lacks or mistypes {exc}") from None
    if TRADE_STATE.get(trade_state) is Outcome.PAID:  # R43: the settlement amount next to what the payer paid
        settled = wechat_v3_notice_fields(amount, resource.get("promotion_detail"))
        settlement, settlement_error = settled["settlement"], settled["settlement_error"]
    else:
        settlement = settlement_error = None
    return PaymentNotice(
        STORED,
        transaction_id,
        out_trade_no,
        mchid,
        sp_mchid,
        trade_state,
        total,
        paid,
        currency,
        success_time,
        source,
        settlement,
        settlement_error,
    )


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value


def outcome_of(trade_state: str) -> Outcome | None:
    return TRADE_STATE.get(trade_state)


# ---------------------------------------------------------------- ACKs (R6)


def ack_success() -> tuple[int, str]:
    return 204, ""


def ack_failure(status: int, message: str) -> tuple[int, str]:
    return status, json.dumps({"code": "FAIL", "message": message[:64]}, ensure_ascii=False)


# ---------------------------------------------------------------- signed API client (§2)


def nonce_str(length: int = 32) -> str:
    alphabet = string.ascii_uppercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def authorization(
    mchid: str, serial: str, key: rsa.RSAPrivateKey, method: str, url: str, body: str, ts: int, nonce: str
) -> str:
    message = f"{method}\n{url}\n{ts}\n{nonce}\n{body}\n".encode()
    signature = rsa_sign(key, message)
    return (
        f'{SIGNATURE_TYPE} mchid="{mchid}",nonce_str="{nonce}",signature="{signature}",'
        f'timestamp="{ts}",serial_no="{serial}"'
    )


@dataclass
class MerchantCredentials:
    mchid: str
    apiv3_key: bytes
    private_key: rsa.RSAPrivateKey
    serial: str
    platform: PlatformKeys
    public_key_id: str | None = None


class WeChatPayClient:
    """Signed requests to WeChat Pay v3, responses verified like notifications (§2.1)."""

    def __init__(
        self,
        base_url: str,
        creds: MerchantCredentials,
        *,
        timeout_s: float = 3.0,
        clock: Callable[[], float] = time.time,
        refresh_keys: Callable[[], bool] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.creds = creds
        self.timeout_s = timeout_s
        self.clock = clock
        self.refresh_keys = refresh_keys  # R3 for answers too: one certificate refresh on an unknown serial

    def native_prepay(
        self,
        *,
        appid: str,
        description: str,
        out_trade_no: str,
        notify_url: str,
        amount_cent: int,
        currency: str,
        time_expire: str | None = None,
    ) -> str:
        body: dict[str, Any] = {
            "appid": appid,
            "mchid": self.creds.mchid,
            "description": description,
            "out_trade_no": out_trade_no,
            "notify_url": notify_url,
            "amount": {"total": cents(amount_cent), "currency": currency},
        }
        if time_expire:
            body["time_expire"] = time_expire
        answer = self.request("POST", "/v3/pay/transactions/native", body)
        code_url = answer.get("code_url") if isinstance(answer, dict) else None
        if not code_url:
            raise WeChatCallError("native prepay answered without code_url")
        return str(code_url)

    def partner_native_prepay(
        self,
        *,
        sp_appid: str,
        sub_mchid: str,
        description: str,
        out_trade_no: str,
        notify_url: str,
        amount_cent: int,
        currency: str,
        sub_appid: str | None = None,
        time_expire: str | None = None,
    ) -> str:
        """Service-provider Native order (`POST /v3/pay/partner/transactions/native`): these credentials
        are the provider's (sp_mchid); the order belongs to `sub_mchid` (R11)."""
        body: dict[str, Any] = {
            "sp_appid": sp_appid,
            "sp_mchid": self.creds.mchid,
            "sub_mchid": sub_mchid,
            "description": description,
            "out_trade_no": out_trade_no,
            "notify_url": notify_url,
            "amount": {"total": cents(amount_cent), "currency": currency},
        }
        if sub_appid:
            body["sub_appid"] = sub_appid
        if time_expire:
            body["time_expire"] = time_expire
        answer = self.request("POST", "/v3/pay/partner/transactions/native", body)
        code_url = answer.get("code_url") if isinstance(answer, dict) else None
        if not code_url:
            raise WeChatCallError("partner native prepay answered without code_url")
        return str(code_url)

    def certificates(self) -> list[tuple[str, str]]:
        """Download platform certificates (§1.4): [(serial, certificate PEM)]."""
        answer = self.request("GET", "/v3/certificates", None, verify_with_new=True)
        found = []
        for item in answer.get("data", []):
            enc = item["encrypt_certificate"]
            pem = aes_gcm_decrypt(
                self.creds.apiv3_key, enc["nonce"], enc.get("associated_data", ""), enc["ciphertext"]
            ).decode()
            found.append((str(item["serial_no"]), pem))
        return found

    def query_by_out_trade_no(self, out_trade_no: str, *, sub_mchid: str | None = None) -> Response:
        """§2.1 by out_trade_no (an unpaid order can only be queried so). Partner mode when `sub_mchid`
        is given: these credentials are the service provider's (sp_mchid)."""
        no = urllib.parse.quote(out_trade_no, safe="*")
        me = urllib.parse.quote(self.creds.mchid, safe="")
        if sub_mchid:
            sub = urllib.parse.quote(sub_mchid, safe="")
            return self.exchange(
                "GET", f"/v3/pay/partner/transactions/out-trade-no/{no}?sp_mchid={me}&sub_mchid={sub}", None
            )
        return self.exchange("GET", f"/v3/pay/transactions/out-trade-no/{no}?mchid={me}", None)

    def close(self, out_trade_no: str, *, sub_mchid: str | None = None) -> Response:
        """§2.2: 204 = closed now; a 202 answer carries a code (USER_PAYING); errors raise WeChatCallError."""
        no = urllib.parse.quote(out_trade_no, safe="*")
        if sub_mchid:
            return self.exchange(
                "POST",
                f"/v3/pay/partner/transactions/out-trade-no/{no}/close",
                {"sp_mchid": self.creds.mchid, "sub_mchid": sub_mchid},
            )
        return self.exchange(
            "POST", f"/v3/pay/transactions/out-trade-no/{no}/close", {"mchid": self.creds.mchid}
        )

    def tradebill(self, bill_date: str, bill_type: str = "ALL") -> dict[str, str]:
        """§3.1 step 1: {hash_type, hash_value, download_url}. NO_STATEMENT_EXIST / STATEMENT_CREATING come
        back as WeChatCallError with that code (the caller decides what each means)."""
        answer = self.request(
            "GET", f"/v3/bill/tradebill?bill_date={bill_date}&bill_type={bill_type}&tar_type=GZIP", None
        )
        if not isinstance(answer, dict) or not answer.get("download_url") or not answer.get("hash_value"):
            raise WeChatCallError("tradebill answered without download_url/hash_value")
        return {k: str(answer.get(k) or "") for k in ("hash_type", "hash_value", "download_url")}

    def fundflowbill(self, bill_date: str, account_type: str = "BASIC") -> dict[str, str]:
        """The fund-flow bill (资金账单) of one account and day: {hash_type, hash_value, download_url}, as
        tradebill (the same NO_STATEMENT_EXIST / STATEMENT_CREATING codes); downloaded with download_bill."""
        answer = self.request(
            "GET",
            f"/v3/bill/fundflowbill?bill_date={bill_date}&account_type={account_type}&tar_type=GZIP",
            None,
        )
        if not isinstance(answer, dict) or not answer.get("download_url") or not answer.get("hash_value"):
            raise WeChatCallError("fundflowbill answered without download_url/hash_value")
        return {k: str(answer.get(k) or "") for k in ("hash_type", "hash_value", "download_url")}

    def download_bill(self, download_url: str) -> bytes:
        """§3.1 step 2: GET download_url, signed like any request; the answer is NOT signed (raw bytes).
        Only URLs on our API host are followed (we sign the request: never for another host)."""
        parts = urllib.parse.urlsplit(download_url)
        base = urllib.parse.urlsplit(self.base_url)
        if (parts.scheme, parts.netloc) != (base.scheme, base.netloc):
            raise WeChatCallError(f"download_url host {parts.netloc!r} is not the API host {base.netloc!r}")
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        ts, nonce = int(self.clock()), nonce_str()
        headers = {
            "Authorization": authorization(
                self.creds.mchid, self.creds.serial, self.creds.private_key, "GET", path, "", ts, nonce
            ),
            "Accept": "*/*",
            "User-Agent": "tally/0.1",
        }
        try:
            return httpclient.request(
                "GET", self.base_url + path, headers=headers, timeout_s=max(self.timeout_s, 30.0)
            ).body
        except httpclient.StatusError as err:
            raise _channel_error(err.status, err.body) from None
        except OSError as err:
            raise WeChatCallError(f"GET {parts.path}: {err}", retryable=True) from None

    def encryption_key(self) -> tuple[str, rsa.RSAPublicKey]:
        """(serial, key) sensitive fields are encrypted with: the WeChat Pay public key when the merchant has
        one, else the platform certificate that stays valid longest."""
        keys = self.creds.platform
        if self.creds.public_key_id and keys.get(self.creds.public_key_id) is not None:
            return self.creds.public_key_id, keys.by_serial[self.creds.public_key_id]
        serials = sorted(keys.by_serial, key=lambda s: keys.expires.get(s, 0.0))
        if not serials:
            raise WeChatCallError("no platform key to encrypt a sensitive field with", code="NO_PLATFORM_KEY")
        return serials[-1], keys.by_serial[serials[-1]]

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        verify_with_new: bool = False,
        serial: str | None = None,
    ) -> Any:
        return self.exchange(method, path, body, verify_with_new=verify_with_new, serial=serial).data

    def exchange(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        verify_with_new: bool = False,
        serial: str | None = None,
    ) -> Response:
        """`serial`: the platform key that encrypted a sensitive field of `body` (sent as Wechatpay-Serial)."""
        payload = "" if body is None else json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        ts, nonce = int(self.clock()), nonce_str()
        headers = {
            "Authorization": authorization(
                self.creds.mchid, self.creds.serial, self.creds.private_key, method, path, payload, ts, nonce
            ),
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": "tally/0.1",
        }
        if serial or self.creds.public_key_id:
            headers["Wechatpay-Serial"] = serial or str(self.creds.public_key_id)
        try:
            answer = httpclient.request(
                method,
                self.base_url + path,
                body=payload.encode() or None,
                headers=headers,
                timeout_s=self.timeout_s,
            )
        except httpclient.StatusError as err:
            raise _channel_error(err.status, err.body) from None
        except OSError as err:
            raise WeChatCallError(f"{method} {path}: {err}", code="NETWORK", retryable=True) from None
        raw, resp_headers, status = answer.body, answer.headers, answer.status
        lowered = {k.lower(): v for k, v in resp_headers.items()}
        if verify_with_new:
            keys = _keys_from_certificates_answer(raw, self.creds)
        else:
            keys = self.creds.platform
        try:
            self._verify_answer(lowered, raw, keys, refreshable=not verify_with_new)
        except WeChatSignatureError as exc:
            raise WeChatCallError(
                f"{method} {path}: response not verified: {exc.reason}",
                status=status,
                code="RESPONSE_NOT_VERIFIED",
            ) from None
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise WeChatCallError(
                f"{method} {path}: signed answer is not JSON", status=status, code="RESPONSE_NOT_JSON"
            ) from None
        return Response(status, data, raw, _verify_headers(lowered))

    def _verify_answer(
        self, lowered: dict[str, str], raw: bytes, keys: PlatformKeys, *, refreshable: bool
    ) -> None:
        """Like a notification (R3): an unknown certificate serial gets one refresh, then one more verify."""
        try:
            verify_signed(lowered, raw, keys, self.clock())
        except WeChatSignatureError as exc:
            serial = exc.unknown_serial
            if not (
                refreshable
                and serial
                and not serial.startswith(PUBLIC_KEY_ID_PREFIX)
                and self.refresh_keys
                and self.refresh_keys()
            ):
                raise
            verify_signed(lowered, raw, self.creds.platform, self.clock())


def _verify_headers(lowered: dict[str, str]) -> dict[str, str]:
    return {k: lowered[k][:512] for k in REPLAY_HEADERS if k in lowered}


def _keys_from_certificates_answer(raw: bytes, creds: MerchantCredentials) -> PlatformKeys:
    """The certificates answer is signed by one of the certificates it carries (or a known key)."""
    keys = PlatformKeys(dict(creds.platform.by_serial))
    for item in json.loads(raw).get("data", []):
        enc = item["encrypt_certificate"]
        pem = aes_gcm_decrypt(
            creds.apiv3_key, enc["nonce"], enc.get("associated_data", ""), enc["ciphertext"]
        )
        serial, key = load_verifying_key(pem)
        keys.by_serial[serial or str(item["serial_no"])] = key
    return keys


def _channel_error(status: int, raw: bytes) -> WeChatCallError:
    try:
        detail = json.loads(raw)
        code, message = str(detail.get("code", "")), str(detail.get("message", ""))
    except (ValueError, AttributeError):
        code, message = "", raw[:200].decode("utf-8", "replace")
    retryable = status >= 500 or status == 429 or code in {"SYSTEM_ERROR", "FREQUENCY_LIMITED", "BANK_ERROR"}
    return WeChatCallError(f"HTTP {status} {code}: {message}", status=status, code=code, retryable=retryable)
