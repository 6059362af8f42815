"""Alipay fund-flow bill (账务明细: alipay.data.dataservice.bill.downloadurl.query with bill_type=signcustomer):
a streaming parser, pure (channel-spec.md §7; docs/settlement.md §fund flow).

The zip holds GBK CSVs picked by suffix (`…_账务明细.csv`, `…_账务明细(汇总).csv`; open them with
tally.channels.alipay.bills.open_zip-style code when wired). The detail file:

    #支付宝账务明细查询
    #账号：[20888011365400330156]
    #起始日期：[2012年12月29日 00:00:00]   终止日期：[2012年12月30日 00:00:00]
    #-----------------------------------------账务明细列表----------------------------------------
    账务流水号,业务流水号,商户订单号,商品名称,发生时间,对方账号,收入金额（+元）,支出金额（-元）,账户余额（元）,交易渠道,业务类型,备注
    54632446537371	,2012122923922029	,3226563	,海航机票	,2012-12-29 21:02:06,…,2274.00,0.00,14533.03,支付宝,在线支付,
    #----------------------------------------账务明细列表结束-------------------------------------
    #支出合计：0笔，共0.00元
    #收入合计：18笔，共14989.00元
    #导出时间：[2012年12月31日 13:19:01]

Ids end with a TAB (so spreadsheets keep them as text): stripped. A row has an income or an expense, never
both; the expense column is read with or without its minus sign. The two 合计 trailers become the R31/R32
checks of tally.domain.recon.check_guards. Not GBK, an HTML page, an unknown header, a broken row: BillParseError.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator

from tally.domain.fundflow import FEE, OTHER, REFUND, SETTLEMENT, UNCLASSIFIED, FlowTally, FundFlowRow
from tally.domain.recon import BillParseError, BillTotals, SummaryCheck, to_units

CHANNEL = "alipay"
ENCODING = "gbk"
ACCOUNT = "ALIPAY"
DETAIL_SUFFIX = "账务明细.csv"
SUMMARY_SUFFIX = "账务明细(汇总).csv"

HEADER = "账务流水号,业务流水号,商户订单号,商品名称,发生时间,对方账号,收入金额(+元),支出金额(-元),账户余额(元),交易渠道,业务类型,备注"
_COLS = HEADER.split(",")
_WIDE = str.maketrans("（）", "()")
_EXPENSE_TOTAL = re.compile(r"^#支出合计[：:](\d+)笔[，,]共(-?[\d.]+)元")
_INCOME_TOTAL = re.compile(r"^#收入合计[：:](\d+)笔[，,]共(-?[\d.]+)元")

# 业务类型 → what it is to the ledger. Anything not listed is UNCLASSIFIED: a diff, never a guess.
BUSINESS_TYPES = {
    "在线支付": SETTLEMENT,
    "交易付款": SETTLEMENT,
    "交易退款": REFUND,
    "退款": REFUND,
    "收费": FEE,
    "服务费": FEE,
    "提现": OTHER,
    "充值": OTHER,
    "转账": OTHER,
}


class AlipayFundFlowParser:
    """One pass over 账务明细.csv (bytes lines, GBK). `totals` is complete once rows() is exhausted."""

    def __init__(self, lines: Iterable[bytes]):
        self._lines = lines
        self.totals = BillTotals(CHANNEL, "FUNDFLOW_SIGNCUSTOMER")
        self.tally = FlowTally()

    @property
    def balance_breaks(self) -> int:
        return self.tally.balance_breaks

    def rows(self) -> Iterator[FundFlowRow]:
        header_seen = False
        income_total: tuple[int, int] | None = None
        expense_total: tuple[int, int] | None = None
        tally = self.tally = FlowTally()
        for number, raw in enumerate(self._lines, 1):
            try:
                line = raw.decode(ENCODING)
            except UnicodeDecodeError as exc:
                raise BillParseError(f"not GBK: {exc.reason} at byte {exc.start}", number) from None
            line = line.rstrip("\r\n")
            if number == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            low = line.strip()[:200].lower()
            if low.startswith("<") or "<html" in low or "<!doctype" in low:
                raise BillParseError("an HTML page, not a fund-flow bill", number)
            if line.startswith("#"):
                try:
                    if m := _EXPENSE_TOTAL.match(line):
                        expense_total = (int(m.group(1)), abs(to_units(m.group(2), 2)))
                    elif m := _INCOME_TOTAL.match(line):
                        income_total = (int(m.group(1)), to_units(m.group(2), 2))
                except ValueError as exc:
                    raise BillParseError(f"trailer: {exc}", number) from None
                continue
            if not header_seen:
                if line.strip().translate(_WIDE) != HEADER:
                    raise BillParseError(f"unknown header {line[:80]!r}: not an Alipay 账务明细 bill", number)
                header_seen = True
                continue
            (values,) = list(csv.reader([line]))
            if len(values) != len(_COLS):
                raise BillParseError(f"{len(values)} values for {len(_COLS)} columns", number)
            try:
                row = _row([v.strip() for v in values])
            except ValueError as exc:
                raise BillParseError(str(exc), number) from None
            tally.add(row)
            self.totals.rows += 1
            yield row
        if not header_seen:
            raise BillParseError("no 账务明细 header line")
        checks = []
        if income_total is not None:
            checks += [
                SummaryCheck("收入合计笔数", income_total[0], tally.income_n, "rows"),
                SummaryCheck("收入合计金额", income_total[1], tally.income_cent),
            ]
        if expense_total is not None:
            checks += [
                SummaryCheck("支出合计笔数", expense_total[0], tally.expense_n, "rows"),
                SummaryCheck("支出合计金额", expense_total[1], tally.expense_cent),
            ]
        if income_total is not None and expense_total is not None:
            self.totals.stated_rows = income_total[0] + expense_total[0]
        self.totals.checks = checks

    def scan(self) -> BillTotals:
        for _ in self.rows():
            pass
        return self.totals


def _amount(text: str) -> int:
    return to_units(text, 2) if text else 0


def _row(v: list[str]) -> FundFlowRow:
    flow_id, business_no, out_trade_no, _goods, when, _counterparty = v[:6]
    income, expense = _amount(v[6]), abs(_amount(v[7]))
    if income < 0:
        raise ValueError(f"收入金额 {v[6]!r} is negative")
    if income and expense:
        raise ValueError(f"a row with both an income ({v[6]}) and an expense ({v[7]})")
    if not flow_id:
        raise ValueError("row without 账务流水号")
    business_type, memo = v[10], v[11]
    amount = income - expense
    return FundFlowRow(
        ACCOUNT,
        flow_id,
        business_no,
        when,
        business_type,
        BUSINESS_TYPES.get(business_type, UNCLASSIFIED),
        amount,
        to_units(v[8], 2),
        out_trade_no,
        memo,
        abs(amount),
        0,
        1 if income else -1 if expense else 0,
    )
