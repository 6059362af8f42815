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
refunded shows trade_state REFUND in queries (§2.1).
"""

from __future__ import annotations

import copy
import re
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:
    from .core import ChannelSimulator, Merchant

_REFUND = re.compile(r"^/v3/refund/domestic/refunds/([^/]+)$")
_SETTLE = re.compile(r"^/_sim/refunds/([^/]+)/settle$")
OUT_REFUND_NO_RE = re.compile(r"^[0-9A-Za-z_\-|*@]{1,64}$")
OUTCOMES = {"success": "SUCCESS", "closed": "CLOSED", "abnormal": "ABNORMAL"}
BEHAVIOUR_KEYS = ("outcome", "delay_s", "after_accept", "hang_s", "drop", "duplicates")


class RefundDesk:
    """Mixed into ChannelSimulator (core.py): state lives on the simulator, under its lock."""

    def _init_refunds(self: ChannelSimulator) -> None:
        self._refunds: dict[str, dict[str, Any]] = {}  # out_refund_no → refund (+ private _keys)
        self._refund_default: dict[str, Any] = {
            "outcome": "success",
            "delay_s": 60.0,
            "after_accept": None,
            "hang_s": 1.0,
            "drop": False,
            "duplicates": 1,
        }
        self._refund_plans: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ behaviour
    def set_refund_behaviour(
        self: ChannelSimulator, count: int | None = None, **options: Any
    ) -> dict[str, Any]:
        unknown = set(options) - set(BEHAVIOUR_KEYS)
        if unknown:
            raise ValueError(f"unknown refund behaviour {sorted(unknown)}")
        if "outcome" in options and options["outcome"] not in (*OUTCOMES, "hold"):
            raise ValueError("outcome must be success, closed, abnormal or hold")
        with self._lock:
            if count is None:
                self._refund_default.update(options)
                return dict(self._refund_default)
            plan = {**self._refund_default, **options}
            self._refund_plans.extend(dict(plan) for _ in range(int(count)))
            return plan

    def _next_plan(self: ChannelSimulator) -> dict[str, Any]:
        return self._refund_plans.pop(0) if self._refund_plans else dict(self._refund_default)

    # ------------------------------------------------------------------ API
    def refund_route(
        self: ChannelSimulator, method: str, path: str, body: dict[str, Any], merchant: Merchant
    ) -> tuple[int, Any]:
        from .core import SimulatorError

        if method == "POST" and path == "/v3/refund/domestic/refunds":
            view, plan = self.create_refund(merchant.mchid, body)
            if plan and plan.get("after_accept") == "timeout":
                time.sleep(float(plan["hang_s"]))  # accepted; the caller gives up before the answer
            return 200, view
        if method == "GET" and (m := _REFUND.match(path)):
            return 200, self.refund_view(merchant.mchid, unquote(m.group(1)))
        raise SimulatorError(404, "NOT_FOUND", f"simulator does not implement {method} {path}")

    def create_refund(self: ChannelSimulator, mchid: str, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """Returns (the Refund object, the behaviour plan if the refund is new else None)."""
        from .core import SimulatorError

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
                same = (existing["_mchid"], existing["transaction_id"], existing["amount"]["refund"]) == (
                    mchid,
                    tx["transaction_id"],
                    amount["refund"],
                )
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
            plan = self._next_plan()
            refund = {
                "refund_id": "5030" + self._digits(25),
                "out_refund_no": no,
                "transaction_id": tx["transaction_id"],
                "out_trade_no": tx["out_trade_no"],
                "channel": "ORIGINAL",
                "user_received_account": "支付用户零钱",
                "create_time": self._now_rfc3339(),
                "status": "PROCESSING",
                "funds_account": "AVAILABLE",
                "amount": {
                    "total": tx["amount"]["total"],
                    "refund": amount["refund"],
                    "payer_total": tx["amount"]["payer_total"],
                    "payer_refund": amount["refund"],
                    "settlement_refund": amount["refund"],
                    "settlement_total": tx["amount"]["total"],
                    "discount_refund": 0,
                    "currency": "CNY",
                    "refund_fee": 0,
                    "from": [],
                },
                "promotion_detail": [],
                "_mchid": mchid,
                "_notify_url": body.get("notify_url") or order["notify_url"],
                "_plan": plan,
                "_reason": body.get("reason", ""),
            }
            self._refunds[no] = refund
            order["trade_state"] = "REFUND"
            tx["trade_state"] = "REFUND"
            tx["trade_state_desc"] = "转入退款"
        if plan["outcome"] != "hold":
            threading.Thread(
                target=self._settle_later, args=(no, plan), daemon=True, name=f"refund-{no[:8]}"
            ).start()
        return self._public_refund(refund), plan

    def _refundable_order(self: ChannelSimulator, mchid: str, body: dict[str, Any]) -> dict[str, Any]:
        from .core import SimulatorError

        key = None
        if body.get("transaction_id"):
            key = self._by_transaction_id.get(str(body["transaction_id"]))
        elif body.get("out_trade_no"):
            key = (mchid, str(body["out_trade_no"]))
        else:
            raise SimulatorError(400, "PARAM_ERROR", "transaction_id和out_trade_no必须二选一")
        order = self._orders.get(key) if key and key[0] == mchid else None
        if order is None or order.get("transaction") is None:
            raise SimulatorError(404, "RESOURCE_NOT_EXISTS", "订单不存在或未支付")
        return order

    def refund_view(self: ChannelSimulator, mchid: str, out_refund_no: str) -> dict[str, Any]:
        from .core import SimulatorError

        with self._lock:
            refund = self._refunds.get(out_refund_no)
            if refund is None or refund["_mchid"] != mchid:
                raise SimulatorError(404, "RESOURCE_NOT_EXISTS", "退款单不存在")
            return self._public_refund(refund)

    @staticmethod
    def _public_refund(refund: dict[str, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v) for k, v in refund.items() if not k.startswith("_")}

    # ------------------------------------------------------------------ outcomes and notifications
    def _settle_later(self: ChannelSimulator, no: str, plan: dict[str, Any]) -> None:
        if self._stopping.wait(float(plan["delay_s"]) * self.time_scale):
            return
        self.settle_refund(no, plan["outcome"])

    def settle_refund(
        self: ChannelSimulator, out_refund_no: str, outcome: str, *, notify: bool | None = None
    ) -> str:
        """Decide a refund (success | closed | abnormal) and notify (unless the plan drops it). ABNORMAL may
        later be settled again (e.g. success after a person fixed it)."""
        status = OUTCOMES[outcome]
        with self._lock:
            refund = self._refunds[out_refund_no]
            if refund["status"] in ("SUCCESS", "CLOSED"):
                return refund["status"]
            refund["status"] = status
            if status == "SUCCESS":
                refund["success_time"] = self._now_rfc3339()
            plan = refund["_plan"]
            merchant = self.merchant(refund["_mchid"])
            resource = self._refund_resource_of(refund)
        if notify if notify is not None else not plan.get("drop"):
            self._dispatch(
                merchant,
                refund["_notify_url"],
                resource,
                f"REFUND.{status}",
                duplicates=int(plan.get("duplicates") or 1),
            )
        return status

    def _refund_resource_of(self: ChannelSimulator, refund: dict[str, Any]) -> dict[str, Any]:
        return self.refund_resource(
            refund["_mchid"],
            refund["out_trade_no"],
            refund["transaction_id"],
            refund["out_refund_no"],
            refund["amount"]["refund"],
            refund["amount"]["total"],
            refund_status=refund["status"],
            refund_id=refund["refund_id"],
            success_time=refund.get("success_time"),
        )

    def refund_notification(
        self: ChannelSimulator, out_refund_no: str, **build: Any
    ) -> tuple[dict[str, str], bytes]:
        """The signed REFUND.<status> notification of a settled refund, for tests to deliver by hand."""
        with self._lock:
            refund = self._refunds[out_refund_no]
            if refund["status"] == "PROCESSING":
                raise ValueError(f"refund {out_refund_no} is still PROCESSING")
            resource = self._refund_resource_of(refund)
            mchid, status = refund["_mchid"], refund["status"]
        return self.build_notification(
            mchid, resource, event_type=f"REFUND.{status}", associated_data="refund", **build
        )

    def refunds(self: ChannelSimulator) -> list[dict[str, Any]]:
        with self._lock:
            return [self._public_refund(r) for r in self._refunds.values()]

    # ------------------------------------------------------------------ /_sim admin
    def refund_admin(self: ChannelSimulator, method: str, path: str, data: dict[str, Any]) -> tuple[int, Any]:
        from .core import SimulatorError

        if (method, path) == ("POST", "/_sim/refund-behaviour"):
            return 200, self.set_refund_behaviour(**data)
        if (method, path) == ("GET", "/_sim/refunds"):
            return 200, {"refunds": self.refunds()}
        if method == "POST" and (m := _SETTLE.match(path)):
            return 200, {"status": self.settle_refund(unquote(m.group(1)), str(data["outcome"]))}
        raise SimulatorError(404, "NOT_FOUND", f"no admin endpoint {method} {path}")
