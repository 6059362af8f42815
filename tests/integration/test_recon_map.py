"""Recon past one function, on the embedded stack: template.yaml's ReconStateMachine (a Distributed Map over
a run's partitions) executed by moto's Step Functions interpreter, each Lambda task the recon handler running
in this process (tally_local/statemachines.py, moto_fixes 7). One bill both ways gives identical diffs; a
partition that keeps failing ends the run BLOCKED with the reason, never a partial MATCHED."""

from __future__ import annotations

import random
import time

import boto3
import pytest
from tally import bootstrap
from tally.service.recon import ReconService
from tally.service.recon_map import DistributedRecon
from tally.service.recon_sources import sha1_hex
from tally.store.recon import LEDGER_SHARDS, BillArchive, LedgerView, ReconMachine, ReconStore

from tally_local.stack import EmbeddedStack
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

pytestmark = pytest.mark.e2e  # the embedded stack: make test runs it, make check's fast lane does not


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with EmbeddedStack(api_port=0, state_dir=tmp_path_factory.mktemp("state"), schedule_scale=0) as running:
        yield running


def service(stack, **options) -> ReconService:
    s = bootstrap.settings()
    ddb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    archive = BillArchive(s3, s.bills_bucket)
    return ReconService(
        ReconStore(ddb, s.recon_runs_table, s.recon_diff_table),
        LedgerView(ddb, s.ledger_table),
        archive,
        {},
        None,
        lambda: [],
        partition_bytes=0,
        distributed=DistributedRecon(
            archive, ReconMachine(boto3.client("stepfunctions"), s.recon_state_machine_arn)
        ),
        **options,
    )


def a_day(stack) -> tuple[str, str]:
    mchid = str(random.randrange(10**9, 10**10))
    bill, ledger = day_of_differences(mchid, rows=300)
    s = bootstrap.settings()
    put_ledger(boto3.client("dynamodb"), s.ledger_table, ledger)
    key = f"bills/wechatpay/{mchid}/{DAY}/ALL.csv"
    boto3.client("s3").put_object(
        Bucket=s.bills_bucket, Key=key, Body=bill, Metadata={"sha1": sha1_hex(bill)}
    )
    return mchid, key


def concluded(svc: ReconService, run: dict, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = svc.store.run(run["pk"], run["sk"])
        if row and row.get("status") != "RUNNING":
            return row
        time.sleep(0.2)
    raise AssertionError(f"still RUNNING after {timeout_s} s: {run.get('execution')}")


def test_one_bill_in_one_function_and_on_the_distributed_map_gives_identical_diffs(stack):
    assert stack.state_machines, "the template's state machine was created in moto"
    mchid, key = a_day(stack)
    local = service(stack, map_bytes=1 << 40).run("wechatpay", mchid, DAY, pass_="one-function", s3_key=key)
    assert local["path"] == "partitioned" and local["status"] == "DIFFS", local["reason"]
    expected = diffs_of_run(service(stack).store, local["pk"], local["run_id"])
    ddb, table = boto3.client("dynamodb"), bootstrap.settings().ledger_table
    fees = fee_entries(ddb, table, mchid)  # R43: each Map child books its partition's FEE entries
    assert {pk: f["amount_cent"] for pk, f in fees.items()} == expected_fees(mchid, rows=300)
    drop_fee_entries(ddb, table, fees)
    svc = service(stack, map_bytes=0)
    started = svc.run("wechatpay", mchid, DAY, pass_="map", s3_key=key)
    assert started["status"] == "RUNNING" and started["path"] == "distributed", started["reason"]
    done = concluded(svc, started)
    assert done["status"] == "DIFFS", done["reason"]
    assert done["partitions"] == LEDGER_SHARDS and done["report_key"]
    assert diffs_of_run(svc.store, done["pk"], done["run_id"]) == expected and len(expected) == 7
    assert comparable(done["stats"]) == comparable(local["stats"])  # fees_booked included
    assert (
        fee_entries(ddb, table, mchid) == fees
    )  # the same FEE entries as the partitioned run in one function
    assert done["ledger_entries"] == local["ledger_entries"] and done["totals"] == local["totals"]
    prefix = started["partition_prefix"]
    left = boto3.client("s3").list_objects_v2(Bucket=bootstrap.settings().bills_bucket, Prefix=prefix)
    assert left.get("KeyCount", 0) == 0  # the merge cleaned up the partitions


def test_a_partition_that_keeps_failing_blocks_the_run_with_its_reason(stack, monkeypatch):
    original = ReconService.match_partition

    def flaky(self, run, parts, p, *rest):
        if p == 5:
            raise RuntimeError("ledger shard 5 unreadable")
        return original(self, run, parts, p, *rest)

    monkeypatch.setattr(ReconService, "match_partition", flaky)  # the handlers run in this process
    mchid, key = a_day(stack)
    svc = service(stack, map_bytes=0)
    done = concluded(svc, svc.run("wechatpay", mchid, DAY, pass_="map", s3_key=key))
    assert done["status"] == "BLOCKED" and done["block_code"] == "MAP_FAILED"
    assert "States.ExceedToleratedFailureThreshold" in done["reason"]  # what AWS says of the Map …
    assert "partition 5: RuntimeError: ledger shard 5 unreadable" in done["reason"]  # … and which child, why
    assert "stats" not in done  # never concluded as MATCHED/DIFFS from the partitions that did finish
    marker = svc.store.ddb.get_item(
        TableName=svc.store.runs, Key={"pk": {"S": done["pk"]}, "sk": {"S": "blocked"}}
    ).get("Item")
    assert marker and marker["block_code"]["S"] == "MAP_FAILED"  # on the work queue (R41)
