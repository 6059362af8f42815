"""WeChat Pay API v2 look-alike (channel-spec.md §4): XML signed with the API key, ``/pay/...`` APIs.

Independent of ``tally.*``. ``/pay/unifiedorder`` (NATIVE → code_url), ``/pay/orderquery`` and the refund
APIs ``/secapi/pay/refund`` + ``/pay/refundquery`` (wechatpay_v2_refunds.py) verify the
request's MD5/HMAC-SHA256 sign and answer signed XML. ``pay(mch_id, out_trade_no)`` delivers the XML
payment notification to the order's notify_url, retried on the §1.9 schedule × ``time_scale`` until the
answer's ``return_code`` is SUCCESS. Partner mode: orders for a ``sub_mch_id`` are signed with the service
provider's key and carry ``mch_id`` = provider, ``sub_mch_id`` = merchant. ``refund_notification`` builds
a refund callback with ``req_info`` encrypted per §4 (AES-256-ECB, key = md5 hex of the API key).

Composed: the refund desk (wechatpay_v2_refunds.py) works on this desk's orders; the simulator attaches it
(``refund_desk``) and ``handle`` routes ``/secapi/pay/refund`` and ``/pay/refundquery`` to it. Its public
methods are reachable here under their own names.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import padding as sym_padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from . import kernel as k
from ._tls import fingerprint, fingerprint_pem
from .delivery import WECHATPAY_RETRY_S, Chain, DeliveryEngine, DeliveryLog
from .faults import FaultQueue, corrupted
from .kernel import Forward, Kernel, Reply

#: a refund path's handler: (owner mch_id, request fields) → (answer fields, seconds to hold the answer)
PathHandler = Callable[[str, dict[str, str]], tuple[dict[str, str], float]]


def v2_sign(fields: dict[str, str], api_key: str, sign_type: str = "MD5") -> str:
    text = "&".join(f"{k}={fields[k]}" for k in sorted(fields) if k != "sign" and fields[k] != "")
    text += "&key=" + api_key
    if sign_type == "HMAC-SHA256":
        return hmac.new(api_key.encode(), text.encode(), hashlib.sha256).hexdigest().upper()
    return hashlib.md5(text.encode()).hexdigest().upper()


def xml_of(fields: dict[str, str], root: str = "xml") -> bytes:
    inner = "".join(
        f"<{k}><![CDATA[{str(v).replace(']]>', ']]]]><![CDATA[>')}]]></{k}>" for k, v in fields.items()
    )
    return f"<{root}>{inner}</{root}>".encode()


def fields_of(body: bytes) -> dict[str, str]:
    if b"<!" in body.replace(b"<![CDATA[", b""):
        raise ValueError("DTD refused")
    return {child.tag: child.text or "" for child in ET.fromstring(body)}


def acknowledged(reply: Reply) -> bool:
    """A v2 callback is acknowledged by an answer whose return_code is SUCCESS."""
    try:
        return fields_of(reply.text).get("return_code") == "SUCCESS"
    except (ET.ParseError, ValueError):
        return False


@dataclass
class V2Merchant:
    mch_id: str
    api_key: str
    appid: str
    sign_type: str = "MD5"


class WeChatPayV2Desk:
    """The WeChat Pay v2 look-alike (``sim.wechatpay_v2``): merchants, orders, the ``/pay`` APIs, notifications."""

    # the refund desk's public API, on sim.wechatpay_v2 (wechatpay_v2_refunds.py)
    set_refund_behaviour = Forward("refund_desk")
    reset_refund_behaviour = Forward("refund_desk")
    paid_order = Forward("refund_desk")
    settle_refund = Forward("refund_desk")
    refund_notification_of = Forward("refund_desk")
    wait_refund_delivered = Forward("refund_desk")
    refund_list = Forward("refund_desk")
    refunds = Forward("refund_desk")
    refund_deliveries = Forward("refund_desk")

    def __init__(self, kernel: Kernel, engine: DeliveryEngine):
        self.kernel = kernel
        self.engine = engine
        self._lock = threading.RLock()
        self.merchants: dict[str, V2Merchant] = {}
        self.orders: dict[tuple[str, str], dict[str, Any]] = {}
        self.deliveries = DeliveryLog(kernel.stopping)
        self.requests: list[dict[str, Any]] = []  # /pay API calls seen
        self._faults = FaultQueue()
        self.client_certs: dict[
            str, str
        ] = {}  # mch_id -> SHA-256 of the API client certificate /secapi/ needs
        self.tls_ca: Any = None  # the TLS listener's CA (_tls.TestCA), set by the simulator's start_tls
        self.refund_desk: Any = None  # attached by the simulator (wechatpay_v2_refunds.V2RefundDesk)
        self.bills: Any = None  # attached by the simulator: /pay/downloadbill (wechatpay_v2_bills.V2BillBook)
        self._paths: dict[str, PathHandler] = {}

    def attach(self, paths: dict[str, PathHandler]) -> None:
        """Route these ``/pay`` paths (the refund desk's) through ``handle``."""
        self._paths.update(paths)

    def register_merchant(
        self, mch_id: str, api_key: str, appid: str = "wxd930ea5d5a258f4f", sign_type: str = "MD5"
    ) -> dict[str, str]:
        if len(api_key) != 32:
            raise ValueError("the v2 API key is 32 characters")
        with self._lock:
            self.merchants[str(mch_id)] = V2Merchant(str(mch_id), api_key, appid, sign_type)
        return {"mch_id": str(mch_id), "api_key": api_key, "appid": appid, "sign_type": sign_type}

    def register_test_merchant(self, mch_id: str | None = None, sign_type: str = "MD5") -> dict[str, str]:
        return self.register_merchant(
            mch_id or "19" + self.kernel.digits(8), self.kernel.alnum(32), sign_type=sign_type
        )

    def merchant(self, mch_id: str) -> V2Merchant:
        with self._lock:
            found = self.merchants.get(str(mch_id))
        if found is None:
            raise KeyError(f"no v2 merchant {mch_id}")
        return found

    # ------------------------------------------------------------------ /pay APIs
    def issue_client_cert(self, mch_id: str) -> tuple[str, str]:
        """The merchant's API client certificate (apiclient_cert.pem, apiclient_key.pem), issued by the TLS
        listener's CA; from now on this merchant's `/secapi/` calls must present it (sim.start_tls first)."""
        cert, key = self.tls_ca.issue(f"{mch_id} API client (TEST ONLY)", server=False)
        with self._lock:
            self.client_certs[mch_id] = fingerprint_pem(cert)
        return cert, key

    def _client_cert_refusal(self, mch_id: str, client_cert: bytes | None) -> str | None:
        wanted = self.client_certs.get(mch_id)
        if wanted is None:
            return None
        if not client_cert:
            return "需要商户API证书 (simulator: /secapi/ over the TLS listener with the client certificate)"
        return None if fingerprint(client_cert) == wanted else "商户API证书与商户号不匹配"

    def handle(
        self, path: str, body: bytes, client_cert: bytes | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        try:
            req = fields_of(body)
        except (ET.ParseError, ValueError):
            return (
                200,
                {"Content-Type": "text/xml"},
                xml_of({"return_code": "FAIL", "return_msg": "XML格式错误"}),
            )
        merchant = self.merchants.get(req.get("mch_id", ""))
        if merchant is None:
            return (
                200,
                {"Content-Type": "text/xml"},
                xml_of({"return_code": "FAIL", "return_msg": "商户号不存在"}),
            )
        refusal = (
            self._client_cert_refusal(merchant.mch_id, client_cert)
            if path.startswith("/secapi/") or path == "/pay/downloadfundflow"  # both need the API certificate
            else None
        )
        if refusal is not None:
            return 200, {"Content-Type": "text/xml"}, xml_of({"return_code": "FAIL", "return_msg": refusal})
        sign_type = req.get("sign_type") or "MD5"
        if not hmac.compare_digest(v2_sign(req, merchant.api_key, sign_type), req.get("sign", "")):
            return (
                200,
                {"Content-Type": "text/xml"},
                xml_of({"return_code": "FAIL", "return_msg": "签名错误"}),
            )
        owner = req.get("sub_mch_id") or merchant.mch_id
        if path == "/pay/downloadbill" and self.bills is not None:  # the file itself, not a signed XML
            return self.bills.downloadbill(owner, req)
        if path == "/pay/downloadfundflow" and self.bills is not None:  # likewise (R45)
            return self.bills.fundflow.downloadfundflow(owner, req)
        hang = 0.0
        fault = self._take_fault(path)
        if fault is not None and fault["kind"] == "error":
            answer = {"result_code": "FAIL", "err_code": fault["code"], "err_code_des": "模拟故障"}
        elif req.get("appid") and req["appid"] != merchant.appid:
            answer = {
                "result_code": "FAIL",
                "err_code": "APPID_MCHID_NOT_MATCH",
                "err_code_des": "appid和mch_id不匹配",
            }
        elif path == "/pay/unifiedorder":
            answer = self._unifiedorder(owner, req)
        elif path == "/pay/orderquery":
            answer = self._orderquery(owner, req)
        elif path == "/pay/closeorder":
            answer = self._closeorder(owner, req)
        elif path in self._paths:
            answer, hang = self._paths[path](owner, req)
        else:
            return (
                404,
                {"Content-Type": "text/xml"},
                xml_of({"return_code": "FAIL", "return_msg": "not emulated"}),
            )
        answer = {
            "return_code": "SUCCESS",
            "return_msg": "OK",
            "appid": merchant.appid,
            "mch_id": merchant.mch_id,
            "nonce_str": self.kernel.alnum(16),
            **answer,
        }
        if req.get("sub_mch_id"):
            answer["sub_mch_id"] = req["sub_mch_id"]
        answer["sign"] = v2_sign(answer, merchant.api_key, sign_type)
        if fault is not None and fault["kind"] == "bad_signature":
            answer["sign"] = corrupted(answer["sign"])
        with self._lock:
            self.requests.append(
                {
                    "path": path,
                    "mch_id": merchant.mch_id,
                    "out_trade_no": req.get("out_trade_no"),
                    "sign_type": sign_type,
                    "fault": fault["kind"] if fault else None,
                }
            )
        if hang:
            time.sleep(hang)  # the refund is made; the caller gives up before the answer
        return 200, {"Content-Type": "text/xml"}, xml_of(answer)

    def _closeorder(self, owner: str, req: dict[str, str]) -> dict[str, str]:
        with self._lock:
            order = self.orders.get((owner, req.get("out_trade_no", "")))
            if order is None:
                return {
                    "result_code": "FAIL",
                    "err_code": "ORDERNOTEXIST",
                    "err_code_des": "此交易订单号不存在",
                }
            if order["trade_state"] == "SUCCESS":
                return {"result_code": "FAIL", "err_code": "ORDERPAID", "err_code_des": "订单已支付"}
            if order["trade_state"] == "CLOSED":
                return {"result_code": "FAIL", "err_code": "ORDERCLOSED", "err_code_des": "订单已关闭"}
            order["trade_state"] = "CLOSED"
        return {"result_code": "SUCCESS"}

    # ------------------------------------------------------------------ faults on the /pay APIs
    def inject_fault(
        self, kind: str, *, count: int = 1, path_contains: str | None = None, code: str = "SYSTEMERROR"
    ) -> dict[str, Any]:
        """The next ``count`` matching ``/pay/...`` calls misbehave: ``error`` (result_code FAIL with err_code
        ``code``) or ``bad_signature`` (the answer's sign is altered)."""
        if kind not in ("error", "bad_signature"):
            raise ValueError("kind must be error or bad_signature")
        return self._faults.arm({"kind": kind, "path_contains": path_contains, "code": code}, count)

    @property
    def faults(self) -> list[dict[str, Any]]:
        """The armed ``/pay`` faults."""
        return self._faults.pending()

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self, path: str) -> dict[str, Any] | None:
        return self._faults.take(path=path)

    # ------------------------------------------------------------------ key rotation
    def rotate_api_key(self, mch_id: str, new_key: str | None = None) -> str:
        """The merchant sets a new API key mid-run: callbacks and answers are signed with it from now on."""
        merchant = self.merchant(mch_id)
        key = new_key or self.kernel.alnum(32)
        if len(key) != 32:
            raise ValueError("the v2 API key is 32 characters")
        with self._lock:
            merchant.api_key = key
        return key

    def _unifiedorder(self, owner: str, req: dict[str, str]) -> dict[str, str]:
        total = req.get("total_fee", "")
        if not total.isdigit() or int(total) <= 0 or not req.get("out_trade_no") or not req.get("notify_url"):
            return {"result_code": "FAIL", "err_code": "PARAM_ERROR", "err_code_des": "参数错误"}
        with self._lock:
            existing = self.orders.get((owner, req["out_trade_no"]))
            if existing is not None and existing["total_fee"] != int(total):
                return {
                    "result_code": "FAIL",
                    "err_code": "OUT_TRADE_NO_USED",
                    "err_code_des": "商户订单号重复",
                }
            if existing is not None and existing["trade_state"] in ("SUCCESS", "CLOSED"):
                word = "ORDERPAID" if existing["trade_state"] == "SUCCESS" else "ORDERCLOSED"
                return {"result_code": "FAIL", "err_code": word, "err_code_des": word}
            order = self.orders.setdefault(
                (owner, req["out_trade_no"]),
                {
                    "mch_id": req["mch_id"],
                    "sub_mch_id": req.get("sub_mch_id") or "",
                    "owner": owner,
                    "out_trade_no": req["out_trade_no"],
                    "total_fee": int(total),
                    "notify_url": req["notify_url"],
                    "code_url": "weixin://wxpay/bizpayurl?pr=" + self.kernel.alnum(7),
                    "trade_state": "NOTPAY",
                    "transaction_id": None,
                },
            )
        return {
            "result_code": "SUCCESS",
            "trade_type": "NATIVE",
            "prepay_id": "wx" + self.kernel.alnum(30),
            "code_url": order["code_url"],
        }

    def _orderquery(self, owner: str, req: dict[str, str]) -> dict[str, str]:
        order = self.orders.get((owner, req.get("out_trade_no", "")))
        if order is None:
            return {"result_code": "FAIL", "err_code": "ORDERNOTEXIST", "err_code_des": "此交易订单号不存在"}
        out = {
            "result_code": "SUCCESS",
            "out_trade_no": order["out_trade_no"],
            "trade_state": order["trade_state"],
            "trade_state_desc": {"NOTPAY": "订单未支付", "SUCCESS": "支付成功", "CLOSED": "已关闭"}.get(
                order["trade_state"], order["trade_state"]
            ),
            "total_fee": str(order["total_fee"]),
            "fee_type": "CNY",
        }
        if order["transaction_id"]:
            out.update(
                transaction_id=order["transaction_id"],
                cash_fee=str(order["cash_fee"]),
                **coupon_fields(
                    int(order["total_fee"]), int(order["cash_fee"]), order.get("coupon_type", "CASH")
                ),
                trade_type="NATIVE",
                time_end=order.get("time_end", ""),
                bank_type="OTHERS",
                openid="o" + self.kernel.alnum(27),
            )
        return out

    # ------------------------------------------------------------------ notifications
    def payment_params(
        self,
        mch_id: str,
        out_trade_no: str,
        total_fee: int | str,
        *,
        sub_mch_id: str | None = None,
        cash_fee: int | str | None = None,
        transaction_id: str | None = None,
        result_code: str = "SUCCESS",
        coupon_type: str = "CASH",
        **extra: str,
    ) -> dict[str, str]:
        """cash_fee < total_fee adds one coupon (`coupon_*_0`, R43) of `coupon_type` CASH or NO_CASH; a
        NO_CASH one also sends settlement_total_fee (应结订单金额 = 订单金额 − 非充值代金券金额)."""
        merchant = self.merchant(mch_id)
        fields = {
            "appid": merchant.appid,
            "mch_id": merchant.mch_id,
            "nonce_str": self.kernel.alnum(32),
            "result_code": result_code,
            "return_code": "SUCCESS",
            "openid": "o" + self.kernel.alnum(27),
            "is_subscribe": "N",
            "trade_type": "NATIVE",
            "bank_type": "OTHERS",
            "total_fee": str(total_fee),
            "fee_type": "CNY",
            "cash_fee": str(total_fee if cash_fee is None else cash_fee),
            "transaction_id": transaction_id or "42000" + self.kernel.digits(23),
            "out_trade_no": out_trade_no,
            "time_end": k.cst_text("%Y%m%d%H%M%S"),
        }
        if sub_mch_id:
            fields["sub_mch_id"] = sub_mch_id
        if isinstance(total_fee, int) and isinstance(cash_fee, int):
            fields.update(coupon_fields(total_fee, cash_fee, coupon_type))
        fields.update({k: v for k, v in extra.items() if v is not None})
        return fields

    def build_notification(
        self,
        fields: dict[str, str],
        *,
        sign_type: str | None = None,
        sign_override: str | None = None,
        api_key: str | None = None,
    ) -> bytes:
        merchant = self.merchant(fields["mch_id"])
        out = dict(fields)
        sign_type = sign_type or merchant.sign_type
        if sign_type != "MD5":
            out["sign_type"] = sign_type
        out["sign"] = sign_override or v2_sign(out, api_key or merchant.api_key, sign_type)
        return xml_of(out)

    def refund_notification(
        self, mch_id: str, refund: dict[str, str], *, api_key: str | None = None
    ) -> bytes:
        """§4 refund callback: unsigned, `req_info` = base64(AES-256-ECB/PKCS7(`<root>` XML)), key = md5 hex."""
        merchant = self.merchant(mch_id)
        key = hashlib.md5((api_key or merchant.api_key).encode()).hexdigest().lower().encode()
        padder = sym_padding.PKCS7(128).padder()
        plain = padder.update(xml_of(refund, root="root")) + padder.finalize()
        enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 - the wire format
        req_info = base64.b64encode(enc.update(plain) + enc.finalize()).decode()
        return xml_of(
            {
                "return_code": "SUCCESS",
                "appid": merchant.appid,
                "mch_id": merchant.mch_id,
                "nonce_str": self.kernel.alnum(32),
                "req_info": req_info,
            }
        )

    def pay(
        self,
        mch_id: str,
        out_trade_no: str,
        *,
        sub_mch_id: str | None = None,
        cash_fee: int | None = None,
        duplicates: int = 1,
        drop: bool = False,
        coupon_type: str = "CASH",
        time_end: str | None = None,
    ) -> str:
        """Pay an order (`time_end` YYYYMMDDHHMMSS Beijing time places it on a bill day; default now)."""
        owner = sub_mch_id or mch_id
        with self._lock:
            order = self.orders[(owner, out_trade_no)]
            order["transaction_id"] = "42000" + self.kernel.digits(23)
            order["trade_state"] = "SUCCESS"
            order["cash_fee"] = order["total_fee"] if cash_fee is None else cash_fee
            order["coupon_type"] = coupon_type
        fields = self.payment_params(
            order["mch_id"],
            out_trade_no,
            order["total_fee"],
            sub_mch_id=sub_mch_id,
            cash_fee=order["cash_fee"],
            transaction_id=order["transaction_id"],
            coupon_type=coupon_type,
            **({"time_end": time_end} if time_end else {}),
        )
        with self._lock:
            order["time_end"] = fields["time_end"]
        if not drop:
            about = {"transaction_id": fields["transaction_id"]}
            self.notify(
                order["notify_url"],
                lambda: self.build_notification(fields),
                duplicates,
                self.deliveries,
                about,
            )
        return order["transaction_id"]

    def notify(
        self, url: str, body: Callable[[], bytes], duplicates: int, log: DeliveryLog, about: dict[str, Any]
    ) -> None:
        """Deliver an XML callback (``duplicates`` concurrent copies, ``body()`` per attempt) on the §1.9 schedule
        until the answer's return_code is SUCCESS; each attempt is recorded in ``log`` as ``about`` + copy,
        attempt, status, acknowledged."""

        def chain(copy: int) -> Chain:
            def record(attempt: int, headers: dict[str, str], reply: Reply, ok: bool) -> None:
                log.add(
                    {**about, "copy": copy, "attempt": attempt, "status": reply.status, "acknowledged": ok}
                )

            return Chain(
                url=url,
                compose=lambda: ({"Content-Type": "text/xml"}, body()),
                acknowledged=acknowledged,
                record=record,
                schedule=WECHATPAY_RETRY_S,
                label=f"v2 {about}",
            )

        self.engine.send([chain(i) for i in range(max(1, duplicates))], name="v2-notify")

    def wait_delivered(
        self, transaction_id: str, timeout: float = 10.0, count: int = 1
    ) -> list[dict[str, Any]]:
        return self.deliveries.wait(
            lambda d: d["transaction_id"] == transaction_id,
            lambda d: d["acknowledged"],
            what=transaction_id,
            timeout=timeout,
            count=count,
        )


def coupon_fields(total_fee: int, cash_fee: int, coupon_type: str = "CASH") -> dict[str, str]:
    """The v2 coupon fields of a payment whose payer paid less than the order (channel-spec §4, R43)."""
    if cash_fee >= total_fee:
        return {}
    coupon = total_fee - cash_fee
    fields = {
        "coupon_fee": str(coupon),
        "coupon_count": "1",
        "coupon_type_0": coupon_type,
        "coupon_id_0": "1" + str(total_fee).rjust(9, "0"),
        "coupon_fee_0": str(coupon),
    }
    if coupon_type == "NO_CASH":
        fields["settlement_total_fee"] = str(total_fee - coupon)
    return fields
