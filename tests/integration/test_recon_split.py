"""A big bill on several cores (service/recon_partition.py `partition_file`): the bill on disk is cut at line
boundaries, the first piece parsed here and every other one in a process of its own after the bill's head. Whatever
the cuts, the partition files, the totals and the summary checks (R32's input) are those of one pass, and a broken
bill fails with the same error, naming the same line. Real processes, real files."""

from __future__ import annotations

import gzip

import pytest
from tally.channels.wechatpay_v3.bills import WeChatBillParser
from tally.domain.recon import BillParseError
from tally.service.recon_partition import Partitioned, partition_bill, partition_file
from tally.service.recon_sources import OpenedBill, lines_of

from tests.integration.recon_bills import day_of_differences


def _bill(form: str = "crlf", rows: int = 400) -> bytes:
    bill, _ = day_of_differences("1900000109", rows=rows)
    if form == "lf":
        bill = bill.replace(b"\r\n", b"\n")
    elif form == "bom" and not bill.startswith(b"\xef\xbb\xbf"):
        bill = b"\xef\xbb\xbf" + bill
    return bill


def _both(tmp_path, bill: bytes, workers: int) -> tuple[Partitioned, Partitioned]:
    path = tmp_path / "ALL.csv"
    path.write_bytes(bill)
    one = partition_bill(OpenedBill("wechatpay", bill), tmp_path / "one")
    split = partition_file(
        OpenedBill("wechatpay", b""), tmp_path / "split", path, workers=workers, split_bytes=0
    )
    return one, split


def _assert_same(one: Partitioned, split: Partitioned) -> None:
    assert split.totals == one.totals  # rows, amounts, fees, the stated rows and every summary check
    assert (split.head, split.rows, split.partitions) == (one.head, one.rows, one.partitions)
    for p in range(one.partitions):
        assert split.rows_path(p).read_bytes() == one.rows_path(p).read_bytes()
        a, b = one.index(p), split.index(p)
        assert (b.keys, b.amounts, b.flags, b.where, b.fees) == (a.keys, a.amounts, a.flags, a.where, a.fees)
    assert sorted(f.name for f in split.directory.iterdir()) == sorted(
        f.name for f in one.directory.iterdir()
    )


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("form", ["crlf", "lf", "bom"])
def test_a_bill_read_in_pieces_gives_the_files_totals_and_checks_of_one_pass(tmp_path, form, workers):
    one, split = _both(tmp_path, _bill(form), workers)
    assert split.pieces == workers and one.pieces == 1
    assert all(check.ok for check in split.totals.checks) and len(split.totals.checks) > 3
    _assert_same(one, split)


def test_r32_a_summary_that_disagrees_with_the_rows_disagrees_the_same_way_in_pieces(tmp_path):
    """The summary is read by the last piece and checked against the rows of all of them: one pass's verdict."""
    bill = _bill()
    summary_at = bill.rindex(b"\n`", 0, len(bill) - 1) + 1
    head, summary = bill[:summary_at], bill[summary_at:]
    stated_rows = summary.split(b",")[0]
    bill = head + summary.replace(stated_rows, stated_rows + b"1", 1)  # one digit more rows than there are
    one, split = _both(tmp_path, bill, 2)
    assert split.pieces == 2
    assert [c.name for c in split.totals.checks if not c.ok] == ["总交易单数"]
    _assert_same(one, split)


@pytest.mark.parametrize("where", ["first piece", "last piece"])
def test_a_broken_row_fails_with_the_error_of_one_pass_whichever_piece_it_is_in(tmp_path, where):
    lines = _bill().splitlines(keepends=True)
    broken = 3 if where == "first piece" else len(lines) - 5
    lines[broken] = lines[broken].replace(b",`", b",", 1)  # one value short
    bill = b"".join(lines)
    path = tmp_path / "ALL.csv"
    path.write_bytes(bill)
    with pytest.raises(BillParseError) as one:
        partition_bill(OpenedBill("wechatpay", bill), tmp_path / "one")
    with pytest.raises(BillParseError) as split:
        partition_file(OpenedBill("wechatpay", b""), tmp_path / "split", path, workers=2, split_bytes=0)
    assert str(split.value) == str(one.value) and split.value.line == broken + 1


@pytest.mark.parametrize("workers", [4, 7])
def test_more_pieces_than_a_tiny_bill_has_lines_still_gives_one_pass_answer(tmp_path, workers):
    """Cuts that collide or fall in the summary: the bill is read in one pass (or in the pieces that work)."""
    one, split = _both(tmp_path, _bill(rows=2), workers)
    _assert_same(one, split)


def test_a_gzip_bill_on_disk_is_read_in_one_pass(tmp_path):
    bill = _bill()
    path = tmp_path / "ALL.csv.gz"
    path.write_bytes(gzip.compress(bill))
    split = partition_file(OpenedBill("wechatpay", b""), tmp_path / "split", path, workers=2, split_bytes=0)
    assert split.pieces == 1
    _assert_same(partition_bill(OpenedBill("wechatpay", bill), tmp_path / "one"), split)


def test_a_parser_that_read_the_summary_does_not_join_a_later_piece():
    """The cut fell after the summary began: `join` says no and changes nothing (then one pass reads the bill)."""
    bill = _bill()
    whole = WeChatBillParser(lines_of(bill))
    whole.index()
    later = WeChatBillParser(lines_of(bill[: bill.index(b"\n") + 1]))  # the head alone
    later.index()
    before = whole.totals.as_dict()
    assert whole.join(later) is False
    assert whole.totals.as_dict() == before
