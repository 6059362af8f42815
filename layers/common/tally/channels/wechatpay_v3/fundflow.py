"""WeChat Pay fund-flow bill (资金账单, `GET /v3/bill/fundflowbill?bill_date=…&account_type=BASIC|OPERATION|FEES`,
and v2 `/pay/downloadfundflow`): a streaming parser, pure (docs/settlement.md §fund flow).

Same framing as the trade bill (tally.channels.wechatpay_v3.bills): a header line, detail rows whose every value
is prefixed with a backtick, a summary header line and one summary values line; UTF-8 with or without BOM,
CRLF or LF. Header (11 columns; older answers write the unit with full-width parentheses, newer ones with
half-width — both are accepted, nothing else):

    记账时间,微信支付业务单号,资金流水单号,业务名称,业务类型,收支类型,收支金额(元),账户结余(元),资金变更提交申请人,备注,业务凭证号
    资金流水总笔数,收入笔数,收入金额,支出笔数,支出金额

An HTML or JSON answer, an unknown header, a bad row, an unknown 收支类型 raise BillParseError (never "no rows").
The summary becomes the R31/R32 checks of tally.domain.recon.check_guards (the same guards as trade bills).

    parser = WeChatFundFlowParser(binary_lines, account="BASIC")
    day = FundFlowDay(bill_date).extend(parser.rows())
    check_guards(parser.totals)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from tally.domain.fundflow import FEE, OTHER, REFUND, SETTLEMENT, UNCLASSIFIED, FlowTally, FundFlowRow
from tally.domain.recon import BillParseError, BillTotals, SummaryCheck, to_units

CHANNEL = "wechatpay"
ACCOUNTS = ("BASIC", "OPERATION", "FEES")
BOM = "\ufeff"

HEADER = "记账时间,微信支付业务单号,资金流水单号,业务名称,业务类型,收支类型,收支金额(元),账户结余(元),资金变更提交申请人,备注,业务凭证号"
SUMMARY_HEADER = "资金流水总笔数,收入笔数,收入金额,支出笔数,支出金额"
_N_COLS = 11
_WIDE = str.maketrans("（）", "()")

# 业务类型 → what it is to the ledger. Anything not listed is UNCLASSIFIED: a diff, never a guess.
BUSINESS_TYPES = {
    "交易": SETTLEMENT,
    "退款": REFUND,
    "扣除交易手续费": FEE,
    "手续费": FEE,
    "提现": OTHER,
    "充值": OTHER,
    "转账": OTHER,
    "企业付款": OTHER,
}
DIRECTIONS = {"收入": 1, "支出": -1}

# "总金额1.00元;含手续费0.01元" (a payment credited net of its fee), "退款总金额0.01元;含手续费0.00元"
_MEMO = re.compile(r"^(?:退款)?总金额(\d+\.\d{2})元[;；]含手续费(\d+\.\d{2})元")


class WeChatFundFlowParser:
    """One pass over one account's fund-flow bill (bytes lines). `totals` is complete once rows() is exhausted;
    `balance_breaks` counts rows whose 账户结余 is not the previous row's plus the movement (shown, not blocking:
    the row order is not documented), `memo_mismatches` rows whose memo split does not add up to the amount."""

    def __init__(self, lines: Iterable[bytes], *, account: str = "BASIC"):
        if account not in ACCOUNTS:
            raise ValueError(f"account_type {account!r} is not one of {ACCOUNTS}")
        self._lines = lines
        self.account = account
        self.totals = BillTotals(CHANNEL, f"FUNDFLOW_{account}")
        self.tally = FlowTally()
        self.memo_mismatches = 0

    @property
    def balance_breaks(self) -> int:
        return self.tally.balance_breaks

    def rows(self) -> Iterator[FundFlowRow]:
        header_seen = False
        summary_header = False
        summary_done = False
        tally = self.tally = FlowTally()
        for number, raw in enumerate(self._lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BillParseError(f"not UTF-8: {exc.reason} at byte {exc.start}", number) from None
            line = line.rstrip("\r\n")
            if number == 1 and line.startswith(BOM):
                line = line[1:]
            if not line.strip():
                continue
            if not header_seen:
                self._header(line, number)
                header_seen = True
                continue
            if summary_done:
                raise BillParseError("text after the summary line", number)
            if summary_header:
                if not line.startswith("`"):
                    raise BillParseError(f"summary values must start with a backtick: {line[:60]!r}", number)
                self._summary(line[1:].split(",`"), number, tally)
                summary_done = True
                continue
            if line.strip() == SUMMARY_HEADER:
                summary_header = True
                continue
            if not line.startswith("`"):
                raise BillParseError(
                    f"unexpected line (not a row, not the summary header): {line[:60]!r}", number
                )
            v = [x.strip() for x in line[1:].split(",`")]
            if len(v) != _N_COLS:
                raise BillParseError(f"{len(v)} values for {_N_COLS} columns", number)
            try:
                row = self._row(v)
            except ValueError as exc:
                raise BillParseError(str(exc), number) from None
            tally.add(row)
            self.totals.rows += 1
            yield row
        if not header_seen:
            raise BillParseError("empty file: no header line")

    def scan(self) -> BillTotals:
        for _ in self.rows():
            pass
        return self.totals

    # ------------------------------------------------------------------ pieces

    def _header(self, line: str, number: int) -> None:
        stripped = line.strip()
        lowered = stripped[:200].lower()
        if lowered.startswith("<") or "<html" in lowered or "<!doctype" in lowered:
            raise BillParseError("an HTML or XML page, not a fund-flow bill", number)
        if stripped.startswith("{"):
            raise BillParseError(f"a JSON answer, not a fund-flow bill: {stripped[:120]!r}", number)
        if stripped.translate(_WIDE) != HEADER:
            raise BillParseError(f"unknown header {stripped[:80]!r}: not a WeChat Pay fund-flow bill", number)

    def _row(self, v: list[str]) -> FundFlowRow:
        when, business_no, flow_id, name, business_type, direction, amount_text, balance_text = v[:8]
        memo, reference = v[9], v[10]
        sign = DIRECTIONS.get(direction)
        if sign is None:
            raise ValueError(f"收支类型 {direction!r} is neither 收入 nor 支出")
        if not flow_id:
            raise ValueError("row without 资金流水单号")
        magnitude = to_units(amount_text, 2)
        if magnitude < 0:
            raise ValueError(f"收支金额 {amount_text!r} is negative (the direction is 收支类型's)")
        gross, fee = magnitude, 0
        if m := _MEMO.match(memo):
            stated_gross, stated_fee = to_units(m.group(1), 2), to_units(m.group(2), 2)
            if stated_gross - stated_fee == magnitude:
                gross, fee = stated_gross, stated_fee
            else:
                self.memo_mismatches += 1
        return FundFlowRow(
            self.account,
            flow_id,
            business_no,
            when,
            business_type,
            BUSINESS_TYPES.get(business_type, UNCLASSIFIED),
            sign * magnitude,
            to_units(balance_text, 2),
            reference,
            memo or name,
            gross,
            fee,
            sign,
        )

    def _summary(self, values: list[str], number: int, parsed: FlowTally) -> None:
        names = SUMMARY_HEADER.split(",")
        if len(values) != len(names):
            raise BillParseError(f"summary has {len(values)} values for {len(names)} columns", number)
        try:
            total_n, income_n, income, expense_n, expense = (
                _count(values[0]),
                _count(values[1]),
                to_units(values[2], 2),
                _count(values[3]),
                to_units(values[4], 2),
            )
        except ValueError as exc:
            raise BillParseError(f"summary: {exc}", number) from None
        p_income_n, p_income = parsed.income_n, parsed.income_cent
        p_expense_n, p_expense = parsed.expense_n, parsed.expense_cent
        self.totals.stated_rows = total_n
        self.totals.checks = [
            SummaryCheck("资金流水总笔数", total_n, self.totals.rows, "rows"),
            SummaryCheck("收入笔数", income_n, p_income_n, "rows"),
            SummaryCheck("收入金额", income, p_income),
            SummaryCheck("支出笔数", expense_n, p_expense_n, "rows"),
            SummaryCheck("支出金额", abs(expense), p_expense),
        ]


def _count(text: str) -> int:
    """Counts are written `3 and `20.0 (a decimal, then a whole number)."""
    units = to_units(text, 2)
    if units < 0 or units % 100:
        raise ValueError(f"count {text!r} is not a whole number")
    return units // 100
