"""Alipay look-alike (channel-spec.md §5, §6): the gateway ``POST /gateway.do`` and async notifications.

Independent of ``tally.*`` (its own sign-content, SN and certificate code) so it cross-checks the product;
its notifications are also checked by the PyPI ``python-alipay-sdk`` in the tests.

Keys (generated per simulator instance):
    * public-key mode: an "Alipay public key" pair (``alipay_public_key_pem``);
    * certificate mode: a root CA bundle (an RSA root plus an ECDSA root that the SN skips), a "Class 2"
      intermediate, and the Alipay certificate issued by it (``alipay_cert_pem`` = leaf + intermediate);
      SNs computed per §5.5; merchants in cert mode get an app certificate issued by the intermediate.
      ``rotate_alipay_cert()`` issues a new Alipay certificate (new key, new SN); the old stays valid.

Gateway methods: ``alipay.trade.precreate`` (→ qr_code), ``alipay.trade.query`` (ACQ.TRADE_NOT_EXIST until
paid or closed), ``alipay.trade.close``, ``alipay.trade.refund`` and ``alipay.trade.fastpay.refund.query``
(with refund notifications: alipay_refunds.py). Requests are verified (RSA2 over all params but ``sign``; cert mode
also app_cert_sn / alipay_root_cert_sn); answers are ``{"<method>_response": {...}, "sign": ...}`` signed over
the exact value text, with ``alipay_cert_sn`` in cert mode. ``app_auth_token`` (from ``authorize``) makes the
ISV app act for a sub-merchant: the notification then carries ``app_id`` = ISV, ``auth_app_id`` = merchant.

``pay(app_id, out_trade_no)`` → TRADE_SUCCESS notification POSTed (form, charset utf-8) to the order's
notify_url, retried 4m/10m/10m/1h/2h/6h/15h × ``time_scale`` until the body is exactly ``success``.

Composed: the refund desk (alipay_refunds.py) and the trade bills (alipay_bills.py) work on this desk's
books; the simulator attaches them (``refund_desk``, ``bills``) and the gateway routes their methods
(``gateway_methods()``). The refund desk's public methods are reachable here under their own names.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from . import _crypto as c
from . import kernel as k
from .delivery import ALIPAY_RETRY_S, Chain, DeliveryEngine, DeliveryLog
from .faults import FaultQueue, corrupted
from .kernel import AlipayError, Forward, Kernel, Reply

#: §5.4: 4m, 10m, 10m, 1h, 2h, 6h, 15h between the 8 attempts (× time_scale).
RETRY_SCHEDULE_S = ALIPAY_RETRY_S
MODES = ("public_key", "cert")
#: a gateway method: (owner app_id, biz_content) → the answer's business object
GatewayMethod = Callable[[str, dict[str, Any]], dict[str, Any]]


class GatewayDesk(Protocol):
    """A desk that answers gateway methods (the refund desk, the bills)."""

    def gateway_methods(self) -> dict[str, GatewayMethod]: ...


def _name(
    cn: str, ou: str = "Certification Authority", o: str = "Tally Simulated Ant (TEST ONLY)"
) -> x509.Name:
    # Attribute order C, O, OU, CN: RFC 4514 prints it reversed, "CN=…,OU=…,O=…,C=CN" (as Alipay's DNs).
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "CN"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, o),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def issue(
    subject: x509.Name,
    public_key: Any,
    issuer: x509.Name,
    issuer_key: Any,
    *,
    ca: bool,
    days: int = 3650,
    not_after: dt.datetime | None = None,
) -> x509.Certificate:
    now = k.now_utc().replace(microsecond=0)
    algorithm = hashes.SHA256()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(not_after or now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, algorithm)
    )


def sn(cert: x509.Certificate) -> str:
    """§5.5: md5(issuer DN, RFC 2253 order + decimal serial number)."""
    return hashlib.md5((cert.issuer.rfc4514_string() + str(cert.serial_number)).encode()).hexdigest()


def sign_string(params: dict[str, str], exclude: tuple[str, ...]) -> str:
    return "&".join(f"{k}={params[k]}" for k in sorted(params) if k not in exclude)


def rsa2(key: rsa.RSAPrivateKey, text: str, charset: str = "utf-8") -> str:
    return base64.b64encode(key.sign(text.encode(charset), padding.PKCS1v15(), hashes.SHA256())).decode()


@dataclass
class AppMerchant:
    app_id: str
    app_public_key: rsa.RSAPublicKey
    mode: str
    app_cert: x509.Certificate | None = None
    tokens: dict[str, str] = field(default_factory=dict)  # app_auth_token → sub-merchant app_id


@dataclass
class _AlipayCert:
    key: rsa.RSAPrivateKey
    cert: x509.Certificate

    @property
    def sn(self) -> str:
        return sn(self.cert)


class AlipayDesk:
    """The Alipay look-alike (``sim.alipay``): keys, merchants, trades, the gateway and notifications."""

    # the refund desk's public API, on sim.alipay (alipay_refunds.py)
    set_refund_behaviour = Forward("refund_desk")
    reset_refund_behaviour = Forward("refund_desk")
    settle_refund = Forward("refund_desk")
    refund_notification = Forward("refund_desk")
    refund_notification_params = Forward("refund_desk")
    refund_list = Forward("refund_desk")
    trade_refund = Forward("refund_desk")
    refund_query = Forward("refund_desk")
    refunds = Forward("refund_desk")

    def __init__(self, kernel: Kernel, engine: DeliveryEngine):
        self.kernel = kernel
        self.engine = engine
        self._lock = threading.RLock()
        self.merchants: dict[str, AppMerchant] = {}
        self.orders: dict[tuple[str, str], dict[str, Any]] = {}
        self.deliveries = DeliveryLog(kernel.stopping)
        self.requests: list[dict[str, Any]] = []
        self._faults = FaultQueue()
        self.refund_desk: Any = None  # attached by the simulator (alipay_refunds.AlipayRefundDesk)
        self.bills: Any = None  # attached by the simulator (alipay_bills.AlipayBillBook)
        self._methods: dict[str, GatewayMethod] = {
            "alipay.trade.query": self.query,
            "alipay.trade.close": self.close,
        }
        self.public_mode_key = c.new_rsa_key()
        self._root_key = c.new_rsa_key()
        self.root = issue(
            _name("Tally Simulated Ant Root R1"),
            self._root_key.public_key(),
            _name("Tally Simulated Ant Root R1"),
            self._root_key,
            ca=True,
        )
        ec_key = ec.generate_private_key(ec.SECP256R1())
        self.ec_root = issue(
            _name("Tally Simulated Ant Root EC"),
            ec_key.public_key(),
            _name("Tally Simulated Ant Root EC"),
            ec_key,
            ca=True,
        )
        self._ca_key = c.new_rsa_key()
        self.ca = issue(
            _name("Tally Simulated Ant Class 2 R1"),
            self._ca_key.public_key(),
            self.root.subject,
            self._root_key,
            ca=True,
        )
        self.certs: list[_AlipayCert] = []
        self.rotate_alipay_cert()

    def attach(self, desk: GatewayDesk) -> None:
        """Route ``desk``'s gateway methods through this gateway."""
        self._methods.update(desk.gateway_methods())

    # ------------------------------------------------------------------ keys
    def rotate_alipay_cert(self, *, not_after: dt.datetime | None = None) -> str:
        """A new Alipay certificate (new key, new SN), now the signing one; old ones stay valid."""
        key = c.new_rsa_key()
        cert = issue(
            _name("Tally Simulated Alipay", ou="Alipay", o="Tally Simulated Alipay (TEST ONLY)"),
            key.public_key(),
            self.ca.subject,
            self._ca_key,
            ca=False,
            not_after=not_after,
        )
        with self._lock:
            self.certs.append(_AlipayCert(key, cert))
        return sn(cert)

    @property
    def alipay_cert_sn(self) -> str:
        return self.certs[-1].sn

    def alipay_cert_pem(self, which: int = -1) -> str:
        return c.certificate_pem(self.certs[which].cert) + c.certificate_pem(self.ca)

    @property
    def root_cert_pem(self) -> str:
        # Blank line between certificates, as Alipay's alipayRootCert.crt (python-alipay-sdk splits on it).
        return c.certificate_pem(self.root) + "\n" + c.certificate_pem(self.ec_root)

    @property
    def root_cert_sn(self) -> str:
        return sn(self.root)  # the ECDSA root is skipped (§5.5)

    @property
    def alipay_public_key_pem(self) -> str:
        return c.public_key_pem(self.public_mode_key.public_key())

    def _signing(self, merchant: AppMerchant) -> tuple[rsa.RSAPrivateKey, str | None]:
        if merchant.mode == "cert":
            current = self.certs[-1]
            return current.key, current.sn
        return self.public_mode_key, None

    # ------------------------------------------------------------------ merchants
    def register_merchant(
        self, app_id: str, app_public_key_pem: str, mode: str = "public_key"
    ) -> dict[str, str]:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        public = c.load_public_key(app_public_key_pem)
        merchant = AppMerchant(app_id=str(app_id), app_public_key=public, mode=mode)
        out = {
            "app_id": merchant.app_id,
            "mode": mode,
            "alipay_public_key_pem": self.alipay_public_key_pem,
            "alipay_cert_pem": self.alipay_cert_pem(),
            "root_cert_pem": self.root_cert_pem,
        }
        if mode == "cert":
            merchant.app_cert = issue(
                _name(f"app {app_id}", ou="Apps", o="Tally Simulated Merchant"),
                public,
                self.ca.subject,
                self._ca_key,
                ca=False,
            )
            out["app_cert_pem"] = c.certificate_pem(merchant.app_cert)
        with self._lock:
            self.merchants[merchant.app_id] = merchant
        return out

    def register_test_merchant(self, mode: str = "public_key", app_id: str | None = None) -> dict[str, str]:
        """A merchant with a freshly generated app key pair; returns its keys and the channel's."""
        key = c.new_rsa_key()
        app_id = app_id or "2021" + self.kernel.digits(12)
        info = self.register_merchant(app_id, c.public_key_pem(key.public_key()), mode)
        return {**info, "app_private_key_pem": c.private_key_pem(key)}

    def authorize(self, isv_app_id: str, merchant_app_id: str) -> str:
        """The merchant authorises the ISV app (third-party mode): returns the app_auth_token."""
        token = "202501BB" + self.kernel.alnum(32)
        with self._lock:
            self.merchants[isv_app_id].tokens[token] = merchant_app_id
        return token

    def merchant(self, app_id: str) -> AppMerchant:
        with self._lock:
            found = self.merchants.get(str(app_id))
        if found is None:
            raise AlipayError("40002", "Invalid Arguments", "isv.invalid-app-id", "无效的AppID参数")
        return found

    # ------------------------------------------------------------------ the gateway
    def handle_gateway(self, query: str, body: bytes, content_type: str) -> tuple[int, dict[str, str], bytes]:
        params = dict(parse_qsl(query, keep_blank_values=True))
        if "x-www-form-urlencoded" in (content_type or "") and body:
            params.update(dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True)))
        method = params.get("method", "")
        node = method.replace(".", "_") + "_response" if method else "error_response"
        merchant: AppMerchant | None = None
        fault = None
        try:
            merchant = self._authenticate(params)
            fault = self._take_fault(method)
            if fault is not None and fault["kind"] == "error":
                raise AlipayError(fault["code"], fault["msg"], fault["sub_code"], "模拟故障")
            answer = self._route(method, merchant, params)
        except AlipayError as exc:
            answer = exc.body
        with self._lock:
            self.requests.append(
                {"method": method, "app_id": params.get("app_id"), "code": answer.get("code")}
            )
        value = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
        if merchant is None:
            text = '{"error_response":' + value + "}"
        else:
            key, cert_sn = self._signing(merchant)
            signature = rsa2(key, value)
            if fault is not None and fault["kind"] == "bad_signature":
                signature = corrupted(signature)
            text = '{"' + node + '":' + value + ',"sign":"' + signature + '"'
            text += (',"alipay_cert_sn":"' + cert_sn + '"}') if cert_sn else "}"
        return 200, {"Content-Type": "text/html;charset=utf-8"}, text.encode("utf-8")

    # ------------------------------------------------------------------ faults on the gateway
    def inject_fault(
        self,
        kind: str,
        *,
        count: int = 1,
        method: str | None = None,
        code: str = "20000",
        msg: str = "Service Currently Unavailable",
        sub_code: str = "isp.unknow-error",
    ) -> dict[str, Any]:
        """The next ``count`` gateway calls (of ``method``, if given) misbehave: ``error`` (a signed error answer
        with ``code``/``sub_code``) or ``bad_signature`` (the answer's sign is altered)."""
        if kind not in ("error", "bad_signature"):
            raise ValueError("kind must be error or bad_signature")
        fault = {"kind": kind, "method": method, "code": code, "msg": msg, "sub_code": sub_code}
        return self._faults.arm(fault, count)

    @property
    def faults(self) -> list[dict[str, Any]]:
        """The armed gateway faults."""
        return self._faults.pending()

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self, method: str) -> dict[str, Any] | None:
        return self._faults.take(method=method)

    def _authenticate(self, params: dict[str, str]) -> AppMerchant:
        merchant = self.merchant(params.get("app_id", ""))
        if params.get("sign_type") != "RSA2":
            raise AlipayError("40002", "Invalid Arguments", "isv.invalid-signature-type", "无效的签名类型")
        try:
            signature = base64.b64decode(params.get("sign", ""), validate=True)
            merchant.app_public_key.verify(
                signature, sign_string(params, ("sign",)).encode("utf-8"), padding.PKCS1v15(), hashes.SHA256()
            )
        except Exception:  # noqa: BLE001 - any verification failure is the same answer
            raise AlipayError("40002", "Invalid Arguments", "isv.invalid-signature", "验签出错") from None
        if merchant.mode == "cert":
            if params.get("app_cert_sn") != sn(merchant.app_cert):  # type: ignore[arg-type]
                raise AlipayError(
                    "40002", "Invalid Arguments", "isv.app-cert-sn-invalid", "应用公钥证书SN不正确"
                )
            if params.get("alipay_root_cert_sn") != self.root_cert_sn:
                raise AlipayError(
                    "40002", "Invalid Arguments", "isv.alipay-root-cert-sn-invalid", "根证书SN不正确"
                )
        return merchant

    def _route(self, method: str, merchant: AppMerchant, params: dict[str, str]) -> dict[str, Any]:
        try:
            biz = json.loads(params.get("biz_content") or "{}")
        except json.JSONDecodeError:
            raise AlipayError(
                "40002", "Invalid Arguments", "isv.invalid-biz-content", "biz_content格式错误"
            ) from None
        owner = merchant.app_id
        token = params.get("app_auth_token")
        if token:
            if token not in merchant.tokens:
                raise AlipayError(
                    "20001",
                    "Insufficient Token Permissions",
                    "aop.invalid-app-auth-token",
                    "无效的应用授权令牌",
                )
            owner = merchant.tokens[token]
        if method == "alipay.trade.precreate":
            return self.precreate(merchant.app_id, owner, biz, params.get("notify_url", ""))
        if method in self._methods:
            return self._methods[method](owner, biz)
        raise AlipayError("40004", "Business Failed", "isv.invalid-method", "不存在的方法名")

    def precreate(self, isv: str, owner: str, biz: dict[str, Any], notify_url: str) -> dict[str, Any]:
        out_trade_no, total = str(biz.get("out_trade_no") or ""), k.cents(biz.get("total_amount"))
        if not out_trade_no or total is None or total <= 0 or not biz.get("subject"):
            raise AlipayError("40002", "Invalid Arguments", "isv.invalid-parameter", "参数无效")
        if notify_url and (
            urlsplit(notify_url).query or urlsplit(notify_url).hostname not in ("127.0.0.1", "localhost")
        ):
            raise AlipayError(
                "40002", "Invalid Arguments", "isv.invalid-notify-url", "notify_url须为本机且不带参数"
            )
        with self._lock:
            order = self.orders.get((owner, out_trade_no))
            if order is not None and order["total"] != total:
                raise AlipayError("40004", "Business Failed", "ACQ.CONTEXT_INCONSISTENT", "交易信息被篡改")
            if order is None:
                order = {
                    "app_id": isv,
                    "owner": owner,
                    "out_trade_no": out_trade_no,
                    "total": total,
                    "subject": str(biz["subject"]),
                    "notify_url": notify_url,
                    "status": None,
                    "trade_no": None,
                    "qr_code": "https://qr.alipay.com/bax0" + self.kernel.alnum(20),
                }
                self.orders[(owner, out_trade_no)] = order
        return {"code": "10000", "msg": "Success", "out_trade_no": out_trade_no, "qr_code": order["qr_code"]}

    def _trade(self, owner: str, biz: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if biz.get("out_trade_no"):
                order = self.orders.get((owner, str(biz["out_trade_no"])))
            else:
                order = next(
                    (
                        o
                        for o in self.orders.values()
                        if o["owner"] == owner and o["trade_no"] == biz.get("trade_no")
                    ),
                    None,
                )
        if order is None or order["status"] is None:  # not scanned yet: the trade does not exist (§6.2)
            raise AlipayError("40004", "Business Failed", "ACQ.TRADE_NOT_EXIST", "交易不存在")
        return order

    def query(self, owner: str, biz: dict[str, Any]) -> dict[str, Any]:
        order = self._trade(owner, biz)
        answer = {
            "code": "10000",
            "msg": "Success",
            "trade_no": order["trade_no"],
            "out_trade_no": order["out_trade_no"],
            "trade_status": order["status"],
            "total_amount": k.yuan(order["total"]),
            "buyer_logon_id": "tal***@sim.com",
        }
        if order["status"] in ("TRADE_SUCCESS", "TRADE_FINISHED"):
            answer.update(
                receipt_amount=k.yuan(order["receipt"]),
                buyer_pay_amount=k.yuan(order["receipt"]),
                send_pay_date=order["gmt_payment"],
            )
        return answer

    def close(self, owner: str, biz: dict[str, Any]) -> dict[str, Any]:
        order = self._trade(owner, biz)
        if order["status"] != "WAIT_BUYER_PAY":
            raise AlipayError("40004", "Business Failed", "ACQ.TRADE_STATUS_ERROR", "交易状态不合法")
        order["status"] = "TRADE_CLOSED"
        return {
            "code": "10000",
            "msg": "Success",
            "trade_no": order["trade_no"],
            "out_trade_no": order["out_trade_no"],
        }

    # ------------------------------------------------------------------ the buyer
    def scan(self, owner: str, out_trade_no: str) -> str:
        """The buyer scans the QR code: the trade exists now (WAIT_BUYER_PAY) with its trade_no."""
        with self._lock:
            order = self.orders.get((owner, out_trade_no))
            if order is None:
                raise AlipayError("40004", "Business Failed", "ACQ.TRADE_NOT_EXIST", "交易不存在")
            if order["trade_no"] is None:
                order["trade_no"] = k.cst_text("%Y%m%d") + "22001" + self.kernel.digits(15)
                order["status"] = "WAIT_BUYER_PAY"
                order["gmt_create"] = k.cst_text()
            return order["trade_no"]

    def pay(
        self,
        owner: str,
        out_trade_no: str,
        *,
        receipt_amount: int | None = None,
        drop: bool = False,
        duplicates: int = 1,
        total_amount: int | None = None,
        include_cert_sn: bool = False,
        created_at: str | None = None,
        paid_at: str | None = None,
    ) -> str:
        """The buyer pays: TRADE_SUCCESS, then the notification is delivered (in the background).
        `created_at` / `paid_at` ("YYYY-MM-DD HH:MM:SS", Beijing) place the trade in time, e.g. across midnight
        for the bills (the bill day is paid_at's)."""
        trade_no = self.scan(owner, out_trade_no)
        with self._lock:
            order = self.orders[(owner, out_trade_no)]
            if order["status"] != "WAIT_BUYER_PAY":
                raise AlipayError("40004", "Business Failed", "ACQ.TRADE_STATUS_ERROR", "交易状态不合法")
            order["status"] = "TRADE_SUCCESS"
            order["receipt"] = order["total"] if receipt_amount is None else receipt_amount
            order["gmt_payment"] = paid_at or k.cst_text()
            if created_at:
                order["gmt_create"] = created_at
        params = self.notification_params(
            order["app_id"],
            out_trade_no,
            order["total"] if total_amount is None else total_amount,
            trade_no=trade_no,
            receipt_amount=order["receipt"],
            auth_app_id=owner,
            gmt_payment=order["gmt_payment"],
        )
        if not drop:
            self.notify(order["notify_url"], params, duplicates, include_cert_sn=include_cert_sn)
        return trade_no

    # ------------------------------------------------------------------ notifications
    def notification_params(
        self,
        app_id: str,
        out_trade_no: str,
        total_amount: int | str,
        *,
        trade_status: str = "TRADE_SUCCESS",
        trade_no: str | None = None,
        receipt_amount: int | str | None = None,
        auth_app_id: str | None = None,
        **extra: str,
    ) -> dict[str, str]:
        """Unsigned business parameters of a trade notification (§5.1). Amounts in cents are written as
        yuan strings; a str is sent verbatim (fault injection: "1e2", "-1", …)."""

        def money(v: int | str) -> str:
            return v if isinstance(v, str) else k.yuan(v)

        now = k.cst_text()
        params = {
            "notify_time": now,
            "notify_type": "trade_status_sync",
            "notify_id": "2025" + self.kernel.alnum(28),
            "app_id": app_id,
            "auth_app_id": auth_app_id or app_id,
            "charset": "utf-8",
            "version": "1.0",
            "trade_no": trade_no or k.cst_text("%Y%m%d") + "22001" + self.kernel.digits(15),
            "out_trade_no": out_trade_no,
            "trade_status": trade_status,
            "total_amount": money(total_amount),
            "buyer_id": "2088" + self.kernel.digits(12),
            "seller_id": "2088" + self.kernel.digits(12),
            "subject": "模拟商品 test",
            "gmt_create": now,
        }
        if trade_status in ("TRADE_SUCCESS", "TRADE_FINISHED"):
            paid = money(total_amount if receipt_amount is None else receipt_amount)
            funds = [{"amount": paid, "fundChannel": "ALIPAYACCOUNT"}]
            if (
                isinstance(total_amount, int)
                and isinstance(receipt_amount, int)
                and receipt_amount < total_amount
            ):
                # the difference is the merchant's own discount (MDISCOUNT): Σ fund_bill_list = total (R43)
                funds.append({"amount": k.yuan(total_amount - receipt_amount), "fundChannel": "MDISCOUNT"})
            params.update(
                receipt_amount=paid,
                buyer_pay_amount=paid,
                invoice_amount=paid,
                point_amount="0.00",
                gmt_payment=now,
                fund_bill_list=json.dumps(funds, separators=(",", ":")),
            )
        params.update({k: v for k, v in extra.items() if v is not None})
        return params

    def refund_params(
        self,
        app_id: str,
        out_trade_no: str,
        trade_no: str,
        total_amount: int,
        refund_fee: int,
        out_biz_no: str,
    ) -> dict[str, str]:
        """A partial refund notification (§5.3): TRADE_SUCCESS plus refund_fee, gmt_refund, out_biz_no."""
        params = self.notification_params(app_id, out_trade_no, total_amount, trade_no=trade_no)
        params.update(
            refund_fee=k.yuan(refund_fee),
            out_biz_no=out_biz_no,
            gmt_refund=k.cst_text("%Y-%m-%d %H:%M:%S.%f")[:-3],
        )
        return params

    def sign_notification(
        self, params: dict[str, str], *, signer: str | None = None, include_cert_sn: bool = False
    ) -> dict[str, str]:
        """Adds sign_type + sign (RSA2 over all but sign and sign_type). signer: "public_key" | "cert" |
        None (by the app_id's merchant mode)."""
        mode = signer or self.merchant(params["app_id"]).mode
        key, cert_sn = (
            (self.certs[-1].key, self.certs[-1].sn) if mode == "cert" else (self.public_mode_key, None)
        )
        out = dict(params)
        if include_cert_sn and cert_sn:
            out["alipay_cert_sn"] = cert_sn
        out["sign_type"] = "RSA2"
        charset = out.get("charset", "utf-8")
        out["sign"] = rsa2(key, sign_string(out, ("sign", "sign_type")), charset)
        return out

    def build_notification(
        self,
        params: dict[str, str],
        *,
        signer: str | None = None,
        include_cert_sn: bool = False,
        sign_override: str | None = None,
    ) -> bytes:
        """The exact form body Alipay would POST (urlencoded once, in the params' charset)."""
        signed = self.sign_notification(params, signer=signer, include_cert_sn=include_cert_sn)
        if sign_override is not None:
            signed["sign"] = sign_override
        return urlencode(signed, encoding=signed.get("charset", "utf-8")).encode("ascii")

    def notify(
        self, url: str, params: dict[str, str], duplicates: int = 1, *, include_cert_sn: bool = False
    ) -> None:
        """Deliver a notification (``duplicates`` concurrent copies), freshly signed with a new notify_time per
        attempt, on the §5.4 schedule until the answer is exactly ``success``."""

        def compose() -> tuple[dict[str, str], bytes]:
            fresh = {**params, "notify_time": k.cst_text()}
            body = self.build_notification(fresh, include_cert_sn=include_cert_sn)
            return {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}, body

        def chain(copy: int) -> Chain:
            def record(attempt: int, headers: dict[str, str], reply: Reply, ok: bool) -> None:
                self.deliveries.add(
                    {
                        "trade_no": params["trade_no"],
                        "out_trade_no": params["out_trade_no"],
                        "notify_id": params["notify_id"],
                        "copy": copy,
                        "attempt": attempt,
                        "status": reply.status,
                        "answer": reply.text[:64].decode("utf-8", "replace"),
                        "acknowledged": ok,
                    }
                )

            return Chain(
                url=url,
                compose=compose,
                acknowledged=lambda reply: reply.text == b"success",
                record=record,
                schedule=RETRY_SCHEDULE_S,
                label=f"alipay {params['notify_id']} for {params['trade_no']}",
            )

        self.engine.send(
            [chain(i) for i in range(max(1, duplicates))], name=f"alipay-{params['trade_no'][-6:]}"
        )

    def wait_delivered(self, trade_no: str, timeout: float = 10.0, count: int = 1) -> list[dict[str, Any]]:
        return self.deliveries.wait(
            lambda d: d["trade_no"] == trade_no,
            lambda d: d["acknowledged"],
            what=trade_no,
            timeout=timeout,
            count=count,
        )
