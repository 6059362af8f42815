"""Where bills come from and how a file is opened for parsing, for every reconciled channel.

The download (`BillSource.fetch`) and the opened file (`Bill`) of each channel live in its package
(channels/wechatpay_v3/bills.py, channels/alipay/bills.py); the shared answers in channels/bill_source.py.
`OpenedBill` picks the channel's `Bill` through the registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tally.channels import registry as channel_registry
from tally.channels.bill_source import (  # noqa: F401 - re-exported: recon, the CLI and tests import them here
    NO_STATEMENT,
    NOT_READY,
    OK,
    DownloadFailed,
    Fetched,
    gunzip,
    lines_of,
    sha1_hex,
)
from tally.domain.recon import BillIndex, BillItem, BillParseError, BillTotals


class OpenedBill:
    """One bill file, opened. `index()` is the run's single parse pass (totals for the guards + a compact
    index for matching); `item_at(where)` re-reads one row in full; `parser()` is a fresh pass of BillItems
    (what `tally bill parse` prints)."""

    def __init__(self, channel: str, data: bytes, name: str = ""):
        self.channel = channel
        owner = channel_registry.by_stored(channel)
        bill = owner.open_bill(data) if owner is not None and owner.reconciled else None
        if bill is None:
            raise BillParseError(f"no bill parser for channel {channel!r}")
        self._bill = bill
        self._data = bill.data

    def lines(self) -> Iterator[bytes]:
        """The detail file's lines, as the parser reads them."""
        return lines_of(self._data)

    def parser(self, *, check_fees: bool = True, lines: Iterator[bytes] | None = None) -> Any:
        """`lines`: instead of `self.lines()` (a file streamed by service/recon_partition.py, or these wrapped)."""
        return self._bill.parser(check_fees=check_fees, lines=lines)

    def index(self) -> tuple[BillTotals, BillIndex]:
        """The one parse pass of a run: totals (with every summary check) and the per-row index."""
        self._indexed = parser = self.parser()
        index = parser.index()
        return parser.totals, index

    def item_at(self, where: int) -> BillItem:
        """The full BillItem of the row starting at byte `where` (after `index()`)."""
        end = self._data.find(b"\n", where)
        return self._indexed.item_at(self._data[where : end + 1 if end >= 0 else len(self._data)])


def bill_sources(merchants: Any) -> dict[str, Any]:
    """stored channel -> its bill download, for every channel that has one (bootstrap wires these)."""
    sources: dict[str, Any] = {}
    for channel in channel_registry.all_channels():
        source = channel.bill_source(merchants)
        if source is not None:
            sources.setdefault(channel.stored, source)
    return sources
