"""Alipay trade bill (alipay.data.dataservice.bill.downloadurl.query, bill_type=trade): the zip, the two
GBK CSVs in it, a streaming parser for 业务明细 and one for 业务明细(汇总) (channel-spec.md §7), and the
download client (request signing RSA2, response verification, the 30 s download URL).

The parsers are pure. A file that is not GBK, has an unknown header, an unknown 业务类型 or an HTML
error page raises BillParseError: never read as "no rows".
"""

from __future__ import annotations

import csv
import io
import re
import urllib.parse
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tally import errors, httpclient
from tally.channels.alipay.channel import CHANNEL as SPEC
from tally.channels.alipay.channel import GATEWAY
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.bill_source import NO_STATEMENT, OK, DownloadFailed, Fetched, lines_of, sha1_hex
from tally.domain.recon import (
    PAYMENT,
    REFUND,
    BillIndex,
    BillItem,
    BillParseError,
    BillTotals,
    SummaryCheck,
    to_units,
)

CHANNEL = SPEC.stored
ENCODING = "gbk"

DETAIL_HEADER = (
    "支付宝交易号,商户订单号,业务类型,商品名称,创建时间,完成时间,门店编号,门店名称,操作员,终端号,对方账户,"
    "订单金额（元）,商家实收（元）,支付宝红包（元）,集分宝（元）,支付宝优惠（元）,商家优惠（元）,券核销金额（元）,"
    "券名称,商家红包消费金额（元）,卡消费金额（元）,退款批次号/请求号,服务费（元）,分润（元）,备注"
)
SUMMARY_HEADER = (
    "门店编号,门店名称,交易订单总笔数,退款订单总笔数,订单金额（元）,商家实收（元）,支付宝优惠（元）,商家优惠（元）,"
    "卡消费金额（元）,服务费（元）,分润（元）,实收净额（元）"
)
DETAIL_SUFFIX = "业务明细.csv"
SUMMARY_SUFFIX = "业务明细(汇总).csv"

_COLS = DETAIL_HEADER.split(",")
_I = {name: i for i, name in enumerate(_COLS)}
_TRADE_TOTAL = re.compile(r"^#交易合计：(\d+)笔，商家实收共(-?[\d.]+)元，商家优惠共(-?[\d.]+)元")
_REFUND_TOTAL = re.compile(r"^#退款合计：(\d+)笔，商家实收退款共(-?[\d.]+)元，商家优惠退款共(-?[\d.]+)元")
KINDS = {"交易": PAYMENT, "退款": REFUND}  # other 业务类型 values are unconfirmed: a person looks (loud)


def _decode(raw: bytes, number: int) -> str:
    try:
        return raw.decode(ENCODING)
    except UnicodeDecodeError as exc:
        raise BillParseError(f"not GBK: {exc.reason} at byte {exc.start}", number) from None


def _html(line: str) -> bool:
    low = line.strip()[:200].lower()
    return low.startswith("<") or "<html" in low or "<!doctype" in low


def _amount(text: str) -> int:
    return to_units(text, 2) if text else 0


class AlipayBillParser:
    """One pass over 业务明细.csv (bytes lines, GBK). `totals` is complete once items() is exhausted."""

    def __init__(self, lines: Iterable[bytes]):
        self._lines = lines
        self.totals = BillTotals(CHANNEL, "DETAIL")
        self._discount = {PAYMENT: 0, REFUND: 0}
        self._received = {PAYMENT: 0, REFUND: 0}  # signed, as the bill writes 商家实收

    def items(self) -> Iterator[BillItem]:
        header_seen = False
        trade_total: tuple[int, int, int] | None = None
        refund_total: tuple[int, int, int] | None = None
        totals = self.totals
        for number, raw in enumerate(self._lines, 1):
            line = _decode(raw, number).rstrip("\r\n")
            if number == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            if _html(line):
                raise BillParseError("an HTML page, not a bill", number)
            if line.startswith("#"):
                try:
                    if m := _TRADE_TOTAL.match(line):
                        trade_total = (int(m.group(1)), to_units(m.group(2), 2), to_units(m.group(3), 2))
                    elif m := _REFUND_TOTAL.match(line):
                        refund_total = (int(m.group(1)), to_units(m.group(2), 2), to_units(m.group(3), 2))
                except ValueError as exc:
                    raise BillParseError(f"trailer: {exc}", number) from None
                continue
            if not header_seen:
                if line.strip() != DETAIL_HEADER:
                    raise BillParseError(f"unknown header {line[:80]!r}: not an Alipay 业务明细 bill", number)
                header_seen = True
                continue
            (values,) = list(csv.reader([line]))
            if len(values) != len(_COLS):
                raise BillParseError(f"{len(values)} values for {len(_COLS)} columns", number)
            values = [v.strip() for v in values]  # ids end with a TAB (so spreadsheets keep them as text)
            try:
                item = row_item(values)
                self._received[item.kind] += item.amount_cent if item.kind is PAYMENT else -item.amount_cent
                self._discount[item.kind] += _amount(values[_I["商家优惠（元）"]])
            except ValueError as exc:
                raise BillParseError(str(exc), number) from None
            totals.add(item)
            yield item
        if not header_seen:
            raise BillParseError("no 业务明细 header line")
        checks = []
        if trade_total is not None:
            checks += [
                SummaryCheck("交易合计笔数", trade_total[0], totals.payments, "rows"),
                SummaryCheck("交易合计商家实收", trade_total[1], self._received[PAYMENT]),
                SummaryCheck("交易合计商家优惠", trade_total[2], self._discount[PAYMENT]),
            ]
        if refund_total is not None:
            checks += [
                SummaryCheck("退款合计笔数", refund_total[0], totals.refunds, "rows"),
                SummaryCheck("退款合计商家实收退款", refund_total[1], self._received[REFUND]),
                SummaryCheck("退款合计商家优惠退款", refund_total[2], self._discount[REFUND]),
            ]
        if trade_total is not None and refund_total is not None:
            totals.stated_rows = trade_total[0] + refund_total[0]
        totals.checks = checks

    def scan(self) -> BillTotals:
        for _ in self.items():
            pass
        return self.totals

    def index(self) -> BillIndex:
        """One pass: the totals and the compact per-row index matching reads (see WeChatBillParser.index)."""
        index = BillIndex()
        lines = _Positions(self._lines)
        self._lines = lines
        for item in self.items():
            index.add(item, lines.start)
        return index

    @staticmethod
    def item_at(raw: bytes) -> BillItem:
        """One detail line (bytes, as in the file) → its BillItem, by the same rules as `items()`."""
        (values,) = list(csv.reader([_decode(raw, 0).rstrip("\r\n")]))
        try:
            return row_item([v.strip() for v in values])
        except ValueError as exc:
            raise BillParseError(str(exc)) from None


class _Positions:
    """Lines passed through, remembering where the last one started (byte offset in the file)."""

    def __init__(self, lines: Iterable[bytes]):
        self._lines = iter(lines)
        self.start = 0
        self._end = 0

    def __iter__(self) -> _Positions:
        return self

    def __next__(self) -> bytes:
        raw = next(self._lines)
        self.start, self._end = self._end, self._end + len(raw)
        return raw


def row_item(v: list[str]) -> BillItem:
    """One 业务明细 row (values stripped) → BillItem. Pure."""
    kind = KINDS.get(v[_I["业务类型"]])
    if kind is None:
        raise ValueError(f"unknown 业务类型 {v[_I['业务类型']]!r}")
    trade_no, out_trade_no = v[_I["支付宝交易号"]], v[_I["商户订单号"]]
    received = _amount(v[_I["商家实收（元）"]])
    fee_e5 = _amount(v[_I["服务费（元）"]]) * 1000
    when = v[_I["完成时间"]] or v[_I["创建时间"]]
    if kind is PAYMENT:
        if not trade_no:
            raise ValueError("交易 row without 支付宝交易号")
        return BillItem(
            f"{CHANNEL}#{trade_no}", PAYMENT, received, "SUCCESS", when, trade_no, out_trade_no, "", fee_e5
        )
    # a refund: 商家实收 is negative; 退款批次号/请求号 is out_request_no (= out_trade_no when none was given)
    refund_no = v[_I["退款批次号/请求号"]] or out_trade_no
    return BillItem(
        f"{CHANNEL}#{refund_no}",
        REFUND,
        -received,
        "SUCCESS",
        when,
        trade_no,
        out_trade_no,
        refund_no,
        fee_e5,
    )


def parse_summary(lines: Iterable[bytes]) -> dict[str, int]:
    """业务明细(汇总).csv → the 合计 row: {"payments", "refunds", "received_cent", "fee_cent"}."""
    header_seen = False
    for number, raw in enumerate(lines, 1):
        line = _decode(raw, number).rstrip("\r\n")
        if not line.strip() or line.startswith("#"):
            continue
        if _html(line):
            raise BillParseError("an HTML page, not a bill summary", number)
        if not header_seen:
            if line.strip() != SUMMARY_HEADER:
                raise BillParseError(f"unknown summary header {line[:80]!r}", number)
            header_seen = True
            continue
        (values,) = list(csv.reader([line]))
        values = [v.strip() for v in values]
        if values and values[0] == "合计":
            try:
                return {
                    "payments": int(values[2]),
                    "refunds": int(values[3]),
                    "received_cent": _amount(values[5]),
                    "fee_cent": _amount(values[9]),
                }
            except (ValueError, IndexError) as exc:
                raise BillParseError(f"合计 row: {exc}", number) from None
    raise BillParseError("no 合计 row in the summary file")


def summary_checks(totals: BillTotals, summary: dict[str, int]) -> list[SummaryCheck]:
    """Cross-check the detail against 业务明细(汇总)'s 合计 row: counts only (its amount semantics are
    UNCONFIRMED in channel-spec §7, so they are not a blocking check)."""
    return [
        SummaryCheck("汇总交易订单总笔数", summary["payments"], totals.payments, "rows"),
        SummaryCheck("汇总退款订单总笔数", summary["refunds"], totals.refunds, "rows"),
    ]


# ---------------------------------------------------------------- the zip


@dataclass
class BillFiles:
    detail: bytes
    summary: bytes | None
    names: list[str]


def open_zip(
    data: bytes, detail_suffix: str = DETAIL_SUFFIX, summary_suffix: str = SUMMARY_SUFFIX
) -> BillFiles:
    """Pick the two CSVs by suffix (entry order is not guaranteed; names are GBK in the zip header). The fund
    flow (signcustomer) passes its own suffixes (`…_账务明细.csv`, `…_账务明细(汇总).csv`)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        head = data[:200].decode("utf-8", "replace")
        raise BillParseError(f"not a zip file (starts {head[:60]!r})") from None
    detail = summary = None
    names = []
    for info in archive.infolist():
        name = info.filename
        if not info.flag_bits & 0x800:  # no UTF-8 flag: zipfile decoded the GBK name as cp437
            try:
                name = name.encode("cp437").decode(ENCODING)
            except (UnicodeEncodeError, UnicodeDecodeError):
                pass  # keep zipfile's reading; the suffix test below decides
        names.append(name)
        if name.endswith(summary_suffix):
            summary = archive.read(info)
        elif name.endswith(detail_suffix):
            detail = archive.read(info)
    if detail is None:
        raise BillParseError(f"no *{detail_suffix} in the zip (entries: {names})")
    return BillFiles(detail, summary, names)


# ---------------------------------------------------------------- the download
# The signed request (alipay.data.dataservice.bill.downloadurl.query) goes through wire.AlipayClient with the
# merchant's own credentials (public-key, certificate or partner mode): AlipayBillSource below.


class AlipayError(errors.ChannelError):
    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


NO_STATEMENT_SUB_CODES = {"isp.bill_not_exist"}  # what the gateway really answers (not BILL_NOT_EXIST)
METHOD = "alipay.data.dataservice.bill.downloadurl.query"


def download(url: str, gateway: str, *, timeout_s: float = 30.0) -> bytes:
    """GET the bill behind `bill_download_url` (valid 30 s; the answer naming it was signed and verified, the
    file itself is not signed: the parser and the guards check it). Followed only to an alipay.com host or the
    gateway's own host (a simulator), never anywhere a tampered answer could point."""
    parts, own = urllib.parse.urlsplit(url), urllib.parse.urlsplit(gateway)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not (
        host == own.hostname or host == "alipay.com" or host.endswith(".alipay.com")
    ):
        raise AlipayError(f"bill_download_url on an unexpected host {host!r}: not followed")
    try:
        return httpclient.request("GET", url, timeout_s=timeout_s).body  # scheme and host checked above
    except (httpclient.StatusError, OSError) as exc:
        raise AlipayError(f"download: {exc}", retryable=True) from None


# ---------------------------------------------------------------- the source and the opened file


class AlipayBillSource:
    """Alipay trade bills with the merchant's own app (public-key, certificate or partner mode, from the merchant
    directory): alipay.data.dataservice.bill.downloadurl.query (RSA2-signed, the answer verified) → the zip."""

    channel = CHANNEL

    def __init__(self, merchants: Any, *, download_timeout_s: float = 30.0):
        self.merchants = merchants
        self.download_timeout_s = download_timeout_s

    def fetch(self, app_id: str, bill_date: str) -> Fetched:
        from tally.channels.alipay import wire as api

        try:
            client = alipay_desk(self.merchants).alipay_client(alipay_desk(self.merchants).alipay(app_id))
            answer = client.call(METHOD, {"bill_type": "trade", "bill_date": bill_date})
        except errors.NotFound as exc:  # the directory's UnknownMerchant
            raise DownloadFailed(f"no Alipay merchant {app_id}: {exc}", code="NO_MERCHANT") from None
        except api.AlipayCallError as exc:
            if exc.sub_code in NO_STATEMENT_SUB_CODES:
                return Fetched(NO_STATEMENT, note=str(exc))
            raise DownloadFailed(f"bill.downloadurl.query: {exc}", retryable=exc.retryable) from None
        url = str(answer.get("bill_download_url") or "")
        if not url:
            raise DownloadFailed("bill.downloadurl.query answered 10000 without bill_download_url")
        try:
            data = download(url, self.merchants.setting(GATEWAY), timeout_s=self.download_timeout_s)
        except AlipayError as exc:
            raise DownloadFailed(f"alipay bill: {exc}", retryable=exc.retryable) from None
        return Fetched(OK, data, "trade.csv.zip", sha1_hex(data))


class AlipayBill:
    """An Alipay bill opened for parsing: the 业务明细 of the zip as downloaded (or a detail CSV dropped by
    hand), with the 汇总 file's counts when the zip has one."""

    def __init__(self, data: bytes):
        self.data = data
        self._summary_row: dict[str, int] | None = None
        if data[:2] == b"PK":  # the zip as downloaded (or dropped by hand)
            files = open_zip(data)
            self.data = files.detail
            if files.summary is not None:
                self._summary_row = parse_summary(lines_of(files.summary))

    def parser(self, *, check_fees: bool = True, lines: Iterator[bytes] | None = None) -> _AlipayWithSummary:
        return _AlipayWithSummary(
            AlipayBillParser(lines_of(self.data) if lines is None else lines), self._summary_row
        )


class _AlipayWithSummary:
    """The detail parser plus the 汇总 file's counts as extra summary checks."""

    def __init__(self, parser: AlipayBillParser, summary: dict[str, int] | None):
        self._parser = parser
        self._summary = summary
        self.totals: BillTotals = parser.totals

    def items(self) -> Iterator[BillItem]:
        yield from self._parser.items()
        if self._summary is not None:
            self.totals.checks += summary_checks(self.totals, self._summary)

    def scan(self) -> BillTotals:
        for _ in self.items():
            pass
        return self.totals

    def index(self) -> BillIndex:
        index = self._parser.index()
        if self._summary is not None:
            self.totals.checks += summary_checks(self.totals, self._summary)
        return index

    def item_at(self, raw: bytes) -> BillItem:
        return self._parser.item_at(raw)
