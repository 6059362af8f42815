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

from tally.channels.bill_source import (
    NO_STATEMENT,
    NOT_READY,
    OK,
    DownloadFailed,
    Fetched,
    gunzip,
    lines_of,
    sha1_hex,
)
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.channel import CHANNEL as SPEC
from tally.domain.recon import (
    PAYMENT,
    REFUND,
    BillIndex,
    BillItem,
    BillParseError,
    BillTotals,
    SummaryCheck,
    decimals_of,
    rate_units,
    round_units,
    to_units,
)

CHANNEL = SPEC.stored
PREFIX = f"{CHANNEL}#"
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
# Summary headers a layout is also really sent with. SUCCESS: the channel documents four columns but sends the
# seven of ALL (WxJava's and gunsluo/wechatpay-go's recorded SUCCESS bills; tests/unit/test_real_bills.py); the
# refund totals of a SUCCESS bill total columns it does not carry, so they are not compared (no column to sum).
SUMMARY_ALTERNATIVES = {"SUCCESS": (SUMMARY_HEADERS["ALL"],)}
_LAYOUT_OF_HEADER = {header: layout for layout, header in HEADERS.items()}

# summary column → the detail column it totals (None: the row count)
_SUMMED = {
    "总交易单数": None,
    "应结订单总金额": "应结订单金额",
    "退款总金额": "退款金额",
    "充值券退款总金额": "充值券退款金额",
    "手续费总金额": "手续费",
    "订单总金额": "订单金额",
    "申请退款总金额": "申请退款金额",
    "总交易额": "总金额",
    "总退款金额": "退款金额",
    "总代金券或立减优惠退款金额": "代金券或立减优惠退款金额",
    "总企业红包退款金额": None,
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

        return cls(
            name,
            cols,
            cols.index("交易时间"),
            cols.index("微信订单号"),
            cols.index("商户订单号"),
            cols.index("交易状态"),
            cols.index("应结订单金额" if "应结订单金额" in cols else "总金额"),
            cols.index(FEE_COLUMN),
            cols.index("费率"),
            at("商户退款单号"),
            at("退款金额"),
            at("退款状态"),
            name == "REFUND",
        )


_LAYOUTS = {name: _Layout.of(name) for name in HEADERS}


class _Units(dict):
    """text → integer units, each distinct string converted once (amounts repeat a lot in a big bill);
    a hit is one C-level dict lookup. Bounded: past 100,000 distinct strings it converts without keeping."""

    def __init__(self, places: int):
        super().__init__({"": 0, "0." + "0" * places: 0})
        self.places = places

    def __missing__(self, text: str) -> int:
        value = to_units(text, self.places)
        if len(self) < 100_000:
            self[text] = value
        return value


class _Rates(dict):
    """rate text ("0.60%") → {amount_cent: expected fee in e-5 yuan}; an unreadable rate expects nothing."""

    class _Fees(dict):
        def __init__(self, rate_e6: int | None):
            super().__init__()
            self.rate_e6 = rate_e6

        def __missing__(self, amount: int) -> int | None:
            value = None if self.rate_e6 is None else _fee(amount, self.rate_e6)
            if len(self) < 100_000:
                self[amount] = value
            return value

    def __missing__(self, rate: str) -> _Rates._Fees:
        fees = self[rate] = _Rates._Fees(rate_units(rate))
        return fees

    def units(self, rate: str) -> int | None:
        return self[rate].rate_e6


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
        self._summary_line: tuple[list[str], list[str], int] | None = None  # (header, values, line number)
        self._rows_open_at_end = False  # the last line read was a row or the header: the next piece may go on
        self._done = False

    def __getstate__(self) -> dict[str, Any]:
        """What a piece's parser sends back from its process (service/recon_partition.py): all but the lines."""
        return {**self.__dict__, "_lines": ()}

    def items(self) -> Iterator[BillItem]:
        """Stream the rows as BillItems (what `tally bill parse` prints)."""
        return self._rows(None)

    def index(self) -> BillIndex:
        """One pass to the end: the totals (the guards' input, `self.totals`) and a compact per-row index
        for matching (`BillIndex`); no BillItem is built. `item_at(line)` re-reads one row in full."""
        index = BillIndex()
        for _ in self._rows(index):
            pass
        return index

    def scan(self) -> BillTotals:
        """Parse to the end; returns the totals (the guards' input)."""
        self.index()
        return self.totals

    def item_at(self, raw: bytes) -> BillItem:
        """One detail line (bytes, as in the file) → its BillItem, by the same rules as `items()`."""
        if self.layout is None:
            raise BillParseError("item_at before the header was read")
        line = raw.decode("utf-8").rstrip("\r\n")
        v = line[1:].split(",`")
        lay = self.layout
        try:
            return self._item(
                lay,
                v,
                to_units(v[lay.i_settle], 2),
                to_units(v[lay.i_refund_amount], 2) if lay.i_refund_amount is not None else 0,
                to_units(v[lay.i_fee], 5),
                rate_units(v[lay.i_rate]),
            )
        except ValueError as exc:
            raise BillParseError(str(exc)) from None

    def _rows(self, index: BillIndex | None) -> Iterator[BillItem]:
        layout: _Layout | None = None
        summary_header: list[str] | None = None
        summary_seen = False
        rows_open = False  # between the header and the summary header: backtick lines are detail rows
        totals = self.totals
        # the hot loop (a million rows): amount strings repeat a lot, so each distinct one is converted once
        c2 = _Units(2)
        c5 = _Units(5)
        rates = _Rates()
        pick: Any = None
        sums: list[int] = []
        rows = payments = refunds = payment_cent = refund_cent = fee_e5 = 0
        pos = 0
        # the layout's column positions as locals, set when the header is read (rows_open is False until then)
        lay: Any = None
        n_cols = i_state = i_tx = i_fee = i_rate = i_settle = k_settle = 0
        i_refund_no: int | None = None
        i_refund_status: int | None = None
        i_refund_amount: int | None = None
        k_refund: int | None = None
        has_refunds = refund_only = False
        check_fees = self.check_fees
        # a million rows: the flag bits as locals, the amount lookups through map (C, no frame per row)
        c2_of = c2.__getitem__
        f_refund, f_success, f_fee_ok = BillIndex.REFUND, BillIndex.SUCCESS, BillIndex.FEE_OK
        if index is not None:
            keys, amounts, flags, where, fees = (
                index.keys,
                index.amounts,
                index.flags,
                index.where,
                index.fees,
            )
        for number, raw in enumerate(self._lines, 1):
            start = pos
            pos += len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BillParseError(f"not UTF-8: {exc.reason} at byte {exc.start}", number) from None
            line = line.rstrip("\r\n")
            if rows_open and line[:1] == "`":
                v = line[1:].split(",`")
                if len(v) != n_cols:
                    raise BillParseError(f"{len(v)} values for {n_cols} columns", number)
                try:
                    nums = list(map(c2_of, pick(v)))
                    sums = list(map(add, sums, nums))
                    fee = c5[v[i_fee]]
                    if refund_only or (has_refunds and v[i_state] == "REFUND"):
                        assert (
                            i_refund_no is not None and k_refund is not None and i_refund_status is not None
                        )
                        amount = nums[k_refund]
                        ref = v[i_refund_no]
                        if not ref or ref == "0":
                            raise ValueError("refund row without 商户退款单号")
                        refunds += 1
                        refund_cent += amount
                        if index is not None:
                            keys.append(PREFIX + ref)
                            exp = rates[v[i_rate]][amount] if check_fees else None
                            flags.append(
                                f_refund
                                | (f_success if (v[i_refund_status] or "SUCCESS") == "SUCCESS" else 0)
                                | (f_fee_ok if exp is None or -exp == fee else 0)
                            )
                    else:
                        amount = nums[k_settle]
                        tx = v[i_tx]
                        if not tx:
                            raise ValueError("payment row without 微信订单号")
                        payments += 1
                        payment_cent += amount
                        if index is not None:
                            keys.append(PREFIX + tx)
                            exp = rates[v[i_rate]][amount] if check_fees else None
                            flags.append(
                                (f_success if v[i_state] == "SUCCESS" else 0)
                                | (f_fee_ok if exp is None or exp == fee else 0)
                            )
                except ValueError as exc:
                    raise BillParseError(str(exc), number) from None
                rows += 1
                fee_e5 += fee
                if index is not None:
                    amounts.append(amount)
                    where.append(start)
                    fees.append(fee)  # the FEE entry's figure (R43): no second pass to book fees
                    continue
                yield self._item(
                    lay,
                    v,
                    nums[k_settle],
                    nums[k_refund] if k_refund is not None else 0,
                    fee,
                    rates.units(v[i_rate]),
                )
                continue
            if number == 1 and line.startswith(BOM):
                line = line[1:]
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
                i_state, i_tx, i_fee, i_rate, i_settle = (
                    lay.i_state,
                    lay.i_tx,
                    lay.i_fee,
                    lay.i_rate,
                    lay.i_settle,
                )
                i_refund_no, i_refund_status, i_refund_amount = (
                    lay.i_refund_no,
                    lay.i_refund_status,
                    lay.i_refund_amount,
                )
                k_settle = self._sum_columns.index(layout.columns[i_settle])
                k_refund = self._sum_columns.index("退款金额") if i_refund_amount is not None else None
                has_refunds, refund_only = i_refund_no is not None, lay.refund_only
                rows_open = True
                continue
            if summary_seen:
                raise BillParseError("text after the summary line", number)
            if summary_header is None:
                if line != SUMMARY_HEADERS[layout.name] and line not in SUMMARY_ALTERNATIVES.get(
                    layout.name, ()
                ):
                    raise BillParseError(
                        f"unexpected line (not a row, not the {layout.name} summary header): {line[:60]!r}",
                        number,
                    )
                summary_header = line.split(",")
                rows_open = False
                continue
            if line[0] != "`":
                raise BillParseError(f"summary values must start with a backtick: {line[:60]!r}", number)
            totals.rows, totals.payments, totals.refunds = rows, payments, refunds
            totals.payment_cent, totals.refund_cent, totals.fee_e5 = payment_cent, refund_cent, fee_e5
            self._sums = dict(zip(self._sum_columns, sums, strict=True))
            self._sums[FEE_COLUMN] = fee_e5
            self._summary_line = (summary_header, line[1:].split(",`"), number)
            self._summary(*self._summary_line)
            summary_seen = True
        if layout is None:
            raise BillParseError("empty file: no header line")
        totals.rows, totals.payments, totals.refunds = rows, payments, refunds
        totals.payment_cent, totals.refund_cent, totals.fee_e5 = payment_cent, refund_cent, fee_e5
        if not summary_seen:
            self._sums = dict(zip(self._sum_columns, sums, strict=True))
            self._sums[FEE_COLUMN] = fee_e5
        self._rows_open_at_end = rows_open
        self._done = True

    def join(self, later: WeChatBillParser) -> bool:
        """Fold in `later`, which read the rest of this bill (after the same head) while this parser read up to a
        line boundary: service/recon_partition.py parses a big bill in pieces on several cores. The counts add
        up and the summary, read by the last piece, is checked against the whole bill, as one pass checks it.
        False (nothing changed) when the bill does not split there, the summary having begun before the cut:
        then the bill is read in one pass."""
        if not self._rows_open_at_end or self.layout != later.layout:
            return False
        mine, theirs = self.totals, later.totals
        mine.rows += theirs.rows
        mine.payments += theirs.payments
        mine.refunds += theirs.refunds
        mine.payment_cent += theirs.payment_cent
        mine.refund_cent += theirs.refund_cent
        mine.fee_e5 += theirs.fee_e5
        self._sums = {column: total + later._sums[column] for column, total in self._sums.items()}
        self._summary_line, self._rows_open_at_end = later._summary_line, later._rows_open_at_end
        if self._summary_line is not None:
            self._summary(*self._summary_line)
        return True

    def _item(
        self, lay: _Layout, v: list[str], settle: int, refund: int, fee: int, bp: int | None
    ) -> BillItem:
        if lay.refund_only or (lay.i_refund_no is not None and v[lay.i_state] == "REFUND"):
            return self._refund(lay, v, refund, fee, bp)
        tx = v[lay.i_tx]
        if not tx:
            raise ValueError("payment row without 微信订单号")
        return BillItem(
            PREFIX + tx,
            PAYMENT,
            settle,
            v[lay.i_state],
            v[lay.i_time],
            tx,
            v[lay.i_otn],
            "",
            fee,
            _fee(settle, bp) if bp is not None and self.check_fees else None,
        )

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
            raise BillParseError(
                f"unknown header {stripped[:80]!r}: not a WeChat Pay trade bill layout we know", number
            )
        self.layout = _LAYOUTS[name]
        self.totals.layout = name
        return self.layout

    def _refund(self, lay: _Layout, v: list[str], amount: int, fee: int, bp: int | None) -> BillItem:
        assert lay.i_refund_no is not None and lay.i_refund_status is not None
        refund_no = v[lay.i_refund_no]
        if not refund_no or refund_no == "0":
            raise ValueError("refund row without 商户退款单号")
        expected = -_fee(amount, bp) if bp is not None and self.check_fees else None
        return BillItem(
            PREFIX + refund_no,
            REFUND,
            amount,
            v[lay.i_refund_status] or "SUCCESS",
            v[lay.i_time],
            v[lay.i_tx],
            v[lay.i_otn],
            refund_no,
            fee,
            expected,
        )

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
                    parsed = round_units(
                        round_units(self._sums[column], 5, min(places, 5)), min(places, 5), 5
                    )
                    checks.append(SummaryCheck(name, stated, parsed, "e-5 yuan"))
                else:
                    checks.append(SummaryCheck(name, to_units(text, 2), self._sums[column], "cent"))
            except ValueError as exc:
                raise BillParseError(f"summary {name}: {exc}", number) from None
        totals.checks = checks


# ---------------------------------------------------------------- the download and the opened file


class WeChatBillSource:
    channel = wx.CHANNEL

    def __init__(self, merchants: Any):
        self.merchants = merchants

    def fetch(self, mchid: str, bill_date: str) -> Fetched:
        client = self.merchants.client(self.merchants.wechatpay(mchid))
        try:
            answer = client.tradebill(bill_date, "ALL")
        except wx.ChannelError as exc:
            if exc.code == "NO_STATEMENT_EXIST":
                return Fetched(NO_STATEMENT, note=str(exc))
            if exc.code == "STATEMENT_CREATING":
                return Fetched(NOT_READY, note=str(exc))
            raise DownloadFailed(f"tradebill: {exc}", retryable=exc.retryable) from None
        try:
            raw = client.download_bill(answer["download_url"])
        except wx.ChannelError as exc:
            raise DownloadFailed(f"bill download: {exc}", retryable=exc.retryable) from None
        data = gunzip(raw)
        return Fetched(
            OK,
            data,
            "ALL.csv",
            sha1_hex(data),
            answer["hash_value"].lower(),
            extra={"hash_type": answer.get("hash_type", "")},
        )


class WeChatBill:
    """A WeChat trade bill opened for parsing: the GZIP answer decompressed (a plain CSV kept as it is)."""

    def __init__(self, data: bytes):
        self.data = gunzip(data)

    def parser(self, *, check_fees: bool = True, lines: Iterator[bytes] | None = None) -> WeChatBillParser:
        return WeChatBillParser(lines_of(self.data) if lines is None else lines, check_fees=check_fees)
