"""WeChat Pay API v2 refunds: `POST /secapi/pay/refund` and `POST /pay/refundquery`, XML signed with the API
key (channel-spec §4 signature rules), and the explicit tables mapping v2 words to outcomes (R22, R29).

v2 reports the same WeChat transactions and refund numbers as v3 (wechatpay_v2/wire.py docstring), so a
v2 refund is channel "wechatpay": its v2 words are translated to the v3 ones (REFUNDCLOSE → CLOSED, CHANGE →
ABNORMAL) and one table (wechatpay_v3/refunds.py REFUND_STATUS) decides the outcome, for the `req_info`
notification and for the query alike; the raw key is the same (`wechatpay#<out_refund_no>`, status).

Transport: in production `/secapi/pay/refund` needs mutual TLS with the merchant's API client certificate
(apiclient_cert.pem / apiclient_key.pem, carried by the merchant secret: `tally merchant add wechatpay-v2
--client-cert … --client-key …`); bootstrap passes `client_tls` of it. A merchant without one
sends no client certificate (the simulator's plain-HTTP listener; its TLS listener requires one).

The create answer `result_code=SUCCESS` means "the application was accepted", never "refunded" (R29); its
`refund_fee` is this refund's own amount (fen), so it is compared with ours (a difference → a person).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tally import errors, httpclient
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v3.refunds import REFUND_STATUS
from tally.domain.refunds import AnswerKind, ChannelAnswer

REFUND_PATH = "/secapi/pay/refund"
QUERY_PATH = "/pay/refundquery"

# v2 refund_status_$n → the v3 word (one table decides, see the module docstring). PROCESSING = no outcome yet.
QUERY_STATUS_V2 = {**wx2.REFUND_STATUS_V2, "PROCESSING": "PROCESSING"}

# err_code of /secapi/pay/refund (result_code FAIL). RETRY: same out_refund_no and parameters later (the doc:
# "请不要更换商户退款单号，请使用相同参数再次调用API"). REJECTED: a signed, definitive refusal: the refund never
# existed, the reservation is released, the refund_no spent. UNKNOWN (and anything unlisted): a person.
CREATE_ERRORS: dict[str, AnswerKind] = {
    "SYSTEMERROR": AnswerKind.RETRY,
    "BIZERR_NEED_RETRY": AnswerKind.RETRY,
    "FREQUENCY_LIMITED": AnswerKind.RETRY,
    "INVALID_REQ_TOO_MUCH": AnswerKind.RETRY,
    "NOTENOUGH": AnswerKind.RETRY,  # merchant balance too low for now: retried until expiry, then a person
    "ORDER_NOT_READY": AnswerKind.RETRY,
    "TRADE_OVERDUE": AnswerKind.REJECTED,  # older than one year
    "USER_ACCOUNT_ABNORMAL": AnswerKind.REJECTED,  # "退款申请失败，商户可自行处理退款"
    "INVALID_TRANSACTIONID": AnswerKind.REJECTED,
    "ORDERNOTEXIST": AnswerKind.REJECTED,
    "PARAM_ERROR": AnswerKind.REJECTED,
    "APPID_NOT_EXIST": AnswerKind.REJECTED,
    "MCHID_NOT_EXIST": AnswerKind.REJECTED,
    "SIGNERROR": AnswerKind.REJECTED,
    "XML_FORMAT_ERROR": AnswerKind.REJECTED,
    "REQUIRE_POST_METHOD": AnswerKind.REJECTED,
    "ERROR": AnswerKind.UNKNOWN,  # "业务错误 … 请根据实际返回做相应处理": a person reads err_code_des
    "REFUND_FEE_MISMATCH": AnswerKind.UNKNOWN,  # our refund_no with other amounts at WeChat: a person
}
QUERY_ERRORS: dict[str, AnswerKind] = {
    "REFUNDNOTEXIST": AnswerKind.NOT_FOUND,  # wrong number or nothing refunded (not "closed", R22)
    "SYSTEMERROR": AnswerKind.RETRY,
}


class V2ChannelError(errors.ChannelError):
    """No usable answer: network, HTTP error, non-XML, or a signature that does not verify."""


class WeChatPayV2RefundClient:
    """The refund calls' client (`/secapi/pay/refund`, `/pay/refundquery`): signed XML requests with the v2 API
    key (MD5 by default, as the refund API documents), mutual TLS through `tls` (the API client certificate); every
    return_code=SUCCESS answer's sign is verified. The payment calls have their own client,
    wire.WeChatPayV2Client (HMAC-SHA256, sub-merchants): two clients, two names."""

    def __init__(
        self,
        api_base: str,
        *,
        mchid: str,
        api_key: str,
        appid: str = "",
        timeout_s: float = 3.0,
        tls: httpclient.TLS | None = None,
        sign_type: str = "MD5",
    ):
        self.api_base = api_base.rstrip("/")
        self.mchid = mchid
        self.api_key = api_key
        self.appid = appid
        self.timeout_s = timeout_s
        self.tls = tls
        self.sign_type = sign_type

    def request(self, path: str, fields: dict[str, str]) -> dict[str, str]:
        params = {"mch_id": self.mchid, "nonce_str": secrets.token_hex(16), **fields}
        if self.appid:
            params["appid"] = self.appid
        params = {k: v for k, v in params.items() if v not in (None, "")}
        if self.sign_type != "MD5":
            params["sign_type"] = self.sign_type
        params["sign"] = wx2.sign(params, self.api_key, self.sign_type)
        try:
            raw = httpclient.request(
                "POST",
                self.api_base + path,
                body=wx2.to_xml(params).encode("utf-8"),
                headers={"Content-Type": "text/xml; charset=utf-8"},
                timeout_s=self.timeout_s,
                tls=self.tls,
            ).body
        except httpclient.StatusError as err:
            raise V2ChannelError(f"{path}: HTTP {err.status}") from None
        except OSError as err:
            raise V2ChannelError(f"{path}: {err}") from None
        try:
            answer = wx2.parse_xml(raw)
        except wx2.XmlError as exc:
            raise V2ChannelError(f"{path}: {exc}") from None
        if answer.get("return_code") == "SUCCESS":
            try:
                wx2.verify(answer, self.api_key)
            except wx2.SignatureError as exc:
                raise V2ChannelError(f"{path}: answer signature: {exc.reason}") from None
        return answer


def client_tls(cert_pem: str, key_pem: str, cafile: str | None = None) -> httpclient.TLS:
    """Production `/secapi/` transport: the merchant's API client certificate (the PEMs its secret carries),
    presented on connections of its own (tally/httpclient.py keys its pools by it). `cafile`: trust these CAs
    instead of the system's (tests against the simulator's TLS listener)."""
    return httpclient.TLS(cafile=cafile or None, cert_pem=cert_pem, key_pem=key_pem)


def check_client_certificate(cert_pem: str, key_pem: str) -> None:
    """Refuse an API client certificate that cannot work before it is stored: both parts, and they match."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if not (cert_pem and key_pem):
        raise ValueError("the API client certificate needs both --client-cert and --client-key")
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except ValueError as exc:
        raise ValueError(f"unreadable API client certificate or key: {exc}") from None
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, pub) != key.public_key().public_bytes(
        serialization.Encoding.DER, pub
    ):
        raise ValueError("the API client key does not belong to the certificate")


class WeChatV2Refunds:
    """The per-channel refund client the RefundService calls (create / query), WeChat Pay v2."""

    channel = wx2.STORED

    def __init__(
        self, client: WeChatPayV2RefundClient, notify_url: str, *, clock: Callable[[], float] = time.time
    ):
        self.client = client
        self.notify_url = notify_url
        self.clock = clock

    def create(self, refund: dict[str, Any]) -> ChannelAnswer:
        fields = {
            "out_refund_no": refund["refund_no"],
            "total_fee": str(int(refund["total_cent"])),
            "refund_fee": str(int(refund["amount_cent"])),
            "refund_fee_type": refund.get("currency") or "CNY",
            "refund_desc": refund.get("reason") or "",
            "notify_url": self.notify_url,
        }
        fields.update(_trade_ref(refund))
        try:
            answer = self.client.request(REFUND_PATH, fields)
        except V2ChannelError as exc:
            return ChannelAnswer(AnswerKind.RETRY, code="NETWORK", message=str(exc))  # sent, outcome unknown
        if answer.get("return_code") != "SUCCESS":
            # unsigned by protocol: it proves nothing, so a person looks before anything is released (R22)
            return ChannelAnswer(
                AnswerKind.UNKNOWN,
                code="RETURN_FAIL",
                message=f"return_code {answer.get('return_code')}: {answer.get('return_msg', '')}",
            )
        if answer.get("result_code") != "SUCCESS":
            code = answer.get("err_code") or "RESULT_FAIL"
            return ChannelAnswer(
                CREATE_ERRORS.get(code, AnswerKind.UNKNOWN),
                code=code,
                message=f"{code}: {answer.get('err_code_des', '')}"[:300],
            )
        if answer.get("out_refund_no") not in (None, refund["refund_no"]):
            return ChannelAnswer(
                AnswerKind.UNKNOWN,
                code="OTHER_REFUND",
                message=f"answer is for refund {answer.get('out_refund_no')}",
            )
        fee = answer.get("refund_fee")
        return ChannelAnswer(
            AnswerKind.ACCEPTED,
            refund_id=answer.get("refund_id") or None,
            refund_cent=int(fee) if fee and fee.isascii() and fee.isdigit() else None,
            code="SUCCESS",
            message="refund application accepted",
        )

    def query(self, refund: dict[str, Any]) -> ChannelAnswer:
        try:
            answer = self.client.request(QUERY_PATH, {"out_refund_no": refund["refund_no"]})
        except V2ChannelError as exc:
            return ChannelAnswer(AnswerKind.RETRY, code="NETWORK", message=str(exc))
        if answer.get("return_code") != "SUCCESS":
            return ChannelAnswer(
                AnswerKind.RETRY, code="RETURN_FAIL", message=str(answer.get("return_msg", ""))
            )
        if answer.get("result_code") != "SUCCESS":
            code = answer.get("err_code") or "RESULT_FAIL"
            return ChannelAnswer(
                QUERY_ERRORS.get(code, AnswerKind.RETRY),
                code=code,
                message=f"{code}: {answer.get('err_code_des', '')}"[:300],
            )
        return query_answer(answer, refund, self.client.mchid)


def query_answer(answer: dict[str, str], refund: dict[str, Any], mchid: str) -> ChannelAnswer:
    """The `_$n` entry of our out_refund_no in a verified refundquery answer → outcome (one v3 table)."""
    index = next(
        (
            k[len("out_refund_no_") :]
            for k, v in answer.items()
            if k.startswith("out_refund_no_") and v == refund["refund_no"]
        ),
        None,
    )
    if index is None:
        return ChannelAnswer(
            AnswerKind.NOT_FOUND, code="NOT_LISTED", message="our out_refund_no is not in the answer"
        )
    word = answer.get(f"refund_status_{index}", "")
    v3_word = QUERY_STATUS_V2.get(word)
    refund_id = answer.get(f"refund_id_{index}") or None
    if v3_word is None:
        return ChannelAnswer(
            AnswerKind.UNKNOWN, refund_id=refund_id, code=word, message=f"unmapped refund_status {word!r}"
        )
    event = REFUND_STATUS[v3_word]
    if event is None:
        return ChannelAnswer(AnswerKind.OUTCOME, event=None, refund_id=refund_id, code=v3_word)
    try:
        notice = wx2.to_refund_notice(
            {
                "out_refund_no": refund["refund_no"],
                "refund_id": refund_id or "",
                "refund_status": word,
                "out_trade_no": answer.get("out_trade_no") or "",
                "transaction_id": answer.get("transaction_id") or "",
                "refund_fee": answer.get(f"refund_fee_{index}", ""),
                "total_fee": answer.get("total_fee", ""),
                # R43: 退款金额 = 申请退款金额 − 非充值代金券退款金额, and the coupons' share of this refund
                "settlement_refund_fee": answer.get(f"settlement_refund_fee_{index}", ""),
                "settlement_total_fee": answer.get("settlement_total_fee", ""),
                "coupon_refund_fee": answer.get(f"coupon_refund_fee_{index}", ""),
                "success_time": answer.get(f"refund_success_time_{index}") or "",
            },
            mchid,
        )
    except wx2.ParseError as exc:
        return ChannelAnswer(AnswerKind.UNKNOWN, refund_id=refund_id, code=word, message=str(exc))
    notice = replace(notice, source="query")
    return ChannelAnswer(
        AnswerKind.OUTCOME,
        event=event,
        refund_id=refund_id,
        refund_cent=notice.refund_cent,
        success_time=notice.success_time,
        code=v3_word,
        notice=notice,
    )


def _trade_ref(refund: dict[str, Any]) -> dict[str, str]:
    if refund.get("transaction_id"):
        return {"transaction_id": str(refund["transaction_id"])}
    return {"out_trade_no": str(refund["out_trade_no"])}
