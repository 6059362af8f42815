"""WeChat Pay v3 combine payments (合单支付) on the channel simulator, on the v3 desk's books.

* ``POST /v3/combine-transactions/native`` ``{combine_appid, combine_mchid, combine_out_trade_no,
  sub_orders[{mchid, sub_mchid?, attach, amount{total_amount, currency}, out_trade_no, description}],
  notify_url, time_expire?}`` → ``{"code_url"}``. ``combine_mchid`` must be the signer; every
  ``sub_orders[].mchid`` too (partner mode: the provider, the order's merchant is ``sub_mchid``).
* ``GET /v3/combine-transactions/out-trade-no/{combine_out_trade_no}`` → the combine order in the notification
  resource's shape (sub_orders[] with trade_state, and transaction_id + amount.payer_amount once paid).
* ``POST /v3/combine-transactions/out-trade-no/{combine_out_trade_no}/close`` ``{combine_appid, sub_orders[{mchid,
  out_trade_no, sub_mchid?}]}`` → 204: every named sub-order that is NOTPAY becomes CLOSED, all or none. A named
  sub-order already paid → 400 ``ORDER_PAID`` (nothing closed); all named ones closed already → 400
  ``ORDER_CLOSED``; a sub-order not of this combine (or its sub_mchid wrong) → 400 ``PARAM_ERROR``. The
  single-order close refuses a combine's sub-order (wechatpay_v3.py): a combine order is closed only so.
* ``pay_combine(combine_mchid, combine_out_trade_no, drop=, duplicates=, forge_sub=)`` pays every sub-order
  (each its own transaction_id, each an ordinary paid order on the v3 books: queries, refunds and bills see it)
  and delivers ONE TRANSACTION.SUCCESS notification carrying all sub-orders.

Composed into ``ChannelSimulator`` as ``sim.combine``.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import unquote

from . import kernel as k
from .kernel import SimulatorError
from .wechatpay_v3 import OUT_TRADE_NO_RE, WeChatPayV3Desk

_QUERY = re.compile(r"^/v3/combine-transactions/out-trade-no/([^/]+)$")
_CLOSE = re.compile(r"^/v3/combine-transactions/out-trade-no/([^/]+)/close$")
_REQUIRED = ("combine_appid", "combine_mchid", "combine_out_trade_no", "sub_orders", "notify_url")
_SUB_REQUIRED = ("mchid", "attach", "amount", "out_trade_no", "description")


class CombineDesk:
    def __init__(self, v3: WeChatPayV3Desk):
        self.v3 = v3
        self._combines: dict[tuple[str, str], dict[str, Any]] = {}  # (combine_mchid, no) → combine order

    def route(self, method: str, path: str, body: dict[str, Any], mchid: str) -> tuple[int, Any]:
        if method == "POST" and path == "/v3/combine-transactions/native":
            return 200, self.create_combine_native_order(mchid, body)
        if method == "GET" and (m := _QUERY.match(path)):
            return 200, self.combine_view(mchid, unquote(m.group(1)))
        if method == "POST" and (m := _CLOSE.match(path)):
            self.close_combine(mchid, unquote(m.group(1)), body)
            return 204, None
        raise SimulatorError(404, "NOT_FOUND", f"simulator does not implement {method} {path}")

    def create_combine_native_order(self, mchid: str, body: dict[str, Any]) -> dict[str, str]:
        v3 = self.v3
        merchant = v3.merchant(mchid)
        for name in _REQUIRED:
            if body.get(name) in (None, "", []):
                raise SimulatorError(
                    400, "PARAM_ERROR", f"输入源“/body/{name}”必填性规则校验失败，此字段为必填项"
                )
        if str(body["combine_mchid"]) != merchant.mchid:
            raise SimulatorError(400, "PARAM_ERROR", "combine_mchid与请求签名中的商户号不一致")
        if body["combine_appid"] != merchant.appid:
            raise SimulatorError(400, "APPID_MCHID_NOT_MATCH", "combine_appid和combine_mchid不匹配")
        no = str(body["combine_out_trade_no"])
        if not OUT_TRADE_NO_RE.match(no):
            raise SimulatorError(400, "PARAM_ERROR", "combine_out_trade_no格式错误")
        subs = body["sub_orders"]
        if not isinstance(subs, list) or not 1 <= len(subs) <= 50:
            raise SimulatorError(400, "PARAM_ERROR", "sub_orders须为1-50个子单")
        with v3._lock:
            existing = self._combines.get((merchant.mchid, no))
            if existing is not None:
                if [s["out_trade_no"] for s in existing["sub_orders"]] != [
                    s.get("out_trade_no") for s in subs
                ]:
                    raise SimulatorError(400, "INVALID_REQUEST", "合单商户订单号重复，且子单与原请求不一致")
                return {"code_url": existing["code_url"]}
        code_url = "weixin://wxpay/bizpayurl?pr=" + v3.kernel.alnum(7)
        kept = []
        for sub in subs:
            if not isinstance(sub, dict) or any(sub.get(f) in (None, "") for f in _SUB_REQUIRED):
                raise SimulatorError(400, "PARAM_ERROR", f"子单须有 {', '.join(_SUB_REQUIRED)}")
            if str(sub["mchid"]) != merchant.mchid:
                raise SimulatorError(400, "PARAM_ERROR", "子单mchid须为合单发起方商户号")
            amount = sub["amount"]
            total = amount.get("total_amount") if isinstance(amount, dict) else None
            if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
                raise SimulatorError(400, "PARAM_ERROR", "amount.total_amount必须为正整数")
            owner = str(sub.get("sub_mchid") or merchant.mchid)
            kept.append({**copy.deepcopy(sub), "_owner": owner})
        with v3._lock:
            for sub in kept:
                key = (sub["_owner"], str(sub["out_trade_no"]))
                if key in v3._orders:
                    raise SimulatorError(400, "INVALID_REQUEST", f"子单商户订单号{key[1]}重复")
            for sub in kept:
                key = (sub["_owner"], str(sub["out_trade_no"]))
                order = {
                    "appid": merchant.appid,
                    "mchid": sub["_owner"],
                    "out_trade_no": key[1],
                    "description": str(sub["description"]),
                    "notify_url": str(body["notify_url"]),
                    "attach": str(sub["attach"]),
                    "time_expire": body.get("time_expire"),
                    "amount": {"total": sub["amount"]["total_amount"], "currency": "CNY"},
                    "code_url": code_url,
                    "trade_state": "NOTPAY",
                    "created_at": k.now_rfc3339(),
                    "_expire_at": None,
                    "combine_out_trade_no": no,
                }
                if sub.get("sub_mchid"):
                    order.update(sub_mchid=sub["_owner"], sp_mchid=merchant.mchid, sp_appid=merchant.appid)
                    order["partner"] = True
                v3._orders[key] = order
            self._combines[(merchant.mchid, no)] = {
                "combine_appid": merchant.appid,
                "combine_mchid": merchant.mchid,
                "combine_out_trade_no": no,
                "notify_url": str(body["notify_url"]),
                "code_url": code_url,
                "sub_orders": kept,
            }
        return {"code_url": code_url}

    def close_combine(self, mchid: str, combine_out_trade_no: str, body: dict[str, Any]) -> None:
        """The combine close (all named sub-orders or none), signed by the combine initiator ``mchid``."""
        merchant = self.v3.merchant(mchid)
        for name in ("combine_appid", "sub_orders"):
            if body.get(name) in (None, "", []):
                raise SimulatorError(
                    400, "PARAM_ERROR", f"输入源“/body/{name}”必填性规则校验失败，此字段为必填项"
                )
        if body["combine_appid"] != merchant.appid:
            raise SimulatorError(400, "APPID_MCHID_NOT_MATCH", "combine_appid和combine_mchid不匹配")
        named = body["sub_orders"]
        if not isinstance(named, list) or not 1 <= len(named) <= 50:
            raise SimulatorError(400, "PARAM_ERROR", "sub_orders须为1-50个子单")
        with self.v3._lock:
            combine = self._combines.get((merchant.mchid, combine_out_trade_no))
            if combine is None:
                raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
            mine = {
                (str(sub["out_trade_no"]), str(sub.get("sub_mchid") or "")): sub
                for sub in combine["sub_orders"]
            }
            orders = []
            for item in named:
                if not isinstance(item, dict) or not item.get("mchid") or not item.get("out_trade_no"):
                    raise SimulatorError(400, "PARAM_ERROR", "子单须有 mchid, out_trade_no")
                if str(item["mchid"]) != merchant.mchid:
                    raise SimulatorError(400, "PARAM_ERROR", "子单mchid须为合单发起方商户号")
                sub = mine.get((str(item["out_trade_no"]), str(item.get("sub_mchid") or "")))
                if sub is None:
                    raise SimulatorError(400, "PARAM_ERROR", f"子单{item['out_trade_no']}不属于该合单")
                orders.append(self.v3._orders[(sub["_owner"], str(sub["out_trade_no"]))])
            states = {order["trade_state"] for order in orders}
            if "SUCCESS" in states:
                raise SimulatorError(400, "ORDER_PAID", "订单已支付")
            if states == {"CLOSED"}:
                raise SimulatorError(400, "ORDER_CLOSED", "订单已关闭")
            for order in orders:
                if order["trade_state"] == "NOTPAY":
                    order["trade_state"] = "CLOSED"
            combine.setdefault("closes", []).append(copy.deepcopy(named))

    def combine_view(self, mchid: str, combine_out_trade_no: str) -> dict[str, Any]:
        with self.v3._lock:
            combine = self._combines.get((str(mchid), combine_out_trade_no))
            if combine is None:
                raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
            return self._resource(combine)

    def _resource(self, combine: dict[str, Any]) -> dict[str, Any]:
        """The combine order as the notification resource / query answer shows it (under the v3 lock)."""
        subs = []
        for sub in combine["sub_orders"]:
            order = self.v3._orders[(sub["_owner"], str(sub["out_trade_no"]))]
            tx = order.get("transaction") or {}
            view: dict[str, Any] = {
                "mchid": combine["combine_mchid"],
                "trade_state": order["trade_state"],
                "attach": order["attach"],
                "out_trade_no": order["out_trade_no"],
                "amount": {"total_amount": order["amount"]["total"], "currency": "CNY"},
            }
            if sub.get("sub_mchid"):
                view["sub_mchid"] = sub["_owner"]
            if tx:
                view.update(
                    trade_type="NATIVE",
                    bank_type=tx["bank_type"],
                    success_time=tx["success_time"],
                    transaction_id=tx["transaction_id"],
                )
                view["amount"].update(payer_amount=tx["amount"]["payer_total"], payer_currency="CNY")
            subs.append(view)
        return {
            "combine_appid": combine["combine_appid"],
            "combine_mchid": combine["combine_mchid"],
            "combine_out_trade_no": combine["combine_out_trade_no"],
            "scene_info": {"device_id": "POS1:1"},
            "sub_orders": subs,
            "combine_payer_info": {"openid": self.v3._new_openid()},
        }

    def pay_combine(
        self,
        combine_mchid: str,
        combine_out_trade_no: str,
        *,
        drop: bool = False,
        duplicates: int = 1,
        forge_sub: dict[str, Any] | None = None,
        success_time: str | None = None,
    ) -> list[str]:
        """The user pays the combine order once: every sub-order becomes SUCCESS with its own transaction_id;
        one TRANSACTION.SUCCESS notification carries them all (unless ``drop``). ``forge_sub``: a fault, an
        extra sub-order (e.g. ``{"mchid": other, "out_trade_no": …, "total": 100}``) slipped into the
        notification only. ``success_time``: RFC 3339 (default now), e.g. for a bill day. Returns the transaction ids
        in sub-order order."""
        v3 = self.v3
        merchant = v3.merchant(combine_mchid)
        tids = []
        with v3._lock:
            combine = self._combines.get((merchant.mchid, combine_out_trade_no))
            if combine is None:
                raise SimulatorError(404, "ORDER_NOT_EXIST", "订单不存在")
        for sub in combine["sub_orders"]:
            owner, otn = sub["_owner"], str(sub["out_trade_no"])
            with v3._lock:
                order = v3._orders[(owner, otn)]
                if order["trade_state"] != "NOTPAY":
                    raise SimulatorError(400, "ORDER_PAID", f"子单{otn}状态为{order['trade_state']}")
                resource = v3.transaction_resource(
                    owner, otn, order["amount"]["total"], attach=order["attach"], success_time=success_time
                )
                if order.get("partner"):
                    resource["sp_appid"] = resource.pop("appid")
                    resource["sp_mchid"] = merchant.mchid
                    del resource["mchid"]
                    resource["sub_mchid"] = owner
                    resource["payer"] = {"sp_openid": resource["payer"]["openid"]}
                order["trade_state"] = "SUCCESS"
                order["transaction"] = resource
                v3._by_transaction_id[resource["transaction_id"]] = (owner, otn)
                tids.append(resource["transaction_id"])
        with v3._lock:
            notification = self._resource(combine)
        if forge_sub:
            notification["sub_orders"].append(self._forged_sub(forge_sub))
        if not drop:
            v3.dispatch(
                merchant, combine["notify_url"], notification, "TRANSACTION.SUCCESS", duplicates=duplicates
            )
        return tids

    def _forged_sub(self, forge_sub: dict[str, Any]) -> dict[str, Any]:
        total = int(forge_sub.get("total", 100))
        return {
            "mchid": str(forge_sub["mchid"]),
            "trade_state": "SUCCESS",
            "trade_type": "NATIVE",
            "bank_type": "OTHERS",
            "attach": "",
            "success_time": k.now_rfc3339(),
            "transaction_id": self.v3._new_transaction_id(),
            "out_trade_no": str(forge_sub["out_trade_no"]),
            "amount": {"total_amount": total, "payer_amount": total, "currency": "CNY"},
            **({"sub_mchid": str(forge_sub["sub_mchid"])} if forge_sub.get("sub_mchid") else {}),
        }

    def combine_notification(
        self,
        combine_mchid: str,
        combine_out_trade_no: str,
        *,
        forge_sub: dict[str, Any] | None = None,
        paid_anyway: bool = False,
    ) -> tuple[dict[str, str], bytes]:
        """The signed TRANSACTION.SUCCESS notification of a combine order as it stands, for tests to deliver
        (``forge_sub``: with an extra sub-order, as in ``pay_combine``). ``paid_anyway``: the buyer paid as the
        order was closed (a race at the channel, like the demo day's payment after close): every sub-order not
        paid is reported SUCCESS with a new transaction_id; the desk's books are not changed."""
        resource = self.combine_view(combine_mchid, combine_out_trade_no)
        if paid_anyway:
            for sub in resource["sub_orders"]:
                if sub.get("transaction_id"):
                    continue
                total = sub["amount"]["total_amount"]
                sub.update(
                    trade_state="SUCCESS",
                    trade_type="NATIVE",
                    bank_type="OTHERS",
                    success_time=k.now_rfc3339(),
                    transaction_id=self.v3._new_transaction_id(),
                )
                sub["amount"].update(payer_amount=total, payer_currency="CNY")
        if forge_sub:
            resource["sub_orders"].append(self._forged_sub(forge_sub))
        return self.v3.build_notification(combine_mchid, resource)
