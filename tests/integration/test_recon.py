"""Reconciliation end to end on moto + S3 with the simulator's real-format bills (R31–R36)."""

from __future__ import annotations

import datetime as dt
import json
import random
import time

import boto3
import pytest
from tally import bootstrap
from tally.store.codec import from_item, to_item

from tally_local.resources import LambdaContext
from tests.integration.recon_helpers import D_BEFORE, D, metric, pay, s3_keys

pytestmark = pytest.mark.usefixtures("days_of_2024")


@pytest.fixture
def m(h):
    """A merchant of its own (the session's simulator keeps every test's orders)."""
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def ledger(h, pk):
    return from_item(h.ddb.get_item(TableName=h.env["LEDGER_TABLE"], Key=to_item({"pk": pk})).get("Item"))


def put_ledger(h, **row):
    from tally.store.recon import with_bill_shard

    h.ddb.put_item(TableName=h.env["LEDGER_TABLE"], Item=to_item(with_bill_shard(row)))


def diffs(svc, mchid, day=D):
    return {d["sk"]: d for d in svc.show("wechatpay", mchid, day)["diffs"]}


# ------------------------------------------------------------------------------------------ happy path


def test_run_matches_keeps_the_bill_in_s3_and_rerun_is_idempotent_R34_R36(h, m, svc):
    for i, cents in enumerate((100, 2550, 1)):
        pay(h, m["mchid"], cents, f"{D}T1{i}:00:00+08:00")
    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["totals"]["rows"] == 3 and run["totals"]["payment_cent"] == 2651
    assert run["stats"]["matched"] == 3 and run["guard"] == "PASSED"
    keys = s3_keys(f"bills/wechatpay/{m['mchid']}/{D}/")
    assert keys == [run["bill_key"]] and run["sha1"] in run["bill_key"]  # the hash in the name
    again = svc.run("wechatpay", m["mchid"], D, pass_="T+3")
    assert again["status"] == "MATCHED" and again["bill_key"] == run["bill_key"]
    assert s3_keys(f"bills/wechatpay/{m['mchid']}/{D}/") == keys  # never overwritten, never a second copy
    assert diffs(svc, m["mchid"]) == {}
    report = boto3.client("s3").get_object(Bucket=bootstrap.settings().bills_bucket, Key=again["report_key"])
    assert "MATCHED" in report["Body"].read().decode("utf-8-sig")
    assert metric(h, "ReconMatched") == 2


def test_a_kept_bill_is_never_overwritten(h):
    """The same key written again with other bytes (a race, a replay) leaves the first bytes in place."""
    from tally.store.recon import BillArchive

    archive = BillArchive(boto3.client("s3"), bootstrap.settings().bills_bucket)
    first = archive.keep("wechatpay", "1900009999", D, "ALL.csv", b"the first bill", "a" * 40)
    again = archive.keep("wechatpay", "1900009999", D, "ALL.csv", b"other bytes", "a" * 40)
    assert first == again == f"bills/wechatpay/1900009999/{D}/ALL.{'a' * 40}.csv"
    assert archive.read(first)[0] == b"the first bill"
    versions = boto3.client("s3").list_object_versions(Bucket=bootstrap.settings().bills_bucket, Prefix=first)
    assert len(versions.get("Versions", [])) == 1


def test_payment_at_235958_that_succeeds_at_000002_lands_in_the_next_day_R34(h, m, svc, monkeypatch):
    """The server runs in UTC; the day cut is the channel's success time in Asia/Shanghai."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    otn, tid = pay(h, m["mchid"], 880, f"{D}T00:00:02+08:00")  # created 23:59:58 the day before
    assert (
        ledger(h, f"wechatpay#{m['mchid']}#{tid}")["bill_date"] == D
    )  # 16:00:02 UTC of the 30th, still the 1st in China
    before = svc.run("wechatpay", m["mchid"], D_BEFORE)
    assert before["status"] == "QUIET"  # no bill that day, and no ledger entry either
    day = svc.run("wechatpay", m["mchid"], D)
    assert day["status"] == "MATCHED" and day["totals"]["rows"] == 1
    (row,) = (r for r in h.sim.bills.rows(m["mchid"], D))
    assert row[0] == f"{D} 00:00:02" and row[5] == tid


# ------------------------------------------------------------------------------------------ diff classes


def test_channel_only_payment_is_queried_and_applied_through_the_pull_path_R36_R23(h, m, svc):
    pay(h, m["mchid"], 500, f"{D}T09:00:00+08:00")
    otn, tid = pay(h, m["mchid"], 1200, f"{D}T10:00:00+08:00", deliver=False)  # the callback never came: 掉单
    run = svc.run("wechatpay", m["mchid"], D)
    assert run["status"] == "DIFFS"
    d = diffs(svc, m["mchid"])[f"PAYMENT#wechatpay#{tid}"]
    assert (d["cls"], d["channel_amount_cent"], d["handle_status"], d["recovery"]) == (
        "CHANNEL_ONLY",
        1200,
        "OPEN",
        "QUEUED",
    )
    raw = from_item(
        h.ddb.get_item(
            TableName=h.env["NOTIFY_RAW_TABLE"], Key=to_item({"pk": f"wechatpay#{m['mchid']}#{tid}"})
        )["Item"]
    )
    assert raw["source"] == "recon" and raw["handled"] == 0
    assert h.drain() == []  # the same worker path as a callback
    assert ledger(h, f"wechatpay#{m['mchid']}#{tid}")["source"] == "recon"
    assert h.order(m["mchid"], otn)["status"] == "PAID"
    rerun = svc.run("wechatpay", m["mchid"], D, pass_="T+3")
    assert rerun["status"] == "MATCHED" and rerun["stats"]["auto_resolved"] == 1
    healed = diffs(svc, m["mchid"])[f"PAYMENT#wechatpay#{tid}"]
    assert healed["handle_status"] == "RESOLVED" and healed["history"][-1]["by"] == "recon"
    assert metric(h, "ReconDiffOpened") == 1 and metric(h, "ReconRecoverQueued") == 1


def test_local_only_resolved_with_a_reversing_entry_nothing_deleted_R36(h, m, svc):
    pay(h, m["mchid"], 300, f"{D}T09:00:00+08:00")
    ghost = "wechatpay#4200000000000000000000000042"
    put_ledger(
        h,
        pk=ghost,
        kind="PAYMENT",
        channel="wechatpay",
        mchid=m["mchid"],
        transaction_id=ghost[10:],
        order_pk=f"{m['mchid']}#GHOST",
        amount_cent=777,
        bill_date=D,
        booked_at="x",
        source="notify",
    )
    run = svc.run("wechatpay", m["mchid"], D)
    d = diffs(svc, m["mchid"])[f"PAYMENT#{ghost}"]
    assert run["status"] == "DIFFS" and (d["cls"], d["local_amount_cent"]) == ("LOCAL_ONLY", 777)
    done = svc.resolve("wechatpay", m["mchid"], D, d["sk"], by="alice", note="test booking", reverse=True)
    assert done["handle_status"] == "RESOLVED" and done["handler"] == "alice"
    assert [e["action"] for e in done["history"]] == ["OPENED", "RESOLVED"]
    reversal = ledger(h, f"{ghost}#REVERSAL#{D}")
    assert (reversal["kind"], reversal["amount_cent"], reversal["reverses"]) == ("REVERSAL", -777, ghost)
    assert ledger(h, ghost)["amount_cent"] == 777  # the original stays
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "MATCHED"  # folded: 777 - 777 = nothing booked


def test_amount_differs_resolved_by_the_delta_R36(h, m, svc):
    _, tid = pay(h, m["mchid"], 1000, f"{D}T09:00:00+08:00")
    h.ddb.update_item(
        TableName=h.env["LEDGER_TABLE"],
        Key=to_item({"pk": f"wechatpay#{m['mchid']}#{tid}"}),
        UpdateExpression="SET amount_cent = :a, settlement_cent = :a",  # R43: recon matches settlement_cent
        ExpressionAttributeValues={":a": {"N": "990"}},
    )
    svc.run("wechatpay", m["mchid"], D)
    d = diffs(svc, m["mchid"])[f"PAYMENT#wechatpay#{tid}"]
    assert (d["cls"], d["channel_amount_cent"], d["local_amount_cent"]) == ("AMOUNT_DIFFERS", 1000, 990)
    with pytest.raises(ValueError, match="why"):
        svc.resolve("wechatpay", m["mchid"], D, d["sk"], by="bob", note="", reverse=True)
    svc.resolve("wechatpay", m["mchid"], D, d["sk"], by="bob", note="booked 10 short", reverse=True)
    assert ledger(h, f"wechatpay#{m['mchid']}#{tid}#REVERSAL#{D}")["amount_cent"] == 10
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "MATCHED"
    with pytest.raises(ValueError, match="not OPEN"):
        svc.resolve("wechatpay", m["mchid"], D, d["sk"], by="bob", note="again", reverse=True)


def test_refunds_matched_and_a_processing_refund_we_booked_is_status_differs_R35_R36(h, m, svc):
    otn, tid = pay(h, m["mchid"], 5000, f"{D}T08:00:00+08:00")
    h.sim.bills.add_refund(m["mchid"], otn, "RF-OK-1", 1500, success_time=f"{D}T12:00:00+08:00")
    h.sim.bills.add_refund(
        m["mchid"], otn, "RF-PROC-2", 500, success_time=f"{D}T13:00:00+08:00", refund_status="PROCESSING"
    )
    h.sim.bills.add_refund(m["mchid"], otn, "RF-MISSING-3", 200, success_time=f"{D}T14:00:00+08:00")
    # the refunds subsystem's ledger shape: scoped per merchant, and a pre-#15 (unscoped) entry
    for pk, no, cents in (
        (f"wechatpay#{m['mchid']}#RF-OK-1", "RF-OK-1", 1500),
        ("wechatpay#RF-PROC-2", "RF-PROC-2", 500),
    ):
        put_ledger(
            h,
            pk=pk,
            kind="REFUND",
            channel="wechatpay",
            mchid=m["mchid"],
            transaction_id=tid,
            refund_no=no,
            refund_id="5030x",
            order_pk=f"{m['mchid']}#{otn}",
            amount_cent=cents,
            bill_date=D,
            booked_at="x",
            source="notify",
        )
    run = svc.run("wechatpay", m["mchid"], D)
    assert run["totals"]["refunds"] == 3 and run["totals"]["refund_cent"] == 2200
    found = {sk: d["cls"] for sk, d in diffs(svc, m["mchid"]).items()}
    assert found == {
        "REFUND#wechatpay#RF-PROC-2": "STATUS_DIFFERS",
        "REFUND#wechatpay#RF-MISSING-3": "CHANNEL_ONLY",
    }
    assert run["stats"]["matched"] == 2  # the payment and RF-OK-1; fees agree with the rate (no FEE diff)


# ------------------------------------------------------------------------------------------ guards


@pytest.mark.parametrize(
    "fault, code",
    [
        ("empty_nonzero_summary", "EMPTY_BILL"),  # R31
        ("wrong_summary", "SUMMARY_MISMATCH"),  # R32
        ("changed_header", "LAYOUT_QUARANTINED"),  # a renamed column: a new layout (docs/recon.md)
        ("html_error", "PARSE_FAILED"),
        ("mixed_encoding", "PARSE_FAILED"),
        ("wrong_hash", "HASH_MISMATCH"),
    ],
)
def test_a_bad_bill_is_blocked_before_matching_R31_R32(h, m, svc, fault, code):
    for i in range(2):
        pay(h, m["mchid"], 100 + i, f"{D}T1{i}:00:00+08:00")
    h.sim.bills.fault(fault)
    run = svc.run("wechatpay", m["mchid"], D)
    assert (run["status"], run["block_code"]) == ("BLOCKED", code), run["reason"]
    assert diffs(svc, m["mchid"]) == {}  # nothing matched, nothing reported as "no differences"
    assert svc.show("wechatpay", m["mchid"], D)["runs"][0]["reason"] == run["reason"]
    assert metric(h, "ReconBlocked") == 1
    report = boto3.client("s3").get_object(Bucket=bootstrap.settings().bills_bucket, Key=run["report_key"])
    assert "BLOCKED" in report["Body"].read().decode("utf-8-sig")  # the finance person's file says so too
    if code in ("PARSE_FAILED", "HASH_MISMATCH"):
        assert metric(h, "ReconParseFailed") == 1
    assert s3_keys(f"bills/wechatpay/{m['mchid']}/{D}/")  # the evidence is kept


def test_volume_drop_is_blocked_until_a_person_confirms_R33(h, m, svc):
    """R33: a day far below the previous one is blocked until a person confirms."""
    svc.min_previous_rows, svc.min_ratio = 2, 0.5
    for i in range(4):
        pay(h, m["mchid"], 100, f"{D_BEFORE}T1{i}:00:00+08:00")
        pay(h, m["mchid"], 100, f"{D}T1{i}:00:00+08:00")
    assert svc.run("wechatpay", m["mchid"], D_BEFORE)["status"] == "MATCHED"
    h.sim.bills.fault("volume_drop")  # 1 row of 4, with a summary that agrees
    run = svc.run("wechatpay", m["mchid"], D)
    assert (run["status"], run["block_code"]) == ("BLOCKED", "VOLUME_DROP")
    assert "tally recon confirm" in run["reason"] and diffs(svc, m["mchid"]) == {}
    confirmed = svc.confirm("wechatpay", m["mchid"], D, "carol", "promo day ended")
    assert confirmed["confirmed_by"] == "carol" and confirmed["bill_key"] == run["bill_key"]
    assert confirmed["status"] == "DIFFS"  # the thin bill, once confirmed, is matched: 3 of ours are missing
    assert sum(d["cls"] == "LOCAL_ONLY" for d in diffs(svc, m["mchid"]).values()) == 3
    # R55: the person's confirmation and each verdict are journaled; the last verdict pins its 3 differences
    recon = [json.loads(r["record"]) for r in h.scan("JOURNAL_TABLE") if r["sk"] != "head"]
    kinds = {r["kind"]: r for r in recon if r["kind"].startswith("recon.")}
    assert sorted(kinds) == ["recon.blocked", "recon.confirm", "recon.diffs", "recon.matched"]
    assert kinds["recon.confirm"]["facts"]["by"] == "carol"
    assert kinds["recon.diffs"]["facts"]["confirmed_by"] == "carol"
    assert sorted(ref["table"] for ref in kinds["recon.diffs"]["refs"]) == ["recon_diff"] * 3 + ["recon_runs"]


def test_no_statement_is_a_quiet_day_only_if_our_ledger_is_empty_too(h, m, svc):
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "QUIET"
    pay(h, m["mchid"], 100, f"{D}T10:00:00+08:00")
    h.sim.bills.fault("no_statement")
    run = svc.run("wechatpay", m["mchid"], D)
    assert (run["status"], run["block_code"]) == ("BLOCKED", "NO_STATEMENT_BUT_LEDGER")
    assert metric(h, "ReconDownloadFailed") == 1 and metric(h, "ReconBlocked") == 1


def test_statement_creating_is_retried_later_then_blocked_at_the_last_tick(h, m, svc):
    pay(h, m["mchid"], 100, f"{D}T10:00:00+08:00")
    h.sim.bills.fault("statement_creating", count=2)
    svc.clock = lambda: dt.datetime(2024, 5, 2, 10, 30, tzinfo=dt.timezone(dt.timedelta(hours=8))).timestamp()
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "RETRY"
    svc.clock = lambda: dt.datetime(2024, 5, 2, 16, 30, tzinfo=dt.timezone(dt.timedelta(hours=8))).timestamp()
    late = svc.run("wechatpay", m["mchid"], D)
    assert (late["status"], late["block_code"]) == ("BLOCKED", "STATEMENT_LATE")


def test_every_finished_run_beats_the_heartbeat_and_its_absence_is_an_alarm_R38(h, m, svc):
    """ "Recon never ran" is loud: ReconRunCompleted counts every finished run — quiet day, blocked day, matched
    day — but not a RETRY; ReconNotRunAlarm breaches when no run finished for 30 hours (missing data breaches)."""
    import pathlib

    from tally_local.resources import load_template

    assert svc.run("wechatpay", m["mchid"], D_BEFORE)["status"] == "QUIET"
    assert metric(h, "ReconRunCompleted") == 1
    pay(h, m["mchid"], 100, f"{D}T10:00:00+08:00")
    h.sim.bills.fault("statement_creating", count=2)
    china = dt.timezone(dt.timedelta(hours=8))
    svc.clock = lambda: dt.datetime(2024, 5, 2, 10, 30, tzinfo=china).timestamp()
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "RETRY"
    assert metric(h, "ReconRunCompleted") == 1  # not finished: no beat
    svc.clock = lambda: dt.datetime(2024, 5, 2, 16, 30, tzinfo=china).timestamp()
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "BLOCKED"
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "MATCHED"
    assert metric(h, "ReconRunCompleted") == 3
    alarm = load_template(pathlib.Path(__file__).parents[2] / "template.yaml")["Resources"][
        "ReconNotRunAlarm"
    ]["Properties"]
    assert (alarm["MetricName"], alarm["Statistic"], alarm["ComparisonOperator"], alarm["Threshold"]) == (
        "ReconRunCompleted",
        "Sum",
        "LessThanThreshold",
        1,
    )
    # missing, not breaching: a new stack stays silent until its first tick; stopped ticks go INSUFFICIENT_DATA,
    # which notifies (R46, tests/unit/test_alarm_wiring.py)
    assert alarm["TreatMissingData"] == "missing" and alarm["InsufficientDataActions"] == [
        {"Ref": "AlarmTopic"}
    ]
    assert alarm["Period"] * alarm["DatapointsToAlarm"] > 24 * 3600  # more than the daily cadence
    assert (
        alarm["Period"] >= 3600 and alarm["Period"] * alarm["EvaluationPeriods"] <= 7 * 24 * 3600
    )  # CW limits


# ------------------------------------------------------------------------------------------ the function


def invoke(h, event):
    handler, _ = h.handlers["ReconFunction"]
    result = handler(event, LambdaContext("ReconFunction"))
    h._collect_metrics()
    return result


def test_a_bill_dropped_by_hand_into_s3_is_reconciled_and_our_own_downloads_are_not(h, m):
    _, tid = pay(h, m["mchid"], 4200, f"{D}T10:00:00+08:00")
    bucket = bootstrap.settings().bills_bucket
    key = f"bills/wechatpay/{m['mchid']}/{D}/by-hand.csv"
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=h.sim.bills.bill(m["mchid"], D))
    event = {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": bucket}, "object": {"key": key}},
    }
    (run,) = invoke(h, event)["runs"]
    assert (run["pass"], run["status"]) == ("s3", "MATCHED")
    downloaded = bootstrap.recon_service().run("wechatpay", m["mchid"], D)["bill_key"]
    event["detail"]["object"]["key"] = downloaded
    assert invoke(h, event) == {"runs": []}


def test_a_bill_dropped_by_hand_under_a_bad_date_folder_is_a_work_queue_item_naming_the_file_R41(h, m):
    """Audit L5 (docs/silence.md): the bill was dropped with ReconParseFailed and a log line only; the person
    who uploaded it had nothing to look at. Now it is also a work-queue item `bill-upload` naming the key."""
    bucket = bootstrap.settings().bills_bucket
    key = f"bills/wechatpay/{m['mchid']}/2026-13-45/by-hand.csv"
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=h.sim.bills.bill(m["mchid"], D))
    event = {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": bucket}, "object": {"key": key}},
    }
    assert invoke(h, event) == {"runs": []}
    assert invoke(h, event) == {"runs": []}  # the same upload notified again: still one item
    assert h.metric("ReconParseFailed") == 2
    items = [i for i in bootstrap.work_queue().list({}) if i["kind"] == "bill-upload"]
    assert len(items) == 1 and key in items[0]["reason"] and items[0]["merchant"] == m["mchid"], items


def test_the_schedule_runs_t1_and_the_two_days_before_for_each_merchant_R34(h, m):
    event = json.loads(
        (h.handlers["ReconFunction"][1].code_dir.parents[1] / "events/recon_schedule.json").read_text()
    )
    runs = invoke(h, event)["runs"]
    mine = [r for r in runs if r["pk"].startswith(f"wechatpay#{m['mchid']}#")]
    trade = [r for r in mine if r["pass"] != "fundflow"]
    assert [r["pass"] for r in trade] == ["T+1", "T+2", "T+3"]
    assert {r["status"] for r in trade} == {"QUIET"}
    fund = [r for r in mine if r["pass"] == "fundflow"]  # R45: the fund flow of T+2 and T+3 (T+1 lag)
    assert [r["pk"].rsplit("#", 1)[1] for r in fund] == [t["pk"].rsplit("#", 1)[1] for t in trade[1:]]
    assert {r["status"] for r in fund} == {"MATCHED"}, [r["reason"] for r in fund]
    assert [r for r in invoke(h, event)["runs"] if r["pk"].startswith(f"wechatpay#{m['mchid']}#")] == []
