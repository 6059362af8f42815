"""The WeChat Pay API v3 desk of the channel simulator: keys, merchants, direct-merchant orders, payments and
their TRANSACTION.SUCCESS notifications, the builders of signed callbacks, the API faults and the request
authentication (see the package docstring). The partner and refund desks (wechatpay_v3_partner.py,
wechatpay_v3_refunds.py) and the trade bills (bills.py) work on this desk's books."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa

from . import _crypto as c
from . import kernel as k
from .delivery import WECHATPAY_RETRY_S, Chain, DeliveryEngine, DeliveryLog
from .faults import FaultQueue
from .kernel import Kernel, SimulatorError, log

#: §1.9 retry schedule (seconds between attempts), multiplied by ``time_scale``.
RETRY_SCHEDULE_S = WECHATPAY_RETRY_S
SIGNATURE_TYPE = "WECHATPAY2-SHA256-RSA2048"
SIGNTEST_PREFIX = "WECHATPAY/SIGNTEST/"
TESTKEYS_DIR = Path(__file__).parent / "testkeys"
VERIFY_MODES = ("public_key", "certificate", "mixed")
OUT_TRADE_NO_RE = re.compile(r"^[0-9A-Za-z_\-*|]{6,32}$")
DEFAULT_APPID = "wxd678efh567hg6787"
FAULT_KINDS = ("error", "unsigned", "bad_signature", "delay")

_SUMMARIES = {
    "TRANSACTION.SUCCESS": "支付成功",
    "REFUND.SUCCESS": "退款成功",
    "REFUND.ABNORMAL": "退款异常",
    "REFUND.CLOSED": "退款关闭",
    "SECURITY_ECHO.SUCCESS": "回调通知成功",  # pay.weixin.qq.com/doc/v3/partner/4019605946
}
SECURITY_ECHO = "SECURITY_ECHO.SUCCESS"
_TRADE_STATE_DESC = {
    "SUCCESS": "支付成功",
    "NOTPAY": "订单未支付",
    "CLOSED": "订单已关闭",
    "REFUND": "转入退款",
}


@dataclass
class PlatformKey:
    """One platform certificate (cert mode) or the WeChat Pay public key (public-key mode)."""

    serial: str
    private_key: rsa.RSAPrivateKey
    cert: x509.Certificate | None = None

    @property
    def public_key_pem(self) -> str:
        return c.public_key_pem(self.private_key.public_key())

    @property
    def cert_pem(self) -> str:
        assert self.cert is not None
        return c.certificate_pem(self.cert)


@dataclass
class Merchant:
    mchid: str
    apiv3_key: str
    public_key: rsa.RSAPublicKey
    public_key_pem: str
    serial: str
    appid: str
    verify_mode: str

    def describe(self) -> dict[str, Any]:
        return {
            "mchid": self.mchid,
            "appid": self.appid,
            "merchant_serial": self.serial,
            "verify_mode": self.verify_mode,
        }


@dataclass
class _Job:
    """One notification (payment or refund) being delivered, possibly as several concurrent copies."""

    merchant: Merchant
    notify_url: str
    body: bytes
    notification_id: str
    event_type: str
    transaction_id: str
    out_trade_no: str
    started: float = field(default_factory=time.monotonic)


def refuse_combine_sub_order(order: dict[str, Any]) -> None:
    """A combine order's sub-order is closed only with the combine close ("合单支付订单只能使用此合单关单api完成关单");
    the single close refuses it. The code is the simulator's choice (no official code retrieved): 400
    INVALID_REQUEST, which Tally hands to a person like any refused close."""
    if order.get("combine_out_trade_no"):
        raise SimulatorError(400, "INVALID_REQUEST", "合单支付订单只能使用合单关单接口关单")


def test_merchant() -> dict[str, str]:
    """The committed TEST-ONLY merchant from ``testkeys/`` (mchid, appid, apiv3_key, merchant_serial,
    merchant_private_key_pem, merchant_public_key_pem, merchant_cert_pem)."""
    meta = json.loads((TESTKEYS_DIR / "merchant.json").read_text())
    return {
        **{name: meta[name] for name in ("mchid", "appid", "apiv3_key", "merchant_serial")},
        "merchant_private_key_pem": (TESTKEYS_DIR / "merchant_key.pem").read_text(),
        "merchant_cert_pem": (TESTKEYS_DIR / "merchant_cert.pem").read_text(),
        "merchant_public_key_pem": c.public_key_pem(
            c.load_certificate((TESTKEYS_DIR / "merchant_cert.pem").read_text()).public_key()  # type: ignore[arg-type]
        ),
    }


test_merchant.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


class WeChatPayV3Desk:
    """WeChat Pay API v3 look-alike (direct merchants). Its books (merchants, orders, deliveries, API requests)
    live here, under ``_lock``; the partner and refund desks use them."""

    def __init__(self, kernel: Kernel, engine: DeliveryEngine, *, fixed_keys: bool = False):
        self.kernel = kernel
        self.engine = engine
        self._lock = threading.RLock()
        self._merchants: dict[str, Merchant] = {}
        self._orders: dict[tuple[str, str], dict[str, Any]] = {}
        self._by_transaction_id: dict[str, tuple[str, str]] = {}
        self._deliveries = DeliveryLog(kernel.stopping)
        self._faults = FaultQueue()  # inject_fault: the next N matching /v3/ calls misbehave
        self.requests: list[dict[str, Any]] = []  # API calls seen: method, path, mchid, status
        self.echoes: list[dict[str, Any]] = []  # POST /v3/security/echo calls taken (security_echo)
        self.echo_callbacks = True  # False: the echo call is answered but its callback never sent
        self._spare_certs: list[PlatformKey] = []
        self._certs: list[PlatformKey] = []  # oldest first
        if fixed_keys:
            self._load_fixed_keys()
        else:
            self._certs.append(self._new_platform_cert())
            self._pubkey = PlatformKey(serial=self._new_pub_key_id(), private_key=c.new_rsa_key())
        self._active_serial = self._certs[-1].serial

    # ------------------------------------------------------------------ keys
    def _load_fixed_keys(self) -> None:
        def cert_key(stem: str) -> PlatformKey:
            cert = c.load_certificate((TESTKEYS_DIR / f"{stem}_cert.pem").read_text())
            key = c.load_private_key((TESTKEYS_DIR / f"{stem}_key.pem").read_text())
            return PlatformKey(serial=c.serial_hex(cert), private_key=key, cert=cert)

        self._certs.append(cert_key("platform"))
        self._spare_certs.append(cert_key("platform2"))  # handed out by the first rotate
        self._pubkey = PlatformKey(
            serial=(TESTKEYS_DIR / "pub_key_id.txt").read_text().strip(),
            private_key=c.load_private_key((TESTKEYS_DIR / "pubkey_key.pem").read_text()),
        )

    def _new_platform_cert(self) -> PlatformKey:
        key = c.new_rsa_key()
        cert = c.make_certificate(key, "Tally Simulator WeChat Pay Platform Certificate")
        return PlatformKey(serial=c.serial_hex(cert), private_key=key, cert=cert)

    def _new_pub_key_id(self) -> str:
        return "PUB_KEY_ID_0114" + self.kernel.digits(30)

    @property
    def platform_serial(self) -> str:
        """Serial of the active (signing) platform certificate: 40 uppercase hex characters."""
        return self._active_serial

    @property
    def platform_cert_pem(self) -> str:
        return self._key_for_serial(self._active_serial).cert_pem  # type: ignore[union-attr]

    @property
    def platform_certificates(self) -> list[dict[str, str]]:
        """Every platform certificate ever issued (oldest first): ``{"serial", "pem"}``."""
        return [{"serial": k.serial, "pem": k.cert_pem} for k in self._certs]

    @property
    def public_key_id(self) -> str:
        return self._pubkey.serial

    @property
    def public_key_pem(self) -> str:
        """The WeChat Pay public key (public-key mode), bare SPKI PEM."""
        return self._pubkey.public_key_pem

    def rotate_platform_certificate(self, *, activate: bool = True) -> str:
        """Issue a new platform certificate (new key, new serial) and return its serial. Old ones stay
        downloadable from ``/v3/certificates`` and valid. ``activate`` makes it the signing one."""
        new = self._spare_certs.pop(0) if self._spare_certs else self._new_platform_cert()
        with self._lock:
            self._certs.append(new)
            if activate:
                self._active_serial = new.serial
        log.info("platform certificate rotated: %s (active=%s)", new.serial, activate)
        return new.serial

    def _key_for_serial(self, serial: str) -> PlatformKey | None:
        if serial == self._pubkey.serial:
            return self._pubkey
        for key in self._certs:
            if key.serial == serial:
                return key
        return None

    def _signer(self, merchant: Merchant | None, serial: str | None = None) -> tuple[str, rsa.RSAPrivateKey]:
        """(header serial, signing key). An unknown explicit serial is sent as-is, signed with the default key."""
        if serial:
            key = self._key_for_serial(serial)
            if key is not None:
                return serial, key.private_key
        mode = merchant.verify_mode if merchant else "certificate"
        if mode == "mixed":
            mode = self.kernel.choice(("public_key", "certificate"))
        default = self._pubkey if mode == "public_key" else self._key_for_serial(self._active_serial)
        assert default is not None
        return (serial or default.serial), default.private_key

    # ------------------------------------------------------------------ merchants
    def register_merchant(
        self,
        mchid: str,
        apiv3_key: str,
        merchant_public_key_pem: str,
        merchant_serial: str,
        appid: str = DEFAULT_APPID,
        verify_mode: str = "public_key",
    ) -> dict[str, Any]:
        """Register (or replace) a merchant. ``merchant_public_key_pem`` may be a bare public key or the
        merchant API certificate. ``verify_mode`` (public_key | certificate | mixed) picks which key signs
        callbacks (``Wechatpay-Serial`` = PUB_KEY_ID_… or the platform cert serial; mixed = random per
        attempt, like the migration period)."""
        if verify_mode not in VERIFY_MODES:
            raise ValueError(f"verify_mode must be one of {VERIFY_MODES}")
        if len(apiv3_key.encode("utf-8")) != 32:
            raise ValueError("apiv3_key must be 32 bytes")
        if not mchid or not merchant_serial:
            raise ValueError("mchid and merchant_serial are required")
        merchant = Merchant(
            mchid=str(mchid),
            apiv3_key=apiv3_key,
            public_key=c.load_public_key(merchant_public_key_pem),
            public_key_pem=merchant_public_key_pem,
            serial=merchant_serial.upper(),
            appid=appid,
            verify_mode=verify_mode,
        )
        with self._lock:
            self._merchants[merchant.mchid] = merchant
        return {**merchant.describe(), **self.keys_info()}

    def register_test_merchant(self, verify_mode: str = "public_key") -> dict[str, str]:
        """Register the committed TEST-ONLY merchant from ``testkeys/``; returns ``test_merchant()``."""
        m = test_merchant()
        self.register_merchant(
            m["mchid"],
            m["apiv3_key"],
            m["merchant_public_key_pem"],
            m["merchant_serial"],
            appid=m["appid"],
            verify_mode=verify_mode,
        )
        return m

    def merchant(self, mchid: str) -> Merchant:
        with self._lock:
            m = self._merchants.get(str(mchid))
        if m is None:
            raise SimulatorError(400, "MCH_NOT_EXISTS", "商户号不存在")
        return m

    def keys_info(self) -> dict[str, Any]:
        return {
            "platform_serial": self.platform_serial,
            "platform_cert_pem": self.platform_cert_pem,
            "platform_certificates": self.platform_certificates,
            "public_key_id": self.public_key_id,
            "public_key_pem": self.public_key_pem,
        }

    # ------------------------------------------------------------------ ids
    def _new_transaction_id(self) -> str:
        today = k.now_cst().strftime("%Y%m%d")
        while True:
            tid = "42000" + self.kernel.digits(5) + today + self.kernel.digits(10)  # 28 digits
            with self._lock:
                if tid not in self._by_transaction_id:
                    return tid

    def _new_openid(self) -> str:
        return "o" + self.kernel.alnum(27, c.ALNUM + "_-")

    # ------------------------------------------------------------------ orders (API side)
    def create_native_order(self, mchid: str, body: dict[str, Any]) -> dict[str, str]:
        """``POST /v3/pay/transactions/native`` after authentication (``mchid`` from Authorization)."""
        merchant = self.merchant(mchid)
        for name in ("appid", "mchid", "description", "out_trade_no", "notify_url", "amount"):
            if body.get(name) in (None, ""):
                raise SimulatorError(
                    400,
                    "PARAM_ERROR",
                    f"输入源“/body/{name}”映射到字段“{name}”必填性规则校验失败，此字段为必填项",
                )
        if str(body["mchid"]) != merchant.mchid:
            raise SimulatorError(400, "PARAM_ERROR", "mchid与请求签名中的商户号不一致")
        if body["appid"] != merchant.appid:
            raise SimulatorError(400, "APPID_MCHID_NOT_MATCH", "appid和mch_id不匹配")
        otn = str(body["out_trade_no"])
        if not OUT_TRADE_NO_RE.match(otn):
            raise SimulatorError(400, "PARAM_ERROR", "out_trade_no格式错误")
        amount = body["amount"]
        total = amount.get("total") if isinstance(amount, dict) else None
        if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
            raise SimulatorError(400, "PARAM_ERROR", "amount.total必须为正整数")
        currency = amount.get("currency") or "CNY"
        if currency != "CNY":
            raise SimulatorError(400, "PARAM_ERROR", "暂不支持该币种")
        notify_url = _notify_url(body["notify_url"])
        expire_at = None
        if body.get("time_expire"):
            try:
                expire_at = dt.datetime.fromisoformat(str(body["time_expire"]))
            except ValueError:
                raise SimulatorError(400, "PARAM_ERROR", "time_expire格式错误") from None
            if expire_at.tzinfo is None:
                raise SimulatorError(400, "PARAM_ERROR", "time_expire格式错误")
        key = (merchant.mchid, otn)
        with self._lock:
            existing = self._orders.get(key)
            if existing is not None:
                if existing["amount"]["total"] != total or existing["amount"]["currency"] != currency:
                    raise SimulatorError(400, "INVALID_REQUEST", "201 商户订单号重复")
                if existing["trade_state"] == "SUCCESS":
                    raise SimulatorError(400, "ORDER_PAID", "订单已支付")
                if existing["trade_state"] == "CLOSED":
                    raise SimulatorError(400, "ORDER_CLOSED", "订单已关闭")
                return {"code_url": existing["code_url"]}
            order = {
                "appid": merchant.appid,
                "mchid": merchant.mchid,
                "out_trade_no": otn,
                "description": str(body["description"]),
                "notify_url": notify_url,
                "attach": str(body.get("attach") or ""),
                "time_expire": body.get("time_expire"),
                "amount": {"total": total, "currency": currency},
                "code_url": "weixin://wxpay/bizpayurl?pr=" + self.kernel.alnum(7),
                "trade_state": "NOTPAY",
                "created_at": k.now_rfc3339(),
                "_expire_at": expire_at,
            }
            self._orders[key] = order
        return {"code_url": order["code_url"]}

    def _order(self, mchid: str, out_trade_no: str) -> dict[str, Any]:
        order = self._orders.get((str(mchid), str(out_trade_no)))
        if order is None:
            raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
        return order

    def hide_until(self, mchid: str, out_trade_no: str, until: float) -> None:
        """Fault: query and close answer 404 ORDER_NOT_EXIST for this order until wall-clock ``until``
        (``time.time()`` seconds; ``float("inf")`` = until ``hide_until(..., 0)``), as a lagging replica does."""
        with self._lock:
            self._order(mchid, out_trade_no)["_hide_until"] = float(until)

    def _visible_order(self, mchid: str, out_trade_no: str) -> dict[str, Any]:
        order = self._order(mchid, out_trade_no)
        if order.get("_hide_until", 0) > k.now():
            raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
        return order

    def transaction_view(self, mchid: str, out_trade_no: str) -> dict[str, Any]:
        """What ``GET /v3/pay/transactions/out-trade-no/{out_trade_no}`` returns (§2.1 shape)."""
        with self._lock:
            order = self._visible_order(mchid, out_trade_no)
            if order.get("transaction") is not None:
                return copy.deepcopy(order["transaction"])
            state = order["trade_state"]
            return {
                "appid": order["appid"],
                "mchid": order["mchid"],
                "out_trade_no": order["out_trade_no"],
                "trade_state": state,
                "trade_state_desc": _TRADE_STATE_DESC[state],
                "attach": order["attach"],
                "amount": {
                    "total": order["amount"]["total"],
                    "currency": order["amount"]["currency"],
                    "payer_currency": order["amount"]["currency"],
                },
            }

    def transaction_by_id(self, mchid: str, transaction_id: str) -> dict[str, Any]:
        with self._lock:
            key = self._by_transaction_id.get(transaction_id)
            if key is None or key[0] != str(mchid):
                raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
            return self.transaction_view(*key)

    def close_order(self, mchid: str, out_trade_no: str) -> None:
        with self._lock:
            order = self._visible_order(mchid, out_trade_no)
            refuse_combine_sub_order(order)
            if order["trade_state"] == "SUCCESS":
                raise SimulatorError(400, "ORDER_PAID", "订单已支付")
            if order["trade_state"] == "CLOSED":
                raise SimulatorError(400, "ORDER_CLOSED", "订单已关闭")
            order["trade_state"] = "CLOSED"

    def security_echo(self, merchant: Merchant, body: dict[str, Any], serial: str | None) -> dict[str, Any]:
        """POST /v3/security/echo (商户签名验签/加解密测试, pay.weixin.qq.com/doc/v3/partner/4015139289): the
        request is signed by the merchant (checked by `authenticate`) and names the key it expects in
        `Wechatpay-Serial` (required); `echo_message` is required. With a `notify_url` the channel then sends a
        signed, encrypted SECURITY_ECHO.SUCCESS callback there (4019605946: resource_type encrypt-resource,
        original_type security, associated_data ""). The answer repeats `echo_message`: the page's answer fields
        were not confirmed, so Tally relies on none of them but its signature. The callback's plaintext is not
        documented either: the simulator encrypts `{}`, which Tally never reads."""
        if not serial or self._key_for_serial(serial) is None:
            raise SimulatorError(
                400, "PARAM_ERROR", "Wechatpay-Serial必填，且须为微信支付公钥ID或平台证书序列号"
            )
        message = body.get("echo_message")
        if not isinstance(message, str) or not message:
            raise SimulatorError(400, "PARAM_ERROR", "echo_message必填")
        notify_url = _notify_url(body["notify_url"]) if body.get("notify_url") else None
        with self._lock:
            self.echoes.append(
                {"mchid": merchant.mchid, "echo_message": message, "notify_url": notify_url, "at": k.now()}
            )
            send = self.echo_callbacks
        if notify_url and send:
            self.dispatch(merchant, notify_url, {}, SECURITY_ECHO)
        return {"echo_message": message}

    def get_order(self, mchid: str, out_trade_no: str) -> dict[str, Any]:
        """Everything the simulator knows about one order (for humans and tests)."""
        with self._lock:
            order = self._order(mchid, out_trade_no)
            out = {k: copy.deepcopy(v) for k, v in order.items() if not k.startswith("_")}
        out["deliveries"] = [d for d in self._deliveries if d["out_trade_no"] == out_trade_no]
        return out

    def certificates_response(self, mchid: str) -> dict[str, Any]:
        merchant = self.merchant(mchid)
        data = []
        for cert in self._certs:
            assert cert.cert is not None
            nonce = self.kernel.alnum(12)
            data.append(
                {
                    "serial_no": cert.serial,
                    "effective_time": c.rfc3339_cst(cert.cert.not_valid_before_utc),
                    "expire_time": c.rfc3339_cst(cert.cert.not_valid_after_utc),
                    "encrypt_certificate": {
                        "algorithm": "AEAD_AES_256_GCM",
                        "nonce": nonce,
                        "associated_data": "certificate",
                        "ciphertext": c.aead_encrypt(
                            merchant.apiv3_key, cert.cert_pem.encode(), "certificate", nonce
                        ),
                    },
                }
            )
        return {"data": data}

    # ------------------------------------------------------------------ actions
    def pay(
        self,
        mchid: str,
        out_trade_no: str,
        *,
        payer_total: int | None = None,
        duplicates: int = 1,
        drop: bool = False,
        amount_total: int | None = None,
        delay: float = 0,
        openid: str | None = None,
        bank_type: str = "OTHERS",
        probe: bool = False,
        success_time: str | None = None,
        coupon_type: str = "CASH",
    ) -> str:
        """The user pays: the order becomes SUCCESS and a TRANSACTION.SUCCESS notification is delivered to
        its notify_url in the background. Returns the new transaction_id.

        payer_total: what the user paid (default total; less ⇒ a coupon in promotion_detail).
        duplicates: N copies delivered concurrently (each with its own retry chain).
        drop: never deliver (the order is still SUCCESS for queries).
        amount_total: fault: the channel reports this amount.total instead of the ordered one (queries too).
        delay: wall-clock seconds (not scaled) before the first attempt.
        probe: also send one WECHATPAY/SIGNTEST/ probe (bad signature, no retries) before the real one.
        success_time: RFC 3339 success time (default now), e.g. to pay across midnight for the bills.
        coupon_type: the coupon's type when payer_total < total: CASH (充值型, settled to the merchant) or
            NOCASH (免充值, the merchant gives it up: the bill's 应结订单金额 is total − the coupon, R43).
        """
        merchant = self.merchant(mchid)
        with self._lock:
            order = self._order(merchant.mchid, out_trade_no)
            if order["trade_state"] == "SUCCESS":
                raise SimulatorError(400, "ORDER_PAID", "订单已支付")
            if order["trade_state"] == "CLOSED":
                raise SimulatorError(400, "ORDER_CLOSED", "订单已关闭")
            if order["_expire_at"] is not None and k.now_utc() > order["_expire_at"]:
                raise SimulatorError(400, "ORDER_EXPIRED", "订单已过期 (time_expire)")
            total = order["amount"]["total"] if amount_total is None else int(amount_total)
            resource = self.transaction_resource(
                merchant.mchid,
                out_trade_no,
                total,
                payer_total=payer_total,
                openid=openid,
                bank_type=bank_type,
                attach=order["attach"],
                success_time=success_time,
                coupon_type=coupon_type,
            )
            tid = resource["transaction_id"]
            order["trade_state"] = "SUCCESS"
            order["transaction"] = resource
            self._by_transaction_id[tid] = (merchant.mchid, out_trade_no)
        log.info("paid %s/%s -> %s (drop=%s duplicates=%s)", mchid, out_trade_no, tid, drop, duplicates)
        if not drop:
            self.dispatch(
                merchant,
                order["notify_url"],
                resource,
                "TRANSACTION.SUCCESS",
                duplicates=duplicates,
                delay=delay,
                probe=probe,
            )
        return tid

    def redeliver(self, mchid: str, out_trade_no: str, *, duplicates: int = 1, delay: float = 0) -> str:
        """Send the TRANSACTION.SUCCESS notification of a paid order again (a new notification id)."""
        merchant = self.merchant(mchid)
        with self._lock:
            order = self._order(merchant.mchid, out_trade_no)
            if order.get("transaction") is None:
                raise SimulatorError(400, "ORDER_NOT_PAID", "订单未支付")
            resource = copy.deepcopy(order["transaction"])
        self.dispatch(
            merchant, order["notify_url"], resource, "TRANSACTION.SUCCESS", duplicates=duplicates, delay=delay
        )
        return resource["transaction_id"]

    # ------------------------------------------------------------------ builders
    def transaction_resource(
        self,
        mchid: str,
        out_trade_no: str,
        total: int,
        *,
        payer_total: int | None = None,
        transaction_id: str | None = None,
        openid: str | None = None,
        success_time: str | None = None,
        appid: str | None = None,
        attach: str = "",
        bank_type: str = "OTHERS",
        trade_type: str = "NATIVE",
        trade_state: str = "SUCCESS",
        coupon_type: str = "CASH",
    ) -> dict[str, Any]:
        """A decrypted payment resource (§1.7, direct merchant) as the channel would send it. payer_total <
        total adds one promotion_detail coupon of `coupon_type` (CASH | NOCASH), funded by the merchant."""
        merchant = self._merchants.get(str(mchid))
        payer_total = total if payer_total is None else int(payer_total)
        resource: dict[str, Any] = {
            "mchid": str(mchid),
            "appid": appid or (merchant.appid if merchant else DEFAULT_APPID),
            "out_trade_no": out_trade_no,
            "transaction_id": transaction_id or self._new_transaction_id(),
            "trade_type": trade_type,
            "trade_state": trade_state,
            "trade_state_desc": _TRADE_STATE_DESC.get(trade_state, trade_state),
            "bank_type": bank_type,
            "attach": attach,
            "success_time": success_time or k.now_rfc3339(),
            "payer": {"openid": openid or self._new_openid()},
            "amount": {
                "total": int(total),
                "payer_total": payer_total,
                "currency": "CNY",
                "payer_currency": "CNY",
            },
        }
        if payer_total < total:
            discount = total - payer_total
            resource["promotion_detail"] = [
                {
                    "coupon_id": self.kernel.digits(11),
                    "name": "模拟代金券",
                    "scope": "GLOBAL",
                    "type": coupon_type,
                    "amount": discount,
                    "stock_id": self.kernel.digits(8),
                    "wechatpay_contribute": 0,
                    "merchant_contribute": discount,
                    "other_contribute": 0,
                    "currency": "CNY",
                }
            ]
        return resource

    def refund_resource(
        self,
        mchid: str,
        out_trade_no: str,
        transaction_id: str,
        out_refund_no: str,
        refund: int,
        total: int,
        *,
        refund_status: str = "SUCCESS",
        refund_id: str | None = None,
        success_time: str | None = None,
        user_received_account: str = "支付用户零钱",
        payer_total: int | None = None,
        payer_refund: int | None = None,
    ) -> dict[str, Any]:
        """A decrypted refund resource (§1.8); pair with event_type REFUND.<refund_status>. It states total,
        refund, payer_total, payer_refund only (no settlement_refund: that is the query's, §2.3)."""
        resource: dict[str, Any] = {
            "mchid": str(mchid),
            "out_trade_no": out_trade_no,
            "transaction_id": transaction_id,
            "out_refund_no": out_refund_no,
            "refund_id": refund_id or ("5030" + self.kernel.digits(25)),
            "refund_status": refund_status,
            "user_received_account": user_received_account,
            "amount": {
                "total": total,
                "refund": refund,
                "payer_total": total if payer_total is None else payer_total,
                "payer_refund": refund if payer_refund is None else payer_refund,
            },
        }
        if refund_status == "SUCCESS":
            resource["success_time"] = success_time or k.now_rfc3339()
        return resource

    def _envelope(
        self,
        merchant: Merchant,
        resource: dict[str, Any] | bytes,
        *,
        event_type: str,
        associated_data: str,
        resource_nonce: str | None = None,
        notification_id: str | None = None,
        create_time: str | None = None,
        summary: str | None = None,
    ) -> tuple[str, bytes]:
        original_type = (
            "refund"
            if event_type.startswith("REFUND.")
            else "security"
            if event_type == SECURITY_ECHO
            else "transaction"
        )
        nonce = resource_nonce or self.kernel.alnum(12)
        plaintext = resource if isinstance(resource, bytes) else k.compact(resource)
        nid = notification_id or self.kernel.uuid()
        envelope = {
            "id": nid,
            "create_time": create_time or k.now_rfc3339(),
            "resource_type": "encrypt-resource",
            "event_type": event_type,
            "summary": summary if summary is not None else _SUMMARIES.get(event_type, "通知"),
            "resource": {
                "original_type": original_type,
                "algorithm": "AEAD_AES_256_GCM",
                "ciphertext": c.aead_encrypt(merchant.apiv3_key, plaintext, associated_data, nonce),
                "associated_data": associated_data,
                "nonce": nonce,
            },
        }
        return nid, k.compact(envelope)

    def _signed_headers(
        self,
        merchant: Merchant | None,
        body: bytes,
        *,
        timestamp: str | int | None = None,
        nonce: str | None = None,
        serial: str | None = None,
        signature_override: str | None = None,
        signature_type: bool = True,
    ) -> dict[str, str]:
        ts = str(int(k.now()) if timestamp is None else timestamp)
        nonce = nonce or self.kernel.alnum(32)
        serial, key = self._signer(merchant, serial)
        signature = signature_override or c.rsa_sign(key, c.response_message(ts, nonce, body))
        headers = {
            "Wechatpay-Timestamp": ts,
            "Wechatpay-Nonce": nonce,
            "Wechatpay-Signature": signature,
            "Wechatpay-Serial": serial,
        }
        if signature_type:
            headers["Wechatpay-Signature-Type"] = SIGNATURE_TYPE
        headers["Request-ID"] = self.kernel.uuid()
        return headers

    def build_notification(
        self,
        mchid: str,
        resource: dict[str, Any] | bytes,
        *,
        event_type: str = "TRANSACTION.SUCCESS",
        timestamp: str | int | None = None,
        nonce: str | None = None,
        serial: str | None = None,
        signature_override: str | None = None,
        associated_data: str = "transaction",
        resource_nonce: str | None = None,
        notification_id: str | None = None,
        create_time: str | None = None,
        summary: str | None = None,
        apiv3_key: str | None = None,
    ) -> tuple[dict[str, str], bytes]:
        """A standalone, fully signed + encrypted callback ``(headers, body)`` for a registered merchant.

        serial: Wechatpay-Serial to sign with (PUB_KEY_ID_… or a platform cert serial; default by the
        merchant's verify_mode; an unknown serial is sent as-is, signed with the default key).
        signature_override: put this in Wechatpay-Signature instead (e.g. ``WECHATPAY/SIGNTEST/…``).
        apiv3_key: encrypt with another key (fault: wrong key). ``resource`` may be raw bytes.
        """
        merchant = self.merchant(mchid)
        if apiv3_key is not None:
            merchant = Merchant(**{**merchant.__dict__, "apiv3_key": apiv3_key})
        _, body = self._envelope(
            merchant,
            resource,
            event_type=event_type,
            associated_data=associated_data,
            resource_nonce=resource_nonce,
            notification_id=notification_id,
            create_time=create_time,
            summary=summary,
        )
        headers = self._signed_headers(
            merchant,
            body,
            timestamp=timestamp,
            nonce=nonce,
            serial=serial,
            signature_override=signature_override,
        )
        headers["Content-Type"] = "application/json"
        return headers, body

    # ------------------------------------------------------------------ delivery
    def dispatch(
        self,
        merchant: Merchant,
        notify_url: str,
        resource: dict[str, Any],
        event_type: str,
        *,
        duplicates: int = 1,
        delay: float = 0,
        probe: bool = False,
    ) -> None:
        """Deliver one notification (payment or refund) to notify_url: ``duplicates`` concurrent copies, each
        attempt freshly signed, retried on the §1.9 schedule; ``probe`` adds one WECHATPAY/SIGNTEST/ probe."""
        nid, body = self._envelope(
            merchant,
            resource,
            event_type=event_type,
            associated_data=_ASSOCIATED_DATA.get(event_type.split(".")[0], "transaction"),
        )
        job = _Job(
            merchant=merchant,
            notify_url=notify_url,
            body=body,
            notification_id=nid,
            event_type=event_type,
            transaction_id=resource.get("transaction_id", ""),
            out_trade_no=resource.get("out_trade_no", ""),
        )
        chains = [self._chain(job, i) for i in range(max(1, int(duplicates)))]
        if probe:
            chains.insert(0, self._chain(job, -1))
        self.engine.send(chains, delay=delay, name=f"notify-{nid[:8]}")

    def _chain(self, job: _Job, copy_index: int) -> Chain:
        """Copy ``copy_index`` of the notification (-1: the SIGNTEST probe, one attempt, bad signature)."""

        def compose() -> tuple[dict[str, str], bytes]:
            override = None
            if copy_index < 0:
                override = SIGNTEST_PREFIX + base64.b64encode(self.kernel.randbytes(192)).decode("ascii")
            headers = self._signed_headers(job.merchant, job.body, signature_override=override)
            return {**headers, "Content-Type": "application/json"}, job.body

        def record(attempt: int, headers: dict[str, str], reply: k.Reply, ok: bool) -> None:
            self._deliveries.add(
                {
                    "notification_id": job.notification_id,
                    "event_type": job.event_type,
                    "transaction_id": job.transaction_id,
                    "out_trade_no": job.out_trade_no,
                    "mchid": job.merchant.mchid,
                    "notify_url": job.notify_url,
                    "kind": "probe" if copy_index < 0 else "notification",
                    "copy": copy_index,
                    "attempt": attempt,
                    "status": reply.status,
                    "error": reply.error,
                    "serial": headers["Wechatpay-Serial"],
                    "duration_ms": reply.duration_ms,
                    "elapsed_ms": int((time.monotonic() - job.started) * 1000),
                    "at": k.now_rfc3339(),
                }
            )

        return Chain(
            url=job.notify_url,
            compose=compose,
            acknowledged=lambda reply: copy_index >= 0 and reply.status in (200, 204),
            record=record,
            schedule=() if copy_index < 0 else RETRY_SCHEDULE_S,
            label=f"{job.notification_id} for {job.transaction_id}",
        )

    @property
    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivery attempt so far (copies of the records)."""
        return self._deliveries.records()

    def wait_delivered(
        self, transaction_id: str, timeout: float = 10.0, count: int = 1
    ) -> list[dict[str, Any]]:
        """Block until ``count`` notification attempts for ``transaction_id`` were acknowledged (200/204);
        returns those records. Raises ``TimeoutError``."""
        return self._deliveries.wait(
            lambda d: d["transaction_id"] == transaction_id,
            lambda d: d["kind"] == "notification" and d["status"] in (200, 204),
            what=transaction_id,
            timeout=timeout,
            count=count,
        )

    # ------------------------------------------------------------------ API faults
    def inject_fault(
        self,
        kind: str,
        *,
        count: int = 1,
        path_contains: str | None = None,
        method: str | None = None,
        status: int = 500,
        code: str = "SYSTEM_ERROR",
        message: str = "系统错误",
        seconds: float = 0.0,
    ) -> dict[str, Any]:
        """Make the next ``count`` matching ``/v3/`` API calls misbehave. kind:
        ``error`` (answer ``status`` {code, message}, signed), ``unsigned`` (normal answer without
        Wechatpay-* headers), ``bad_signature`` (normal answer, corrupted signature),
        ``delay`` (sleep ``seconds`` first, then answer normally)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        fault = {
            "kind": kind,
            "path_contains": path_contains,
            "method": method.upper() if method else None,
            "status": int(status),
            "code": code,
            "message": message,
            "seconds": float(seconds),
        }
        return self._faults.arm(fault, count)

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self, method: str, path: str) -> dict[str, Any] | None:
        return self._faults.take(path=path, method=method)

    # ------------------------------------------------------------------ request authentication
    def authenticate(
        self, method: str, canonical_url: str, authorization: str | None, body: bytes
    ) -> Merchant:
        """§2.5: verify ``Authorization: WECHATPAY2-SHA256-RSA2048 k="v",…`` against the merchant key."""
        if not authorization:
            raise SimulatorError(401, "SIGN_ERROR", "Http头Authorization值为空")
        scheme, _, params = authorization.strip().partition(" ")
        if scheme != SIGNATURE_TYPE:
            raise SimulatorError(401, "SIGN_ERROR", "错误的签名认证类型")
        fields = dict(_AUTH_PARAM_RE.findall(params))
        missing = [
            k for k in ("mchid", "nonce_str", "signature", "timestamp", "serial_no") if not fields.get(k)
        ]
        if missing:
            raise SimulatorError(401, "SIGN_ERROR", f"Http头Authorization缺少{','.join(missing)}")
        merchant = self.merchant(fields["mchid"])
        if fields["serial_no"].upper() != merchant.serial:
            raise SimulatorError(401, "SIGN_ERROR", "商户证书序列号有误")
        try:
            skew = abs(k.now() - int(fields["timestamp"]))
        except ValueError:
            raise SimulatorError(401, "SIGN_ERROR", "时间戳格式错误") from None
        if skew > 300:
            raise SimulatorError(401, "SIGN_ERROR", "Http头Authorization中的timestamp已过期")
        message = c.request_message(method, canonical_url, fields["timestamp"], fields["nonce_str"], body)
        if not c.rsa_verify(merchant.public_key, message, fields["signature"]):
            raise SimulatorError(401, "SIGN_ERROR", "签名错误")
        return merchant


_AUTH_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')
_ASSOCIATED_DATA = {"REFUND": "refund", "SECURITY_ECHO": ""}  # the echo callback's example: "" (4019605946)


def _notify_url(value: Any) -> str:
    """A notify_url the simulator delivers to: http(s), no parameters, a loopback host."""
    notify_url = str(value)
    parts = urlsplit(notify_url)
    if parts.scheme not in ("http", "https") or parts.query or parts.fragment:
        raise SimulatorError(400, "PARAM_ERROR", "notify_url格式错误（须为http(s)且不能携带参数）")
    if not k.is_loopback(parts.hostname):
        raise SimulatorError(400, "PARAM_ERROR", "simulator only delivers to loopback notify_url hosts")
    return notify_url


def nocash_of(tx: dict[str, Any]) -> int:
    return sum(int(p["amount"]) for p in tx.get("promotion_detail") or () if p.get("type") == "NOCASH")


def refund_split(tx: dict[str, Any], refund: int) -> dict[str, int]:
    """A refund of this transaction split like WeChat does (kernel.coupon_refund_split): the bill and the
    refund answer/notification say the same (退款金额 = settlement_refund, 充值券退款金额 = the CASH share)."""
    coupons = sum(int(p["amount"]) for p in tx.get("promotion_detail") or ())
    return k.coupon_refund_split(int(tx["amount"]["total"]), coupons, nocash_of(tx), refund)
