"""The partition files of service/recon_partition.py, against a reference built the slow, obvious way from the
in-memory index: whatever the chunk size (a block of rows only takes the spill's fast path, a block holding the
header or the summary the general one), every partition holds exactly the bill's rows of its ledger shard, raw
and in bill order, and its index says the same as the in-memory one. The partition function is the ledger's
shard hash (store.tables.shard_of / store.shards.ledger_shard), which every ledger row already carries in its
`bill_shard` attribute: a bill partition must be that shard, or the match misses."""

from __future__ import annotations

import pytest
from tally.service.recon_partition import partition_bill, partitions_of
from tally.service.recon_sources import OpenedBill
from tally.store.shards import LEDGER_SHARDS, ledger_shard
from tally.store.tables import shard_of

from tests.integration.recon_bills import day_of_differences

KEYS = [f"wechatpay#42000000012024050{i:010d}" for i in range(2_000)] + [
    "alipay#2024050122001",
    "wechatpay#R-退款-1",  # non-ASCII: hashed as its UTF-8 bytes, as shard_of does
    "",
    "x" * 300,
]


@pytest.mark.parametrize("n", [1, 2, 7, LEDGER_SHARDS, 100, 256, 300, 1 << 20])
def test_the_partition_of_a_key_is_its_shard_of(n):
    assert partitions_of([k.encode() for k in KEYS], n) == [shard_of(k, n) for k in KEYS]


def test_bill_partition_p_is_ledger_shard_p_for_every_key_form():
    """A bill key is `channel#id`; the ledger entry that books it is `channel#mchid#id` (or `channel#id` before
    issue #15) and its FEE entry `fee#…`: all of them in the same shard as the bill row's partition."""
    ids = [f"42000000012024050{i:010d}" for i in range(500)]
    parts = partitions_of([f"wechatpay#{i}".encode() for i in ids], LEDGER_SHARDS)
    assert len(set(parts)) == LEDGER_SHARDS
    for ident, p in zip(ids, parts, strict=True):
        for pk in (
            f"wechatpay#{ident}",
            f"wechatpay#1900000109#{ident}",
            f"fee#wechatpay#1900000109#{ident}",
        ):
            assert ledger_shard(pk) == p


def _expected(bill: bytes) -> dict[int, tuple[bytes, list]]:
    """partition → (its rows file, its index as (key, amount, flag, where, fee) rows), from the in-memory index."""
    opened = OpenedBill("wechatpay", bill)
    _, index = opened.index()
    out: dict[int, tuple[bytes, list]] = {p: (b"", []) for p in range(LEDGER_SHARDS)}
    for i, key in enumerate(index.keys):
        start = index.where[i]
        end = bill.find(b"\n", start) + 1 or len(bill)
        raw, rows = out[ledger_shard(key)]
        rows.append((key, index.amounts[i], index.flags[i], len(raw), index.fees[i]))
        out[ledger_shard(key)] = (raw + bill[start:end], rows)
    return out


@pytest.mark.parametrize("chunk_lines", [1, 7, 64, 10_000, 100_000])
@pytest.mark.parametrize("form", ["crlf", "lf", "bom"])
def test_every_partition_holds_its_shards_rows_raw_and_in_bill_order(tmp_path, chunk_lines, form):
    bill, _ = day_of_differences("1900000109", rows=400)
    if form == "lf":
        bill = bill.replace(b"\r\n", b"\n")
    elif form == "bom" and not bill.startswith(b"\xef\xbb\xbf"):
        bill = b"\xef\xbb\xbf" + bill
    expected = _expected(bill)
    parts = partition_bill(OpenedBill("wechatpay", bill), tmp_path, chunk_lines=chunk_lines)
    assert parts.head == bill[: bill.index(b"\n") + 1]  # the header line: what a row reader needs
    assert sum(parts.rows) == sum(len(rows) for _, rows in expected.values()) > 400
    for p in range(LEDGER_SHARDS):
        raw, rows = expected[p]
        index = parts.index(p)
        got = list(zip(index.keys, index.amounts, index.flags, index.where, index.fees, strict=True))
        assert parts.rows_path(p).read_bytes() == raw
        assert got == rows and parts.rows[p] == len(rows)
        reader = parts.reader(p)
        assert [reader.item_at(w).key for w in index.where] == index.keys  # `where` finds each row again
        reader.close()
