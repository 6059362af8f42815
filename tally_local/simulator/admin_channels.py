"""``/_sim/alipay/...`` and ``/_sim/wechatpay-v2/...``: the admin API of the Alipay and WeChat Pay v2
look-alikes, in the same JSON style as the v3 one (``/_sim/merchants``, ``/_sim/pay``, ``/_sim/rotate``,
``/_sim/faults``). Unsigned, test-only, loopback only like the rest of the simulator.

Alipay (``/_sim/alipay``)
    ``POST /merchants`` ``{app_id?, mode: public_key|cert, app_public_key_pem?}`` → the channel's keys (and a
    generated app key pair when no public key is given); ``GET /merchants``; ``POST /authorize``
    ``{isv_app_id, merchant_app_id}`` → ``{app_auth_token}``; ``POST /pay`` ``{app_id, out_trade_no,
    receipt_amount?, total_amount?, duplicates?, drop?, include_cert_sn?}`` (amounts in cents) → ``{trade_no}``;
    ``POST /rotate`` ``{not_after?}`` → a new Alipay certificate (new ``alipay_cert_sn``) signs from now on;
    ``GET /orders``, ``GET /deliveries``, ``GET /requests``; ``POST|DELETE /faults`` ``{kind: error|bad_signature,
    count?, method?, code?, sub_code?}``.
WeChat Pay v2 (``/_sim/wechatpay-v2``)
    ``POST /merchants`` ``{mch_id?, api_key?, appid?, sign_type?}`` → ``{mch_id, api_key, appid, sign_type}``;
    ``GET /merchants`` (no keys); ``POST /pay`` ``{mch_id, out_trade_no, sub_mch_id?, cash_fee?, duplicates?,
    drop?}`` → ``{transaction_id}``; ``POST /rotate`` ``{mch_id, api_key?}`` → the merchant's new API key signs
    callbacks and answers from now on; ``GET /orders``, ``GET /deliveries``, ``GET /requests``;
    ``POST|DELETE /faults`` ``{kind: error|bad_signature, count?, path_contains?, code?}``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from .alipay import AlipayDesk
from .kernel import Kernel
from .wechatpay_v2 import WeChatPayV2Desk

ALIPAY = "/_sim/alipay"
V2 = "/_sim/wechatpay-v2"


def route(
    alipay: Callable[[], AlipayDesk],
    v2: Callable[[], WeChatPayV2Desk],
    kernel: Kernel,
    method: str,
    path: str,
    data: dict[str, Any],
) -> tuple[int, Any] | None:
    """(status, JSON payload) for an Alipay / v2 admin path, or None when the path is not one of them. The desks
    are asked for on use (the simulator makes each on first use: they generate keys)."""
    if path.startswith(ALIPAY + "/"):
        return _alipay(alipay(), method, path[len(ALIPAY) :], data)
    if path.startswith(V2 + "/"):
        return _v2(v2(), kernel, method, path[len(V2) :], data)
    return None


def _pick(data: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: data[k] for k in names if k in data}


def _alipay(ali: AlipayDesk, method: str, path: str, data: dict[str, Any]) -> tuple[int, Any]:
    key = (method, path)
    if key == ("POST", "/merchants"):
        mode = str(data.get("mode") or "public_key")
        if data.get("app_public_key_pem"):
            return 201, ali.register_merchant(str(data["app_id"]), str(data["app_public_key_pem"]), mode)
        return 201, ali.register_test_merchant(mode, data.get("app_id"))
    if key == ("GET", "/merchants"):
        with ali._lock:
            merchants = list(ali.merchants.values())
        return 200, {
            "merchants": [
                {"app_id": m.app_id, "mode": m.mode, "authorised_merchants": sorted(set(m.tokens.values()))}
                for m in merchants
            ],
            "alipay_cert_sn": ali.alipay_cert_sn,
            "alipay_root_cert_sn": ali.root_cert_sn,
        }
    if key == ("POST", "/authorize"):
        return 200, {"app_auth_token": ali.authorize(str(data["isv_app_id"]), str(data["merchant_app_id"]))}
    if key == ("POST", "/pay"):
        opts = _pick(data, ("receipt_amount", "total_amount", "duplicates", "drop", "include_cert_sn"))
        return 200, {"trade_no": ali.pay(str(data["app_id"]), str(data["out_trade_no"]), **opts)}
    if key == ("POST", "/rotate"):
        not_after = dt.datetime.fromisoformat(str(data["not_after"])) if data.get("not_after") else None
        sn = ali.rotate_alipay_cert(not_after=not_after)
        return 200, {"alipay_cert_sn": sn, "alipay_cert_pem": ali.alipay_cert_pem()}
    if key == ("GET", "/orders"):
        with ali._lock:
            return 200, {"orders": [dict(o) for o in ali.orders.values()]}
    if key == ("GET", "/deliveries"):
        with ali._lock:
            return 200, {"deliveries": [dict(d) for d in ali.deliveries]}
    if key == ("GET", "/requests"):
        with ali._lock:
            return 200, {"requests": [dict(r) for r in ali.requests]}
    if key == ("POST", "/faults"):
        return 201, ali.inject_fault(
            str(data.pop("kind")), **_pick(data, ("count", "method", "code", "msg", "sub_code"))
        )
    if key == ("DELETE", "/faults"):
        ali.clear_faults()
        return 204, None
    return 404, {"code": "NOT_FOUND", "message": f"no admin endpoint {method} {ALIPAY}{path}"}


def _v2(v2: WeChatPayV2Desk, kernel: Kernel, method: str, path: str, data: dict[str, Any]) -> tuple[int, Any]:
    key = (method, path)
    if key == ("POST", "/merchants"):
        sign_type = str(data.get("sign_type") or "MD5")
        if sign_type not in ("MD5", "HMAC-SHA256"):
            raise ValueError("sign_type must be MD5 or HMAC-SHA256")
        mch_id = str(data.get("mch_id") or "19" + kernel.digits(8))
        api_key = str(data.get("api_key") or kernel.alnum(32))
        opts = {"appid": str(data["appid"])} if data.get("appid") else {}
        return 201, v2.register_merchant(mch_id, api_key, sign_type=sign_type, **opts)
    if key == ("GET", "/merchants"):
        with v2._lock:
            return 200, {
                "merchants": [
                    {"mch_id": m.mch_id, "appid": m.appid, "sign_type": m.sign_type}
                    for m in v2.merchants.values()
                ]
            }
    if key == ("POST", "/pay"):
        opts = _pick(data, ("sub_mch_id", "cash_fee", "duplicates", "drop"))
        return 200, {"transaction_id": v2.pay(str(data["mch_id"]), str(data["out_trade_no"]), **opts)}
    if key == ("POST", "/rotate"):
        return 200, {
            "mch_id": str(data["mch_id"]),
            "api_key": v2.rotate_api_key(str(data["mch_id"]), data.get("api_key")),
        }
    if key == ("GET", "/orders"):
        with v2._lock:
            return 200, {"orders": [dict(o) for o in v2.orders.values()]}
    if key == ("GET", "/deliveries"):
        with v2._lock:
            return 200, {"deliveries": [dict(d) for d in v2.deliveries]}
    if key == ("GET", "/requests"):
        with v2._lock:
            return 200, {"requests": [dict(r) for r in v2.requests]}
    if key == ("POST", "/faults"):
        return 201, v2.inject_fault(str(data.pop("kind")), **_pick(data, ("count", "path_contains", "code")))
    if key == ("DELETE", "/faults"):
        v2.clear_faults()
        return 204, None
    return 404, {"code": "NOT_FOUND", "message": f"no admin endpoint {method} {V2}{path}"}
