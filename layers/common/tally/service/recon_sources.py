"""Where bills come from: the channels' download APIs (and how a file is opened for parsing).

`fetch(mchid, bill_date)` answers one of: a bill (files + SHA-1), NO_STATEMENT (the channel says there is
no bill for that day) or NOT_READY (being generated: retry later). Everything else raises DownloadFailed.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.channels import bills_alipay as ali
from tally.channels import wechatpay_v3 as wx
from tally.channels.bills_wechatpay import WeChatBillParser
from tally.domain.recon import BillIndex, BillItem, BillParseError, BillTotals

OK, NO_STATEMENT, NOT_READY = "OK", "NO_STATEMENT", "NOT_READY"


class DownloadFailed(Exception):
    def __init__(self, message: str, *, retryable: bool = False, code: str = "DOWNLOAD_FAILED"):
        super().__init__(message)
        self.retryable = retryable
        self.code = code


@dataclass
class Fetched:
    status: str
    data: bytes = b""  # the bill as it will be parsed (WeChat: decompressed; Alipay: the zip)
    name: str = ""
    sha1: str = ""
    channel_hash: str = ""  # what the channel said the hash is (WeChat hash_value), "" if none
    note: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def sha1_hex(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()  # noqa: S324 - the channel's integrity check, not security


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


def gunzip(raw: bytes) -> bytes:
    """The GZIP answer decompressed; anything that is not gzip is kept as-is for the parser to refuse
    loudly (an HTML error page served with 200 must not disappear here)."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DownloadFailed(f"corrupt gzip: {exc}", code="CORRUPT_GZIP") from None


class AlipayBillSource:
    """Alipay trade bills with the merchant's own app (public-key, certificate or partner mode, from the merchant
    directory): alipay.data.dataservice.bill.downloadurl.query (RSA2-signed, the answer verified) → the zip."""

    channel = ali.CHANNEL

    def __init__(self, merchants: Any, *, download_timeout_s: float = 30.0):
        self.merchants = merchants
        self.download_timeout_s = download_timeout_s

    def fetch(self, app_id: str, bill_date: str) -> Fetched:
        from tally.channels import alipay as api
        from tally.service.merchants import UnknownMerchant

        try:
            client = self.merchants.alipay_client(self.merchants.alipay(app_id))
            answer = client.call(ali.METHOD, {"bill_type": "trade", "bill_date": bill_date})
        except UnknownMerchant as exc:
            raise DownloadFailed(f"no Alipay merchant {app_id}: {exc}", code="NO_MERCHANT") from None
        except api.ChannelError as exc:
            if exc.sub_code in ali.NO_STATEMENT_SUB_CODES:
                return Fetched(NO_STATEMENT, note=str(exc))
            raise DownloadFailed(f"bill.downloadurl.query: {exc}", retryable=exc.retryable) from None
        url = str(answer.get("bill_download_url") or "")
        if not url:
            raise DownloadFailed("bill.downloadurl.query answered 10000 without bill_download_url")
        try:
            data = ali.download(url, self.merchants.alipay_gateway, timeout_s=self.download_timeout_s)
        except ali.AlipayError as exc:
            raise DownloadFailed(f"alipay bill: {exc}", retryable=exc.retryable) from None
        return Fetched(OK, data, "trade.csv.zip", sha1_hex(data))


# ---------------------------------------------------------------- opening a bill for parsing


class OpenedBill:
    """One bill file, opened. `index()` is the run's single parse pass (totals for the guards + a compact
    index for matching); `item_at(where)` re-reads one row in full; `parser()` is a fresh pass of BillItems
    (what `tally bill parse` prints)."""

    def __init__(self, channel: str, data: bytes, name: str = ""):
        self.channel = channel
        self._summary_row: dict[str, int] | None = None
        if channel == wx.CHANNEL:
            self._data = gunzip(data)
        elif channel == ali.CHANNEL:
            self._data = data
            if data[:2] == b"PK":  # the zip as downloaded (or dropped by hand)
                files = ali.open_zip(data)
                self._data = files.detail
                if files.summary is not None:
                    self._summary_row = ali.parse_summary(ali.lines_of(files.summary))
        else:
            raise BillParseError(f"no bill parser for channel {channel!r}")

    def lines(self) -> Iterator[bytes]:
        """The detail file's lines, as the parser reads them."""
        return ali.lines_of(self._data)

    def parser(self, *, check_fees: bool = True, lines: Iterator[bytes] | None = None) -> Any:
        """`lines`: instead of `self.lines()` (a file streamed by service/recon_partition.py, or these wrapped)."""
        lines = self.lines() if lines is None else lines
        if self.channel == wx.CHANNEL:
            return WeChatBillParser(lines, check_fees=check_fees)
        return _AlipayWithSummary(ali.AlipayBillParser(lines), self._summary_row)

    def index(self) -> tuple[BillTotals, BillIndex]:
        """The one parse pass of a run: totals (with every summary check) and the per-row index."""
        self._indexed = parser = self.parser()
        index = parser.index()
        return parser.totals, index

    def item_at(self, where: int) -> BillItem:
        """The full BillItem of the row starting at byte `where` (after `index()`)."""
        end = self._data.find(b"\n", where)
        return self._indexed.item_at(self._data[where : end + 1 if end >= 0 else len(self._data)])


class _AlipayWithSummary:
    """The detail parser plus the 汇总 file's counts as extra summary checks."""

    def __init__(self, parser: ali.AlipayBillParser, summary: dict[str, int] | None):
        self._parser = parser
        self._summary = summary
        self.totals: BillTotals = parser.totals

    def items(self) -> Iterator[BillItem]:
        yield from self._parser.items()
        if self._summary is not None:
            self.totals.checks += ali.summary_checks(self.totals, self._summary)

    def scan(self) -> BillTotals:
        for _ in self.items():
            pass
        return self.totals

    def index(self) -> BillIndex:
        index = self._parser.index()
        if self._summary is not None:
            self.totals.checks += ali.summary_checks(self.totals, self._summary)
        return index

    def item_at(self, raw: bytes) -> BillItem:
        return self._parser.item_at(raw)
