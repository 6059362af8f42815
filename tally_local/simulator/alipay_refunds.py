"""Alipay refunds on the simulator (channel-spec §6.3, §6.4, §5.3): ``alipay.trade.refund``,
``alipay.trade.fastpay.refund.query`` and refund notifications: a desk composed with the Alipay desk (alipay.py),
working on its trades (``sim.alipay.refund_desk``; its public methods are reachable on ``sim.alipay``).

Behaviour per refund (``sim.alipay.set_refund_behaviour``):
    outcome      ``success`` | ``fail`` (accepted, never refunded: the query shows the refund without
                 refund_status, no notification) | ``hold`` (undecided until ``settle_refund``)
    delay_s      channel seconds from acceptance to the outcome, × ``time_scale``; ``success`` with
                 ``delay_s=0`` is decided before the answer (``fund_change=Y``), else ``fund_change=N``
    after_accept ``None`` | ``timeout``: the refund is made, the answer held ``hang_s`` wall-clock seconds
    reject       a sub_code: the request is refused (40004 Business Failed), nothing is refunded
    drop         no notification; ``duplicates``: concurrent copies of each notification
``count=N`` applies the behaviour to the next N new refunds, else it becomes the default.

Rules: the same out_request_no with the same amount answers the same refund (refunded once, §6.3); another
amount → ACQ.DISCORDANT_REPEAT_REQUEST; refunds beyond the paid amount → ACQ.REFUND_AMT_NOT_EQUAL_TOTAL;
an unpaid trade → ACQ.TRADE_STATUS_ERROR. A successful refund is notified (retried 4m/10m/10m/1h/2h/6h/15h
× time_scale) to the payment's notify_url: TRADE_SUCCESS (partial) or TRADE_CLOSED + gmt_close (fully
refunded) with ``refund_fee`` = cumulative refunded, ``gmt_refund`` (milliseconds), ``out_biz_no`` (§5.3).
The query for an unknown out_request_no answers code 10000 without refund data (§6.4).
"""

from __future__ import annotations

import time
from typing import Any

from . import kernel as k
from .alipay import AlipayDesk, GatewayMethod
from .faults import Behaviour
from .kernel import AlipayError

OUTCOMES = ("success", "fail", "hold")


def _check(options: dict[str, Any]) -> None:
    if "outcome" in options and options["outcome"] not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}")


def _detail_items(refund: dict[str, Any]) -> list[dict[str, str]]:
    """refund_detail_item_list (§6.3, §6.4: returned when query_options asks for it): the refund's fund channels,
    the payer's money and the merchant's discount (MDISCOUNT) apart; Σ amount = refund_amount."""
    split = refund["split"]
    items = [{"fund_channel": "ALIPAYACCOUNT", "amount": k.yuan(split["payer_refund"])}]
    if split["discount_refund"]:
        items.append({"fund_channel": "MDISCOUNT", "amount": k.yuan(split["discount_refund"])})
    return [{**i, "real_amount": i["amount"]} for i in items]


class AlipayRefundDesk:
    """Alipay refunds; the trades are the Alipay desk's, under its lock."""

    def __init__(self, alipay: AlipayDesk):
        self.alipay = alipay
        self._lock = alipay._lock
        self.refunds: dict[tuple[str, str], dict[str, Any]] = {}  # (owner, out_request_no) → refund
        self.behaviour = Behaviour(
            {
                "outcome": "success",
                "delay_s": 60.0,
                "after_accept": None,
                "hang_s": 1.0,
                "reject": None,
                "drop": False,
                "duplicates": 1,
            },
            _check,
        )

    def gateway_methods(self) -> dict[str, GatewayMethod]:
        return {
            "alipay.trade.refund": self.trade_refund,
            "alipay.trade.fastpay.refund.query": self.refund_query,
        }

    def set_refund_behaviour(self, count: int | None = None, **options: Any) -> dict[str, Any]:
        return self.behaviour.set(count, **options)

    def reset_refund_behaviour(self) -> None:
        self.behaviour.reset()

    # ------------------------------------------------------------------ alipay.trade.refund
    def trade_refund(self, owner: str, biz: dict[str, Any]) -> dict[str, Any]:
        amount = k.cents(biz.get("refund_amount"))
        no = str(biz.get("out_request_no") or "")
        if amount is None or amount <= 0 or not no or len(no) > 64:
            raise AlipayError("40004", "Business Failed", "ACQ.INVALID_PARAMETER", "参数无效")
        order = self.alipay._trade(owner, biz)
        hang = 0.0
        with self._lock:
            existing = self.refunds.get((owner, no))
            if existing is not None:
                if existing["trade_no"] != order["trade_no"] or existing["amount"] != amount:
                    raise AlipayError(
                        "40004", "Business Failed", "ACQ.DISCORDANT_REPEAT_REQUEST", "不一致的请求"
                    )
                return self._refund_answer(order, existing)  # the same out_request_no refunds once
            if order["status"] != "TRADE_SUCCESS" and not (
                order["status"] == "TRADE_CLOSED" and order.get("refunded")
            ):
                raise AlipayError("40004", "Business Failed", "ACQ.TRADE_STATUS_ERROR", "交易状态非法")
            plan = self.behaviour.next()
            if plan.get("reject"):
                raise AlipayError("40004", "Business Failed", str(plan["reject"]), "模拟拒绝退款")
            taken = sum(
                r["amount"]
                for r in self.refunds.values()
                if r["trade_no"] == order["trade_no"] and r["status"] != "FAIL"
            )
            if taken + amount > order["receipt"]:
                raise AlipayError(
                    "40004", "Business Failed", "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限"
                )
            refund = {
                "owner": owner,
                # R43: the merchant's discount (MDISCOUNT) comes back in proportion, never from the payer
                "split": k.coupon_refund_split(
                    order["total"],
                    order["total"] - order["receipt"],
                    order["total"] - order["receipt"],
                    amount,
                ),
                "out_request_no": no,
                "trade_no": order["trade_no"],
                "out_trade_no": order["out_trade_no"],
                "amount": amount,
                "status": "PROCESSING",
                "reason": str(biz.get("refund_reason") or ""),
                "plan": plan,
                "gmt_refund_pay": None,
            }
            self.refunds[(owner, no)] = refund
            if plan["outcome"] == "success" and float(plan["delay_s"]) == 0:
                self._decide(refund, "success")  # synchronous refund: fund_change=Y
            elif plan["outcome"] != "hold":
                self.alipay.kernel.after(
                    float(plan["delay_s"]),
                    self._settle,
                    owner,
                    no,
                    plan["outcome"],
                    name=f"alipay-refund-{no[:8]}",
                )
            if plan.get("after_accept") == "timeout":
                hang = float(plan["hang_s"])
            answer = self._refund_answer(order, refund)
        if refund["status"] == "SUCCESS":
            self._notify_refund(refund)
        if hang:
            time.sleep(hang)  # made; the caller gives up before the answer ("sent, outcome unknown")
        return answer

    def _refund_answer(self, order: dict[str, Any], refund: dict[str, Any]) -> dict[str, Any]:
        return {
            "code": "10000",
            "msg": "Success",
            "trade_no": order["trade_no"],
            "out_trade_no": order["out_trade_no"],
            "buyer_logon_id": "tal***@sim.com",
            "fund_change": "Y" if refund["status"] == "SUCCESS" else "N",
            "refund_fee": k.yuan(self._refunded(order["trade_no"])),
            "send_back_fee": k.yuan(refund["split"]["payer_refund"])
            if refund["status"] == "SUCCESS"
            else "0.00",
            **({"gmt_refund_pay": refund["gmt_refund_pay"]} if refund["gmt_refund_pay"] else {}),
        }

    def _refunded(self, trade_no: str) -> int:
        return sum(
            r["amount"]
            for r in self.refunds.values()
            if r["trade_no"] == trade_no and r["status"] == "SUCCESS"
        )

    # ------------------------------------------------------------------ alipay.trade.fastpay.refund.query
    def refund_query(self, owner: str, biz: dict[str, Any]) -> dict[str, Any]:
        no = str(biz.get("out_request_no") or "")
        if not no:
            raise AlipayError("40004", "Business Failed", "ACQ.INVALID_PARAMETER", "参数无效")
        order = self.alipay._trade(owner, biz)
        with self._lock:
            refund = self.refunds.get((owner, no))
            if refund is None or refund["trade_no"] != order["trade_no"]:
                return {"code": "10000", "msg": "Success"}  # unknown out_request_no: no refund data (§6.4)
            answer = {
                "code": "10000",
                "msg": "Success",
                "trade_no": order["trade_no"],
                "out_trade_no": order["out_trade_no"],
                "out_request_no": no,
                "total_amount": k.yuan(order["total"]),
                "refund_amount": k.yuan(refund["amount"]),
            }
            if refund["status"] == "SUCCESS":
                answer.update(
                    refund_status="REFUND_SUCCESS",
                    gmt_refund_pay=refund["gmt_refund_pay"],
                    send_back_fee=k.yuan(refund["split"]["payer_refund"]),
                )
                if "refund_detail_item_list" in (biz.get("query_options") or ()):
                    answer["refund_detail_item_list"] = _detail_items(refund)
            return answer

    # ------------------------------------------------------------------ outcomes and notifications
    def _settle(self, owner: str, no: str, outcome: str) -> None:
        self.settle_refund(no, outcome, owner=owner)

    def _decide(self, refund: dict[str, Any], outcome: str) -> bool:
        """Under the lock. True if the refund just succeeded."""
        if refund["status"] != "PROCESSING":
            return False
        if outcome == "success":
            refund["status"] = "SUCCESS"
            now = k.now_cst()
            refund["gmt_refund_pay"] = now.strftime("%Y-%m-%d %H:%M:%S")
            refund["gmt_refund"] = now.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            order = self.alipay.orders[(refund["owner"], refund["out_trade_no"])]
            order["refunded"] = self._refunded(refund["trade_no"])
            refund["cumulative"] = order["refunded"]
            if order["refunded"] >= order["total"]:
                order["status"] = "TRADE_CLOSED"  # fully refunded (§5.3)
            return True
        refund["status"] = "FAIL"
        return False

    def settle_refund(
        self, out_request_no: str, outcome: str, *, owner: str | None = None, notify: bool | None = None
    ) -> str:
        """Decide a refund (success | fail); a success is notified unless the plan drops it."""
        if outcome not in ("success", "fail"):
            raise ValueError("outcome must be success or fail")
        with self._lock:
            refund = self._find_refund(out_request_no, owner)
            succeeded = self._decide(refund, outcome)
        if succeeded and (notify if notify is not None else not refund["plan"].get("drop")):
            self._notify_refund(refund)
        return refund["status"]

    def _find_refund(self, out_request_no: str, owner: str | None) -> dict[str, Any]:
        found = [r for (o, no), r in self.refunds.items() if no == out_request_no and owner in (None, o)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} refunds with out_request_no {out_request_no}")
        return found[0]

    def refund_notification_params(self, out_request_no: str, *, owner: str | None = None) -> dict[str, str]:
        """The unsigned parameters of a succeeded refund's notification (§5.3)."""
        with self._lock:
            refund = self._find_refund(out_request_no, owner)
            if refund["status"] != "SUCCESS":
                raise ValueError(f"refund {out_request_no} is {refund['status']}: only a success is notified")
            order = self.alipay.orders[(refund["owner"], refund["out_trade_no"])]
            full = refund["cumulative"] >= order["total"]
        params = self.alipay.refund_params(
            order["app_id"],
            order["out_trade_no"],
            order["trade_no"],
            order["total"],
            refund["cumulative"],
            out_request_no,
        )
        params["auth_app_id"] = refund["owner"]
        params["gmt_refund"] = refund["gmt_refund"]
        if full:
            params["trade_status"] = "TRADE_CLOSED"
            params["gmt_close"] = refund["gmt_refund"][:19]
            for name in (
                "receipt_amount",
                "buyer_pay_amount",
                "invoice_amount",
                "point_amount",
                "fund_bill_list",
            ):
                params.pop(name, None)
        return params

    def refund_notification(self, out_request_no: str, *, owner: str | None = None) -> bytes:
        """The signed form body of a succeeded refund's notification, for tests to deliver by hand."""
        return self.alipay.build_notification(self.refund_notification_params(out_request_no, owner=owner))

    def _notify_refund(self, refund: dict[str, Any]) -> None:
        params = self.refund_notification_params(refund["out_request_no"], owner=refund["owner"])
        url = self.alipay.orders[(refund["owner"], refund["out_trade_no"])]["notify_url"]
        if url:
            self.alipay.notify(url, params, int(refund["plan"].get("duplicates") or 1))

    def refund_list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{k: v for k, v in r.items() if k != "plan"} for r in self.refunds.values()]
