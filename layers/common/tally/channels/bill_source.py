"""What every channel's bill download answers (service/recon_sources.py, channels/<name>/bills.py).

`fetch(mchid, bill_date)` answers one of: a bill (files + SHA-1), NO_STATEMENT (the channel says there is
no bill for that day) or NOT_READY (being generated: retry later). Everything else raises DownloadFailed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Protocol, runtime_checkable

from tally import errors
from tally.domain.recon import BillIndex, BillItem, BillTotals

OK, NO_STATEMENT, NOT_READY = "OK", "NO_STATEMENT", "NOT_READY"


class DownloadFailed(errors.ChannelError):
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


def gunzip(raw: bytes) -> bytes:
    """The GZIP answer decompressed; anything that is not gzip is kept as-is for the parser to refuse
    loudly (an HTML error page served with 200 must not disappear here)."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DownloadFailed(f"corrupt gzip: {exc}", code="CORRUPT_GZIP") from None


def lines_of(data: bytes) -> Iterator[bytes]:
    """A bill's bytes as lines (bytes, newline kept): what every parser reads."""
    return iter(io.BytesIO(data))


class LineBlocks:
    """A bill's lines handed over a block (a list of lines) at a time, for a reader that must know which lines a
    parser has read (service/recon_partition.py moves a block's indexed rows out before the next block is read).
    Iterated, it is the lines one by one; a parser that reads by block (`blocks`) reads each block to its end
    before it asks for the next."""

    def __init__(self, blocks: Iterable[list[bytes]]):
        self.blocks = iter(blocks)
        self._lines = chain.from_iterable(self.blocks)  # one stream: lines and blocks never read twice

    def __iter__(self) -> Iterator[bytes]:
        return self._lines  # a for loop over the lines runs at C speed, with no Python step per line

    def __next__(self) -> bytes:
        return next(self._lines)


class BillSource(Protocol):
    channel: str

    def fetch(self, mchid: str, bill_date: str) -> Fetched: ...


class BillParser(Protocol):
    totals: BillTotals

    def items(self) -> Iterator[BillItem]: ...

    def scan(self) -> BillTotals: ...

    def index(self) -> BillIndex: ...

    def item_at(self, raw: bytes) -> BillItem: ...


@runtime_checkable
class SplittableParser(BillParser, Protocol):
    """A parser that can read a big bill in line-aligned pieces at once, each piece after the bill's head
    (service/recon_partition.py `partition_file`): `join` folds the next piece's parser into this one."""

    def join(self, later: Any) -> bool: ...


class Bill(Protocol):
    """One bill file opened for parsing: `data` as the parser reads it."""

    data: bytes

    def parser(self, *, check_fees: bool = True, lines: Iterator[bytes] | None = None) -> Any:
        """`lines`: read these instead of `data`'s (a bill streamed from a file by service/recon_partition.py)."""
        ...
