"""WeChat Pay fund-flow bills (资金账单) of the channel simulator: ``GET /v3/bill/fundflowbill`` (BASIC account)
and the same one-time download URL as the trade bill, built from what the simulator paid out.

Written from the published layout (docs/settlement.md §2), never importing tally.*: a header, one row per
balance movement with every value behind a backtick, a summary. The settlement lag is WeChat's default: a
payment's money, net of its fee, is credited on T+1 (业务类型 交易, 收入, memo "总金额X元;含手续费Y元"); a
refund is debited on T, net of the fee given back (退款, 支出, memo "退款总金额X元;含手续费Y元"). A day without
movements answers 400 NO_STATEMENT_EXIST.

Faults (``sim.bills.fundflow_fault(kind)``): ``drop_credit`` (the first credit left out, summary consistent),
``fee_off_by_one`` (the first credit's fee one fen more, its amount one fen less, memo consistent),
``late_day`` (400 STATEMENT_CREATING: the day's bill not out yet), ``html_error``, ``wrong_summary`` (one fen more
in 收入金额), ``empty_nonzero_summary`` (no rows, the real summary).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from decimal import Decimal
from typing import Any

from . import kernel as k
from .faults import FaultQueue
from .kernel import SimulatorError

# column_added: layout drift, a column the real layout does not have (the recon layout canary)
FAULTS = (
    "drop_credit",
    "fee_off_by_one",
    "late_day",
    "html_error",
    "wrong_summary",
    "empty_nonzero_summary",
) + ("column_added",)
HEADER = "记账时间,微信支付业务单号,资金流水单号,业务名称,业务类型,收支类型,收支金额(元),账户结余(元),资金变更提交申请人,备注,业务凭证号"
SUMMARY = "资金流水总笔数,收入笔数,收入金额,支出笔数,支出金额"


def _cents(yuan: Decimal) -> int:
    return int(yuan * 100)


class FundFlowBook:
    """What ``BillBook`` (sim.bills) paid out, as the merchant's BASIC account moved."""

    def __init__(self, bills: Any):
        self.bills = bills
        self.faults = FaultQueue()

    def fault(self, kind: str, count: int = 1) -> None:
        if kind not in FAULTS:
            raise ValueError(f"unknown fund-flow fault {kind!r}; one of {FAULTS}")
        self.faults.arm({"kind": kind}, count)

    def movements(self, mchid: str, day: dt.date) -> list[tuple[Any, ...]]:
        """(time, business no, type, direction, …): credits of day−1's payments, debits of day's refunds."""
        v3 = self.bills.v3
        with v3._lock:
            paid = [
                o["transaction"]
                for (m, _), o in v3._orders.items()
                if m == str(mchid) and o.get("transaction")
            ]
        out = []
        for t in sorted(paid, key=lambda t: t["success_time"]):
            if k.china_day(t["success_time"]) != day - dt.timedelta(days=1):
                continue
            nocash = sum(int(p["amount"]) for p in t.get("promotion_detail") or () if p["type"] == "NOCASH")
            total = (
                t["amount"]["total"] - nocash
            )  # 应结订单金额: what is settled (R43), as the trade bill writes it
            fee = _cents(k.wechat_fee(total))
            memo = f"总金额{k.yuan(total)}元;含手续费{k.yuan(fee)}元"
            out.append(
                ("交易", "收入", t["transaction_id"], t["out_trade_no"], total - fee, fee, total, memo)
            )
        with self.bills._lock:
            refunds = [
                r
                for r in self.bills._refunds
                if r["mchid"] == str(mchid)
                and r["refund_status"] == "SUCCESS"
                and k.china_day(r["success_time"]) == day
            ]
        for r in refunds:
            settle = int(r.get("settle", r["refund"]))  # what leaves the account: the settlement refund (R43)
            fee = _cents(k.wechat_fee(settle))
            memo = f"退款总金额{k.yuan(settle)}元;含手续费{k.yuan(fee)}元"
            out.append(
                (
                    "退款",
                    "支出",
                    r["refund_id"],
                    r["out_refund_no"],
                    settle - fee,
                    fee,
                    settle,
                    memo,
                )
            )
        return out

    def bill(self, mchid: str, day: dt.date, fault: str | None) -> bytes:
        moves = self.movements(mchid, day)
        if fault in ("drop_credit", "fee_off_by_one"):
            first = next((i for i, m in enumerate(moves) if m[1] == "收入"), None)
            if first is not None and fault == "drop_credit":
                moves.pop(first)
            elif first is not None:
                kind, direction, no, ref, amount, fee, gross, _ = moves[first]
                memo = f"总金额{k.yuan(gross)}元;含手续费{k.yuan(fee + 1)}元"
                moves[first] = (kind, direction, no, ref, amount - 1, fee + 1, gross, memo)
        balance = 0
        rows = []
        for i, (kind, direction, no, ref, amount, _fee_cent, _gross, memo) in enumerate(moves):
            balance += amount if direction == "收入" else -amount
            rows.append(
                [
                    f"{day.isoformat()} 0{i % 10}:00:00",
                    no,
                    "4200" + hashlib.sha1(f"{no}#{kind}".encode()).hexdigest()[:24],  # noqa: S324 - an id
                    kind,
                    kind,
                    direction,
                    k.yuan(amount),
                    k.yuan(balance),
                    "system",
                    memo,
                    ref,
                ]
            )
        income = [m for m in moves if m[1] == "收入"]
        expense = [m for m in moves if m[1] == "支出"]
        summary = [
            str(len(moves)),
            str(len(income)),
            k.yuan(sum(m[4] for m in income) + (1 if fault == "wrong_summary" else 0)),
            str(len(expense)),
            k.yuan(sum(m[4] for m in expense)),
        ]
        if fault == "empty_nonzero_summary":
            rows = []
        header = HEADER
        if fault == "column_added":
            header, rows = header + ",渠道", [[*r, "API"] for r in rows]
        lines = (
            [header]
            + [",".join("`" + v for v in r) for r in rows]
            + [SUMMARY, ",".join("`" + v for v in summary)]
        )
        return ("\ufeff" + "\r\n".join(lines) + "\r\n").encode()

    def fundflowbill(self, mchid: str, query: dict[str, str]) -> dict[str, str]:
        import gzip

        try:
            day = dt.date.fromisoformat(query.get("bill_date", ""))
        except ValueError:
            raise SimulatorError(400, "PARAM_ERROR", "bill_date格式错误") from None
        account = query.get("account_type", "BASIC")
        if account not in ("BASIC", "OPERATION", "FEES"):
            raise SimulatorError(400, "PARAM_ERROR", "account_type must be BASIC, OPERATION or FEES")
        if account != "BASIC":  # the simulated merchant nets its fees in BASIC: nothing moves elsewhere
            raise SimulatorError(400, "NO_STATEMENT_EXIST", "请求的账单文件不存在")
        taken = self.faults.take()
        fault = taken["kind"] if taken else None
        if fault == "late_day" or day >= k.now_cst().date():
            raise SimulatorError(400, "STATEMENT_CREATING", "账单生成中")
        if not self.movements(mchid, day) and fault is None:
            raise SimulatorError(400, "NO_STATEMENT_EXIST", "请求的账单文件不存在")
        if fault == "html_error":
            data = (
                b"<!DOCTYPE html>\r\n<html><head><title>500 Internal Server Error</title></head></html>\r\n"
            )
        else:
            data = self.bill(mchid, day, fault)
        token = secrets.token_urlsafe(16)
        with self.bills._lock:
            self.bills._files[token] = data if fault == "html_error" else gzip.compress(data)
        return {
            "hash_type": "SHA1",
            "hash_value": hashlib.sha1(data).hexdigest(),  # noqa: S324 - the channel's integrity check
            "download_url": f"{self.bills.v3.kernel.url}/v3/billdownload/file?token={token}&tartype=gzip",
        }
