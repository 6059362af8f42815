"""Trade bills (交易账单) of the channel simulator: `GET /v3/bill/tradebill` and the download URL
(channel-spec.md §3), made from the simulator's own paid orders plus refunds it is told about (each refund once, however
often it is told).

Written from the spec, independently of tally.channels.bills_wechatpay (never imports tally.*), so the
product's parser is checked against a second reading of the format.

    sim.bills.add_refund(mchid, out_trade_no, out_refund_no, refund_cent, success_time=None)
    sim.bills.bill(mchid, "2024-05-01")            -> bytes (the decompressed ALL bill, UTF-8 + BOM, CRLF)
    sim.bills.fault("empty_nonzero_summary")       # the next bill served misbehaves (count=1)

Faults: ``empty_nonzero_summary`` (no rows, the real summary) · ``changed_header`` (a column renamed) ·
``column_added`` / ``column_moved`` / ``summary_line_added`` (layout drift: the recon canary) ·
``html_error`` (an HTML error page served as the file, its hash announced) · ``wrong_summary`` (one fen
more in 应结订单总金额) · ``volume_drop`` (only every 20th row, a consistent summary) · ``wrong_hash``
(hash_value of other bytes) · ``statement_creating`` (400 STATEMENT_CREATING) · ``no_statement``
(400 NO_STATEMENT_EXIST even with rows) · ``mixed_encoding`` (one row written in GBK, the rest UTF-8).
A day without rows answers 400 NO_STATEMENT_EXIST, as WeChat Pay does.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import secrets
import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from . import kernel as k
from .faults import FaultQueue
from .fundflow_bills import FundFlowBook
from .kernel import CST, SimulatorError
from .wechatpay_v3 import WeChatPayV3Desk, refund_split

FEE_RATE = k.WECHAT_FEE_RATE
FAULTS = (
    "empty_nonzero_summary",
    "changed_header",
    "html_error",
    "wrong_summary",
    "volume_drop",
    "wrong_hash",
    "statement_creating",
    "no_statement",
    "mixed_encoding",
    # layout drift (the canary, docs/recon.md "Bill layouts"): the bill stays consistent, its shape changes
    "column_added",
    "column_moved",
    "summary_line_added",
)
DRIFT_COLUMN = "优惠标签"  # column_added: a column the real layouts do not have, at the end
DRIFT_SUMMARY = ("营销总金额", "`0.00")  # summary_line_added: a second summary line after the known one

HEADER = (
    "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,"
    "应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,"
    "手续费,费率,订单金额,申请退款金额,费率备注"
)
SUMMARY = "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额"


@dataclass
class RawBody:
    """An answer that is not JSON (the bill file): sent as-is, unsigned (§3.1 step 2)."""

    data: bytes
    content_type: str = "application/octet-stream"


_fee = k.wechat_fee  # the fee in yuan, rounded half up to the fen (written with 5 decimals)
_day_of = k.china_day


def _clock(rfc3339: str) -> str:
    return dt.datetime.fromisoformat(rfc3339).astimezone(CST).strftime("%Y-%m-%d %H:%M:%S")


def refund_row(when: str, appid: str, mchid: str, sub_mchid: str, r: dict[str, Any]) -> list[str]:
    """One REFUND row of the ALL layout (v3 and v2 bills): 退款金额 is the settlement refund (申请退款金额 −
    非充值代金券退款金额), 充值券退款金额 the CASH coupons' share, 申请退款金额 the refund; the fee given back
    follows the settlement refund as the payment's fee follows 应结订单金额."""
    settle = int(r.get("settle", r["refund"]))
    return [
        when,
        appid,
        mchid,
        sub_mchid,
        "",
        r["transaction_id"],
        r["out_trade_no"],
        "",
        "NATIVE",
        "REFUND",
        "OTHERS",
        "CNY",
        "0.00",
        "0.00",
        r["refund_id"],
        r["out_refund_no"],
        k.yuan(settle),
        k.yuan(int(r.get("cash_coupon", 0))),
        "ORIGINAL",
        r["refund_status"],
        "模拟商品",
        "",
        f"{-_fee(settle):.5f}",
        "0.60%",
        "0.00",
        k.yuan(r["refund"]),
        "",
    ]


class BillBook:
    """The v3 desk's trade bills (``sim.bills``)."""

    def __init__(self, v3: WeChatPayV3Desk):
        self.v3 = v3
        self._lock = threading.Lock()
        self._refunds: list[dict[str, Any]] = []
        self._faults = FaultQueue()
        self._files: dict[str, bytes] = {}  # download token → gzip bytes
        self.fundflow = FundFlowBook(self)  # GET /v3/bill/fundflowbill (fundflow_bills.py, R45)
        self.refund_desk: Any = (
            None  # the v3 refund desk (its successful refunds are in the bill); set by the simulator
        )

    # ------------------------------------------------------------------ inputs
    def add_refund(
        self,
        mchid: str,
        out_trade_no: str,
        out_refund_no: str,
        refund_cent: int,
        *,
        success_time: str | None = None,
        refund_status: str = "SUCCESS",
    ) -> dict[str, Any]:
        order = self.v3.get_order(mchid, out_trade_no)
        tx = (order.get("transaction") or {}).get("transaction_id")
        if not tx:
            raise SimulatorError(400, "ORDER_NOT_PAID", "订单未支付")
        split = refund_split(order["transaction"], int(refund_cent))  # as the refund desk answers (R43)
        refund = {
            "mchid": str(mchid),
            "out_trade_no": out_trade_no,
            "transaction_id": tx,
            "out_refund_no": out_refund_no,
            "refund_id": "5030" + secrets.token_hex(12)[:25],
            "refund": int(refund_cent),
            "settle": split["settlement_refund"],  # 退款金额 = 申请退款金额 − 非充值代金券退款金额
            "cash_coupon": split["cash_coupon_refund"],  # 充值券退款金额
            "total": order["amount"]["total"],
            "appid": order["appid"],
            "refund_status": refund_status,
            "success_time": success_time or k.now_cst().isoformat(timespec="seconds"),
        }
        with self._lock:
            # A bill lists each refund once (one row per 商户退款单号): telling the book about a refund it
            # already lists updates that row (its state as of the bill), keeping the channel's refund id.
            for i, known in enumerate(self._refunds):
                if known["mchid"] == refund["mchid"] and known["out_refund_no"] == out_refund_no:
                    refund["refund_id"] = known["refund_id"]
                    self._refunds[i] = refund
                    break
            else:
                self._refunds.append(refund)
        return refund

    def fault(self, kind: str, count: int = 1) -> None:
        if kind not in FAULTS:
            raise ValueError(f"unknown bill fault {kind!r}; one of {FAULTS}")
        self._faults.arm({"kind": kind}, count)

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self) -> str | None:
        fault = self._faults.take()
        return fault["kind"] if fault else None

    # ------------------------------------------------------------------ the file
    def rows(self, mchid: str, bill_date: str) -> list[list[str]]:
        day = dt.date.fromisoformat(bill_date)
        with self.v3._lock:
            paid = [
                o["transaction"]
                for (m, _), o in self.v3._orders.items()
                if m == str(mchid) and o.get("transaction")
            ]
        rows = []
        for t in sorted(paid, key=lambda t: t["success_time"]):
            if _day_of(t["success_time"]) != day:
                continue
            total = t["amount"]["total"]
            coupons = sum(int(p["amount"]) for p in t.get("promotion_detail") or ())
            nocash = sum(int(p["amount"]) for p in t.get("promotion_detail") or () if p["type"] == "NOCASH")
            settle = total - nocash  # 应结订单金额 = 订单金额 − 免充值代金券金额 (R43)
            rows.append(
                [
                    _clock(t["success_time"]),
                    t["appid"],
                    t["mchid"],
                    "0",
                    "",
                    t["transaction_id"],
                    t["out_trade_no"],
                    t["payer"]["openid"],
                    t["trade_type"],
                    "SUCCESS",
                    t["bank_type"],
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
                    t.get("attach", ""),
                    f"{_fee(settle):.5f}",
                    "0.60%",
                    k.yuan(total),
                    "0.00",
                    "",
                ]
            )
        with self._lock:
            told = [r for r in self._refunds if r["mchid"] == str(mchid)]
        known = {r["out_refund_no"] for r in told}
        made = self.refund_desk.settled(str(mchid)) if self.refund_desk is not None else []
        refunds = [
            r
            for r in told + [r for r in made if r["out_refund_no"] not in known]
            if _day_of(r["success_time"]) == day
        ]
        for r in refunds:
            rows.append(refund_row(_clock(r["success_time"]), r["appid"], r["mchid"], "0", r))
        return rows

    def bill(self, mchid: str, bill_date: str, fault: str | None = None) -> bytes:
        rows = self.rows(mchid, bill_date)
        if fault == "volume_drop":
            rows = rows[::20]
        summary = self._summary(rows)
        if fault == "wrong_summary":
            summary[1] = k.yuan(int(Decimal(summary[1]) * 100) + 1)
        if fault == "empty_nonzero_summary":
            rows = []
        header = HEADER.replace("应结订单金额", "结算金额") if fault == "changed_header" else HEADER
        cols = header.split(",")
        if fault == "column_added":
            cols, rows = [*cols, DRIFT_COLUMN], [[*r, ""] for r in rows]
        if fault == "column_moved":  # 商户订单号 before 微信订单号
            i, j = cols.index("微信订单号"), cols.index("商户订单号")
            order = list(range(len(cols)))
            order[i], order[j] = j, i
            cols, rows = [cols[x] for x in order], [[r[x] for x in order] for r in rows]
        lines = [",".join(cols).encode()] + [",".join("`" + v for v in r).encode() for r in rows]
        if fault == "mixed_encoding" and len(lines) > 1:
            lines[1] = lines[1].decode().encode("gbk")
        lines += [SUMMARY.encode(), ",".join("`" + v for v in summary).encode()]
        if fault == "summary_line_added":
            lines += [x.encode() for x in DRIFT_SUMMARY]
        return b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n"

    @staticmethod
    def _summary(rows: list[list[str]]) -> list[str]:
        def total(i: int) -> Decimal:
            return sum((Decimal(r[i]) for r in rows), Decimal("0"))

        return [
            str(len(rows)),
            f"{total(12):.2f}",
            f"{total(16):.2f}",
            f"{total(17):.2f}",
            f"{total(22):.2f}",
            f"{total(24):.2f}",
            f"{total(25):.2f}",
        ]

    # ------------------------------------------------------------------ the API
    def tradebill(self, mchid: str, query: dict[str, str]) -> dict[str, str]:
        bill_date = query.get("bill_date", "")
        try:
            day = dt.date.fromisoformat(bill_date)
        except ValueError:
            raise SimulatorError(400, "PARAM_ERROR", "bill_date格式错误") from None
        if query.get("bill_type", "ALL") != "ALL":
            raise SimulatorError(400, "PARAM_ERROR", "simulator serves bill_type=ALL only")
        if day >= k.now_cst().date() + dt.timedelta(days=1):
            raise SimulatorError(400, "PARAM_ERROR", "账单日期不能是未来")
        fault = self._take_fault()
        if fault == "statement_creating":
            raise SimulatorError(400, "STATEMENT_CREATING", "账单生成中")
        if fault == "no_statement" or (not self.rows(mchid, bill_date) and fault is None):
            raise SimulatorError(400, "NO_STATEMENT_EXIST", "请求的账单文件不存在")
        if fault == "html_error":
            data = (
                b"<!DOCTYPE html>\r\n<html><head><title>500 Internal Server Error</title></head></html>\r\n"
            )
        else:
            data = self.bill(mchid, bill_date, fault)
        digest = hashlib.sha1(b"other bytes" if fault == "wrong_hash" else data).hexdigest()  # noqa: S324
        token = secrets.token_urlsafe(16)
        with self._lock:
            self._files[token] = data if fault == "html_error" else gzip.compress(data)
        return {
            "hash_type": "SHA1",
            "hash_value": digest,
            "download_url": f"{self.v3.kernel.url}/v3/billdownload/file?token={token}&tartype=gzip",
        }

    def download(self, query: dict[str, str]) -> RawBody:
        with self._lock:
            data = self._files.pop(query.get("token", ""), None)  # one download per URL
        if data is None:
            raise SimulatorError(400, "INVALID_REQUEST", "下载链接已失效")
        return RawBody(data, "application/octet-stream")

    def route(self, method: str, path: str, query: dict[str, str], mchid: str) -> tuple[int, Any]:
        if method == "GET" and path == "/v3/bill/tradebill":
            return 200, self.tradebill(mchid, query)
        if method == "GET" and path == "/v3/bill/fundflowbill":
            return 200, self.fundflow.fundflowbill(mchid, query)
        if method == "GET" and path == "/v3/billdownload/file":
            return 200, self.download(query)
        raise SimulatorError(404, "NOT_FOUND", f"simulator does not implement {method} {path}")
