"""The partitioned path (service/recon_partition.py): the same diffs, stats and guards as the in-memory path,
on moto with a bill kept in S3; the ledger read shard by shard (by_bill_shard)."""

from __future__ import annotations

import random

import boto3
import pytest
from tally import bootstrap
from tally.store.codec import to_item
from tally.store.recon import LEDGER_SHARDS, LedgerView, ledger_shard

from tests.integration.recon_bills import (
    DAY,
    comparable,
    day_of_differences,
    diffs_of_run,
    drop_fee_entries,
    expected_fees,
    fee_entries,
    put_ledger,
)
from tests.integration.recon_helpers import metric

pytestmark = pytest.mark.usefixtures("days_of_2024")

ROWS = 200  # the comparison's bill: with 200 rows every one of the 16 shards holds some (a shard empty of
# random merchant-scoped keys has a chance of ~4e-5; 120 rows would leave one empty in ~0.7 % of runs)


@pytest.fixture
def mchid():
    return str(random.randrange(10**9, 10**10))


def keep(bill: bytes, mchid: str, name: str = "ALL.csv") -> str:
    """A bill dropped by hand (S3 key with its SHA-1 metadata, as BillArchive.keep writes it)."""
    from tally.service.recon_sources import sha1_hex

    key = f"bills/wechatpay/{mchid}/{DAY}/{name}"
    boto3.client("s3").put_object(
        Bucket=bootstrap.settings().bills_bucket, Key=key, Body=bill, Metadata={"sha1": sha1_hex(bill)}
    )
    return key


def scoped(ledger: list[dict], mchid: str) -> list[dict]:
    """The same entries under merchant-scoped keys (`channel#mchid#id`, issue #15), as booking writes them now."""

    def key(pk: str) -> str:
        channel, _, rest = pk.partition("#")
        return f"{channel}#{mchid}#{rest}"

    return [
        r | {"pk": key(r["pk"])} | ({"reverses": key(r["reverses"])} if "reverses" in r else {})
        for r in ledger
    ]


@pytest.mark.parametrize(("keys", "pieces"), [("pre-#15", 1), ("scoped", 2)])
def test_partitioned_path_gives_the_same_diffs_and_stats_as_the_in_memory_path(h, svc, mchid, keys, pieces):
    """Also with merchant-scoped entry keys: ledger shard p must hold the keys of bill partition p. ROWS rows
    hold every kind of difference and reach all 16 shards (asserted); the bigger bills are the Distributed Map
    test's and bench/'s (600 rows here cost ~3x the CPU and proved nothing more). With `pieces` 2 the bill,
    downloaded to disk, is parsed by two processes at once (test_recon_split.py: what a big bill gets)."""
    bill, ledger = day_of_differences(mchid, rows=ROWS)
    assert len({ledger_shard(r["pk"]) for r in ledger}) == LEDGER_SHARDS  # every partition has rows
    ledger = scoped(ledger, mchid) if keys == "scoped" else ledger
    put_ledger(h.ddb, h.env["LEDGER_TABLE"], ledger)
    key = keep(bill, mchid)
    svc.recover = None  # channel-only rows are not queried here: the comparison is about matching
    memory = svc.run("wechatpay", mchid, DAY, pass_="memory", s3_key=key)
    assert memory.get("path") is None and memory["status"] == "DIFFS", memory["reason"]
    expected = diffs_of_run(svc.store, memory["pk"], memory["run_id"])
    table = h.env["LEDGER_TABLE"]
    fees = fee_entries(h.ddb, table, mchid)  # R43: the same FEE entries both ways (each path books them anew)
    drop_fee_entries(h.ddb, table, fees)
    svc.partition_bytes = 0  # every bill partitioned
    svc.split_bytes, svc.workers = (0, pieces) if pieces > 1 else (svc.split_bytes, 1)
    parted = svc.run("wechatpay", mchid, DAY, pass_="partitioned", s3_key=key)
    assert parted["pieces"] == pieces
    assert fee_entries(h.ddb, table, mchid) == fees
    assert {pk: f["amount_cent"] for pk, f in fees.items()} == expected_fees(mchid, rows=ROWS)
    assert parted["path"] == "partitioned" and parted["partitions"] == LEDGER_SHARDS
    assert parted["status"] == "DIFFS"
    assert len(expected) == 7  # the duplicate's second row is channel-only, as in every path
    assert {v[0] + "/" + v[1] for v in expected.values()} == (
        {
            "CHANNEL_ONLY/PAYMENT",
            "CHANNEL_ONLY/REFUND",
            "AMOUNT_DIFFERS/PAYMENT",
            "AMOUNT_DIFFERS/FEE",
            "STATUS_DIFFERS/PAYMENT",
            "LOCAL_ONLY/PAYMENT",
        }
    )
    assert diffs_of_run(svc.store, parted["pk"], parted["run_id"]) == expected
    assert comparable(parted["stats"]) == comparable(memory["stats"])
    assert parted["stats"]["duplicates"] == 1 and parted["stats"]["auto_resolved"] == 0
    assert parted["totals"] == memory["totals"] and parted["ledger_entries"] == memory["ledger_entries"]


def test_partitioned_path_keeps_the_guards_R32(h, svc, mchid):
    """A bill whose summary disagrees with its rows is BLOCKED before anything is matched, partitioned too."""
    bill, ledger = day_of_differences(mchid, rows=50)
    lines = bill.split(b"\r\n")
    lines[-2] = lines[-2].replace(b"`", b"`9", 1)  # the stated row count
    svc.partition_bytes = 0
    run = svc.run("wechatpay", mchid, DAY, pass_="partitioned", s3_key=keep(b"\r\n".join(lines), mchid))
    assert run["status"] == "BLOCKED" and run["guard"] == "SUMMARY_MISMATCH", run["reason"]
    assert "stats" not in run and svc.store.diffs_of(run["pk"]) == []


def test_every_reader_reads_every_shard_and_a_reversal_sits_with_its_entry(h, mchid):
    """day / all_of_day / entry_and_reversals across the 16 shards; backfill shards an entry written before."""
    _, ledger = day_of_differences(mchid, rows=80)
    put_ledger(h.ddb, h.env["LEDGER_TABLE"], ledger)
    view = LedgerView(h.ddb, h.env["LEDGER_TABLE"])
    assert len({ledger_shard(r["pk"]) for r in ledger}) == LEDGER_SHARDS  # spread over every shard
    assert sorted(r["pk"] for r in view.day("wechatpay", mchid, DAY)) == sorted(r["pk"] for r in ledger)
    assert len([r for r in view.all_of_day(DAY, mchid=mchid)]) == len(ledger)
    (reversal,) = [r for r in ledger if r["kind"] == "REVERSAL"]
    target = reversal["reverses"]
    assert {r["pk"] for r in view.entry_and_reversals(target, DAY)} == {target, reversal["pk"]}
    old = {
        "pk": f"wechatpay#OLD{mchid}",
        "kind": "PAYMENT",
        "amount_cent": 1,
        "mchid": mchid,
        "bill_date": DAY,
    }
    h.ddb.put_item(TableName=h.env["LEDGER_TABLE"], Item=to_item(old))  # before sharding: no bill_shard
    assert old["pk"] not in {r["pk"] for r in view.day("wechatpay", mchid, DAY)}
    assert view.backfill_shards() >= 1
    assert old["pk"] in {r["pk"] for r in view.day("wechatpay", mchid, DAY)}
    assert view.backfill_shards() == 0  # re-runnable: nothing left to do


def test_a_map_run_that_never_comes_back_is_blocked_not_silent(h, svc):
    """A RUNNING run (its execution aborted, or the merge never ran) is BLOCKED by the next scheduled tick after
    map_stale_s: ReconBlocked counts it and the day's work-queue marker is set (R41); the pass is not re-run."""
    from tally.domain.recon import scheduled_days
    from tally.store.recon import recon_pk

    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    day, pass_ = scheduled_days(svc.clock())[0]
    pk = recon_pk("wechatpay", m["mchid"], day)
    stuck = {"pk": pk, "sk": f"run#2024-01-01T00:00:00.000Z#{pass_}", "channel": "wechatpay"}
    stuck |= {
        "mchid": m["mchid"],
        "bill_date": day,
        "pass": pass_,
        "status": "RUNNING",
        "run_id": stuck["sk"],
    }
    stuck |= {"running_since_s": int(svc.clock()) - 5 * 3600, "execution_name": "x"}
    svc.store.put_run(stuck)
    svc.merchants = lambda: [("wechatpay", m["mchid"])]
    ran = svc.scheduled()
    assert pass_ not in {r["pass"] for r in ran if r["pk"] == pk}  # not started again
    (row,) = [r for r in svc.store.run_rows(pk) if r["sk"] == stuck["sk"]]
    assert row["status"] == "BLOCKED" and row["block_code"] == "MAP_STALE", row
    assert "Distributed Map" in row["reason"]
    assert metric(h, "ReconBlocked") == 1
    marker = svc.store.ddb.get_item(TableName=svc.store.runs, Key=to_item({"pk": pk, "sk": "blocked"}))[
        "Item"
    ]
    assert marker["block_code"] == {"S": "MAP_STALE"}


def test_r43_the_partitioned_path_books_each_rows_fee_once_and_a_changed_fee_is_a_diff(
    h, svc, mchid, monkeypatch
):
    """Each partition books its rows' fees as FEE entries (docs/settlement.md §6.5) from the index the one parse
    built: one entry per row key (the duplicate row's once), a refund's fee given back negative, each entry in
    its row's ledger shard. A re-run reads what is booked (one Query per shard) and writes nothing; a fee the
    bill now states differently is a FEE AMOUNT_DIFFERS and the booked entry is never overwritten (R43)."""
    from tally.store.recon import bill_shard

    bill, ledger = day_of_differences(mchid, rows=200)
    put_ledger(h.ddb, h.env["LEDGER_TABLE"], ledger)
    key = keep(bill, mchid)
    svc.recover = None
    svc.partition_bytes = 0
    first = svc.run("wechatpay", mchid, DAY, pass_="partitioned", s3_key=key)
    assert first["path"] == "partitioned" and first["partitions"] == LEDGER_SHARDS
    table = h.env["LEDGER_TABLE"]
    booked = fee_entries(h.ddb, table, mchid)
    want = expected_fees(mchid, rows=200)
    assert {pk: f["amount_cent"] for pk, f in booked.items()} == want
    assert first["stats"]["fees_booked"] == len(want) and first["stats"]["fee_diffs"] == 0
    refund = booked[f"fee#wechatpay#{mchid}#RF{201:08d}"]
    assert (refund["of"], refund["refund_no"], refund["amount_cent"]) == ("REFUND", f"RF{201:08d}", -4)
    assert all(f["bill_shard"] == bill_shard(DAY, ledger_shard(pk)) for pk, f in booked.items())
    assert {ledger_shard(pk) for pk in booked} == set(range(LEDGER_SHARDS))  # every partition booked some

    writes = Writes(svc.ledger.ddb)
    monkeypatch.setattr(svc.ledger, "ddb", writes)
    again = svc.run("wechatpay", mchid, DAY, pass_="partitioned-again", s3_key=key)
    assert again["stats"]["fees_booked"] == 0 and again["stats"]["fee_diffs"] == 0
    assert writes.calls == []  # a re-run: the booked entries are read (a Query per shard), nothing is written
    assert fee_entries(h.ddb, table, mchid) == booked

    changed = next(pk for pk, f in booked.items() if f["of"] == "PAYMENT")
    h.ddb.update_item(  # as if an earlier bill had stated another fee: the channel changed it since
        TableName=table,
        Key=to_item({"pk": changed}),
        UpdateExpression="SET amount_cent = :a",
        ExpressionAttributeValues={":a": {"N": str(booked[changed]["amount_cent"] + 3)}},
    )
    third = svc.run("wechatpay", mchid, DAY, pass_="partitioned-third", s3_key=key)
    assert third["stats"]["fee_diffs"] == 1 and writes.calls == []
    diff = svc.store.diff(third["pk"], f"FEE#{changed}")
    assert diff is not None and diff["cls"] == "AMOUNT_DIFFERS" and diff["handle_status"] == "OPEN"
    assert (diff["channel_amount_cent"], diff["local_amount_cent"]) == (
        booked[changed]["amount_cent"],
        booked[changed]["amount_cent"] + 3,
    )
    assert diff["transaction_id"] and diff["out_trade_no"]  # the row re-read in full for the person
    assert fee_entries(h.ddb, table, mchid)[changed]["amount_cent"] == booked[changed]["amount_cent"] + 3


class Writes:
    """A DynamoDB client that notes every write call (and passes everything through)."""

    def __init__(self, ddb):
        self._ddb = ddb
        self.calls: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self._ddb, name)
        if name in ("put_item", "transact_write_items", "batch_write_item", "update_item"):
            self.calls.append(name)
        return attr


def test_r43_fee_entries_go_out_in_conditional_batches_and_a_taken_key_is_read_back_not_overwritten(h, mchid):
    """LedgerView.put_fees: TransactWriteItems of up to 100 conditional Puts from a small pool; a batch with a key
    already booked is cancelled, that key's booked amount is read back (for the caller's diff) and the rest of the
    batch is written; a key twice in one batch is written once and the second compared; nothing is overwritten."""
    from tally.store import recon as store_recon

    view = LedgerView(h.ddb, h.env["LEDGER_TABLE"])
    table = h.env["LEDGER_TABLE"]

    def row(n: int, cents: int) -> dict:
        pk = f"fee#wechatpay#{mchid}#T{n:06d}"
        return {"pk": pk, "kind": "FEE", "channel": "wechatpay", "mchid": mchid, "bill_date": DAY} | {
            "amount_cent": cents,
            "of": "PAYMENT",
        }

    booked_before = row(150, 99)
    view.put_fees([booked_before])  # an entry an earlier run booked at 0.99
    rows = [row(n, n + 1) for n in range(250)] + [row(7, 8)]  # row 7 twice (the same key twice in a bill)
    written, taken = view.put_fees(iter(rows))
    assert written == 249  # 250 keys, one of them taken; the second row 7 refused
    assert taken == {booked_before["pk"]: 99, row(7, 8)["pk"]: 8}
    stored = fee_entries(h.ddb, table, mchid)
    assert stored[booked_before["pk"]]["amount_cent"] == 99  # never overwritten
    assert len(stored) == 250 and all(f["bill_shard"] for f in stored.values())
    assert store_recon.FEE_BATCH == 100  # TransactWriteItems' limit
    assert view.put_fees(iter(rows))[0] == 0  # a second pass writes nothing
