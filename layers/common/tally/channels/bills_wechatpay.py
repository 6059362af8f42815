"""WeChat Pay trade bill (交易账单): a streaming parser, pure (channel-spec.md §3.2).

Layout: a detail header line, detail rows (every value prefixed with a backtick), a summary header
line, one summary values line. UTF-8 with or without BOM, CRLF or LF. The layout is chosen by the
exact header: ALL (27 columns), SUCCESS (20), REFUND (29), or the legacy column sets (总金额 /
代金券或立减优惠金额 / 企业红包) that older merchants still receive. Anything else — an HTML error
page, a JSON error, an unknown header, an undecodable line, a row with the wrong column count —
raises BillParseError: a bill we do not understand is never read as "no rows".

    parser = WeChatBillParser(binary_lines)
    for item in parser.items():   # BillItem, one per detail row, streamed
        ...
    parser.totals                 # BillTotals incl. the summary checks (after items() is exhausted)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import add, itemgetter
from typing import Any

from tally.domain.recon import (
    PAYMENT,
    REFUND,
    BillItem,
    BillParseError,
    BillTotals,
    SummaryCheck,
    decimals_of,
    rate_units,
    round_units,
    to_units,
)

CHANNEL = "wechatpay"
BOM = "\ufeff"

_COMMON = "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类"
HEADERS = {
    "ALL": f"{_COMMON},应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,"
           "商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注",
    "SUCCESS": f"{_COMMON},应结订单金额,代金券金额,商品名称,商户数据包,手续费,费率,订单金额,费率备注",
    "REFUND": f"{_COMMON},应结订单金额,代金券金额,退款申请时间,退款成功时间,微信退款单号,商户退款单号,退款金额,"
              "充值券退款金额,退款类型,退款状态,商品名称,商户数据包,手续费,费率,订单金额,申请退款金额,费率备注",
    # legacy column sets (before 免充值券), detected by header (channel-spec §3.2, RONCOO parser)
    "LEGACY_ALL": "交易时间,公众账号ID,商户号,子商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,"
                  "货币种类,总金额,代金券或立减优惠金额,微信退款单号,商户退款单号,退款金额,代金券或立减优惠退款金额,"
                  "退款类型,退款状态,商品名称,商户数据包,手续费,费率",
    "LEGACY_SUCCESS": "交易时间,公众账号ID,商户号,子商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,"
                      "付款银行,货币种类,总金额,企业红包金额,商品名称,商户数据包,手续费,费率",
    "LEGACY_SUCCESS_COUPON": "交易时间,公众账号ID,商户号,子商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,"
                             "交易状态,付款银行,货币种类,总金额,代金券或立减优惠金额,商品名称,商户数据包,手续费,费率",
}
SUMMARY_HEADERS = {
    "ALL": "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额",
    "REFUND": "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额",
    "SUCCESS": "总交易单数,应结订单总金额,手续费总金额,订单总金额",
    "LEGACY_ALL": "总交易单数,总交易额,总退款金额,总代金券或立减优惠退款金额,手续费总金额",
    "LEGACY_SUCCESS": "总交易单数,总交易额,总退款金额,总企业红包退款金额,手续费总金额",
    "LEGACY_SUCCESS_COUPON": "总交易单数,总交易额,总退款金额,总代金券或立减优惠退款金额,手续费总金额",
}
_LAYOUT_OF_HEADER = {header: layout for layout, header in HEADERS.items()}

# summary column → the detail column it totals (None: the row count)
_SUMMED = {
    "总交易单数": None, "应结订单总金额": "应结订单金额", "退款总金额": "退款金额", "充值券退款总金额": "充值券退款金额",
    "手续费总金额": "手续费", "订单总金额": "订单金额", "申请退款总金额": "申请退款金额", "总交易额": "总金额",
    "总退款金额": "退款金额", "总代金券或立减优惠退款金额": "代金券或立减优惠退款金额", "总企业红包退款金额": None,
}
FEE_COLUMN = "手续费"


@dataclass(frozen=True)
class _Layout:
    name: str
    columns: tuple[str, ...]
    i_time: int
    i_tx: int
    i_otn: int
    i_state: int
    i_settle: int  # 应结订单金额, or 总金额 in the legacy sets
    i_fee: int
    i_rate: int
    i_refund_no: int | None
    i_refund_amount: int | None
    i_refund_status: int | None
    refund_only: bool

    @classmethod
    def of(cls, name: str) -> _Layout:
        cols = tuple(HEADERS[name].split(","))

        def at(*names: str) -> int | None:
            for n in names:
                if n in cols:
                    return cols.index(n)
            return None

        return cls(name, cols, cols.index("交易时间"), cols.index("微信订单号"), cols.index("商户订单号"),
                   cols.index("交易状态"), at("应结订单金额", "总金额"), cols.index(FEE_COLUMN), cols.index("费率"),
                   at("商户退款单号"), at("退款金额"), at("退款状态"), name == "REFUND")


_LAYOUTS = {name: _Layout.of(name) for name in HEADERS}


def _cached(cache: dict[str, int], text: str, places: int) -> int:
    value = to_units(text, places)
    if len(cache) < 100_000:
        cache[text] = value
    return value


def _fee(amount_cent: int, rate_e6: int) -> int:
    """amount × rate, rounded half up to the fen, in e-5 yuan (rate in 1e-6: 0.60 % → 6000)."""
    q, r = divmod(abs(amount_cent) * rate_e6, 1_000_000)
    fen = q + (1 if 2 * r >= 1_000_000 else 0)
    return (fen if amount_cent >= 0 else -fen) * 1000


class WeChatBillParser:
    """One pass over a bill's lines (bytes). Construct again for a second pass."""

    def __init__(self, lines: Iterable[bytes], *, check_fees: bool = True):
        self._lines = lines
        self.check_fees = check_fees
        self.layout: _Layout | None = None
        self.totals = BillTotals(CHANNEL, "")
        self._sums: dict[str, int] = {}
        self._sum_columns: list[str] = []
        self._done = False

    def items(self, *, light: bool = False) -> Iterator[BillItem]:
        """Stream the rows. `light` (scan's pass): totals only, no BillItem built, nothing yielded."""
        layout: _Layout | None = None
        summary_header: list[str] | None = None
        summary_seen = False
        totals = self.totals
        # hot loop (a million rows): amounts repeat a lot, so each distinct string is converted once
        c2: dict[str, int] = {"0.00": 0, "": 0}
        c5: dict[str, int] = {"0.00000": 0, "": 0}
        rates: dict[str, int | None] = {}
        pick: Any = None
        sums: list[int] = []
        for number, raw in enumerate(self._lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BillParseError(f"not UTF-8: {exc.reason} at byte {exc.start}", number) from None
            if number == 1 and line.startswith(BOM):
                line = line[1:]
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if layout is None:
                layout = self._header(line, number)
                self._sum_columns = [c for c in layout.columns if c in _SUMMED.values() and c != FEE_COLUMN]
                idx = [layout.columns.index(c) for c in self._sum_columns]
                pick = itemgetter(*idx) if len(idx) > 1 else (lambda row, i=idx[0]: (row[i],))
                sums = [0] * len(self._sum_columns)
                lay = layout
                n_cols = len(layout.columns)
                k_settle = self._sum_columns.index(layout.columns[lay.i_settle])
                k_refund = (self._sum_columns.index("退款金额") if lay.i_refund_amount is not None else None)
                continue
            if summary_seen:
                raise BillParseError("text after the summary line", number)
            if line[0] == "`" and summary_header is None:
                v = line[1:].split(",`")
                if len(v) != n_cols:
                    raise BillParseError(f"{len(v)} values for {n_cols} columns", number)
                try:
                    nums = [c2[t] if t in c2 else _cached(c2, t, 2) for t in pick(v)]
                    sums = list(map(add, sums, nums))
                    f = v[lay.i_fee]
                    fee = c5[f] if f in c5 else _cached(c5, f, 5)
                    if light:  # the guards' pass: the same checks and sums, no objects
                        refund = lay.refund_only or (lay.i_refund_no is not None and v[lay.i_state] == "REFUND")
                        if refund:
                            totals.refunds += 1
                            totals.refund_cent += nums[k_refund]  # type: ignore[index]
                            if not v[lay.i_refund_no] or v[lay.i_refund_no] == "0":  # type: ignore[index]
                                raise ValueError("refund row without 商户退款单号")
                        else:
                            if not v[lay.i_tx]:
                                raise ValueError("payment row without 微信订单号")
                            totals.payments += 1
                            totals.payment_cent += nums[k_settle]
                        totals.rows += 1
                        totals.fee_e5 += fee
                        continue
                    r = v[lay.i_rate]
                    bp = rates[r] if r in rates else rates.setdefault(r, rate_units(r))
                    if lay.refund_only or (lay.i_refund_no is not None and v[lay.i_state] == "REFUND"):
                        assert k_refund is not None
                        item = self._refund(lay, v, nums[k_refund], fee, bp)
                        totals.refunds += 1
                        totals.refund_cent += item.amount_cent
                    else:
                        amount = nums[k_settle]
                        tx = v[lay.i_tx]
                        if not tx:
                            raise ValueError("payment row without 微信订单号")
                        item = BillItem(f"{CHANNEL}#{tx}", PAYMENT, amount, v[lay.i_state], v[lay.i_time], tx,
                                        v[lay.i_otn], "", fee,
                                        _fee(amount, bp) if bp is not None and self.check_fees else None)
                        totals.payments += 1
                        totals.payment_cent += amount
                except ValueError as exc:
                    raise BillParseError(str(exc), number) from None
                totals.rows += 1
                totals.fee_e5 += fee
                yield item
                continue
            if summary_header is None:
                if line != SUMMARY_HEADERS[layout.name]:
                    raise BillParseError(f"unexpected line (not a row, not the {layout.name} summary header): "
                                         f"{line[:60]!r}", number)
                summary_header = line.split(",")
                continue
            if line[0] != "`":
                raise BillParseError(f"summary values must start with a backtick: {line[:60]!r}", number)
            self._sums = dict(zip(self._sum_columns, sums, strict=True))
            self._sums[FEE_COLUMN] = totals.fee_e5
            self._summary(summary_header, line[1:].split(",`"), number)
            summary_seen = True
        if layout is None:
            raise BillParseError("empty file: no header line")
        self._done = True

    def scan(self) -> BillTotals:
        """Parse to the end without keeping anything; returns the totals (the guards' input)."""
        for _ in self.items(light=True):
            pass
        return self.totals

    # ------------------------------------------------------------------ pieces

    def _header(self, line: str, number: int) -> _Layout:
        stripped = line.strip()
        lowered = stripped[:200].lower()
        if lowered.startswith("<") or "<html" in lowered or "<!doctype" in lowered:
            raise BillParseError("an HTML page, not a bill (error page from the channel or a proxy)", number)
        if stripped.startswith("{"):
            raise BillParseError(f"a JSON answer, not a bill: {stripped[:120]!r}", number)
        name = _LAYOUT_OF_HEADER.get(stripped)
        if name is None:
            raise BillParseError(f"unknown header {stripped[:80]!r}: not a WeChat Pay trade bill layout we know",
                                 number)
        self.layout = _LAYOUTS[name]
        self.totals.layout = name
        return self.layout

    def _refund(self, lay: _Layout, v: list[str], amount: int, fee: int, bp: int | None) -> BillItem:
        assert lay.i_refund_no is not None and lay.i_refund_status is not None
        refund_no = v[lay.i_refund_no]
        if not refund_no or refund_no == "0":
            raise ValueError("refund row without 商户退款单号")
        expected = -_fee(amount, bp) if bp is not None and self.check_fees else None
        return BillItem(f"{CHANNEL}#{refund_no}", REFUND, amount, v[lay.i_refund_status] or "SUCCESS",
                        v[lay.i_time], v[lay.i_tx], v[lay.i_otn], refund_no, fee, expected)

    def _summary(self, header: list[str], values: list[str], number: int) -> None:
        if len(values) != len(header):
            raise BillParseError(f"summary has {len(values)} values for {len(header)} columns", number)
        totals = self.totals
        checks: list[SummaryCheck] = []
        for name, text in zip(header, values, strict=True):
            try:
                if name == "总交易单数":
                    stated = to_units(text, 2)  # seen as `12 and as `45.0: a decimal, then an integer
                    if stated % 100:
                        raise ValueError(f"row count {text!r} is not whole")
                    totals.stated_rows = stated // 100
                    checks.append(SummaryCheck(name, stated // 100, totals.rows, "rows"))
                    continue
                column = _SUMMED.get(name)
                if column is None or column not in self._sums:
                    continue  # a total of a column this layout does not carry: nothing to compare
                places = decimals_of(text)
                if column == FEE_COLUMN:
                    stated = to_units(text, 5)
                    parsed = round_units(round_units(self._sums[column], 5, min(places, 5)), min(places, 5), 5)
                    checks.append(SummaryCheck(name, stated, parsed, "e-5 yuan"))
                else:
                    checks.append(SummaryCheck(name, to_units(text, 2), self._sums[column], "cent"))
            except ValueError as exc:
                raise BillParseError(f"summary {name}: {exc}", number) from None
        totals.checks = checks
