"""WeChat Pay API v2 (legacy): XML notifications signed with the API key, XML ACKs, refund `req_info`.

Wire format: docs/channel-spec.md §4. The v2 API reports the same WeChat transactions as v3
(same `transaction_id` space), so its notices carry channel "wechatpay": a payment reported by a v2
callback and by a v3 query is one raw row and one ledger entry (R7, R18).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives import padding as sym_padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from defusedxml import DefusedXmlException
from defusedxml import ElementTree as SafeET

from tally import errors
from tally.channels.settlement import refund_fields
from tally.channels.wechatpay_v2.channel import CHANNEL as SPEC
from tally.channels.wechatpay_v2.settlement import v2_refund_basis, wechat_v2_payment
from tally.domain.clock import CHINA
from tally.domain.notifications import PaymentNotice
from tally.domain.poll import Answer
from tally.domain.refunds import RefundNotice
from tally.domain.settlement import notice_fields
from tally.errors import ParseError, SignatureError  # the shared meanings (R4, R5), re-exported

STORED = SPEC.stored  # "wechatpay": same transaction id space as v3 (see the module docstring)
API = str(SPEC.api)  # "wechatpay_v2": the order row's `api`, the merchants table's channel
ACK_CONTENT_TYPE = "text/xml"
_FORBIDDEN = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_DIGITS = re.compile(r"^\d{1,15}$", re.ASCII)


class XmlError(errors.InvalidRequest):
    """Not a usable v2 XML body (before any signature check: nothing is trusted)."""


# ---------------------------------------------------------------- hardened XML


XML_MAX_BYTES = 64 * 1024  # a v2 callback is 1-2 KB; checked before any parsing (R40)
_DECLARED_ENCODING = re.compile(rb"""^<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def parse_xml(body: bytes, root: str = "xml") -> dict[str, str]:
    """A flat `<xml><k>v</k>…</xml>` document → dict (R40).

    Cheap checks first: the size, then the encoding — UTF-8 only, declared or not (a UTF-16 body passed
    a byte-level DOCTYPE check and had its entities expanded); then DTDs and entities are refused on the
    decoded text, and the parse itself is defusedxml's, which refuses DTDs, entities and external
    references whatever the encoding. Nested elements and repeated fields are refused too."""
    if len(body) > XML_MAX_BYTES:
        raise XmlError(f"body of {len(body)} bytes is over the {XML_MAX_BYTES}-byte limit")
    if body[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in body:
        raise XmlError("unsupported XML encoding: only UTF-8 is accepted")
    declared = _DECLARED_ENCODING.match(body.lstrip(b"\xef\xbb\xbf"))
    if declared and declared.group(1).lower().replace(b"_", b"-") not in (b"utf-8", b"utf8"):
        raise XmlError(f"unsupported XML encoding: {declared.group(1)[:20].decode('ascii')}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise XmlError("unsupported XML encoding: the body is not UTF-8") from None
    if _FORBIDDEN.search(text.encode("utf-8")):
        raise XmlError("DTD/entity declarations are refused")
    try:
        element = SafeET.fromstring(body, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except ET.ParseError as exc:
        raise XmlError(f"not XML: {exc}") from None
    except DefusedXmlException:
        raise XmlError("DTD/entity declarations are refused") from None
    except (ValueError, LookupError) as exc:  # expat: a declared multi-byte or unknown encoding (e.g. GBK)
        raise XmlError(f"unsupported XML encoding: {exc}") from None
    if element.tag != root:
        raise XmlError(f"root element is <{element.tag[:20]}>, expected <{root}>")
    out: dict[str, str] = {}
    for child in element:
        if len(child):
            raise XmlError(f"<{child.tag[:20]}> is nested")
        if child.tag in out:
            raise XmlError(f"<{child.tag[:20]}> appears twice")
        out[child.tag] = child.text or ""
    return out


def to_xml(fields: Mapping[str, str], root: str = "xml") -> str:
    def cdata(value: str) -> str:
        return "<![CDATA[" + value.replace("]]>", "]]]]><![CDATA[>") + "]]>"

    return f"<{root}>" + "".join(f"<{k}>{cdata(str(v))}</{k}>" for k, v in fields.items()) + f"</{root}>"


# ---------------------------------------------------------------- signatures (§4)


def string_to_sign(params: Mapping[str, str], api_key: str) -> str:
    """stringA (non-empty values except sign, sorted by key, raw values) + "&key=" + API key."""
    items = "&".join(f"{k}={params[k]}" for k in sorted(params) if k != "sign" and params[k] != "")
    return f"{items}&key={api_key}"


def sign(params: Mapping[str, str], api_key: str, sign_type: str = "MD5") -> str:
    message = string_to_sign(params, api_key).encode("utf-8")
    if sign_type == "MD5":
        return hashlib.md5(message).hexdigest().upper()
    if sign_type == "HMAC-SHA256":
        return hmac.new(api_key.encode("utf-8"), message, hashlib.sha256).hexdigest().upper()
    raise ValueError(f"unknown sign_type {sign_type!r}")


def verify(params: Mapping[str, str], api_key: str) -> str:
    """Checks `sign` (constant time). The algorithm is told by the signature's length (32 = MD5,
    64 = HMAC-SHA256), since MD5-signed notifications are reported even for HMAC orders (§4)."""
    given = (params.get("sign") or "").upper()
    declared = params.get("sign_type") or "MD5"
    if declared not in ("MD5", "HMAC-SHA256"):
        raise SignatureError(f"unknown sign_type {declared[:20]!r}", cause="unsupported_sign_type")
    algorithm = {32: "MD5", 64: "HMAC-SHA256"}.get(len(given))
    if algorithm is None:
        raise SignatureError("missing or malformed sign", cause="missing_signature")
    if not hmac.compare_digest(sign(params, api_key, algorithm), given):
        raise SignatureError(f"{algorithm} sign does not verify with the API key")
    return algorithm


# ---------------------------------------------------------------- refund req_info (§4)


def refund_key(api_key: str) -> bytes:
    return hashlib.md5(api_key.encode("utf-8")).hexdigest().lower().encode("ascii")


def decrypt_req_info(req_info: str, api_key: str) -> dict[str, str]:
    """base64 → AES-256-ECB/PKCS7 with key = lowercase hex MD5 of the API key → `<root>` XML.

    ECB has no integrity tag: padding and a well-formed `<root>` document are the only evidence that
    the key is right, so any failure here means "not proven to come from WeChat" (R4)."""
    try:
        data = base64.b64decode(req_info, validate=True)
        if not data or len(data) % 16:
            raise ValueError("length is not a multiple of the AES block")
        decryptor = Cipher(algorithms.AES(refund_key(api_key)), modes.ECB()).decryptor()  # noqa: S305 - the wire format
        padded = decryptor.update(data) + decryptor.finalize()
        unpadder = sym_padding.PKCS7(128).unpadder()
        plain = unpadder.update(padded) + unpadder.finalize()
        return parse_xml(plain, root="root")
    except (binascii.Error, ValueError, XmlError) as exc:
        raise SignatureError(
            f"req_info does not decrypt with the API key: {exc}", cause="undecryptable"
        ) from None


def encrypt_req_info(fields: Mapping[str, str], api_key: str) -> str:
    """The inverse (merchant check and tests): `<root>` XML → AES-256-ECB/PKCS7 → base64."""
    padder = sym_padding.PKCS7(128).padder()
    padded = padder.update(to_xml(fields, root="root").encode("utf-8")) + padder.finalize()
    encryptor = Cipher(algorithms.AES(refund_key(api_key)), modes.ECB()).encryptor()  # noqa: S305
    return base64.b64encode(encryptor.update(padded) + encryptor.finalize()).decode("ascii")


# ---------------------------------------------------------------- parsing


def fen(params: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = params.get(name)
    if value in (None, "") and default is not None:
        return default
    if not isinstance(value, str) or not _DIGITS.match(value):
        raise ParseError(f"{name} must be integer fen, got {str(value)[:20]!r}")
    return int(value)


def to_payment_notice(params: Mapping[str, str], source: str = "notify") -> PaymentNotice:
    """A verified payment notification (return_code SUCCESS). result_code FAIL with a transaction id is
    a pay error (R8, R16). total_fee is compared, cash_fee (what the payer paid) is booked (R13)."""
    for name in ("out_trade_no", "mch_id", "result_code"):
        if not params.get(name):
            raise ParseError(f"{name} is missing")
    sub = params.get("sub_mch_id") or None
    total = fen(params, "total_fee")
    # SUCCESS paid, FAIL a pay error; anything else is kept verbatim and, unknown, goes to a person (R16).
    state = {"SUCCESS": "SUCCESS", "FAIL": "PAYERROR"}.get(
        params["result_code"], f"RESULT_{params['result_code']}"
    )
    paid = fen(params, "cash_fee", default=total) if state == "SUCCESS" else 0
    settled = notice_fields(wechat_v2_payment, params) if state == "SUCCESS" else {}  # R43
    return PaymentNotice(
        channel=STORED,
        transaction_id=params.get("transaction_id") or "",
        out_trade_no=params["out_trade_no"],
        mchid=sub or params["mch_id"],
        sp_mchid=params["mch_id"] if sub else None,
        trade_state=state,
        order_total_cent=total,
        paid_cent=paid,
        currency=params.get("fee_type") or "CNY",
        success_time=time_end_iso(params.get("time_end")),
        source=source,
        **settled,
    )


def time_end_iso(text: str | None) -> str | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y%m%d%H%M%S").replace(tzinfo=CHINA).isoformat()
    except ValueError:
        raise ParseError(f"unparseable time_end {text[:20]!r}") from None


# ---------------------------------------------------------------- ACKs (§4, R6)


def ack_success() -> tuple[int, str]:
    return 200, to_xml({"return_code": "SUCCESS", "return_msg": "OK"})


def ack_failure(status: int, message: str) -> tuple[int, str]:
    return status, to_xml({"return_code": "FAIL", "return_msg": message[:64]})


# v2 refund_status → the v3 word, so one table (wechatpay_v3/refunds.py REFUND_STATUS) decides the outcome.
REFUND_STATUS_V2 = {"SUCCESS": "SUCCESS", "REFUNDCLOSE": "CLOSED", "CHANGE": "ABNORMAL"}


def to_refund_notice(refund: dict[str, str], mchid: str) -> RefundNotice:
    """A decrypted `req_info` (§4) as the channel-neutral refund notice (R29, R30): same channel and refund
    number space as v3, so the refund it reports is the one `POST /refunds` created."""
    from tally.channels.wechatpay_v3.refunds import REFUND_STATUS

    word = str(refund.get("refund_status") or "")
    v3_word = REFUND_STATUS_V2.get(word)
    basis = v2_refund_basis(refund)  # R43: settlement_refund_fee (+ coupon_refund_fee from the query)
    try:
        return RefundNotice(
            channel=STORED,
            refund_no=_required(refund, "out_refund_no"),
            refund_id=str(refund.get("refund_id") or ""),
            status=v3_word or word,
            event=REFUND_STATUS.get(v3_word) if v3_word else None,
            mchid=mchid,
            sp_mchid=None,
            out_trade_no=str(refund.get("out_trade_no") or ""),
            transaction_id=str(refund.get("transaction_id") or ""),
            refund_cent=_fen(refund, "refund_fee"),
            total_cent=_fen(refund, "total_fee"),
            success_time=_beijing(refund.get("success_time")),
            source="notify",
            **refund_fields(basis),
            settlement_basis=basis,
        )
    except (KeyError, ValueError) as exc:
        raise ParseError(f"req_info lacks or mistypes {exc}") from None


def _required(fields: dict[str, str], name: str) -> str:
    value = fields.get(name)
    if not value:
        raise KeyError(name)
    return str(value)


def _fen(fields: dict[str, str], name: str) -> int:
    value = _required(fields, name)
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"{name} is not integer fen: {value[:20]!r}")
    return int(value)


def _beijing(text: str | None) -> str | None:
    """ "2018-11-19 16:24:13" (Beijing) → RFC 3339 with +08:00, like v3."""
    return text.replace(" ", "T") + "+08:00" if text else None


# ---------------------------------------------------------------- the v2 API client (prepay and pull)
# Same host as v3 (api.mch.weixin.qq.com). Requests and answers are flat XML signed with the API key;
# `return_code` is the call, `result_code` the business result, `err_code` the reason (R22 tables below).
# Local pseudo-codes: NETWORK (no HTTP answer), HTTP_5XX, RETURN_FAIL (return_code FAIL: the call itself was
# refused, e.g. 签名错误), RESPONSE_NOT_VERIFIED (answer sign does not verify: possibly forged), NOT_XML.

QUERY_ERROR: dict[str, Answer] = {  # err_code of a failed /pay/orderquery
    "ORDERNOTEXIST": Answer.NOT_CREATED,  # never "closed" on its own (R22)
    "SYSTEMERROR": Answer.TRANSIENT,
    "NETWORK": Answer.TRANSIENT,
    "HTTP_5XX": Answer.TRANSIENT,
    "RETURN_FAIL": Answer.PERSON,
    "RESPONSE_NOT_VERIFIED": Answer.PERSON,
    "NOT_XML": Answer.PERSON,
    "SIGNERROR": Answer.PERSON,
    "NOAUTH": Answer.PERSON,
    "APPID_NOT_EXIST": Answer.PERSON,
    "MCHID_NOT_EXIST": Answer.PERSON,
    "APPID_MCHID_NOT_MATCH": Answer.PERSON,
    "LACK_PARAMS": Answer.PERSON,
    "PARAM_ERROR": Answer.PERSON,
}
CLOSE_ANSWER: dict[str, Answer] = {  # what /pay/closeorder answers; CLOSED/PAID are then confirmed by a query
    "CLOSED_NOW": Answer.CLOSED,
    "ORDERCLOSED": Answer.CLOSED,
    "ORDERPAID": Answer.PAID,
    "ORDERNOTEXIST": Answer.NOT_CREATED,
    "SYSTEMERROR": Answer.TRANSIENT,
    "NETWORK": Answer.TRANSIENT,
    "HTTP_5XX": Answer.TRANSIENT,
    "RETURN_FAIL": Answer.PERSON,
    "RESPONSE_NOT_VERIFIED": Answer.PERSON,
    "NOT_XML": Answer.PERSON,
    "SIGNERROR": Answer.PERSON,
    "NOAUTH": Answer.PERSON,
    "APPID_MCHID_NOT_MATCH": Answer.PERSON,
    "PARAM_ERROR": Answer.PERSON,
}
# trade_state of a successful /pay/orderquery: the same words as v3 (§2.1), so v3's table decides.
QUERY_STATE: dict[str, Answer] = {
    "SUCCESS": Answer.PAID,
    "REFUND": Answer.PAID,
    "NOTPAY": Answer.WAITING,
    "USERPAYING": Answer.WAITING,
    "CLOSED": Answer.CLOSED,
    "REVOKED": Answer.CLOSED,
    "PAYERROR": Answer.CLOSED,
}


class WeChatV2CallError(errors.ChannelError):
    """A v2 API call that did not give a usable, verified SUCCESS answer; `word` picks the table row."""

    def __init__(self, message: str, *, word: str, retryable: bool = False):
        super().__init__(message)
        self.word = word
        self.retryable = retryable


class WeChatPayV2Client:
    """`/pay/unifiedorder`, `/pay/orderquery`, `/pay/closeorder` signed with the API key (HMAC-SHA256 by
    default, MD5 on request); answers are parsed with the hardened parser (XXE refused) and their sign
    verified before anything in them is used. Partner: `mchid`/`api_key` are the provider's, `sub_mch_id`
    names the merchant."""

    def __init__(
        self,
        base_url: str,
        mchid: str,
        api_key: str,
        appid: str,
        *,
        sub_mch_id: str | None = None,
        sub_appid: str | None = None,
        sign_type: str = "HMAC-SHA256",
        timeout_s: float = 3.0,
    ):
        self.base_url = base_url.rstrip("/")
        self.mchid = mchid
        self.api_key = api_key
        self.appid = appid
        self.sub_mch_id = sub_mch_id
        self.sub_appid = sub_appid
        self.sign_type = sign_type
        self.timeout_s = timeout_s

    def unified_order(
        self,
        *,
        out_trade_no: str,
        total_fee: int,
        body: str,
        notify_url: str,
        time_expire: float | None = None,
        spbill_create_ip: str = "127.0.0.1",
    ) -> str:
        """NATIVE unified order → code_url (the buyer scans it). `total_fee` in integer fen."""
        if isinstance(total_fee, bool) or not isinstance(total_fee, int) or total_fee <= 0:
            raise ValueError("total_fee must be a positive integer number of fen")
        fields = {
            "body": body[:128],
            "out_trade_no": out_trade_no,
            "total_fee": str(total_fee),
            "spbill_create_ip": spbill_create_ip,
            "notify_url": notify_url,
            "trade_type": "NATIVE",
            "product_id": out_trade_no[:32],
            "fee_type": "CNY",
        }
        if time_expire is not None:
            fields["time_expire"] = datetime.fromtimestamp(time_expire, CHINA).strftime("%Y%m%d%H%M%S")
        answer = self.call("/pay/unifiedorder", fields)
        if not answer.get("code_url"):
            raise WeChatV2CallError("unifiedorder answered without code_url", word="PARAM_ERROR")
        return answer["code_url"]

    def order_query(self, out_trade_no: str) -> dict[str, str]:
        return self.call("/pay/orderquery", {"out_trade_no": out_trade_no})

    def close_order(self, out_trade_no: str) -> dict[str, str]:
        return self.call("/pay/closeorder", {"out_trade_no": out_trade_no})

    def download_bill(self, bill_date: str, bill_type: str = "ALL", *, max_bytes: int = 1 << 30) -> bytes:
        """`/pay/downloadbill` (bill_date YYYYMMDD, tar_type GZIP): the answer is the bill itself (gzip or the
        CSV, not signed: the v2 API signs no file), or an error XML `return_code FAIL` whose `return_msg` names
        the case (`No Bill Exist`: no bill for the day -> word NO_BILL_EXIST; `Bill Creating` -> BILL_CREATING).
        Anything that is neither (an HTML page) is returned as-is for the parser to refuse loudly."""
        import secrets

        from tally import httpclient

        request = {
            "appid": self.appid,
            "mch_id": self.mchid,
            "nonce_str": secrets.token_hex(16),
            "sign_type": self.sign_type,
            "bill_date": bill_date.replace("-", ""),
            "bill_type": bill_type,
            "tar_type": "GZIP",
        }
        if self.sub_mch_id:
            request["sub_mch_id"] = self.sub_mch_id
        request["sign"] = sign(request, self.api_key, self.sign_type)
        try:
            raw = httpclient.request(
                "POST",
                self.base_url + "/pay/downloadbill",
                body=to_xml(request).encode("utf-8"),
                headers={"Content-Type": "text/xml; charset=utf-8"},
                timeout_s=max(self.timeout_s, 30.0),
                limit=max_bytes + 1,
            ).body
        except httpclient.StatusError as err:
            word = "HTTP_5XX" if err.status >= 500 else f"HTTP_{err.status}"
            raise WeChatV2CallError(
                f"POST /pay/downloadbill: HTTP {err.status}", word=word, retryable=err.status >= 500
            ) from None
        except OSError as err:
            raise WeChatV2CallError(
                f"POST /pay/downloadbill: {err}", word="NETWORK", retryable=True
            ) from None
        if len(raw) > max_bytes:
            raise WeChatV2CallError(
                f"POST /pay/downloadbill: answer over {max_bytes} bytes", word="TOO_LARGE"
            )
        if raw.lstrip()[:5] == b"<xml>":
            try:
                answer = parse_xml(raw[: 1 << 16])
            except XmlError as exc:
                raise WeChatV2CallError(f"POST /pay/downloadbill: {exc}", word="NOT_XML") from None
            message = answer.get("return_msg", "")[:64]
            word = {"no bill exist": "NO_BILL_EXIST", "bill creating": "BILL_CREATING"}.get(
                message.strip().lower(), answer.get("error_code") or "RETURN_FAIL"
            )
            raise WeChatV2CallError(
                f"POST /pay/downloadbill: return_code {answer.get('return_code', '')[:20]!r} {message}",
                word=word,
                retryable=word == "BILL_CREATING",
            )
        return raw

    def call(self, path: str, fields: dict[str, str]) -> dict[str, str]:
        import secrets

        from tally import httpclient

        request = {
            "appid": self.appid,
            "mch_id": self.mchid,
            "nonce_str": secrets.token_hex(16),
            "sign_type": self.sign_type,
            **fields,
        }
        if self.sub_mch_id:
            request["sub_mch_id"] = self.sub_mch_id
            if self.sub_appid:
                request["sub_appid"] = self.sub_appid
        request["sign"] = sign(request, self.api_key, self.sign_type)
        try:
            raw = httpclient.request(
                "POST",
                self.base_url + path,
                body=to_xml(request).encode("utf-8"),
                headers={"Content-Type": "text/xml; charset=utf-8"},
                timeout_s=self.timeout_s,
                limit=1 << 20,
            ).body
        except httpclient.StatusError as err:
            word = "HTTP_5XX" if err.status >= 500 else f"HTTP_{err.status}"
            raise WeChatV2CallError(
                f"POST {path}: HTTP {err.status}", word=word, retryable=err.status >= 500
            ) from None
        except OSError as err:
            raise WeChatV2CallError(f"POST {path}: {err}", word="NETWORK", retryable=True) from None
        try:
            answer = parse_xml(raw)
        except XmlError as exc:
            raise WeChatV2CallError(f"POST {path}: {exc}", word="NOT_XML") from None
        if answer.get("return_code") != "SUCCESS":
            raise WeChatV2CallError(
                f"POST {path}: return_code {answer.get('return_code', '')[:20]!r} "
                f"{answer.get('return_msg', '')[:64]}",
                word="RETURN_FAIL",
            )
        try:
            verify(answer, self.api_key)
        except SignatureError as exc:
            raise WeChatV2CallError(
                f"POST {path}: answer not verified: {exc.reason}", word="RESPONSE_NOT_VERIFIED"
            ) from None
        if answer.get("mch_id") != self.mchid or (
            self.sub_mch_id and answer.get("sub_mch_id", self.sub_mch_id) != self.sub_mch_id
        ):
            raise WeChatV2CallError(
                f"POST {path}: answer is about merchant {answer.get('mch_id', '')[:32]!r}",
                word="RESPONSE_NOT_VERIFIED",
            )
        if answer.get("result_code") != "SUCCESS":
            word = answer.get("err_code") or "RESULT_FAIL"
            raise WeChatV2CallError(
                f"POST {path}: {word} {answer.get('err_code_des', '')[:64]}",
                word=word,
                retryable=word == "SYSTEMERROR",
            )
        return answer


def query_notice(answer: Mapping[str, str], *, mchid: str, sp_mchid: str | None = None) -> PaymentNotice:
    """A verified paid /pay/orderquery answer (SUCCESS or REFUND) as a `source = "query"` notice: the same
    raw key as the callback (`wechatpay#transaction_id`), total_fee compared, cash_fee booked (R13, R23)."""
    for name in ("out_trade_no", "transaction_id", "trade_state"):
        if not answer.get(name):
            raise ParseError(f"{name} is missing")
    total = fen(answer, "total_fee")
    return PaymentNotice(
        channel=STORED,
        transaction_id=answer["transaction_id"],
        out_trade_no=answer["out_trade_no"],
        mchid=mchid,
        sp_mchid=sp_mchid,
        trade_state=answer["trade_state"],
        order_total_cent=total,
        paid_cent=fen(answer, "cash_fee", default=total),
        currency=answer.get("fee_type") or "CNY",
        success_time=time_end_iso(answer.get("time_end")),
        source="query",
        **notice_fields(wechat_v2_payment, answer),  # R43: the query answer carries the same coupon fields
    )
