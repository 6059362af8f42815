"""The partitioned path (service/recon_partition.py): the same diffs, stats and guards as the in-memory path,
on moto with a bill kept in S3; the ledger read shard by shard (by_bill_shard)."""

from __future__ import annotations

import random

import boto3
import pytest
from tally import bootstrap
from tally.store.codec import to_item
from tally.store.recon import LEDGER_SHARDS, LedgerView, ledger_shard

from tests.integration.recon_bills import DAY, comparable, day_of_differences, diffs_of_run, put_ledger
from tests.integration.recon_helpers import metric


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


@pytest.mark.parametrize("keys", ["pre-#15", "scoped"])
def test_partitioned_path_gives_the_same_diffs_and_stats_as_the_in_memory_path(h, svc, mchid, keys):
    """Also with merchant-scoped entry keys: ledger shard p must hold the keys of bill partition p."""
    bill, ledger = day_of_differences(mchid)
    ledger = scoped(ledger, mchid) if keys == "scoped" else ledger
    put_ledger(h.ddb, h.env["LEDGER_TABLE"], ledger)
    key = keep(bill, mchid)
    svc.recover = None  # channel-only rows are not queried here: the comparison is about matching
    memory = svc.run("wechatpay", mchid, DAY, pass_="memory", s3_key=key)
    assert memory.get("path") is None and memory["status"] == "DIFFS", memory["reason"]
    expected = diffs_of_run(svc.store, memory["pk"], memory["run_id"])
    svc.partition_bytes = 0  # every bill partitioned
    parted = svc.run("wechatpay", mchid, DAY, pass_="partitioned", s3_key=key)
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
