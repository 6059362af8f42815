"""Where bills come from: the channels' download APIs (and how a file is opened for parsing).

`fetch(mchid, bill_date)` answers one of: a bill (files + SHA-1), NO_STATEMENT (the channel says there is
no bill for that day) or NOT_READY (being generated: retry later). Everything else raises DownloadFailed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
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
        return Fetched(OK, data, "ALL.csv", sha1_hex(data), answer["hash_value"].lower(),
                       extra={"hash_type": answer.get("hash_type", "")})


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
    """Alipay trade bills. Credentials: the secret `<prefix>alipay/<app_id>` with app_private_key and
    alipay_public_key (PEM). The merchant directory for Alipay is being built on another branch."""

    channel = ali.CHANNEL

    def __init__(self, secrets: Any, secret_prefix: str, gateway: str, *, timeout_s: float = 10.0):
        self.secrets = secrets
        self.secret_prefix = secret_prefix
        self.gateway = gateway
        self.timeout_s = timeout_s

    def client(self, app_id: str) -> ali.AlipayBillClient:
        from cryptography.hazmat.primitives import serialization

        try:
            secret = json.loads(self.secrets.get_secret_value(
                SecretId=f"{self.secret_prefix}alipay/{app_id}")["SecretString"])
        except Exception as exc:  # noqa: BLE001 - any failure reading credentials is a download failure
            raise DownloadFailed(f"no Alipay credentials for {app_id}: {type(exc).__name__}") from None
        return ali.AlipayBillClient(
            self.gateway, app_id,
            serialization.load_pem_private_key(secret["app_private_key"].encode(), password=None),
            serialization.load_pem_public_key(secret["alipay_public_key"].encode()), timeout_s=self.timeout_s)

    def fetch(self, mchid: str, bill_date: str) -> Fetched:
        client = self.client(mchid)
        try:
            url = client.download_url(bill_date)
            if url is None:
                return Fetched(NO_STATEMENT, note="isp.bill_not_exist")
            data = client.download(url)
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

    def parser(self, *, check_fees: bool = True) -> Any:
        lines: Iterator[bytes] = ali.lines_of(self._data)
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
        return self._indexed.item_at(self._data[where:end + 1 if end >= 0 else len(self._data)])


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
