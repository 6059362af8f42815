"""Every bill layout the product reads, per stored channel, and the reviewed mappings kept in the repo
(docs/recon.md "Bill layouts"). The shapes are the parsers' own constants, so a parser and its layout cannot
drift apart; a bill whose shape is none of these is quarantined (service/recon_layout.py).

    known("wechatpay")            # [KnownLayout(kind="trade ALL"), …, KnownLayout(kind="fundflow")]
    shape_of(detail_bytes)        # (Shape, sample row) from the file's first and last lines
    classify("wechatpay", shape)  # the KnownLayout, or None
    repo_mappings("wechatpay")    # {fingerprint: Mapping} from channels/layouts/*.json (reviewed files)
"""

from __future__ import annotations

import functools
import gzip
import json
from collections import deque
from pathlib import Path
from typing import Any

from tally.channels.alipay import bills as alipay_bills
from tally.channels.alipay import fundflow as alipay_fundflow
from tally.channels.bill_source import gunzip
from tally.channels.wechatpay_v3 import bills as wechat_bills
from tally.channels.wechatpay_v3 import fundflow as wechat_fundflow
from tally.domain.bill_layout import KnownLayout, LayoutError, Mapping, Shape, sniff, text_lines
from tally.domain.recon import BillParseError

HEAD_BYTES = 16 * 1024
TAIL_BYTES = 8 * 1024
LAYOUTS_DIR = Path(__file__).parent / "layouts"

TRADE = "trade"
FUNDFLOW = "fundflow"


@functools.cache
def known(channel: str) -> tuple[KnownLayout, ...]:
    """The layouts the channel's parsers read (stored channel: `wechatpay` covers v3 and v2 bills)."""
    if channel == wechat_bills.CHANNEL:
        trade = [
            KnownLayout(channel, f"{TRADE} {name}", Shape.of(header, summary))
            for name, header in wechat_bills.HEADERS.items()
            for summary in (
                wechat_bills.SUMMARY_HEADERS[name],
                *wechat_bills.SUMMARY_ALTERNATIVES.get(name, ()),
            )
        ]
        flow = KnownLayout(
            channel, FUNDFLOW, Shape.of(wechat_fundflow.HEADER, wechat_fundflow.SUMMARY_HEADER)
        )
        return (*trade, flow)
    if channel == alipay_bills.CHANNEL:
        return (
            KnownLayout(
                channel,
                f"{TRADE} 业务明细",
                Shape.of(alipay_bills.DETAIL_HEADER),
                "",
                alipay_bills.DETAIL_HEADER,
                "gbk",
            ),
            KnownLayout(
                channel,
                f"{FUNDFLOW} 账务明细",
                Shape.of(alipay_fundflow.HEADER),
                "",
                alipay_fundflow.HEADER,
                "gbk",
            ),
        )
    return ()


def family(layout: KnownLayout) -> str:
    """`trade` or `fundflow`: which parser reads it."""
    return layout.kind.split(" ", 1)[0]


def classify(channel: str, shape: Shape) -> KnownLayout | None:
    return next((k for k in known(channel) if k.shape == shape), None)


def shape_of(detail: bytes) -> tuple[Shape, list[str]]:
    """The shape of a bill's detail file (decompressed, the CSV itself), from its first and last lines."""
    if len(detail) <= HEAD_BYTES + TAIL_BYTES:
        lines = text_lines(detail)
        return sniff(lines, lines, whole=True)
    head = text_lines(detail[:HEAD_BYTES])[:-1]  # the last one may be cut
    return sniff(head, text_lines(detail[-TAIL_BYTES:]))


def shape_of_file(path: Path) -> tuple[Shape, list[str]]:
    """The same for a bill on disk (plain, or gzip: streamed once for its last lines)."""
    with path.open("rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        with gzip.open(path, "rb") as g:
            head_bytes = g.read(HEAD_BYTES)
            last = deque(g, maxlen=8)
        lines = text_lines(head_bytes)
        if not last:
            return sniff(lines, lines, whole=True)
        return sniff(lines[:-1], text_lines(b"".join(last)))
    size = path.stat().st_size
    if size <= HEAD_BYTES + TAIL_BYTES:
        return shape_of(path.read_bytes())
    with path.open("rb") as f:
        head = f.read(HEAD_BYTES)
        f.seek(size - TAIL_BYTES)
        tail = f.read()
    return sniff(text_lines(head)[:-1], text_lines(tail))


def looks_like_a_bill(shape: Shape) -> bool:
    """A CSV header of several named columns: an HTML page, a JSON error or an empty file is not (the
    parser refuses those, PARSE_FAILED), only a table the channel reshaped is quarantined."""
    cols = shape.header
    if len(cols) < 5 or not all(cols):
        return False
    first = cols[0].lower()
    return not (first.startswith("<") or first.startswith("{") or "html" in first)


def mapping_from(data: dict[str, Any]) -> Mapping:
    return Mapping.from_dict(data, known(str(data.get("channel", ""))))


@functools.cache
def repo_mappings(channel: str) -> dict[str, Mapping]:
    """The reviewed mapping files of the repo (channels/layouts/*.json) for one channel, by fingerprint."""
    found: dict[str, Mapping] = {}
    for path in sorted(LAYOUTS_DIR.glob("*.json")):
        data = json.loads(path.read_text("utf-8"))
        if data.get("channel") != channel:
            continue
        try:
            mapping = mapping_from(data)
        except LayoutError as exc:
            raise LayoutError(f"{path.name}: {exc}") from None
        found[mapping.fingerprint] = mapping
    return found


def detail_any(channel: str, data: bytes) -> bytes:
    """The detail CSV of any bill file a person holds: a trade zip's 业务明细, a signcustomer zip's 账务明细, a gzip
    answer decompressed, a plain CSV as it is."""
    if data[:2] == b"PK" and channel == alipay_bills.CHANNEL:
        try:
            return alipay_bills.open_zip(data).detail
        except BillParseError:
            return alipay_bills.open_zip(
                data, alipay_fundflow.DETAIL_SUFFIX, alipay_fundflow.SUMMARY_SUFFIX
            ).detail
    return gunzip(data)


def fund_account(channel: str, name: str) -> str:
    """A fund-flow file's account: the file does not say it; its name may (recon keeps `{account}.{sha1}.csv`)."""
    if channel == alipay_bills.CHANNEL:
        return alipay_fundflow.ACCOUNT
    upper = name.upper()
    return next((a for a in wechat_fundflow.ACCOUNTS if a in upper), "BASIC")
