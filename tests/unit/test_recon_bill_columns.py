"""The WeChat trade-bill parser reads detail rows a run at a time, column by column (issue #33: a 1M-row bill near
pandas.read_csv). These pin that the column path reads what a row-by-row reader reads: the index the run builds
equals the rows as `items()` gives them, amounts written unusually go through to_units value by value, and a bad
row in a run of thousands is refused at its own line (R32: a bill we cannot read is never "no rows")."""

import pytest
from tally.channels.bill_source import lines_of
from tally.channels.wechatpay_v3.bills import BLOCK_LINES, WeChatBillParser
from tally.domain.recon import BillIndex, BillParseError, check_guards

from bench.recon_1m import HEADER, SUMMARY, generate


def _bill(tmp_path, rows):
    path = tmp_path / "ALL.csv"
    generate(path, rows)
    return path.read_bytes()


def _index_and_items(data):
    indexed = WeChatBillParser(lines_of(data))
    index = indexed.index()
    streamed = WeChatBillParser(lines_of(data))
    items = list(streamed.items())
    return index, indexed.totals, items, streamed.totals


def test_r32_the_run_index_is_the_rows_as_items_read_them(tmp_path):
    data = _bill(tmp_path, BLOCK_LINES + 123)  # more than one block, the last one partial
    index, totals, items, totals_items = _index_and_items(data)
    assert check_guards(totals).code == "PASSED" and totals == totals_items
    assert index.keys == [i.key for i in items]
    assert list(index.amounts) == [i.amount_cent for i in items]
    assert list(index.fees) == [i.fee_e5 for i in items]
    assert all(f & BillIndex.CLEAN == BillIndex.CLEAN for f in index.flags)
    lines = data.split(b"\n")
    assert all(data[w : w + 1] == b"`" and data[w - 1 : w] == b"\n" for w in index.where) and len(lines) > 3


def test_amounts_written_unusually_are_read_value_by_value(tmp_path):
    data = _bill(tmp_path, 50)
    text = data.decode("utf-8")
    row = text.split("\r\n")[7]
    values = row.split(",`")
    values[12] = values[12][
        :-1
    ]  # 应结订单金额 with one decimal ("12.3"): to_units reads it, the fast path does not
    odd = text.replace(row, ",`".join(values), 1).encode()
    index, totals, items, _ = _index_and_items(odd)
    assert index.amounts[6] == items[6].amount_cent == int(values[12].replace(".", "")) * 10
    assert check_guards(totals).code == "SUMMARY_MISMATCH"  # one fen less than the stated total (R32)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda v: v.__setitem__(12, "1.2x"), "not an amount"),
        (lambda v: v.__setitem__(5, ""), "payment row without 微信订单号"),
        (lambda v: v.pop(), "26 values for 27 columns"),
    ],
)
def test_r32_a_bad_row_deep_in_a_run_is_refused_at_its_own_line(tmp_path, change, reason):
    data = _bill(tmp_path, BLOCK_LINES + 10).decode("utf-8")
    lines = data.split("\r\n")
    bad = BLOCK_LINES - 7  # 0-based line index: header is line 1
    values = lines[bad].split(",`")
    change(values)
    lines[bad] = ",`".join(values)
    broken = "\r\n".join(lines).encode()
    for read in (lambda p: p.index(), lambda p: list(p.items())):
        with pytest.raises(BillParseError) as caught:
            read(WeChatBillParser(lines_of(broken)))
        assert caught.value.line == bad + 1 and reason in str(caught.value)


def test_a_line_ending_in_two_carriage_returns_reads_as_one_row(tmp_path):
    data = _bill(tmp_path, 20)
    odd = data.replace(b"\r\n", b"\r\r\n", 3)  # the header, then two rows
    index, totals, items, _ = _index_and_items(odd)
    assert totals.rows == 20 and check_guards(totals).code == "PASSED"
    assert index.keys == [i.key for i in items]
    assert HEADER and SUMMARY  # the bench's layout is the ALL layout these tests read
