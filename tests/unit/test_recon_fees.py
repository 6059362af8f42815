"""FEE entries from the one parse pass (R43, docs/settlement.md §6.5), pure: the index carries each row's fee,
`FeeBook` plans the entries a run writes and the differences it reports, with no second pass of the bill."""

from __future__ import annotations

import pathlib

from tally.domain.recon import (
    REFUND,
    BillIndex,
    BillItem,
    FeeBook,
    fee_cent,
    fee_entry_pk,
    legacy_fee_pk,
    round_units,
)
from tally.service.recon_sources import OpenedBill

BILLS = pathlib.Path(__file__).parents[1] / "fixtures" / "bills"
CASES = [
    ("wechatpay", BILLS / "wechat_all_bom_crlf.csv"),
    ("wechatpay", BILLS / "wechat_refund.csv"),
    ("wechatpay", BILLS / "wechat_success.csv"),
    ("wechatpay", BILLS / "wechat_legacy_success.csv"),
    ("alipay", BILLS / "alipay_20880211096256330156_20240501.csv.zip"),
]


def second_pass(channel: str, data: bytes, mchid: str) -> dict[str, int]:
    """What booking fees from a second pass of BillItems gave (the code this replaces): {pk: cents}, first row
    of a key wins, zero fees not booked."""
    fees: dict[str, int] = {}
    for item in OpenedBill(channel, data).parser().items():
        cents = round_units(item.fee_e5, 5, 2)
        if cents:
            fees.setdefault(fee_entry_pk(item.key, mchid), cents)
    return fees


def test_r43_the_one_pass_index_books_the_fees_a_second_pass_of_the_bill_would():
    """For every fixture bill of both channels: the FEE entries planned from the index (its `fees`) are exactly
    those a second parse pass of BillItems gives, and a WeChat refund's fee given back is negative."""
    seen_refund_fee = False
    for channel, path in CASES:
        data = path.read_bytes()
        opened = OpenedBill(channel, data)
        _, index = opened.index()
        assert len(index.fees) == len(index.keys), path
        planned = {pk: cents for pk, cents, _ in FeeBook("1900000109", {}).new(index)}
        assert planned == second_pass(channel, data, "1900000109"), path
        assert planned, path
        for _pk, cents, i in FeeBook("1900000109", {}).new(index):
            item = opened.item_at(index.where[i])
            assert index.fees[i] == item.fee_e5 and cents == fee_cent(item.fee_e5)
            if index.flags[i] & BillIndex.REFUND:
                assert item.kind == REFUND
                if (
                    channel == "wechatpay"
                ):  # WeChat writes a fee given back negative (Alipay: see docs/recon.md)
                    assert cents < 0
                    seen_refund_fee = True
    assert seen_refund_fee


def index_of(*rows: tuple[str, int, str]) -> BillIndex:
    index = BillIndex()
    for n, (key, fee_e5, kind) in enumerate(rows):
        index.add(BillItem(key, kind, 100, "SUCCESS", "", key[-2:], "otn", "", fee_e5), n * 100)
    return index


def test_r43_rounding_half_up_to_the_fen_and_zero_fees_are_not_booked():
    index = index_of(
        ("wechatpay#a1", 1500, "PAYMENT"),  # 0.015 → 0.02 (half up)
        ("wechatpay#a2", 1499, "PAYMENT"),  # 0.01499 → 0.01
        ("wechatpay#a3", 499, "PAYMENT"),  # under half a fen: nothing charged
        ("wechatpay#a4", 0, "PAYMENT"),
        ("wechatpay#r1", -1500, "REFUND"),  # a fee given back: −0.02
    )
    planned = {pk: cents for pk, cents, _ in FeeBook("M1", {}).new(index)}
    assert planned == {"fee#wechatpay#M1#a1": 2, "fee#wechatpay#M1#a2": 1, "fee#wechatpay#M1#r1": -2}


def test_r43_a_rerun_plans_no_write_and_a_changed_fee_is_a_difference_never_an_overwrite():
    index = index_of(("wechatpay#a1", 6000, "PAYMENT"), ("wechatpay#a2", 15000, "PAYMENT"))
    book = FeeBook("M1", {"fee#wechatpay#M1#a1": 6, "fee#wechatpay#M1#a2": 15})
    assert list(book.new(index)) == [] and book.differs == []
    changed = FeeBook("M1", {"fee#wechatpay#M1#a1": 7, "fee#wechatpay#M1#a2": 15})
    assert list(changed.new(index)) == []  # nothing written over the booked 0.07
    assert changed.differs == [(0, 7)]  # row 0 differs from the booked amount 7


def test_r43_entries_booked_before_merchant_scoping_are_recognised_not_booked_twice():
    index = index_of(("wechatpay#a1", 6000, "PAYMENT"), ("wechatpay#a2", 15000, "PAYMENT"))
    book = FeeBook("M1", {legacy_fee_pk("wechatpay#a1"): 6})
    assert [pk for pk, _, _ in book.new(index)] == ["fee#wechatpay#M1#a2"]


def test_r43_two_merchants_with_the_same_refund_number_get_an_entry_each():
    """A merchant's refund number (商户退款单号) is the merchant's own: the FEE entry is scoped like every entry."""
    index = index_of(("wechatpay#R1", -1000, "REFUND"))
    a = [pk for pk, _, _ in FeeBook("M1", {}).new(index)]
    b = [pk for pk, _, _ in FeeBook("M2", {"fee#wechatpay#M1#R1": -1}).new(index)]
    assert a == ["fee#wechatpay#M1#R1"] and b == ["fee#wechatpay#M2#R1"]


def test_r43_a_key_twice_in_the_bill_is_compared_when_its_second_put_is_refused():
    index = index_of(("wechatpay#a1", 6000, "PAYMENT"), ("wechatpay#a1", 7000, "PAYMENT"))
    book = FeeBook("M1", {})
    assert [(pk, c) for pk, c, _ in book.new(index)] == [
        ("fee#wechatpay#M1#a1", 6),
        ("fee#wechatpay#M1#a1", 7),
    ]
    book.refused(index, {"fee#wechatpay#M1#a1": 6})  # the first row's put won
    assert book.differs == [(1, 6)]


def test_r43_the_partition_files_carry_each_rows_fee_and_a_partition_books_its_own_shard(tmp_path):
    """The partitioned path's index files (service/recon_partition.py) carry the fees: the FEE entries planned
    partition by partition are exactly the in-memory plan, and every entry of partition p sits in ledger shard p
    (what `LedgerView.fee_shard(…, p)` reads back on a re-run)."""
    from tally.service.recon_partition import partition_bill
    from tally.store.recon import ledger_shard

    from tests.integration.recon_bills import day_of_differences

    bill, _ = day_of_differences("1900000109", rows=300)
    _, index = OpenedBill("wechatpay", bill).index()
    whole = sorted((pk, cents) for pk, cents, _ in FeeBook("1900000109", {}).new(index))
    parts = partition_bill(OpenedBill("wechatpay", bill), tmp_path, chunk_lines=50)
    parted = []
    for p in range(parts.partitions):
        planned = [(pk, cents) for pk, cents, _ in FeeBook("1900000109", {}).new(parts.index(p))]
        assert all(ledger_shard(pk) == p for pk, _ in planned)
        parted += planned
    assert sorted(parted) == whole and len(whole) > 300  # the duplicate row's key twice in both


def test_r43_each_fee_entry_row_names_the_row_it_was_charged_on_exactly_as_the_second_pass_would():
    """`service.recon.fee_entry_rows` (what `put_fees` writes) for payments and refunds: every field of every row
    equals the entry built the plain way from the row's own BillItem (a payment by transaction_id, a refund by
    refund_no, never both), whatever shortcut builds the dictionaries."""
    from tally.service.recon import fee_entry_rows

    run = {"channel": "wechatpay", "mchid": "1900000109", "bill_date": "2024-05-01", "run_id": "run#t"}
    kinds = set()
    for channel, path in CASES[:2]:
        run["channel"] = channel
        data = path.read_bytes()
        opened = OpenedBill(channel, data)
        _, index = opened.index()
        items = list(OpenedBill(channel, data).parser().items())
        got = list(fee_entry_rows(run, index, FeeBook(run["mchid"], {}), "2024-05-02T02:30:00.000Z"))
        want = []
        for item in items:
            cents = round_units(item.fee_e5, 5, 2)
            if not cents:
                continue
            row = {
                "kind": "FEE",
                "channel": channel,
                "mchid": run["mchid"],
                "bill_date": run["bill_date"],
                "source_run": run["run_id"],
                "booked_at": "2024-05-02T02:30:00.000Z",
                "pk": fee_entry_pk(item.key, run["mchid"]),
                "amount_cent": cents,
                "fee_e5": item.fee_e5,
            }
            if item.kind == REFUND:
                row.update(of="REFUND", refund_no=item.refund_no)
            else:
                row.update(of="PAYMENT", transaction_id=item.transaction_id)
            kinds.add(row["of"])
            want.append(row)
        assert got == want
    assert kinds == {"PAYMENT", "REFUND"}
