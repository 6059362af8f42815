"""WeChat Pay v3 service-provider (partner) APIs of the simulator (channel-spec §1.7 partner, §2.1, §2.2).

Composed into ``ChannelSimulator`` (``sim.partner``), on the v3 desk's books. The service provider (``sp_mchid``, a registered merchant) signs the
requests; orders belong to the sub-merchant and are kept under ``(sub_mchid, out_trade_no)``, so two
sub-merchants may use the same out_trade_no (R11):

* ``POST /v3/pay/partner/transactions/native`` ``{sp_appid, sp_mchid, sub_appid?, sub_mchid, description,
  out_trade_no, time_expire?, attach?, notify_url, amount{total, currency}}`` → ``{"code_url"}``;
* ``GET /v3/pay/partner/transactions/out-trade-no/{no}?sp_mchid=&sub_mchid=`` → the partner-shaped
  transaction (sp_appid, sp_mchid, sub_mchid, payer.sp_openid);
* ``POST /v3/pay/partner/transactions/out-trade-no/{no}/close`` ``{sp_mchid, sub_mchid}`` → 204.

``pay_partner(sp_mchid, sub_mchid, out_trade_no)`` pays such an order and delivers a partner-shaped
TRANSACTION.SUCCESS notification encrypted and signed for the provider.
"""

from __future__ import annotations

import copy
from typing import Any

from . import kernel as k
from .kernel import SimulatorError
from .wechatpay_v3 import WeChatPayV3Desk, refuse_combine_sub_order

_REQUIRED = ("sp_appid", "sp_mchid", "sub_mchid", "description", "out_trade_no", "notify_url", "amount")


class PartnerDesk:
    """Partner-mode orders, kept in the v3 desk's orders under (sub_mchid, out_trade_no)."""

    def __init__(self, v3: WeChatPayV3Desk):
        self.v3 = v3

    def create_partner_native_order(self, sp_mchid: str, body: dict[str, Any]) -> dict[str, str]:
        v3 = self.v3
        provider = v3.merchant(sp_mchid)
        for name in _REQUIRED:
            if body.get(name) in (None, ""):
                raise SimulatorError(
                    400,
                    "PARAM_ERROR",
                    f"输入源“/body/{name}”映射到字段“{name}”必填性规则校验失败，此字段为必填项",
                )
        if str(body["sp_mchid"]) != provider.mchid:
            raise SimulatorError(400, "PARAM_ERROR", "sp_mchid与请求签名中的商户号不一致")
        if body["sp_appid"] != provider.appid:
            raise SimulatorError(400, "APPID_MCHID_NOT_MATCH", "sp_appid和sp_mchid不匹配")
        sub = str(body["sub_mchid"])
        # the direct-order checks (out_trade_no, amount, notify_url, time_expire) are the same: reuse them
        direct = {**body, "appid": provider.appid, "mchid": provider.mchid}
        key, otn = (provider.mchid, str(body["out_trade_no"])), str(body["out_trade_no"])
        with v3._lock:
            existing = v3._orders.get((sub, otn))
            if existing is not None and existing.get("sp_mchid") != provider.mchid:
                raise SimulatorError(400, "INVALID_REQUEST", "201 商户订单号重复")
            saved = v3._orders.pop(key, None)  # the provider's own direct order with this number, if any
            if existing is not None:
                v3._orders[key] = existing  # same number again: the direct checks see the partner order
            try:
                answer = v3.create_native_order(provider.mchid, direct)
                order = v3._orders[key]
            finally:
                v3._orders.pop(key, None)
                if saved is not None:
                    v3._orders[key] = saved
            order.update(
                mchid=sub,
                sub_mchid=sub,
                sp_mchid=provider.mchid,
                sp_appid=provider.appid,
                sub_appid=body.get("sub_appid") or None,
                partner=True,
            )
            v3._orders[(sub, otn)] = order
        return answer

    def _partner_order(self, sp_mchid: str, sub_mchid: str, out_trade_no: str) -> dict[str, Any]:
        order = self.v3._visible_order(sub_mchid, out_trade_no)
        if not order.get("partner") or order.get("sp_mchid") != str(sp_mchid):
            raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
        return order

    def partner_transaction_view(self, sp_mchid: str, sub_mchid: str, out_trade_no: str) -> dict[str, Any]:
        with self.v3._lock:
            order = self._partner_order(sp_mchid, sub_mchid, out_trade_no)
            if order.get("transaction") is not None:
                return copy.deepcopy(order["transaction"])
            view = {
                "sp_appid": order["sp_appid"],
                "sp_mchid": order["sp_mchid"],
                "sub_mchid": order["sub_mchid"],
                "out_trade_no": order["out_trade_no"],
                "trade_state": order["trade_state"],
                "trade_state_desc": "未支付" if order["trade_state"] == "NOTPAY" else "订单已关闭",
                "attach": order["attach"],
                "amount": {
                    "total": order["amount"]["total"],
                    "currency": order["amount"]["currency"],
                    "payer_currency": order["amount"]["currency"],
                },
            }
            if order.get("sub_appid"):
                view["sub_appid"] = order["sub_appid"]
            return view

    def close_partner_order(self, sp_mchid: str, sub_mchid: str, out_trade_no: str) -> None:
        with self.v3._lock:
            order = self._partner_order(sp_mchid, sub_mchid, out_trade_no)
            refuse_combine_sub_order(order)
            if order["trade_state"] == "SUCCESS":
                raise SimulatorError(400, "ORDER_PAID", "订单已支付")
            if order["trade_state"] == "CLOSED":
                raise SimulatorError(400, "ORDER_CLOSED", "订单已关闭")
            order["trade_state"] = "CLOSED"

    def partner_transaction_resource(
        self, sp_mchid: str, sub_mchid: str, out_trade_no: str, total: int, **kw: Any
    ) -> dict[str, Any]:
        """A payment resource in service-provider shape (§1.7 partner): sp_appid/sp_mchid/sub_mchid and
        payer.sp_openid instead of appid/mchid/payer.openid; sign and encrypt it with the provider's
        merchant (``build_notification(sp_mchid, resource)``)."""
        resource = self.v3.transaction_resource(sp_mchid, out_trade_no, total, **kw)
        resource["sp_appid"] = resource.pop("appid")
        resource["sp_mchid"] = resource.pop("mchid")
        resource["sub_mchid"] = str(sub_mchid)
        resource["payer"] = {"sp_openid": resource["payer"]["openid"]}
        return resource

    def pay_partner(
        self,
        sp_mchid: str,
        sub_mchid: str,
        out_trade_no: str,
        *,
        payer_total: int | None = None,
        duplicates: int = 1,
        drop: bool = False,
        amount_total: int | None = None,
        delay: float = 0,
    ) -> str:
        """The user pays a partner order: a partner-shaped TRANSACTION.SUCCESS goes to the provider's URL."""
        v3 = self.v3
        provider = v3.merchant(sp_mchid)
        with v3._lock:
            order = self._partner_order(provider.mchid, sub_mchid, out_trade_no)
            if order["trade_state"] != "NOTPAY":
                raise SimulatorError(
                    400,
                    "ORDER_PAID" if order["trade_state"] == "SUCCESS" else "ORDER_CLOSED",
                    "订单已支付" if order["trade_state"] == "SUCCESS" else "订单已关闭",
                )
            if order["_expire_at"] is not None and k.now_utc() > order["_expire_at"]:
                raise SimulatorError(400, "ORDER_EXPIRED", "订单已过期 (time_expire)")
            total = order["amount"]["total"] if amount_total is None else int(amount_total)
            resource = self.partner_transaction_resource(
                provider.mchid,
                str(sub_mchid),
                out_trade_no,
                total,
                payer_total=payer_total,
                attach=order["attach"],
            )
            if order.get("sub_appid"):
                resource["sub_appid"] = order["sub_appid"]
            order["trade_state"] = "SUCCESS"
            order["transaction"] = resource
            v3._by_transaction_id[resource["transaction_id"]] = (str(sub_mchid), out_trade_no)
        if not drop:
            v3.dispatch(
                provider,
                order["notify_url"],
                resource,
                "TRANSACTION.SUCCESS",
                duplicates=duplicates,
                delay=delay,
            )
        return str(resource["transaction_id"])
