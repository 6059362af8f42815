"""WeChat Pay v2's trade bill (``POST /pay/downloadbill``, ``sim.wechatpay_v2.bills``), from the v2 desk's paid orders.

The request is the v2 signed XML (``bill_date`` YYYYMMDD, ``bill_type`` ALL, ``tar_type`` GZIP optional); the answer
is the file itself (the same ALL layout as v3's bill, built by ``bills.BillBook.bill``), gzip when asked, not
signed; or an error XML ``<return_code>FAIL</return_code><return_msg>No Bill Exist</return_msg>`` for a day without
rows. Never imports tally.*.

Faults (``sim.wechatpay_v2.bills.fault(kind)``): the trade-bill faults that exist on v2's wire:
``empty_nonzero_summary``, ``changed_header``, ``html_error``, ``wrong_summary``, ``volume_drop``, ``no_statement``
(No Bill Exist even with rows), ``mixed_encoding``, and ``statement_creating`` (``Bill Creating``). v2 sends no hash,
so ``wrong_hash`` has no v2 form.
"""

from __future__ import annotations

import datetime as dt
import gzip
from typing import Any

from . import kernel as k
from .bills import FAULTS as V3_FAULTS
from .bills import BillBook, _fee, refund_row
from .faults import FaultQueue
from .fundflow_bills import FundFlowBook
from .wechatpay_v2 import xml_of
from .wechatpay_v2_refunds import unsettled_fee

FAULTS = tuple(f for f in V3_FAULTS if f != "wrong_hash")
HTML = b"<!DOCTYPE html>\r\n<html><head><title>500 Internal Server Error</title></head></html>\r\n"


class V2BillBook(BillBook):
    """The v2 desk's trade bills: payments (``pay(..., time_end=…)`` places one in time)."""

    def __init__(self, v2: Any):  # noqa: D107 - no v3 desk: the rows come from the v2 orders
        self.v2 = v2
        self._faults = FaultQueue()
        self.requests: list[dict[str, str]] = []
        self.fundflow = V2FundFlowBook(self)  # POST /pay/downloadfundflow (R45)

    def fault(self, kind: str, count: int = 1) -> None:
        if kind not in FAULTS:
            raise ValueError(f"unknown v2 bill fault {kind!r}; one of {FAULTS}")
        self._faults.arm({"kind": kind}, count)

    def rows(self, mchid: str, bill_date: str) -> list[list[str]]:
        day = dt.date.fromisoformat(bill_date)
        with self.v2._lock:
            paid = [
                dict(o)
                for o in self.v2.orders.values()
                if o.get("owner") == str(mchid) and o.get("trade_state") == "SUCCESS" and o.get("time_end")
            ]
        rows = []
        for o in sorted(paid, key=lambda o: o["time_end"]):
            when = dt.datetime.strptime(o["time_end"], "%Y%m%d%H%M%S")
            if when.date() != day:
                continue
            total = o["total_fee"]
            coupons = total - int(o.get("cash_fee", total))
            settle = total - unsettled_fee(o)  # 应结订单金额 = 订单金额 − 非充值代金券金额 (R43)
            rows.append(
                [
                    when.strftime("%Y-%m-%d %H:%M:%S"),
                    self.v2.merchant(o["mch_id"]).appid,
                    o["mch_id"],
                    o.get("sub_mch_id") or "0",
                    "",
                    o["transaction_id"],
                    o["out_trade_no"],
                    "o" + o["transaction_id"][-27:],
                    "NATIVE",
                    "SUCCESS",
                    "OTHERS",
                    "CNY",
                    k.yuan(settle),
                    k.yuan(coupons),
                    "0",
                    "0",
                    "0.00",
                    "0.00",
                    "",
                    "",
                    "模拟商品",
                    "",
                    f"{_fee(settle):.5f}",
                    "0.60%",
                    k.yuan(total),
                    "0.00",
                    "",
                ]
            )
        rows += self._refund_rows(mchid, day)
        return rows

    def _refund_rows(self, mchid: str, day: dt.date) -> list[list[str]]:
        """The v2 desk's successful refunds decided on `day`: 退款金额 = settlement_refund_fee (R43)."""
        desk = self.v2.refund_desk
        with self.v2._lock:
            done = [
                dict(r)
                for r in desk.refunds.values()
                if r["owner"] == str(mchid)
                and r["status"] == "SUCCESS"
                and str(r.get("success_time") or "")[:10] == day.isoformat()
            ]
        rows = []
        for r in sorted(done, key=lambda r: r["success_time"]):
            split = r["split"]
            row = {
                **r,
                "refund": r["refund_fee"],
                "settle": split["settlement_refund"],
                "cash_coupon": split["cash_coupon_refund"],
                "refund_status": "SUCCESS",
            }
            appid = self.v2.merchant(r["mch_id"]).appid
            rows.append(refund_row(r["success_time"], appid, r["mch_id"], "0", row))
        return rows

    def downloadbill(self, owner: str, req: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """The answer of a verified ``/pay/downloadbill`` request (the desk checked mch_id and sign)."""
        self.requests.append({"mch_id": owner, "bill_date": req.get("bill_date", "")})

        def fail(message: str) -> tuple[int, dict[str, str], bytes]:
            return 200, {"Content-Type": "text/xml"}, xml_of({"return_code": "FAIL", "return_msg": message})

        try:
            day = dt.datetime.strptime(req.get("bill_date", ""), "%Y%m%d").date()
        except ValueError:
            return fail("invalid bill_date")
        if req.get("bill_type", "ALL") != "ALL":
            return fail("simulator serves bill_type=ALL only")
        if day >= k.now_cst().date():
            return fail("Bill Date Error")
        fault = self._take_fault()
        if fault == "statement_creating":
            return fail("Bill Creating")
        bill_date = day.isoformat()
        if fault == "no_statement" or (not self.rows(owner, bill_date) and fault is None):
            return fail("No Bill Exist")
        if fault == "html_error":
            return 200, {"Content-Type": "text/html"}, HTML
        data = self.bill(owner, bill_date, fault)
        if req.get("tar_type") == "GZIP":
            return 200, {"Content-Type": "application/x-gzip"}, gzip.compress(data)
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, data


class V2FundFlowBook(FundFlowBook):
    """The v2 desk's fund flow (``sim.wechatpay_v2.bills.fundflow``): ``POST /pay/downloadfundflow`` (signed
    HMAC-SHA256, account_type Basic|Operation|Fees; the desk asks for the merchant's API client certificate once
    one was issued) answers the 资金账单 file itself (gzip with tar_type=GZIP), the same layout and lag as v3's
    (``fundflow_bills.FundFlowBook``): each v2 payment's 应结订单金额 net of its 0.60 % fee credited on T+1. Error
    answers are XML ``return_code FAIL`` with ``No Bill Exist`` / ``Bill Creating``. The v3 desk's faults."""

    def __init__(self, v2_bills: V2BillBook):
        super().__init__(v2_bills)
        self.v2 = v2_bills.v2
        self.requests: list[dict[str, str]] = []

    def movements(self, mchid: str, day: dt.date) -> list[tuple[Any, ...]]:
        with self.v2._lock:
            paid = [
                dict(o)
                for o in self.v2.orders.values()
                if o.get("owner") == str(mchid) and o.get("trade_state") == "SUCCESS" and o.get("time_end")
            ]
        out = []
        for o in sorted(paid, key=lambda o: o["time_end"]):
            when = dt.datetime.strptime(o["time_end"], "%Y%m%d%H%M%S")
            if when.date() != day - dt.timedelta(days=1):
                continue
            coupon = int(o["total_fee"]) - int(o.get("cash_fee", o["total_fee"]))
            settle = int(o["total_fee"]) - (coupon if o.get("coupon_type") == "NO_CASH" else 0)
            fee = int(_fee(settle) * 100)
            memo = f"总金额{k.yuan(settle)}元;含手续费{k.yuan(fee)}元"
            out.append(
                ("交易", "收入", o["transaction_id"], o["out_trade_no"], settle - fee, fee, settle, memo)
            )
        return out

    def downloadfundflow(self, owner: str, req: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        self.requests.append(
            {
                "mch_id": owner,
                "bill_date": req.get("bill_date", ""),
                "account_type": req.get("account_type", ""),
            }
        )

        def fail(message: str) -> tuple[int, dict[str, str], bytes]:
            return 200, {"Content-Type": "text/xml"}, xml_of({"return_code": "FAIL", "return_msg": message})

        if req.get("sign_type") != "HMAC-SHA256":
            return fail("sign_type must be HMAC-SHA256")
        try:
            day = dt.datetime.strptime(req.get("bill_date", ""), "%Y%m%d").date()
        except ValueError:
            return fail("invalid bill_date")
        account = req.get("account_type", "")
        if account not in ("Basic", "Operation", "Fees"):
            return fail("invalid account_type")
        taken = self.faults.take()
        fault = taken["kind"] if taken else None
        if fault == "late_day" or day >= k.now_cst().date():
            return fail("Bill Creating")
        if account != "Basic" or (not self.movements(owner, day) and fault is None):
            return fail("No Bill Exist")
        if fault == "html_error":
            return 200, {"Content-Type": "text/html"}, HTML
        data = self.bill(owner, day, fault)
        if req.get("tar_type") == "GZIP":
            return 200, {"Content-Type": "application/x-gzip"}, gzip.compress(data)
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, data
