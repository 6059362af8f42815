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

import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, islice, repeat
from operator import itemgetter, methodcaller
from typing import Any, NoReturn

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
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
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


class _Rates(dict[str, int | None]):
    """rate text ("0.60%") → its units of 1e-6 (6000), each distinct text read once; None: not a plain rate."""

    def __missing__(self, rate: str) -> int | None:
        units = self[rate] = rate_units(rate)
        return units

    def units(self, rate: str) -> int | None:
        return self[rate]


_NINES = bytes.maketrans(b"0123456789", b"9999999999")
_TAILS = {places: b"." + b"9" * places + b"\n" for places in (2, 5)}  # a value's end, digits made nines
_KEY_HEAD = PREFIX.encode()
_KEY_SEP = b"\n" + _KEY_HEAD  # a run's keys built in one join and one decode


def _column_units(column: Sequence[bytes], places: int, one: Any) -> list[int]:
    """A column's amounts in units of 10^-places, exactly as `to_units` reads each (`one`: its cached form).

    The usual column, every value `-?digits.digits` with exactly `places` decimals (what the channel writes: "12.30",
    "0.06000"), is read in one go: its shape checked by a few C passes over the column joined (each digit made a 9:
    one dot per value, followed by exactly `places` digits and the value's end, a digit before it, nothing but
    digits, dots, minus signs and the separators), then its digits read by int() without the dots. Anything else
    (fewer decimals, spaces, junk) is read value by value by to_units, which accepts or refuses it."""
    joined = b"\n".join(column)
    shape = joined.translate(_NINES) + b"\n"
    n = len(column)
    if (
        shape.count(b".") == n
        and shape.count(_TAILS[places]) == n
        and not shape.translate(None, b"9.-\n")
        and b"\n." not in shape
        and b"-." not in shape
        and not shape.startswith(b".")
    ):
        try:
            return list(map(int, joined.replace(b".", b"").split(b"\n")))  # a misplaced "-": ValueError
        except ValueError:
            pass
    return list(map(one, joined.decode("utf-8").split("\n")))


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

    def _blocks(self) -> Iterator[list[bytes]]:
        """The lines a block at a time: the blocks a caller hands over (`LineBlocks`: each block is read to its
        end before the next is asked for), or BLOCK_LINES lines of the stream at a time."""
        given = getattr(self._lines, "blocks", None)
        if given is not None:
            return iter(given)
        it = iter(self._lines)
        return iter(lambda: list(islice(it, BLOCK_LINES)), [])

    def _rows(self, index: BillIndex | None) -> Iterator[BillItem]:
        """The one pass. Lines are read a block at a time; a run of detail rows (between the header and the
        summary header, every line starting with a backtick) is parsed column by column (`_run`): each value
        split once and every column converted by C-level maps, so no Python step per value. Every other line
        goes through the header / summary rules one at a time."""
        summary_header: list[str] | None = None
        summary_seen = False
        rows_open = False  # between the header and the summary header: backtick lines are detail rows
        run = _Run(self, index)
        number = pos = 0  # lines and bytes before the block
        for block in self._blocks():
            starts = array("q", accumulate(map(len, block), initial=pos))
            pos = starts.pop()
            firsts = (
                bytes(map(_first_byte, block))
                if b"" not in block
                else b"".join(b[:1] or b"\n" for b in block)
            )
            k, n = 0, len(block)
            while k < n:
                if rows_open:
                    found = _NOT_ROW.search(firsts, k, n)
                    end = found.start() if found else n
                    if end > k:
                        try:
                            items = run.rows(block[k:end], starts[k:end], number + k + 1)
                        except BillParseError as exc:
                            # items() streams the good rows before the bad one first, as a row-by-row reader does
                            good = exc.line - number - 1
                            if index is None and good > k:
                                yield from run.rows(block[k:good], starts[k:good], number + k + 1) or ()
                            raise
                        if items:
                            yield from items
                        k = end
                        continue
                at = number + k + 1
                try:
                    line = block[k].decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    raise BillParseError(f"not UTF-8: {exc.reason} at byte {exc.start}", at) from None
                k += 1
                if at == 1 and line.startswith(BOM):
                    line = line[1:]
                if not line.strip():
                    continue
                if self.layout is None:
                    run.open(self._header(line, at))
                    rows_open = True
                    continue
                if summary_seen:
                    raise BillParseError("text after the summary line", at)
                if summary_header is None:
                    name = self.layout.name
                    if line != SUMMARY_HEADERS[name] and line not in SUMMARY_ALTERNATIVES.get(name, ()):
                        raise BillParseError(
                            f"unexpected line (not a row, not the {name} summary header): {line[:60]!r}", at
                        )
                    summary_header = line.split(",")
                    rows_open = False
                    continue
                if line[0] != "`":
                    raise BillParseError(f"summary values must start with a backtick: {line[:60]!r}", at)
                run.close()
                self._summary_line = (summary_header, line[1:].split(",`"), at)
                self._summary(*self._summary_line)
                summary_seen = True
            number += len(block)
        if self.layout is None:
            raise BillParseError("empty file: no header line")
        run.close()
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


# Lines read per block when the caller streams lines one by one (a caller that hands over blocks, `LineBlocks`,
# chooses its own): ~2.5 MB of a typical bill, its rows' values parsed column by column (`_Run`)
BLOCK_LINES = 10_000
_NOT_ROW = re.compile(rb"[^`]")  # over a block's first bytes: the next line that is not a detail row
_first_byte = itemgetter(0)
_separators = methodcaller("count", b",`")  # a detail line's values, less one


def _split(raw: list[bytes]) -> list[list[str]]:
    """Detail lines → their values (the leading backtick and the line end dropped), one list per line."""
    return [line.decode("utf-8")[1:].rstrip("\r\n").split(",`") for line in raw]


def _decoded_until_bad(block: list[bytes]) -> tuple[list[str], UnicodeDecodeError]:
    """The block's lines decoded up to the first that is not UTF-8, and that line's error."""
    texts: list[str] = []
    for raw in block:
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return texts, exc
    raise AssertionError("a block that failed to decode decoded line by line")  # pragma: no cover


class _Run:
    """The detail rows of one bill, a run of lines at a time: what `_rows` hands over between the header and the
    summary header. A run's values are split once per line; then each column is converted at C speed (`map` over
    the column, each distinct amount string converted once: `_Units`) and the index's arrays are extended a run
    at a time. The first bad row of a run (a wrong column count, an unreadable amount, a row without its id) is
    found by `_refuse`, row by row in file order, so the error names the same line and reason as a row-by-row
    reader would."""

    def __init__(self, parser: WeChatBillParser, index: BillIndex | None):
        self.parser = parser
        self.index = index
        self.c2 = _Units(2)
        self.c5 = _Units(5)
        self.rates = _Rates()
        self.count = [0, 0, 0, 0, 0, 0]  # rows, payments, refunds, payment_cent, refund_cent, fee_e5
        self.sums: list[int] = []
        self.summed: list[int] = []  # the column positions of parser._sum_columns
        self.used: list[int] = []

    def open(self, layout: _Layout) -> None:
        """The header was read: its layout's summed columns."""
        parser = self.parser
        parser._sum_columns = [c for c in layout.columns if c in _SUMMED.values() and c != FEE_COLUMN]
        self.summed = [layout.columns.index(c) for c in parser._sum_columns]
        self.sums = [0] * len(self.summed)
        picked = (
            layout.i_fee,
            layout.i_rate,
            layout.i_state,
            layout.i_tx,
            layout.i_refund_no,
            layout.i_refund_status,
        )
        self.used = sorted({*self.summed, *(c for c in picked if c is not None)})  # the columns a run reads

    def close(self) -> None:
        """The figures so far into the parser's totals and sums (at the summary line, or at the end)."""
        parser, totals, count = self.parser, self.parser.totals, self.count
        totals.rows, totals.payments, totals.refunds = count[0], count[1], count[2]
        totals.payment_cent, totals.refund_cent, totals.fee_e5 = count[3], count[4], count[5]
        parser._sums = dict(zip(parser._sum_columns, self.sums, strict=True))
        parser._sums[FEE_COLUMN] = count[5]

    def rows(self, raw: list[bytes], starts: array[int], first: int) -> list[BillItem] | None:
        """Detail lines `raw` (as in the file, line `first` onwards, starting at bytes `starts` of the bill):
        counted and summed, into the index (or returned as BillItems when there is none)."""
        parser = self.parser
        lay = parser.layout
        assert lay is not None
        n_cols = len(lay.columns)
        n = len(raw)
        body = b"".join(raw)
        try:
            body.decode("utf-8")  # every line is text (the values are read as bytes, the keys decoded below)
        except UnicodeDecodeError:
            good, exc = _decoded_until_bad(raw)
            if good:  # a bad row before it is the first error
                self.rows(raw[: len(good)], starts, first)
            raise BillParseError(f"not UTF-8: {exc.reason} at byte {exc.start}", first + len(good)) from None
        if set(map(_separators, raw)) != {n_cols - 1}:
            self._refuse(_split(raw), first)
        body = body.replace(b"\r\n", b"\n")
        cols: dict[int, Sequence[bytes]]
        if b"\r" in body:  # a line ending in more than one CR, or a CR inside a row: each line on its own
            cols = dict(enumerate(zip(*(line[1:].rstrip(b"\r\n").split(b",`") for line in raw), strict=True)))
        else:  # every value of the run in one list, row after row: column c is every n_cols-th value from c
            flat = (body[1:-1] if body.endswith(b"\n") else body[1:]).replace(b"\n`", b",`").split(b",`")
            cols = {c: flat[c::n_cols] for c in self.used}
        c2_of = self.c2.__getitem__
        try:
            settle: list[int] = []
            refunded: list[int] = []
            for k, c in enumerate(self.summed):
                values = _column_units(cols[c], 2, c2_of)
                self.sums[k] += sum(values)
                if c == lay.i_settle:
                    settle = values
                elif c == lay.i_refund_amount:
                    refunded = values
            fees = _column_units(cols[lay.i_fee], 5, self.c5.__getitem__)
        except ValueError:
            self._refuse(_split(raw), first)
        states = cols[lay.i_state]
        mixed = lay.refund_only or (lay.i_refund_no is not None and b"REFUND" in states)
        if mixed:
            assert lay.i_refund_no is not None and lay.i_refund_status is not None
            refund_status = cols[lay.i_refund_status]
            is_refund = [True] * n if lay.refund_only else [s == b"REFUND" for s in states]
            ids: Sequence[bytes] = [
                r if q else t
                for t, r, q in zip(cols[lay.i_tx], cols[lay.i_refund_no], is_refund, strict=True)
            ]
            if b"" in ids or any(q and r == b"0" for r, q in zip(ids, is_refund, strict=True)):
                self._refuse(_split(raw), first)
            amounts = [r if q else s for s, r, q in zip(settle, refunded, is_refund, strict=True)]
            refunds = sum(is_refund)
            refund_cent = sum(a for a, q in zip(amounts, is_refund, strict=True) if q)
        else:
            ids = cols[lay.i_tx]
            if b"" in ids:
                self._refuse(_split(raw), first)
            amounts, refunds, refund_cent = settle, 0, 0
        count = self.count
        total = sum(amounts)
        count[0] += n
        count[1] += n - refunds
        count[2] += refunds
        count[3] += total - refund_cent
        count[4] += refund_cent
        count[5] += sum(fees)
        rates = cols[lay.i_rate]
        index = self.index
        if index is None:
            units = self.rates.units
            return [
                parser._item(lay, v, s, r, f, units(v[lay.i_rate]))
                for v, s, r, f in zip(
                    _split(raw),
                    settle,
                    refunded if lay.i_refund_amount is not None else repeat(0),
                    fees,
                    strict=False,
                )
            ]
        expected = self._expected(rates, amounts) if parser.check_fees else repeat(None, n)
        if mixed:
            flags = bytes(
                [
                    (
                        BillIndex.REFUND
                        | (BillIndex.SUCCESS if (rs or b"SUCCESS") == b"SUCCESS" else 0)
                        | (BillIndex.FEE_OK if e is None or -e == f else 0)
                    )
                    if q
                    else (
                        (BillIndex.SUCCESS if s == b"SUCCESS" else 0)
                        | (BillIndex.FEE_OK if e is None or e == f else 0)
                    )
                    for q, s, rs, e, f in zip(is_refund, states, refund_status, expected, fees, strict=True)
                ]
            )
        else:
            success, fee_ok = BillIndex.SUCCESS, BillIndex.FEE_OK
            flags = bytes(
                [
                    (success if s == b"SUCCESS" else 0) | (fee_ok if e is None or e == f else 0)
                    for s, e, f in zip(states, expected, fees, strict=True)
                ]
            )
        index.keys += (_KEY_HEAD + _KEY_SEP.join(ids)).decode("utf-8").split("\n")
        index.amounts.extend(amounts)
        index.flags += flags
        index.where.extend(starts)
        index.fees.extend(fees)  # the FEE entry's figure (R43): no second pass to book fees
        return None

    def _expected(self, rates: Sequence[bytes], amounts: list[int]) -> list[int | None]:
        """Each row's fee by its own rate (`_fee`: e-5 yuan, half up to the fen; None: no readable rate). A run at
        one rate (the usual bill) in one comprehension with `_fee` inlined."""
        table = self.rates

        def units(rate: bytes) -> int | None:
            return table.units(rate.decode("utf-8"))

        distinct = set(rates)
        if len(distinct) > 1:
            return [
                None if (r := units(rate)) is None else _fee(a, r)
                for rate, a in zip(rates, amounts, strict=True)
            ]
        rate_e6 = units(distinct.pop())
        if rate_e6 is None:
            return [None] * len(amounts)
        return [
            (a * rate_e6 + 500_000) // 1_000_000 * 1000
            if a >= 0
            else -((-a * rate_e6 + 500_000) // 1_000_000 * 1000)
            for a in amounts
        ]

    def _refuse(self, vs: list[list[str]], first: int) -> NoReturn:
        """Raise for the first bad row of a run, in file order, with the checks in the order a row is read."""
        lay = self.parser.layout
        assert lay is not None
        n_cols = len(lay.columns)
        c2, c5 = self.c2, self.c5
        for number, v in enumerate(vs, first):
            if len(v) != n_cols:
                raise BillParseError(f"{len(v)} values for {n_cols} columns", number)
            try:
                for c in self.summed:
                    c2[v[c]]
                c5[v[lay.i_fee]]
                if lay.refund_only or (lay.i_refund_no is not None and v[lay.i_state] == "REFUND"):
                    ref = v[lay.i_refund_no]  # type: ignore[index]
                    if not ref or ref == "0":
                        raise ValueError("refund row without 商户退款单号")
                elif not v[lay.i_tx]:
                    raise ValueError("payment row without 微信订单号")
            except ValueError as exc:
                raise BillParseError(str(exc), number) from None
        raise AssertionError("a run refused without a bad row")  # pragma: no cover


# ---------------------------------------------------------------- the download and the opened file


class WeChatBillSource:
    channel = wx.STORED

    def __init__(self, merchants: Any):
        self.merchants = merchants

    def fetch(self, mchid: str, bill_date: str) -> Fetched:
        client = wechatpay_v3_desk(self.merchants).client(wechatpay_v3_desk(self.merchants).wechatpay(mchid))
        try:
            answer = client.tradebill(bill_date, "ALL")
        except wx.WeChatCallError as exc:
            if exc.code == "NO_STATEMENT_EXIST":
                return Fetched(NO_STATEMENT, note=str(exc))
            if exc.code == "STATEMENT_CREATING":
                return Fetched(NOT_READY, note=str(exc))
            raise DownloadFailed(f"tradebill: {exc}", retryable=exc.retryable) from None
        try:
            raw = client.download_bill(answer["download_url"])
        except wx.WeChatCallError as exc:
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
