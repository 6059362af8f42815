"""Alipay (OpenAPI gateway "v2"): async notifications, ACKs, and the signed gateway client.

Wire formats: docs/channel-spec.md §5 (notifications, public-key and certificate mode) and §6
(requests, response verification). Amounts are yuan strings: converted exactly to cents (R14).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tally import errors, httpclient
from tally.channels.alipay.channel import CHANNEL as SPEC
from tally.channels.alipay.settlement import alipay_payment
from tally.domain.clock import CHINA
from tally.domain.money import MoneyError, yuan_to_cents
from tally.domain.notifications import Outcome, PaymentNotice
from tally.domain.settlement import notice_fields
from tally.errors import ParseError, SignatureError  # the shared meanings (R4, R5), re-exported

STORED = SPEC.stored
CHARSETS = {"utf-8": "utf-8", "utf8": "utf-8", "gbk": "gbk", "gb2312": "gb2312", "gb18030": "gb18030"}

# trade_status → outcome (§5.3, R16). Anything not here is unknown: it goes to a person.
TRADE_STATUS: dict[str, Outcome] = {
    "TRADE_SUCCESS": Outcome.PAID,
    "TRADE_FINISHED": Outcome.PAID,  # paid, refund window over: still paid
    "TRADE_CLOSED": Outcome.CLOSED,  # unpaid timeout close (a full refund also says CLOSED: see REFUND_FIELDS)
    "WAIT_BUYER_PAY": Outcome.IN_BETWEEN,
}
# A notification carrying any of these reports a refund, never a payment (§5.3).
REFUND_FIELDS = ("refund_fee", "gmt_refund", "out_biz_no")

# Gateway answer codes (§6.1): which failures may succeed when retried with the same parameters.
RETRYABLE_CODES = {"20000", "40005"}
RETRYABLE_SUB_CODES = {"ACQ.SYSTEM_ERROR", "aop.ACQ.SYSTEM_ERROR", "isp.unknow-error"}
TRADE_NOT_EXIST = "ACQ.TRADE_NOT_EXIST"


class FormError(errors.InvalidRequest):
    """The body is not a usable form (before any signature check: nothing is trusted)."""


class AlipayCallError(errors.ChannelError):
    """A gateway call failed. `retryable` says whether the same call may succeed later."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        sub_code: str = "",
        retryable: bool = False,
        unsigned: bool = False,
    ):
        super().__init__(message)
        self.code = code
        self.sub_code = sub_code
        self.retryable = retryable
        self.unsigned = unsigned  # an error answer without a signature: not proof of anything (§6.1)


class TradeNotExist(AlipayCallError):
    """ACQ.TRADE_NOT_EXIST: for a fresh order this means "not paid yet", never "closed" (§6.2, R22)."""


# ---------------------------------------------------------------- form body (§5.1, §5.2 step 1)


def parse_form(body: bytes) -> dict[str, str]:
    """Decode the form body exactly once, with its own `charset` (default UTF-8)."""
    raw: dict[bytes, bytes] = {}
    for pair in body.split(b"&") if body.strip() else []:
        key, sep, value = pair.partition(b"=")
        if not sep or not key:
            raise FormError("not a form body: a field without key=value")
        key, value = (urllib.parse.unquote_to_bytes(part.replace(b"+", b" ")) for part in (key, value))
        if key in raw:
            raise FormError(f"parameter {key[:32]!r} appears twice")
        raw[key] = value
    charset_name = raw.get(b"charset", b"utf-8").decode("ascii", "replace").strip().lower()
    charset = CHARSETS.get(charset_name)
    if charset is None:
        raise FormError(f"unsupported charset {charset_name[:20]!r}")
    try:
        return {k.decode(charset): v.decode(charset) for k, v in raw.items()}
    except UnicodeDecodeError as exc:
        raise FormError(f"body is not valid {charset}: {exc.reason}") from None


def sign_content(params: Mapping[str, str], *, exclude: tuple[str, ...] = ("sign", "sign_type")) -> str:
    """Notification content (§5.2): every parameter but sign and sign_type, sorted, `k=v` joined by `&`.
    Requests sign everything but `sign` (§6): pass exclude=("sign",)."""
    return "&".join(f"{k}={params[k]}" for k in sorted(params) if k not in exclude)


# ---------------------------------------------------------------- keys (§5.5)


def load_public_key(pem: str | bytes) -> rsa.RSAPublicKey:
    """A bare public key: PEM, or the base64 SPKI string Alipay's console shows."""
    data = pem.encode() if isinstance(pem, str) else pem
    if b"-----BEGIN" not in data:
        data = b"-----BEGIN PUBLIC KEY-----\n" + data.strip() + b"\n-----END PUBLIC KEY-----\n"
    return _rsa_public(serialization.load_pem_public_key(data))


@functools.lru_cache(maxsize=64)  # parsing validates the RSA key (~57 ms of CPU): once per key and container
def load_private_key(pem: str | bytes) -> rsa.RSAPrivateKey:
    """The merchant's own RSA key (a key object is immutable: one parse serves every client built with it)."""
    data = pem.encode() if isinstance(pem, str) else pem
    if b"-----BEGIN" not in data:
        data = b"-----BEGIN PRIVATE KEY-----\n" + data.strip() + b"\n-----END PRIVATE KEY-----\n"
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the app private key must be an RSA key")
    return key


def _rsa_public(key: object) -> rsa.RSAPublicKey:
    if not isinstance(key, rsa.RSAPublicKey):
        raise ValueError("expected an RSA public key")
    return key


def load_certificates(pem: str | bytes) -> list[x509.Certificate]:
    data = pem.encode() if isinstance(pem, str) else pem
    certs = x509.load_pem_x509_certificates(data)
    if not certs:
        raise ValueError("no certificate in the PEM")
    return certs


def cert_sn(cert: x509.Certificate) -> str:
    """md5(issuer DN in RFC 2253 order + decimal serial), lowercase hex (§5.5, AntCertificationUtil)."""
    return hashlib.md5((cert.issuer.rfc4514_string() + str(cert.serial_number)).encode()).hexdigest()


def root_cert_sn(bundle_pem: str | bytes) -> str:
    """`_`-joined SNs of the RSA-signed certificates in the root bundle (SM2/ECDSA ones skipped)."""
    sns = [
        cert_sn(c)
        for c in load_certificates(bundle_pem)
        if c.signature_algorithm_oid.dotted_string.startswith("1.2.840.113549.1.1")
    ]
    if not sns:
        raise ValueError("the root certificate bundle has no RSA certificate")
    return "_".join(sns)


def verify_chain(chain: list[x509.Certificate], roots: list[x509.Certificate], now: float) -> None:
    """The Alipay certificate must chain to the configured root bundle and be valid now."""
    when = datetime.fromtimestamp(now, UTC)
    for cert in chain:
        if not cert.not_valid_before_utc <= when <= cert.not_valid_after_utc:
            raise ValueError(
                f"certificate {cert.subject.rfc4514_string()} is not valid now "
                f"(valid until {cert.not_valid_after_utc:%Y-%m-%d})"
            )
    candidates = chain[1:] + roots
    for cert in chain:
        if not any(_issued_by(cert, issuer) for issuer in candidates if issuer is not cert):
            raise ValueError(f"certificate {cert.subject.rfc4514_string()} does not chain to the root bundle")
        if any(cert == root for root in roots):
            return


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass
class AlipayKeys:
    """What Alipay signs with: a public key (public-key mode) and/or certificates by alipay_cert_sn."""

    public_key: rsa.RSAPublicKey | None = None
    by_sn: dict[str, rsa.RSAPublicKey] = field(default_factory=dict)
    expires: dict[str, float] = field(default_factory=dict)  # cert SN → not-valid-after (epoch s)
    root_sn: str | None = None

    @classmethod
    def from_pems(
        cls,
        public_key: str | None = None,
        alipay_certs: Sequence[str] = (),
        root_cert: str | None = None,
        *,
        now: float | None = None,
    ) -> AlipayKeys:
        keys = cls(public_key=load_public_key(public_key) if public_key else None)
        if alipay_certs:
            if not root_cert:
                raise ValueError("certificate mode needs the Alipay root certificate bundle")
            roots = load_certificates(root_cert)
            keys.root_sn = root_cert_sn(root_cert)
            for pem in alipay_certs:
                chain = load_certificates(pem)
                verify_chain(chain, roots, time.time() if now is None else now)
                leaf = chain[0]
                keys.by_sn[cert_sn(leaf)] = _rsa_public(leaf.public_key())
                keys.expires[cert_sn(leaf)] = leaf.not_valid_after_utc.timestamp()
        if keys.public_key is None and not keys.by_sn:
            raise ValueError("give the Alipay public key, or the Alipay certificate with the root bundle")
        return keys

    def candidates(self, cert_sn_hint: str | None) -> list[tuple[str, rsa.RSAPublicKey]]:
        if cert_sn_hint:
            key = self.by_sn.get(cert_sn_hint)
            return [(cert_sn_hint, key)] if key else []
        found = [(sn, key) for sn, key in self.by_sn.items()]
        if self.public_key is not None:
            found.insert(0, ("public_key", self.public_key))
        return found


# ---------------------------------------------------------------- signatures


def rsa2_sign(private_key: rsa.RSAPrivateKey, content: str, charset: str = "utf-8") -> str:
    return base64.b64encode(
        private_key.sign(content.encode(charset), padding.PKCS1v15(), hashes.SHA256())
    ).decode()


def rsa2_verify(public_key: rsa.RSAPublicKey, content: bytes, signature_b64: str) -> bool:
    try:
        signature = base64.b64decode("".join(signature_b64.split()), validate=True)
        public_key.verify(signature, content, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def verify_notification(params: Mapping[str, str], keys: AlipayKeys) -> str:
    """§5.2 over the once-decoded parameters (R1, R2). Returns which key verified it."""
    signature = params.get("sign") or ""
    sign_type = params.get("sign_type") or "RSA2"
    if not signature:
        raise SignatureError("missing sign", cause="missing_signature")
    if sign_type != "RSA2":
        raise SignatureError(
            f"sign_type {sign_type[:10]!r} refused: only RSA2 (SHA256withRSA) is accepted",
            cause="unsupported_sign_type",
        )
    charset = CHARSETS.get((params.get("charset") or "utf-8").lower(), "utf-8")
    content = sign_content(params).encode(charset)
    hint = params.get("alipay_cert_sn") or None
    candidates = keys.candidates(hint)
    if not candidates:
        raise SignatureError(f"unknown alipay_cert_sn {str(hint)[:40]!r}", cause="unknown_serial")
    for name, key in candidates:
        if rsa2_verify(key, content, signature):
            return name
    raise SignatureError("sign does not verify with the configured Alipay key(s)")


# ---------------------------------------------------------------- parsing (§5.1, §5.3)


def amount_cents(params: Mapping[str, Any], name: str) -> int:
    """A yuan string → exact non-negative cents (R14); anything inexact or negative is refused."""
    value = params.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ParseError(f"{name} is missing or empty")
    if value.strip()[:1] in ("-", "+"):  # "-0.00" would book 0 and mark the order PAID (issue #15.4)
        raise ParseError(f"{name} carries a sign: {value[:20]!r}")
    try:
        cents = yuan_to_cents(value)
    except MoneyError as exc:
        raise ParseError(f"{name}: {exc}") from None
    if cents < 0:
        raise ParseError(f"{name} is negative: {value!r}")
    return cents


def is_refund(params: Mapping[str, str]) -> bool:
    return any(params.get(name) for name in REFUND_FIELDS)


def merchant_ids(params: Mapping[str, str]) -> tuple[str, str | None]:
    """(merchant that owns the order, service provider or None). With app_auth_token the ISV's app
    (`app_id`) is notified for the merchant that authorised it (`auth_app_id`)."""
    app_id = params.get("app_id") or ""
    auth_app_id = params.get("auth_app_id") or app_id
    if not app_id:
        raise ParseError("app_id is missing")
    return (auth_app_id, app_id) if auth_app_id != app_id else (app_id, None)


def beijing_iso(text: str | None) -> str | None:
    """ "2024-05-01 12:00:00" (Beijing time) → "2024-05-01T12:00:00+08:00"; None if absent."""
    if not text:
        return None
    try:
        return datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=CHINA).isoformat()
    except ValueError:
        raise ParseError(f"unparseable time {text[:30]!r}") from None


def to_payment_notice(params: Mapping[str, Any], source: str = "notify") -> PaymentNotice:
    """A trade notification or a trade.query answer → the channel-neutral notice.

    total_amount is what the entry check compares, receipt_amount (what the merchant received) is
    booked (R13). `params` for a query answer must carry app_id/auth_app_id added by the caller.
    """
    status = params.get("trade_status")
    out_trade_no = params.get("out_trade_no")
    if not isinstance(status, str) or not status:
        raise ParseError("trade_status is missing")
    if not isinstance(out_trade_no, str) or not out_trade_no:
        raise ParseError("out_trade_no is missing")
    mchid, sp = merchant_ids(params)
    total = amount_cents(params, "total_amount")
    settled: dict[str, Any] = {}
    if TRADE_STATUS.get(status) is Outcome.PAID:
        paid = amount_cents(params, "receipt_amount")
        settled = notice_fields(alipay_payment, params)  # R43: receipt_amount and the voucher split
    else:
        paid = amount_cents(params, "receipt_amount") if params.get("receipt_amount") else 0
    return PaymentNotice(
        channel=STORED,
        transaction_id=str(params.get("trade_no") or ""),
        out_trade_no=out_trade_no,
        mchid=mchid,
        sp_mchid=sp,
        trade_state=status,
        order_total_cent=total,
        paid_cent=paid,
        currency="CNY",
        success_time=beijing_iso(params.get("gmt_payment") or params.get("send_pay_date")),
        source=source,
        **settled,
    )


def outcome_of(trade_status: str) -> Outcome | None:
    return TRADE_STATUS.get(trade_status)


# ---------------------------------------------------------------- ACKs (§5.4, R6)

ACK_CONTENT_TYPE = "text/plain"


def ack_success() -> tuple[int, str]:
    return 200, "success"


def ack_failure(status: int, message: str = "") -> tuple[int, str]:
    return status, "fail"


# ---------------------------------------------------------------- signed gateway client (§6)


@dataclass
class AlipayCredentials:
    app_id: str
    private_key: rsa.RSAPrivateKey
    keys: AlipayKeys
    app_cert_sn: str | None = None  # certificate mode: sent with every request (§5.5)
    app_cert_expires: float | None = None
    app_public_key: rsa.RSAPublicKey | None = None  # from the app certificate (lets `merchant check` verify)


def signed_response_content(raw: str, method: str) -> tuple[str, str, dict[str, Any]]:
    """(exact text of `<method>_response` or `error_response`, its key, the top-level object) (§6.1).

    The signed content is the raw JSON text of the value, from its `{` to the matching `}`; a body with
    a duplicated root node is refused (as the official Java SDK does)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(keys) != len(set(keys)):
            raise AlipayCallError(f"response has a duplicated node among {keys[:8]}")
        return dict(items)

    try:
        top = json.loads(raw, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise AlipayCallError(f"response is not JSON: {exc}") from None
    if not isinstance(top, dict):
        raise AlipayCallError("response is not a JSON object")
    node = method.replace(".", "_") + "_response"
    key = node if node in top else "error_response" if "error_response" in top else None
    if key is None:
        raise AlipayCallError(f"response has no {node}")
    return _value_text(raw, key), key, top


def _value_text(raw: str, key: str) -> str:
    """The raw text of the top-level object value under `key` (string-aware brace matching)."""
    decoder = json.JSONDecoder()
    idx = raw.index("{") + 1
    while True:
        idx = _skip_ws(raw, idx)
        name, idx = decoder.raw_decode(raw, idx)
        idx = _skip_ws(raw, idx)
        if raw[idx] != ":":
            raise AlipayCallError("malformed response")
        start = _skip_ws(raw, idx + 1)
        _, end = decoder.raw_decode(raw, start)
        if name == key:
            return raw[start:end]
        idx = _skip_ws(raw, end)
        if raw[idx] != ",":
            raise AlipayCallError(f"{key} not found")
        idx += 1


def _skip_ws(raw: str, idx: int) -> int:
    while raw[idx] in " \t\r\n":
        idx += 1
    return idx


class AlipayClient:
    """Signed requests to the Alipay gateway; every signed answer is verified before it is read."""

    def __init__(
        self,
        gateway: str,
        creds: AlipayCredentials,
        *,
        app_auth_token: str | None = None,
        timeout_s: float = 3.0,
        clock: Callable[[], float] = time.time,
    ):
        self.gateway = gateway
        self.creds = creds
        self.app_auth_token = app_auth_token
        self.timeout_s = timeout_s
        self.clock = clock

    def request_params(
        self, method: str, biz_content: dict[str, Any], *, notify_url: str | None = None
    ) -> dict[str, str]:
        params = {
            "app_id": self.creds.app_id,
            "method": method,
            "format": "JSON",
            "charset": "utf-8",
            "sign_type": "RSA2",
            "version": "1.0",
            "timestamp": datetime.fromtimestamp(self.clock(), CHINA).strftime("%Y-%m-%d %H:%M:%S"),
            "biz_content": json.dumps(biz_content, ensure_ascii=False, separators=(",", ":")),
        }
        if notify_url:
            params["notify_url"] = notify_url
        if self.app_auth_token:
            params["app_auth_token"] = self.app_auth_token
        if self.creds.app_cert_sn:
            params["app_cert_sn"] = self.creds.app_cert_sn
            params["alipay_root_cert_sn"] = self.creds.keys.root_sn or ""
        params["sign"] = rsa2_sign(self.creds.private_key, sign_content(params, exclude=("sign",)))
        return params

    def call(
        self, method: str, biz_content: dict[str, Any], *, notify_url: str | None = None
    ) -> dict[str, Any]:
        """POST the signed form; verify the answer (§6.1); return its business object (code 10000)."""
        params = self.request_params(method, biz_content, notify_url=notify_url)
        data = urllib.parse.urlencode(params).encode()
        try:
            raw = httpclient.request(
                "POST",
                self.gateway,
                body=data,
                headers={"Content-Type": "application/x-www-form-urlencoded;charset=utf-8"},
                timeout_s=self.timeout_s,
            ).body.decode("utf-8")
        except httpclient.StatusError as err:
            raise AlipayCallError(f"{method}: HTTP {err.status}", retryable=err.status >= 500) from None
        except (OSError, UnicodeDecodeError) as err:
            raise AlipayCallError(f"{method}: {err}", retryable=True) from None
        return self.verify_response(raw, method)

    def verify_response(self, raw: str, method: str) -> dict[str, Any]:
        content, node, top = signed_response_content(raw, method)
        sign = top.get("sign")
        if not sign:
            answer = json.loads(content)
            raise AlipayCallError(
                f"{method}: unsigned {node} {answer.get('code')} {answer.get('sub_code', '')}".strip(),
                code=str(answer.get("code", "")),
                sub_code=str(answer.get("sub_code", "")),
                unsigned=True,
            )
        hint = top.get("alipay_cert_sn") if self.creds.keys.by_sn else None
        candidates = self.creds.keys.candidates(hint)
        if not any(rsa2_verify(key, content.encode("utf-8"), sign) for _, key in candidates):
            raise AlipayCallError(f"{method}: response signature does not verify")
        answer = json.loads(content)
        code, sub_code = str(answer.get("code", "")), str(answer.get("sub_code", ""))
        if code != "10000":
            message = (
                f"{method}: {code} {answer.get('msg', '')} {sub_code} {answer.get('sub_msg', '')}".strip()
            )
            cls = TradeNotExist if sub_code == TRADE_NOT_EXIST else AlipayCallError
            raise cls(
                message,
                code=code,
                sub_code=sub_code,
                retryable=code in RETRYABLE_CODES or sub_code in RETRYABLE_SUB_CODES,
            )
        return answer

    # -------------------------------------------------- the trade APIs

    def precreate(
        self,
        *,
        out_trade_no: str,
        amount_cent: int,
        subject: str,
        notify_url: str,
        timeout_express: str | None = None,
    ) -> str:
        """alipay.trade.precreate → the QR code string the buyer scans."""
        biz: dict[str, Any] = {
            "out_trade_no": out_trade_no,
            "total_amount": format_yuan(amount_cent),
            "subject": subject,
        }
        if timeout_express:
            biz["timeout_express"] = timeout_express
        answer = self.call("alipay.trade.precreate", biz, notify_url=notify_url)
        if not answer.get("qr_code"):
            raise AlipayCallError("alipay.trade.precreate answered without qr_code")
        return str(answer["qr_code"])

    def trade_query(self, *, out_trade_no: str | None = None, trade_no: str | None = None) -> dict[str, Any]:
        """alipay.trade.query (§6.2). Raises TradeNotExist for ACQ.TRADE_NOT_EXIST (= not paid yet)."""
        return self.call("alipay.trade.query", _trade_ref(out_trade_no, trade_no))

    def trade_close(self, *, out_trade_no: str | None = None, trade_no: str | None = None) -> dict[str, Any]:
        """alipay.trade.close: closes an unpaid trade at the channel (R21)."""
        return self.call("alipay.trade.close", _trade_ref(out_trade_no, trade_no))

    def query_notice(
        self, answer: dict[str, Any], *, mchid: str, sp_mchid: str | None = None
    ) -> PaymentNotice:
        """A trade.query answer → a notice with source "query" (R23), for the order's own merchant."""
        params = {**answer, "app_id": sp_mchid or mchid, "auth_app_id": mchid}
        return to_payment_notice(params, source="query")


def _trade_ref(out_trade_no: str | None, trade_no: str | None) -> dict[str, str]:
    if not out_trade_no and not trade_no:
        raise ValueError("give out_trade_no or trade_no")
    ref = {}
    if out_trade_no:
        ref["out_trade_no"] = out_trade_no
    if trade_no:
        ref["trade_no"] = trade_no
    return ref


def format_yuan(amount_cent: int) -> str:
    if isinstance(amount_cent, bool) or not isinstance(amount_cent, int) or amount_cent < 0:
        raise ValueError(f"amount must be non-negative integer cents, got {amount_cent!r}")
    return f"{amount_cent // 100}.{amount_cent % 100:02d}"


# trade.query answers → pull outcomes (R22). The poller only ever sees tally.domain.poll.Answer.
QUERY_STATE = {
    "WAIT_BUYER_PAY": "WAITING",
    "TRADE_SUCCESS": "PAID",
    "TRADE_FINISHED": "PAID",
    "TRADE_CLOSED": "CLOSED",  # closed unpaid (or fully refunded: a paid order never moves back, R24)
}
QUERY_ERROR = {
    TRADE_NOT_EXIST: "NOT_CREATED",  # the buyer has not scanned yet: not paid, never "closed" (§6.2, R22)
    "ACQ.SYSTEM_ERROR": "TRANSIENT",
    "20000": "TRANSIENT",  # service unavailable
    "40005": "TRANSIENT",  # rate limit
    "NETWORK": "TRANSIENT",
    "40002": "PERSON",  # invalid parameter: our configuration
    "20001": "PERSON",  # insufficient authorisation (app_auth_token)
    "40006": "PERSON",  # no permission
}
CLOSE_ANSWER = {
    "CLOSED_NOW": "CLOSED",
    TRADE_NOT_EXIST: "NOT_CREATED",  # never scanned: nothing to close at the channel
    "ACQ.TRADE_STATUS_ERROR": "PAID",  # not WAIT_BUYER_PAY any more: query and decide (paid or closed)
    "ACQ.SYSTEM_ERROR": "TRANSIENT",
    "NETWORK": "TRANSIENT",
    "40002": "PERSON",
    "20001": "PERSON",
}


def error_word(exc: AlipayCallError) -> str:
    """The most specific code of a failed call (sub_code first), the key of the tables above."""
    if exc.sub_code:
        return exc.sub_code
    if exc.code:
        return exc.code
    return "NETWORK" if exc.retryable else "UNSIGNED_ERROR"
