"""Refunds on the channel simulator: ``POST /v3/refund/domestic/refunds``, ``GET .../{out_refund_no}``
(channel-spec §2.3, §2.4) and REFUND.* notifications (§1.5, §1.8) with the payment retry schedule.

Behaviour per refund (``set_refund_behaviour`` / ``POST /_sim/refund-behaviour``):
    outcome     ``success`` | ``closed`` | ``abnormal`` | ``hold`` (stays PROCESSING until ``settle_refund``)
    delay_s     channel seconds from acceptance to the outcome, multiplied by ``time_scale``
    after_accept ``None`` | ``timeout``: the refund is created, then the answer is held ``hang_s`` wall-clock
                seconds (longer than the caller's timeout: "sent, outcome unknown")
    drop        no notification (only the query tells the outcome)
    duplicates  concurrent copies of each notification
``count=N`` applies the behaviour to the next N new refunds, else it becomes the default.

Rules: the same out_refund_no with the same terms answers the same refund (refunded once, §2.3); other
terms → 400 INVALID_REQUEST; refunds (not CLOSED) never exceed what the payer paid → 400 INVALID_REQUEST
"申请退款金额超过订单可退金额"; unknown / unpaid order → 404 RESOURCE_NOT_EXISTS. A paid order that was
refunded shows trade_state REFUND in queries (§2.1). Partner mode: the provider signs, the body names
``sub_mchid`` (create, apply-abnormal-refund; the query asks ``?sub_mchid=``) and the order must be that
sub-merchant's order through this provider; the notifications carry ``sp_mchid`` + ``sub_mchid`` (§1.8). Another
provider, or the wrong sub_mchid, finds no such order / refund (404 RESOURCE_NOT_EXISTS). Composed into
``ChannelSimulator`` (``sim.v3_refunds``), on the v3 desk's books.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from . import _crypto as c
from . import kernel as k
from .faults import Behaviour
from .kernel import SimulatorError
from .wechatpay_v3 import Merchant, WeChatPayV3Desk, nocash_of, refund_split

_REFUND = re.compile(r"^/v3/refund/domestic/refunds/([^/]+)$")
_ABNORMAL = re.compile(r"^/v3/refund/domestic/refunds/([^/]+)/apply-abnormal-refund$")
ABNORMAL_TYPES = ("MERCHANT_BANK_CARD", "USER_BANK_CARD")
_SETTLE = re.compile(r"^/_sim/refunds/([^/]+)/settle$")
OUT_REFUND_NO_RE = re.compile(r"^[0-9A-Za-z_\-|*@]{1,64}$")
OUTCOMES = {"success": "SUCCESS", "closed": "CLOSED", "abnormal": "ABNORMAL"}


def _check(options: dict[str, Any]) -> None:
    if "outcome" in options and options["outcome"] not in (*OUTCOMES, "hold"):
        raise ValueError("outcome must be success, closed, abnormal or hold")


class RefundDesk:
    """v3 refunds: the refund books live here, the orders on the v3 desk (under its lock)."""

    def __init__(self, v3: WeChatPayV3Desk):
        self.v3 = v3
        self._lock = v3._lock
        self._refunds: dict[str, dict[str, Any]] = {}  # out_refund_no → refund (+ private _keys)
        self.behaviour = Behaviour(
            {
                "outcome": "success",
                "delay_s": 60.0,
                "after_accept": None,
                "hang_s": 1.0,
                "drop": False,
                "duplicates": 1,
            },
            _check,
        )
        self._refund_plans = self.behaviour.queue  # the next N refunds' own behaviours
        # once: called with the refund number after apply-abnormal-refund took a reroute, before the answer
        # goes out (another operator acting meanwhile, or a sleep past the caller's timeout)
        self.abnormal_while_answering: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ behaviour
    def set_refund_behaviour(self, count: int | None = None, **options: Any) -> dict[str, Any]:
        return self.behaviour.set(count, **options)

    # ------------------------------------------------------------------ API
    def refund_route(
        self,
        method: str,
        path: str,
        body: dict[str, Any],
        merchant: Merchant,
        serial: str | None = None,
        query: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """`serial`: the request's Wechatpay-Serial (the platform key its sensitive fields were encrypted
        with); `query`: the GET's query string (partner: sub_mchid)."""
        if method == "POST" and (m := _ABNORMAL.match(path)):
            return 200, self.apply_abnormal_refund(merchant.mchid, unquote(m.group(1)), body, serial)
        if method == "POST" and path == "/v3/refund/domestic/refunds":
            view, plan = self.create_refund(merchant.mchid, body)
            if plan and plan.get("after_accept") == "timeout":
                time.sleep(float(plan["hang_s"]))  # accepted; the caller gives up before the answer
            return 200, view
        if method == "GET" and (m := _REFUND.match(path)):
            sub = (query or {}).get("sub_mchid") or None
            return 200, self.refund_view(merchant.mchid, unquote(m.group(1)), sub_mchid=sub)
        raise SimulatorError(404, "NOT_FOUND", f"simulator does not implement {method} {path}")

    def create_refund(self, mchid: str, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Returns (the Refund object, the behaviour plan if the refund is new else None)."""
        no = body.get("out_refund_no")
        amount = body.get("amount")
        if not isinstance(no, str) or not OUT_REFUND_NO_RE.match(no):
            raise SimulatorError(400, "PARAM_ERROR", "out_refund_no格式错误")
        if not isinstance(amount, dict) or not all(
            isinstance(amount.get(k), int) and not isinstance(amount.get(k), bool)
            for k in ("refund", "total")
        ):
            raise SimulatorError(400, "PARAM_ERROR", "amount.refund/amount.total必须为整数（分）")
        if amount.get("currency", "CNY") != "CNY" or amount["refund"] <= 0:
            raise SimulatorError(400, "PARAM_ERROR", "amount格式错误")
        with self._lock:
            order = self._refundable_order(mchid, body)
            tx = order["transaction"]
            existing = self._refunds.get(no)
            if existing is not None:
                same = (
                    existing["_mchid"],
                    existing["_sub_mchid"],
                    existing["transaction_id"],
                    existing["amount"]["refund"],
                ) == (mchid, body.get("sub_mchid") or None, tx["transaction_id"], amount["refund"])
                if not same:
                    raise SimulatorError(
                        400, "INVALID_REQUEST", "out_refund_no重复，且请求参数与原请求不一致"
                    )
                return self._public_refund(existing), None  # the same number refunds once (§2.3)
            if amount["total"] != tx["amount"]["total"]:
                raise SimulatorError(400, "INVALID_REQUEST", "订单金额与原订单金额不一致")
            taken = sum(
                r["amount"]["refund"]
                for r in self._refunds.values()
                if r["transaction_id"] == tx["transaction_id"] and r["status"] != "CLOSED"
            )
            if taken + amount["refund"] > tx["amount"]["payer_total"]:
                raise SimulatorError(400, "INVALID_REQUEST", "申请退款金额超过订单可退金额")
            plan = self.behaviour.next()
            split = refund_split(tx, amount["refund"])  # the coupons come back in proportion (R43)
            refund = {
                "refund_id": "5030" + self.v3.kernel.digits(25),
                "out_refund_no": no,
                "transaction_id": tx["transaction_id"],
                "out_trade_no": tx["out_trade_no"],
                "channel": "ORIGINAL",
                "user_received_account": "支付用户零钱",
                "create_time": k.now_rfc3339(),
                "status": "PROCESSING",
                "funds_account": "AVAILABLE",
                "amount": {
                    "total": tx["amount"]["total"],
                    "refund": amount["refund"],
                    "payer_total": tx["amount"]["payer_total"],
                    "payer_refund": split["payer_refund"],
                    "settlement_refund": split["settlement_refund"],
                    "settlement_total": tx["amount"]["total"] - nocash_of(tx),
                    "discount_refund": split["discount_refund"],
                    "currency": "CNY",
                    "refund_fee": 0,
                    "from": [],
                },
                "promotion_detail": [],
                "_mchid": mchid,
                "_sub_mchid": body.get("sub_mchid") or None,  # partner: the order's merchant
                "_notify_url": body.get("notify_url") or order["notify_url"],
                "_plan": plan,
                "_reason": body.get("reason", ""),
            }
            self._refunds[no] = refund
            order["trade_state"] = "REFUND"
            tx["trade_state"] = "REFUND"
            tx["trade_state_desc"] = "转入退款"
        if plan["outcome"] != "hold":
            self.v3.kernel.after(
                float(plan["delay_s"]), self.settle_refund, no, plan["outcome"], name=f"refund-{no[:8]}"
            )
        return self._public_refund(refund), plan

    def _refundable_order(self, mchid: str, body: dict[str, Any]) -> dict[str, Any]:
        """The paid order the refund names: the signer's own, or (``sub_mchid``) its sub-merchant's order placed
        through this provider; any other merchant's order does not exist for the signer."""
        sub = str(body.get("sub_mchid") or "") or None
        owner = sub or mchid
        key = None
        if body.get("transaction_id"):
            key = self.v3._by_transaction_id.get(str(body["transaction_id"]))
        elif body.get("out_trade_no"):
            key = (owner, str(body["out_trade_no"]))
        else:
            raise SimulatorError(400, "PARAM_ERROR", "transaction_id和out_trade_no必须二选一")
        order = self.v3._orders.get(key) if key and key[0] == owner else None
        if order is not None and (order.get("sp_mchid") if order.get("partner") else None) != (
            mchid if sub else None
        ):
            order = None  # a partner order through another provider, or a direct one named as partner
        if order is None or order.get("transaction") is None:
            raise SimulatorError(404, "RESOURCE_NOT_EXISTS", "订单不存在或未支付")
        return order

    def apply_abnormal_refund(
        self, mchid: str, refund_id: str, body: dict[str, Any], serial: str | None
    ) -> dict[str, Any]:
        """``POST .../{refund_id}/apply-abnormal-refund``: an ABNORMAL refund goes to the merchant's bank
        account or (its three fields given, bank_account and real_name encrypted with a platform key) the
        user's bank card; it is PROCESSING again and settles SUCCESS after the refund's ``delay_s`` (``hold``:
        when the test says). Anything but an ABNORMAL refund of this merchant → 400 INVALID_REQUEST."""
        kind = body.get("type")
        if kind not in ABNORMAL_TYPES:
            raise SimulatorError(400, "PARAM_ERROR", "type必须为USER_BANK_CARD或MERCHANT_BANK_CARD")
        card: dict[str, str] = {}
        if kind == "USER_BANK_CARD":
            if not all(
                isinstance(body.get(f), str) and body[f] for f in ("bank_type", "bank_account", "real_name")
            ):
                raise SimulatorError(
                    400, "PARAM_ERROR", "退款至用户银行卡时bank_type、bank_account、real_name必填"
                )
            key = self.v3._key_for_serial(serial or "")
            if key is None:
                raise SimulatorError(400, "PARAM_ERROR", "Wechatpay-Serial未知或缺失，无法解密敏感字段")
            try:
                card = {
                    "bank_type": body["bank_type"],
                    "bank_account": c.rsa_oaep_decrypt(key.private_key, body["bank_account"]),
                    "real_name": c.rsa_oaep_decrypt(key.private_key, body["real_name"]),
                }
            except (ValueError, TypeError):
                raise SimulatorError(400, "PARAM_ERROR", "敏感字段解密失败") from None
        with self._lock:
            refund = next(
                (r for r in self._refunds.values() if r["refund_id"] == refund_id and r["_mchid"] == mchid),
                None,
            )
            if (
                refund is None
                or refund["out_refund_no"] != body.get("out_refund_no")
                or refund["_sub_mchid"] != (body.get("sub_mchid") or None)  # partner: the sub's refund only
            ):
                raise SimulatorError(404, "RESOURCE_NOT_EXISTS", "退款单不存在")
            if refund["status"] != "ABNORMAL":
                raise SimulatorError(400, "INVALID_REQUEST", "退款单状态不是退款异常，无需发起异常退款")
            refund["status"] = "PROCESSING"
            refund["channel"] = "OTHER_BANKCARD"
            refund["user_received_account"] = (
                f"{card['bank_type']}借记卡{card['bank_account'][-4:]}" if card else "商户结算银行账户"
            )
            refund["_abnormal"] = {"type": kind, **card}
            plan = refund["_plan"]
            no = refund["out_refund_no"]
        if plan["outcome"] != "hold":
            self.v3.kernel.after(
                float(plan["delay_s"]), self.settle_refund, no, "success", name=f"abn-{no[:8]}"
            )
        while_answering, self.abnormal_while_answering = self.abnormal_while_answering, None
        if while_answering is not None:  # taken; what happens before the caller hears it (a test's race)
            while_answering(no)
        return self._public_refund(refund)

    def abnormal_applied(self, out_refund_no: str) -> dict[str, str] | None:
        """What apply-abnormal-refund received for this refund (decrypted), for tests; None if never."""
        with self._lock:
            return copy.deepcopy(self._refunds[out_refund_no].get("_abnormal"))

    def refund_view(self, mchid: str, out_refund_no: str, *, sub_mchid: str | None = None) -> dict[str, Any]:
        with self._lock:
            refund = self._refunds.get(out_refund_no)
            if refund is None or refund["_mchid"] != mchid or refund["_sub_mchid"] != sub_mchid:
                raise SimulatorError(404, "RESOURCE_NOT_EXISTS", "退款单不存在")
            return self._public_refund(refund)

    @staticmethod
    def _public_refund(refund: dict[str, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v) for k, v in refund.items() if not k.startswith("_")}

    # ------------------------------------------------------------------ outcomes and notifications
    def settle_refund(self, out_refund_no: str, outcome: str, *, notify: bool | None = None) -> str:
        """Decide a refund (success | closed | abnormal) and notify (unless the plan drops it). ABNORMAL may
        later be settled again (e.g. success after a person fixed it)."""
        status = OUTCOMES[outcome]
        with self._lock:
            refund = self._refunds[out_refund_no]
            if refund["status"] in ("SUCCESS", "CLOSED"):
                return refund["status"]
            refund["status"] = status
            if status == "SUCCESS":
                refund["success_time"] = k.now_rfc3339()
            plan = refund["_plan"]
            merchant = self.v3.merchant(refund["_mchid"])
            resource = self._refund_resource_of(refund)
        if notify if notify is not None else not plan.get("drop"):
            self.v3.dispatch(
                merchant,
                refund["_notify_url"],
                resource,
                f"REFUND.{status}",
                duplicates=int(plan.get("duplicates") or 1),
            )
        return status

    def _refund_resource_of(self, refund: dict[str, Any]) -> dict[str, Any]:
        resource = self.v3.refund_resource(
            refund["_mchid"],
            refund["out_trade_no"],
            refund["transaction_id"],
            refund["out_refund_no"],
            refund["amount"]["refund"],
            refund["amount"]["total"],
            refund_status=refund["status"],
            refund_id=refund["refund_id"],
            success_time=refund.get("success_time"),
            payer_total=refund["amount"]["payer_total"],
            payer_refund=refund["amount"]["payer_refund"],
        )
        if refund["_sub_mchid"]:  # partner shape (§1.8): sp_mchid + sub_mchid instead of mchid
            resource["sp_mchid"] = resource.pop("mchid")
            resource["sub_mchid"] = refund["_sub_mchid"]
        return resource

    def refund_notification(self, out_refund_no: str, **build: Any) -> tuple[dict[str, str], bytes]:
        """The signed REFUND.<status> notification of a settled refund, for tests to deliver by hand."""
        with self._lock:
            refund = self._refunds[out_refund_no]
            if refund["status"] == "PROCESSING":
                raise ValueError(f"refund {out_refund_no} is still PROCESSING")
            resource = self._refund_resource_of(refund)
            mchid, status = refund["_mchid"], refund["status"]
        return self.v3.build_notification(
            mchid, resource, event_type=f"REFUND.{status}", associated_data="refund", **build
        )

    def settled(self, mchid: str) -> list[dict[str, Any]]:
        """The merchant's successful refunds as its trade bill lists them (bills.refund_row's fields): the bill
        of a refund's success day has it, whoever asked for the refund (R36: a refund the channel made is in
        its bill)."""
        with self._lock:
            done = [
                r for r in self._refunds.values() if r["_mchid"] == str(mchid) and r["status"] == "SUCCESS"
            ]
            return [
                {
                    "mchid": r["_mchid"],
                    "out_trade_no": r["out_trade_no"],
                    "transaction_id": r["transaction_id"],
                    "out_refund_no": r["out_refund_no"],
                    "refund_id": r["refund_id"],
                    "refund": r["amount"]["refund"],
                    "settle": r["amount"]["settlement_refund"],
                    "cash_coupon": r["amount"]["refund"]
                    - r["amount"]["payer_refund"]
                    - (r["amount"]["refund"] - r["amount"]["settlement_refund"]),
                    "appid": self.v3.get_order(r["_mchid"], r["out_trade_no"])["appid"],
                    "refund_status": "SUCCESS",
                    "success_time": r["success_time"],
                }
                for r in done
            ]

    def refunds(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._public_refund(r) for r in self._refunds.values()]

    # ------------------------------------------------------------------ /_sim admin
    def refund_admin(self, method: str, path: str, data: dict[str, Any]) -> tuple[int, Any]:
        if (method, path) == ("POST", "/_sim/refund-behaviour"):
            return 200, self.set_refund_behaviour(**data)
        if (method, path) == ("GET", "/_sim/refunds"):
            return 200, {"refunds": self.refunds()}
        if method == "POST" and (m := _SETTLE.match(path)):
            return 200, {"status": self.settle_refund(unquote(m.group(1)), str(data["outcome"]))}
        raise SimulatorError(404, "NOT_FOUND", f"no admin endpoint {method} {path}")
