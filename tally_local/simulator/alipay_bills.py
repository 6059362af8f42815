"""Alipay trade bills of the simulator: `alipay.data.dataservice.bill.downloadurl.query` (bill_type=trade) and
the zip it points to (channel-spec.md §7), made from the simulator's own Alipay ledger (paid trades plus the
refunds it is told about).

Written from the spec, independently of tally.channels.bills_alipay (never imports tally.*), so the product's
parser is checked against a second reading of the format. The zip holds two GBK CSVs whose member names are
GBK too (no UTF-8 flag): `{PID}0156_{yyyyMMdd}_业务明细.csv` (`#` lines, 25 columns, a TAB after ids, refunds
negative, `#交易合计/#退款合计` trailers) and `{PID}0156_{yyyyMMdd}_业务明细(汇总).csv` (a 合计 row).

    sim.alipay.bills.add_refund(app_id, out_trade_no, refund_cent, out_request_no, refunded_at=None)
    sim.alipay.bills.zip(app_id, "2024-05-01")          -> bytes, the zip as served
    sim.alipay.bills.fault("wrong_summary")             # the next bill served misbehaves (count=1)

Faults: ``empty_nonzero_summary`` (no rows, the real trailers) · ``changed_header`` (a column renamed) ·
``html_error`` (an HTML error page served instead of the zip) · ``wrong_summary`` (one fen more in the
trade trailer's 商家实收) · ``volume_drop`` (only every 20th row, consistent trailers and 汇总) ·
``no_statement`` (isp.bill_not_exist even with rows) · ``mixed_encoding`` (one row written in UTF-8, the
rest GBK). A day without rows answers isp.bill_not_exist. Cross-midnight payments: ``sim.alipay.pay(…,
created_at="2024-04-30 23:59:58", paid_at="2024-05-01 00:00:02")`` — the bill day is the 完成时间's.
A payment it has and we lack: ``sim.alipay.pay(…, drop=True)`` (no notification).
"""

from __future__ import annotations

import datetime as dt
import io
import secrets
import threading
import zipfile
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from . import kernel as k
from .alipay import AlipayDesk, GatewayMethod
from .faults import FaultQueue
from .kernel import AlipayError

FEE_RATE = Decimal("0.0060")  # 0.60 %
FAULTS = (
    "empty_nonzero_summary",
    "changed_header",
    "html_error",
    "wrong_summary",
    "volume_drop",
    "no_statement",
    "mixed_encoding",
)
DOWNLOAD_PATH = "/downloadBillFile.resource"

HEADER = (
    "支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户,订单金额（元）,"
    "商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,券名称,商家红包消费金额（元）,"
    "卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注"
)
SUMMARY_HEADER = (
    "门店编号,门店名称,交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,支付宝优惠（元）,商家优惠（元）,"
    "卡消费金额（元）,服务费（元）,分润（元）,实收净额（元）"
)
RULE = "-" * 41


def _fee(cents: int) -> int:
    """The service fee in cents, 0.60 % rounded half up."""
    return int((Decimal(abs(cents)) * FEE_RATE).quantize(Decimal("1"), rounding=ROUND_HALF_UP))


def _csv(value: str) -> str:
    return f'"{value}"' if "," in value or '"' in value else value


class _GbkName(zipfile.ZipInfo):
    """A member name stored as GBK bytes without the UTF-8 flag, as Alipay's zips have them."""

    __slots__ = ()

    def _encodeFilenameFlags(self):  # noqa: N802 - zipfile's name
        return self.filename.encode("gbk"), self.flag_bits


class AlipayBillBook:
    """The Alipay desk's trade bills (``sim.alipay.bills``)."""

    def __init__(self, alipay: AlipayDesk):
        self.alipay = alipay
        self._lock = threading.Lock()
        self._refunds: list[dict[str, Any]] = []
        self._faults = FaultQueue()
        self._files: dict[str, bytes] = {}  # download token → the zip (or the fault's page)
        self.fundflow = AlipayFundFlowBook(self)  # bill_type=signcustomer (账务明细, R45)

    def gateway_methods(self) -> dict[str, GatewayMethod]:
        return {"alipay.data.dataservice.bill.downloadurl.query": self.downloadurl_query}

    # ------------------------------------------------------------------ inputs
    def add_refund(
        self,
        owner: str,
        out_trade_no: str,
        refund_cent: int,
        out_request_no: str,
        *,
        refunded_at: str | None = None,
    ) -> dict[str, Any]:
        with self.alipay._lock:
            order = self.alipay.orders.get((str(owner), out_trade_no))
        if (
            order is None
            or not order.get("trade_no")
            or order.get("status") not in ("TRADE_SUCCESS", "TRADE_FINISHED")
        ):
            raise ValueError(f"no paid Alipay trade {owner}/{out_trade_no}")
        discount = order["total"] - order["receipt"]  # the merchant's own discount (MDISCOUNT), never settled
        split = k.coupon_refund_split(order["total"], discount, discount, int(refund_cent))
        refund = {
            "owner": str(owner),
            "order": order,
            "refund": int(refund_cent),
            "settle": split["settlement_refund"],  # 商家实收 of the refund row (R43)
            "out_request_no": out_request_no,
            "at": refunded_at or k.cst_text(),
        }
        with self._lock:
            # A bill lists each refund once (one row per trade + 退款请求号): a refund it already lists is updated.
            for i, known in enumerate(self._refunds):
                if (known["owner"], known["order"]["out_trade_no"], known["out_request_no"]) == (
                    refund["owner"],
                    out_trade_no,
                    out_request_no,
                ):
                    self._refunds[i] = refund
                    break
            else:
                self._refunds.append(refund)
        return refund

    def fault(self, kind: str, count: int = 1) -> None:
        if kind not in FAULTS:
            raise ValueError(f"unknown Alipay bill fault {kind!r}; one of {FAULTS}")
        self._faults.arm({"kind": kind}, count)

    def clear_faults(self) -> None:
        self._faults.clear()

    def _take_fault(self) -> str | None:
        fault = self._faults.take()
        return fault["kind"] if fault else None

    # ------------------------------------------------------------------ the files
    def rows(self, owner: str, bill_date: str) -> list[list[str]]:
        """The day's 业务明细 rows (完成时间 on bill_date, Beijing), payments then refunds, in time order."""
        with self.alipay._lock:
            paid = [
                o
                for (m, _), o in self.alipay.orders.items()
                if m == str(owner)
                and o.get("status") in ("TRADE_SUCCESS", "TRADE_FINISHED")
                and o.get("gmt_payment", "").startswith(bill_date)
            ]
        rows = []
        for o in sorted(paid, key=lambda o: o["gmt_payment"]):
            rows.append(
                [
                    o["trade_no"] + "\t",
                    o["out_trade_no"] + "\t",
                    "交易",
                    o["subject"],
                    o.get("gmt_create") or o["gmt_payment"],
                    o["gmt_payment"],
                    "",
                    "",
                    "",
                    "",
                    "tal***@sim.com",
                    k.yuan(o["total"]),
                    k.yuan(o["receipt"]),
                    "0.00",
                    "0.00",
                    "0.00",
                    "0.00",
                    "0.00",
                    "",
                    "0.00",
                    "0.00",
                    "",
                    k.yuan(-_fee(o["receipt"])),
                    "0.00",
                    "",
                ]
            )
        with self._lock:
            refunds = [r for r in self._refunds if r["owner"] == str(owner) and r["at"].startswith(bill_date)]
        for r in sorted(refunds, key=lambda r: r["at"]):
            o = r["order"]
            rows.append(
                [
                    o["trade_no"] + "\t",
                    o["out_trade_no"] + "\t",
                    "退款",
                    o["subject"],
                    o.get("gmt_create") or o["gmt_payment"],
                    r["at"],
                    "",
                    "",
                    "",
                    "",
                    "tal***@sim.com",
                    k.yuan(o["total"]),
                    k.yuan(-int(r.get("settle", r["refund"]))),
                    "0.00",
                    "0.00",
                    "0.00",
                    "0.00",
                    "0.00",
                    "",
                    "0.00",
                    "0.00",
                    r["out_request_no"] + "\t",
                    k.yuan(_fee(int(r.get("settle", r["refund"])))),
                    "0.00",
                    "",
                ]
            )
        return rows

    def zip(self, owner: str, bill_date: str, fault: str | None = None) -> bytes:
        rows = self.rows(owner, bill_date)
        if fault == "volume_drop":
            rows = rows[::20]
        pid = "2088" + str(owner)[-12:].rjust(12, "0")  # a PID-looking account for the simulated app
        day = bill_date.replace("-", "")
        detail, summary = self._detail(pid, bill_date, rows, fault), self._summary(pid, rows)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            when = k.now_cst().timetuple()[:6]
            z.writestr(_GbkName(f"{pid}0156_{day}_业务明细(汇总).csv", date_time=when), summary)
            z.writestr(_GbkName(f"{pid}0156_{day}_业务明细.csv", date_time=when), detail)
        return out.getvalue()

    @staticmethod
    def _totals(rows: list[list[str]], kind: str) -> tuple[int, int]:
        picked = [r for r in rows if r[2] == kind]
        return len(picked), sum(int(Decimal(r[12]) * 100) for r in picked)

    def _detail(self, pid: str, bill_date: str, rows: list[list[str]], fault: str | None) -> bytes:
        start = dt.date.fromisoformat(bill_date)
        end = start + dt.timedelta(days=1)
        trades, trade_cent = self._totals(rows, "交易")
        refunds, refund_cent = self._totals(rows, "退款")
        if fault == "wrong_summary":
            trade_cent += 1
        header = HEADER.replace("商家实收（元）", "实收金额（元）") if fault == "changed_header" else HEADER
        lines = [
            "#支付宝业务明细查询",
            f"#账号：[{pid}0156]",
            f"#起始日期：[{start:%Y年%m月%d日} 00:00:00]   终止日期：[{end:%Y年%m月%d日} 00:00:00]",
            f"#{RULE}业务明细列表{RULE}",
            header,
        ]
        body = [] if fault == "empty_nonzero_summary" else [",".join(_csv(v) for v in r) for r in rows]
        trailer = [
            f"#{RULE}业务明细列表结束{RULE}",
            f"#交易合计：{trades}笔，商家实收共{k.yuan(trade_cent)}元，商家优惠共0.00元",
            f"#退款合计：{refunds}笔，商家实收退款共{k.yuan(refund_cent)}元，商家优惠退款共0.00元",
            f"#导出时间：[{k.now_cst():%Y年%m月%d日 %H:%M:%S}]",
        ]
        encoded = [(line + "\r\n").encode("gbk") for line in lines + body + trailer]
        if fault == "mixed_encoding" and body:
            encoded[len(lines)] = (body[0] + "\r\n").encode("utf-8")  # one row in UTF-8 among GBK
        return b"".join(encoded)

    def _summary(self, pid: str, rows: list[list[str]]) -> bytes:
        trades, trade_cent = self._totals(rows, "交易")
        refunds, refund_cent = self._totals(rows, "退款")
        ordered = sum(int(Decimal(r[11]) * 100) for r in rows if r[2] == "交易")
        fees = sum(int(Decimal(r[22]) * 100) for r in rows)
        received = trade_cent + refund_cent
        values = [
            str(trades),
            str(refunds),
            k.yuan(ordered),
            k.yuan(received),
            "0.00",
            "0.00",
            "0.00",
            k.yuan(fees),
            "0.00",
            k.yuan(received + fees),
        ]
        lines = [
            "#支付宝业务汇总查询",
            f"#账号：[{pid}0156]",
            SUMMARY_HEADER,
            ",".join(["", "", *values]),
            ",".join(["合计", "", *values]),
            f"#导出时间：[{k.now_cst():%Y年%m月%d日 %H:%M:%S}]",
        ]
        return "".join(line + "\r\n" for line in lines).encode("gbk")

    # ------------------------------------------------------------------ the API
    def downloadurl_query(self, owner: str, biz: dict[str, Any]) -> dict[str, Any]:
        """The business object of the gateway's answer (signed by the gateway like every answer)."""
        bill_type, bill_date = str(biz.get("bill_type") or ""), str(biz.get("bill_date") or "")
        if bill_type == "signcustomer":
            return self.fundflow.downloadurl_query(owner, bill_date)
        if bill_type != "trade":
            raise AlipayError(
                "40004", "Business Failed", "isp.bill_type_not_support", "simulator serves trade only"
            )
        try:
            day = dt.date.fromisoformat(bill_date)
        except ValueError:
            raise AlipayError(
                "40002", "Invalid Arguments", "isv.invalid-arguments", "bill_date格式错误"
            ) from None
        if day >= k.now_cst().date():
            raise AlipayError(
                "40004", "Business Failed", "isp.bill_not_exist", "账单不存在"
            )  # not before T+1
        fault = self._take_fault()
        if fault == "no_statement" or (not self.rows(owner, bill_date) and fault is None):
            raise AlipayError("40004", "Business Failed", "isp.bill_not_exist", "账单不存在")
        if fault == "html_error":
            data = b"<!DOCTYPE html>\r\n<html><head><title>502 Bad Gateway</title></head><body>Tengine</body></html>\r\n"
        else:
            data = self.zip(owner, bill_date, fault)
        token = secrets.token_hex(16)
        with self._lock:
            self._files[token] = data
        name = f"{owner}_{bill_date.replace('-', '')}.csv.zip"
        url = (
            f"{self.alipay.kernel.url}{DOWNLOAD_PATH}?bizType=trade&userId={owner}&fileType=csv.zip"
            f"&bizDates={bill_date.replace('-', '')}&downloadFileName={name}&token={token}"
        )
        return {"code": "10000", "msg": "Success", "bill_download_url": url}

    def download(self, query: dict[str, str]) -> bytes | None:
        """The file behind a download URL, once (the real URL is valid for 30 s); None when unknown or used."""
        with self._lock:
            return self._files.pop(query.get("token", ""), None)


# ---------------------------------------------------------------------- the fund flow (账务明细, signcustomer)
FUNDFLOW_FAULTS = (
    "drop_credit",
    "fee_off_by_one",
    "late_day",
    "html_error",
    "wrong_summary",
    "empty_nonzero_summary",
)
FUNDFLOW_HEADER = "账务流水号,业务流水号,商户订单号,商品名称,发生时间,对方账号,收入金额（+元）,支出金额（-元）,账户余额（元）,交易渠道,业务类型,备注"


class AlipayFundFlowBook:
    """The merchant's Alipay balance as it moved (``sim.alipay.bills.fundflow``), from the trade bill's own trades:
    each payment's 商家实收 credited at payment (在线支付, 收入) and its 0.60 % service fee debited with it (收费,
    支出); each refund debited the day it is made (交易退款, 支出) and the fee on it given back (收费, 收入). Alipay
    settles into the balance at once: the lag is T for everything. A day without movements answers
    isp.bill_not_exist.

    Faults (``fault(kind)``): ``drop_credit`` (the first credit left out, trailers consistent), ``fee_off_by_one``
    (the first fee one fen more), ``late_day`` (isp.bill_not_exist although the day has movements: not out yet),
    ``html_error``, ``wrong_summary`` (one fen more in the income trailer), ``empty_nonzero_summary`` (no rows,
    the real trailers)."""

    def __init__(self, bills: AlipayBillBook):
        self.bills = bills
        self.faults = FaultQueue()

    def fault(self, kind: str, count: int = 1) -> None:
        if kind not in FUNDFLOW_FAULTS:
            raise ValueError(f"unknown Alipay fund-flow fault {kind!r}; one of {FUNDFLOW_FAULTS}")
        self.faults.arm({"kind": kind}, count)

    def movements(self, owner: str, bill_date: str) -> list[tuple[str, str, str, str, str, int, str]]:
        """(time, trade_no, out_trade_no, subject, 业务类型, signed cents, memo) of the day, in time order."""
        out = []
        for row in self.bills.rows(owner, bill_date):
            trade_no, otn, kind, subject = row[0].strip(), row[1].strip(), row[2], row[3]
            received, fee = int(Decimal(row[12]) * 100), int(Decimal(row[22]) * 100)
            when = row[5]
            if kind == "交易":
                out.append((when, trade_no, otn, subject, "在线支付", received, ""))
                if fee:
                    out.append((when, trade_no, otn, subject, "收费", -abs(fee), f"服务费[{trade_no}]"))
            else:
                out.append((when, trade_no, otn, subject, "交易退款", received, row[21].strip()))
                if fee:
                    out.append((when, trade_no, otn, subject, "收费", abs(fee), f"服务费退回[{trade_no}]"))
        return sorted(out, key=lambda m: m[0])

    def detail(self, owner: str, bill_date: str, fault: str | None) -> bytes:
        moves = self.movements(owner, bill_date)
        if fault == "drop_credit":
            first = next((i for i, m in enumerate(moves) if m[4] == "在线支付"), None)
            if first is not None:
                moves.pop(first)
        elif fault == "fee_off_by_one":
            first = next((i for i, m in enumerate(moves) if m[4] == "收费" and m[5] < 0), None)
            if first is not None:
                moves[first] = (*moves[first][:5], moves[first][5] - 1, moves[first][6])
        pid = "2088" + str(owner)[-12:].rjust(12, "0")
        start = dt.date.fromisoformat(bill_date)
        end = start + dt.timedelta(days=1)
        balance, rows = 10_000_00, []
        for i, (when, trade_no, otn, subject, kind, cents, memo) in enumerate(moves):
            balance += cents
            rows.append(
                [
                    f"{start:%Y%m%d}{i + 1:06d}\t",
                    trade_no + "\t",
                    otn + "\t",
                    subject + "\t",
                    when,
                    ("tal***@sim.com" if kind != "收费" else "") + "\t",
                    k.yuan(cents) if cents > 0 else "0.00",
                    k.yuan(cents) if cents < 0 else "0.00",
                    k.yuan(balance),
                    "支付宝",
                    kind,
                    memo,
                ]
            )
        income = [m[5] for m in moves if m[5] > 0]
        expense = [m[5] for m in moves if m[5] < 0]
        income_cent = sum(income) + (1 if fault == "wrong_summary" else 0)
        lines = [
            "#支付宝账务明细查询",
            f"#账号：[{pid}0156]",
            f"#起始日期：[{start:%Y年%m月%d日} 00:00:00]   终止日期：[{end:%Y年%m月%d日} 00:00:00]",
            f"#{RULE}账务明细列表{RULE}",
            FUNDFLOW_HEADER,
            *([] if fault == "empty_nonzero_summary" else [",".join(_csv(v) for v in r) for r in rows]),
            f"#{RULE}账务明细列表结束{RULE}",
            f"#支出合计：{len(expense)}笔，共{k.yuan(sum(expense))}元",
            f"#收入合计：{len(income)}笔，共{k.yuan(income_cent)}元",
            f"#导出时间：[{end:%Y年%m月%d日} 05:46:49]",  # fixed: the same day's file is the same bytes
        ]
        return "".join(line + "\r\n" for line in lines).encode("gbk")

    def zip(self, owner: str, bill_date: str, fault: str | None = None) -> bytes:
        pid = "2088" + str(owner)[-12:].rjust(12, "0")
        day = bill_date.replace("-", "")
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            when = k.now_cst().timetuple()[:6]
            z.writestr(
                _GbkName(f"{pid}0156_{day}_账务明细.csv", date_time=when),
                self.detail(owner, bill_date, fault),
            )
        return out.getvalue()

    def downloadurl_query(self, owner: str, bill_date: str) -> dict[str, Any]:
        try:
            day = dt.date.fromisoformat(bill_date)
        except ValueError:
            raise AlipayError(
                "40002", "Invalid Arguments", "isv.invalid-arguments", "bill_date格式错误"
            ) from None
        taken = self.faults.take()
        fault = taken["kind"] if taken else None
        if fault == "late_day" or day >= k.now_cst().date():
            raise AlipayError("40004", "Business Failed", "isp.bill_not_exist", "账单不存在")
        if not self.movements(owner, bill_date) and fault is None:
            raise AlipayError("40004", "Business Failed", "isp.bill_not_exist", "账单不存在")
        if fault == "html_error":
            data = b"<!DOCTYPE html>\r\n<html><head><title>502 Bad Gateway</title></head><body>Tengine</body></html>\r\n"
        else:
            data = self.zip(owner, bill_date, fault)
        token = secrets.token_hex(16)
        with self.bills._lock:
            self.bills._files[token] = data
        name = f"{owner}_{bill_date.replace('-', '')}.csv.zip"
        url = (
            f"{self.bills.alipay.kernel.url}{DOWNLOAD_PATH}?bizType=signcustomer&userId={owner}&fileType=csv.zip"
            f"&bizDates={bill_date.replace('-', '')}&downloadFileName={name}&token={token}"
        )
        return {"code": "10000", "msg": "Success", "bill_download_url": url}
