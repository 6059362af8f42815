"""WeChat Pay v2 refunds on the simulator: ``POST /secapi/pay/refund``, ``POST /pay/refundquery`` and refund
notifications with ``req_info`` (channel-spec §4): a desk composed with the v2 desk (wechatpay_v2.py), working on
its orders (``sim.wechatpay_v2.refund_desk``; its public methods are reachable on ``sim.wechatpay_v2``).

Mutual TLS: ``sim.start_tls()`` opens an HTTPS listener with client certificates required (ssl.CERT_REQUIRED,
real certificates from ``_tls.py``) and ``issue_client_cert(mch_id)`` makes a merchant's API client certificate;
from then on that merchant's ``/secapi/`` calls must present it (another merchant's, or none, is refused). Other
merchants keep the plain-HTTP listener. Requests are verified with the API key (MD5 / HMAC-SHA256), answers
signed the same way.

Behaviour per refund (``sim.wechatpay_v2.set_refund_behaviour``), as the v3 refund simulator:
    outcome      ``success`` | ``closed`` | ``abnormal`` | ``hold`` (undecided until ``settle_refund``)
    delay_s      channel seconds from acceptance to the outcome, × ``time_scale``
    after_accept ``None`` | ``timeout``: the refund is made, the answer held ``hang_s`` wall-clock seconds
    reject       an err_code: the request is refused (result_code FAIL), nothing is refunded
    drop         no notification; ``duplicates``: concurrent copies of each notification
``count=N`` applies the behaviour to the next N new refunds, else it becomes the default.

Rules: the same out_refund_no with the same amounts answers the same refund; other amounts →
REFUND_FEE_MISMATCH; refunds (not closed) beyond the paid amount → ERROR "退款金额超过订单可退金额"; an
unknown / unpaid order → ORDERNOTEXIST; ``total_fee`` must equal the order's. Outcomes are notified
(retried on the §1.9 schedule × time_scale) to the request's notify_url (else the order's) with
``req_info`` = AES-256-ECB(md5(API key)) of ``<root>`` (refund_status SUCCESS / REFUNDCLOSE / CHANGE).
"""

from __future__ import annotations

from typing import Any

from . import kernel as k
from .delivery import DeliveryLog
from .faults import Behaviour
from .wechatpay_v2 import PathHandler, WeChatPayV2Desk

OUTCOMES = {"success": "SUCCESS", "closed": "REFUNDCLOSE", "abnormal": "CHANGE"}


def _check(options: dict[str, Any]) -> None:
    if "outcome" in options and options["outcome"] not in (*OUTCOMES, "hold"):
        raise ValueError("outcome must be success, closed, abnormal or hold")


class V2RefundDesk:
    """v2 refunds; the orders are the v2 desk's, under its lock."""

    def __init__(self, v2: WeChatPayV2Desk):
        self.v2 = v2
        self._lock = v2._lock
        self.orders = v2.orders
        self.refunds: dict[str, dict[str, Any]] = {}  # out_refund_no → refund
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
        self.refund_deliveries = DeliveryLog(v2.kernel.stopping)

    def paths(self) -> dict[str, PathHandler]:
        return {"/secapi/pay/refund": self._refund, "/pay/refundquery": self._refundquery}

    def set_refund_behaviour(self, count: int | None = None, **options: Any) -> dict[str, Any]:
        return self.behaviour.set(count, **options)

    def reset_refund_behaviour(self) -> None:
        self.behaviour.reset()

    def paid_order(self, mch_id: str, out_trade_no: str, total_fee: int, *, notify_url: str = "") -> str:
        """An order paid at WeChat (e.g. a JSAPI payment the merchant made elsewhere): known to the refund API,
        no notification sent. Returns its transaction_id."""
        with self._lock:
            order = self.orders.setdefault(
                (mch_id, out_trade_no),
                {
                    "mch_id": mch_id,
                    "sub_mch_id": "",
                    "owner": mch_id,
                    "out_trade_no": out_trade_no,
                    "total_fee": int(total_fee),
                    "notify_url": notify_url,
                    "code_url": "",
                    "trade_state": "NOTPAY",
                    "transaction_id": None,
                },
            )
            if not order["transaction_id"]:
                order.update(
                    transaction_id="42000" + self.v2.kernel.digits(23),
                    trade_state="SUCCESS",
                    cash_fee=order["total_fee"],
                )
            return order["transaction_id"]

    # ------------------------------------------------------------------ /secapi/pay/refund
    def _refund(self, owner: str, req: dict[str, str]) -> tuple[dict[str, str], float]:
        """(answer fields, seconds to hold the answer)."""
        no, total, fee = req.get("out_refund_no", ""), req.get("total_fee", ""), req.get("refund_fee", "")
        if not no or len(no) > 64 or not total.isdigit() or not fee.isdigit() or int(fee) <= 0:
            return _fail("PARAM_ERROR", "参数错误"), 0.0
        with self._lock:
            order = self._order_of(owner, req)
            if order is None or not order.get("transaction_id"):
                return _fail("ORDERNOTEXIST", "订单不存在"), 0.0
            existing = self.refunds.get(no)
            if existing is not None:
                if (existing["owner"], existing["transaction_id"], existing["refund_fee"]) != (
                    owner,
                    order["transaction_id"],
                    int(fee),
                ):
                    return _fail(
                        "REFUND_FEE_MISMATCH", "订单金额或退款金额与之前请求不一致，请核实后再试"
                    ), 0.0
                return self._refund_fields(existing), 0.0  # the same number refunds once
            if int(total) != order["total_fee"]:
                return _fail("PARAM_ERROR", "订单金额与原订单不一致"), 0.0
            plan = self.behaviour.next()
            if plan.get("reject"):
                return _fail(str(plan["reject"]), "模拟拒绝退款"), 0.0
            taken = sum(
                r["refund_fee"]
                for r in self.refunds.values()
                if r["transaction_id"] == order["transaction_id"] and r["status"] != "REFUNDCLOSE"
            )
            if taken + int(fee) > order.get("cash_fee", order["total_fee"]):
                return _fail("ERROR", "退款金额超过订单可退金额"), 0.0
            split = v2_refund_split(order, int(fee))  # the coupon comes back in proportion (R43)
            refund = {
                "owner": owner,
                "mch_id": req["mch_id"],
                "cash_fee": int(order.get("cash_fee", order["total_fee"])),
                "settlement_total_fee": order["total_fee"] - unsettled_fee(order),
                "split": split,
                "out_refund_no": no,
                "refund_id": "50000" + self.v2.kernel.digits(24),
                "transaction_id": order["transaction_id"],
                "out_trade_no": order["out_trade_no"],
                "total_fee": order["total_fee"],
                "refund_fee": int(fee),
                "status": "PROCESSING",
                "success_time": None,
                "plan": plan,
                "notify_url": req.get("notify_url") or order["notify_url"],
            }
            self.refunds[no] = refund
        if plan["outcome"] != "hold":
            self.v2.kernel.after(
                float(plan["delay_s"]), self.settle_refund, no, plan["outcome"], name=f"v2-refund-{no[:8]}"
            )
        hang = float(plan["hang_s"]) if plan.get("after_accept") == "timeout" else 0.0
        return self._refund_fields(refund), hang

    def _order_of(self, owner: str, req: dict[str, str]) -> dict[str, Any] | None:
        if req.get("transaction_id"):
            return next(
                (
                    o
                    for o in self.orders.values()
                    if o["owner"] == owner and o.get("transaction_id") == req["transaction_id"]
                ),
                None,
            )
        return self.orders.get((owner, req.get("out_trade_no", "")))

    @staticmethod
    def _refund_fields(refund: dict[str, Any]) -> dict[str, str]:
        split = refund["split"]
        return {
            "result_code": "SUCCESS",
            "transaction_id": refund["transaction_id"],
            "out_trade_no": refund["out_trade_no"],
            "out_refund_no": refund["out_refund_no"],
            "refund_id": refund["refund_id"],
            "refund_fee": str(refund["refund_fee"]),
            "settlement_refund_fee": str(split["settlement_refund"]),
            "total_fee": str(refund["total_fee"]),
            **_settlement_total(refund),
            "cash_fee": str(refund["cash_fee"]),
            "cash_refund_fee": str(split["payer_refund"]),
            **({"coupon_refund_fee": str(split["discount_refund"])} if split["discount_refund"] else {}),
        }

    # ------------------------------------------------------------------ /pay/refundquery
    def _refundquery(self, owner: str, req: dict[str, str]) -> tuple[dict[str, str], float]:
        return self._refund_status(owner, req), 0.0

    def _refund_status(self, owner: str, req: dict[str, str]) -> dict[str, str]:
        with self._lock:
            refund = self.refunds.get(req.get("out_refund_no", ""))
            if refund is None or refund["owner"] != owner:
                return _fail("REFUNDNOTEXIST", "退款订单查询失败")
            out = {
                "result_code": "SUCCESS",
                "transaction_id": refund["transaction_id"],
                "out_trade_no": refund["out_trade_no"],
                "total_fee": str(refund["total_fee"]),
                **_settlement_total(refund),
                "cash_fee": str(refund["cash_fee"]),
                "refund_count": "1",
                "out_refund_no_0": refund["out_refund_no"],
                "refund_id_0": refund["refund_id"],
                "refund_fee_0": str(refund["refund_fee"]),
                "settlement_refund_fee_0": str(refund["split"]["settlement_refund"]),
                "refund_status_0": refund["status"],
                "refund_channel_0": "ORIGINAL",
            }
            if refund["split"]["discount_refund"]:
                out["coupon_refund_fee_0"] = str(refund["split"]["discount_refund"])
                out["coupon_refund_count_0"] = "1"
            if refund["success_time"]:
                out["refund_success_time_0"] = refund["success_time"]
            return out

    # ------------------------------------------------------------------ outcomes and notifications
    def settle_refund(self, out_refund_no: str, outcome: str, *, notify: bool | None = None) -> str:
        """Decide a refund (success | closed | abnormal) and notify unless the plan drops it. CHANGE (abnormal)
        may later be settled again."""
        status = OUTCOMES[outcome]
        with self._lock:
            refund = self.refunds[out_refund_no]
            if refund["status"] in ("SUCCESS", "REFUNDCLOSE"):
                return refund["status"]
            refund["status"] = status
            if status == "SUCCESS":
                refund["success_time"] = k.cst_text()
            plan = refund["plan"]
        if (notify if notify is not None else not plan.get("drop")) and refund["notify_url"]:
            body = self.refund_notification_of(out_refund_no)
            duplicates = int(plan.get("duplicates") or 1)
            about = {"out_refund_no": out_refund_no}
            self.v2.notify(refund["notify_url"], lambda: body, duplicates, self.refund_deliveries, about)
        return status

    def refund_notification_of(self, out_refund_no: str) -> bytes:
        """The refund callback (req_info encrypted with the merchant's API key) of a decided refund."""
        with self._lock:
            r = self.refunds[out_refund_no]
            if r["status"] == "PROCESSING":
                raise ValueError(f"refund {out_refund_no} is still PROCESSING")
            fields = {
                "transaction_id": r["transaction_id"],
                "out_trade_no": r["out_trade_no"],
                "refund_id": r["refund_id"],
                "out_refund_no": r["out_refund_no"],
                "total_fee": str(r["total_fee"]),
                "settlement_total_fee": str(r["settlement_total_fee"]),
                "refund_fee": str(r["refund_fee"]),
                "settlement_refund_fee": str(r["split"]["settlement_refund"]),
                "refund_status": r["status"],
                "refund_recv_accout": "支付用户零钱",
                "refund_account": "REFUND_SOURCE_RECHARGE_FUNDS",
                "refund_request_source": "API",
            }
            if r["success_time"]:
                fields["success_time"] = r["success_time"]
            mch_id = r["mch_id"]
        return self.v2.refund_notification(mch_id, fields)

    def wait_refund_delivered(
        self, out_refund_no: str, timeout: float = 10.0, count: int = 1
    ) -> list[dict[str, Any]]:
        return self.refund_deliveries.wait(
            lambda d: d["out_refund_no"] == out_refund_no,
            lambda d: d["acknowledged"],
            what=out_refund_no,
            timeout=timeout,
            count=count,
        )

    def refund_list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{k: v for k, v in r.items() if k != "plan"} for r in self.refunds.values()]


def unsettled_fee(order: dict[str, Any]) -> int:
    """The order's NO_CASH (免充值) coupon: never settled to the merchant."""
    coupon = int(order["total_fee"]) - int(order.get("cash_fee", order["total_fee"]))
    return coupon if order.get("coupon_type") == "NO_CASH" else 0


def v2_refund_split(order: dict[str, Any], refund_fee: int) -> dict[str, int]:
    total = int(order["total_fee"])
    coupons = total - int(order.get("cash_fee", total))
    return k.coupon_refund_split(total, coupons, unsettled_fee(order), refund_fee)


def _settlement_total(refund: dict[str, Any]) -> dict[str, str]:
    """settlement_total_fee is sent only when a 免充值 coupon was used (channel-spec §4)."""
    if refund["settlement_total_fee"] == refund["total_fee"]:
        return {}
    return {"settlement_total_fee": str(refund["settlement_total_fee"])}


def _fail(code: str, text: str) -> dict[str, str]:
    return {"result_code": "FAIL", "err_code": code, "err_code_des": text}
