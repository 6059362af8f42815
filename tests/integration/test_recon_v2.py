"""R44: every merchant reconciled. A WeChat Pay v2 merchant through `/pay/downloadbill` (real signed XML over
HTTP to the simulator, gzip answer), or through the v3 bill when its record says so; a merchant with no way
to fetch a bill is a BLOCKED run NO_BILL_SOURCE with a work-queue item and an alarmed metric; the schedule
counts merchants due / reconciled / blocked."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
from tally.service.recon import ReconService
from tally.store.codec import from_item, to_item

from tally_cli import recon as cli_recon
from tally_cli.main import main
from tests.integration.recon_helpers import metric, new_v2, pay, pay_v2, s3_keys

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"
CST = dt.timezone(dt.timedelta(hours=8))


@pytest.fixture(autouse=True)
def _clean(sim):
    yield
    sim.wechatpay_v2.bills._faults.clear()


def test_r44_a_v2_merchant_is_reconciled_through_downloadbill(h, sim, svc):
    m = new_v2(h, sim)
    for i, cents in enumerate((100, 2550, 7)):
        pay_v2(h, sim, m, cents, f"20240501{10 + i}0000")
    run = svc.run("wechatpay", m["mch_id"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["bill_source"] == "v2" and "v2 credentials" in run["bill_source_why"]
    assert run["totals"]["rows"] == 3 and run["totals"]["payment_cent"] == 2657
    assert run["stats"]["matched"] == 3
    assert sim.wechatpay_v2.bills.requests[-1] == {"mch_id": m["mch_id"], "bill_date": "20240501"}
    keys = s3_keys(f"bills/wechatpay/{m['mch_id']}/{D}/")
    assert keys == [run["bill_key"]] and run["sha1"] in run["bill_key"]  # kept, hash-named, once
    again = svc.run("wechatpay", m["mch_id"], D, pass_="T+2")
    assert again["status"] == "MATCHED" and s3_keys(f"bills/wechatpay/{m['mch_id']}/{D}/") == keys


def test_r44_a_v2_payment_the_channel_has_and_we_lack_is_a_diff(h, sim, svc):
    m = new_v2(h, sim)
    pay_v2(h, sim, m, 300, "20240501090000")
    otn = json.loads(
        h.create_order(m["mch_id"], amount_cent=450, prepay=True, channel="wechatpay_v2")["body"]
    )["out_trade_no"]
    tid = sim.wechatpay_v2.pay(m["mch_id"], otn, drop=True, time_end="20240501093000")  # never notified
    run = svc.run("wechatpay", m["mch_id"], D)
    assert run["status"] == "DIFFS" and run["bill_source"] == "v2"
    (diff,) = svc.show("wechatpay", m["mch_id"], D)["diffs"]
    assert (
        diff["cls"] == "CHANNEL_ONLY" and diff["transaction_id"] == tid and diff["channel_amount_cent"] == 450
    )


@pytest.mark.parametrize(
    "fault, status, code",
    [
        ("html_error", "BLOCKED", "PARSE_FAILED"),
        ("wrong_summary", "BLOCKED", "SUMMARY_MISMATCH"),
        ("empty_nonzero_summary", "BLOCKED", "EMPTY_BILL"),
        ("changed_header", "BLOCKED", "LAYOUT_QUARANTINED"),
        ("no_statement", "BLOCKED", "NO_STATEMENT_BUT_LEDGER"),
        ("statement_creating", "NOT_READY", None),
    ],
)
def test_r44_v2_bill_faults_are_refused_like_the_v3_bill_R31_R32(h, sim, svc, fault, status, code):
    m = new_v2(h, sim)
    pay_v2(h, sim, m, 120, "20240501120000")
    sim.wechatpay_v2.bills.fault(fault)
    run = svc.run("wechatpay", m["mch_id"], D)
    assert run["bill_source"] == "v2"
    if status == "NOT_READY":  # Bill Creating: retried next tick, STATEMENT_LATE from 16:00 Asia/Shanghai on
        assert "Bill Creating" in run["reason"]
        assert run["status"] == "RETRY" or run["block_code"] == "STATEMENT_LATE", run["reason"]
        return
    assert run["status"] == status, run.get("reason")
    assert run.get("block_code") == code


def test_r44_a_v2_quiet_day_is_no_bill_exist_and_an_empty_ledger(h, sim, svc):
    m = new_v2(h, sim)
    run = svc.run("wechatpay", m["mch_id"], "2024-05-02")
    assert run["status"] == "QUIET" and "No Bill Exist" in run["reason"] and run["bill_source"] == "v2"


def test_r44_a_v2_merchant_is_reconciled_through_v3_when_configured(h, sim, svc):
    v3 = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    new_v2(h, sim, mchid=v3["mchid"], bill_source="v3")
    pay(h, v3["mchid"], 880, f"{D}T11:00:00+08:00")
    asked = len(sim.wechatpay_v2.bills.requests)
    run = svc.run("wechatpay", v3["mchid"], D)
    assert run["status"] == "MATCHED", run["reason"]
    assert run["bill_source"] == "v3" and "bill_source v3" in run["bill_source_why"]
    assert len(sim.wechatpay_v2.bills.requests) == asked  # /pay/downloadbill not asked


def test_r44_a_merchant_without_bill_source_is_a_blocked_run_with_an_alarmed_item(h, sim, svc):
    m = new_v2(h, sim, bill_source="v3")  # says v3, has no v3 credentials
    run = svc.run("wechatpay", m["mch_id"], D, pass_="T+1")
    assert run["status"] == "BLOCKED" and run["block_code"] == "NO_BILL_SOURCE"
    assert "no v3 credentials" in run["reason"]
    assert metric(h, "ReconNoBillSource") == 1 and metric(h, "ReconBlocked") == 1
    assert metric(h, "ReconDownloadFailed") == 0
    marker = from_item(
        h.ddb.get_item(
            TableName=h.env["RECON_RUNS_TABLE"],
            Key=to_item({"pk": f"wechatpay#{m['mch_id']}#{D}", "sk": "blocked"}),
        ).get("Item")
    )
    assert marker["blocked_pk"] == "blocked" and marker["block_code"] == "NO_BILL_SOURCE"  # the work queue


def test_r44_the_schedule_counts_merchants_due_reconciled_blocked(h, sim, svc):
    ok = new_v2(h, sim)
    pay_v2(h, sim, ok, 500, "20240501150000")
    stuck = new_v2(h, sim, bill_source="v3")
    strange = str(random.randrange(10**9, 10**10))
    tick = dt.datetime(2024, 5, 2, 10, 30, tzinfo=CST).timestamp()
    service = ReconService(
        svc.store,
        svc.ledger,
        svc.archive,
        svc.sources,
        None,
        # a v2 merchant, one whose record points nowhere, and one of a kind no channel knows: none skipped
        lambda: [("wechatpay_v2", ok["mch_id"]), ("wechatpay_v2", stuck["mch_id"]), ("paypal", strange)],
        clock=lambda: tick,
    )
    results = service.scheduled()
    by_merchant = {(r["mchid"], r["bill_date"]): r for r in results}
    assert by_merchant[(ok["mch_id"], D)]["status"] == "MATCHED"
    assert by_merchant[(stuck["mch_id"], D)]["block_code"] == "NO_BILL_SOURCE"
    assert by_merchant[(strange, D)]["block_code"] == "NO_BILL_SOURCE"
    assert len(results) == 9  # 3 merchants x T+1..T+3
    assert service.day_counts(service.due_merchants(), D) == {
        "bill_date": D,
        "due": 3,
        "reconciled": 1,
        "blocked": 2,
        "pending": 0,
    }
    assert metric(h, "ReconMerchantsDue") == 3
    assert metric(h, "ReconMerchantsReconciled") == 1
    assert metric(h, "ReconMerchantsBlocked") == 2
    assert service.scheduled() == []  # finished days are not re-run


def test_r44_tally_recon_run_channel_wechatpay_v2(h, sim, capsys, monkeypatch):
    monkeypatch.setattr(cli_recon, "connect", lambda args: {"env": h.env})
    m = new_v2(h, sim)
    pay_v2(h, sim, m, 250, "20240501160000")
    assert (
        main(["recon", "run", "--channel", "wechatpay-v2", "--mchid", m["mch_id"], "--date", D, "--local"])
        == 0
    )
    out = capsys.readouterr().out
    assert f"wechatpay#{m['mch_id']}#{D}  matched" in out and "bill source: v2" in out


def test_r44_a_merchant_with_both_records_uses_the_bill_its_v2_record_names(h, sim, svc):
    v3 = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    assert svc.run("wechatpay", v3["mchid"], "2024-05-03")["bill_source"] == "v3"  # v3 credentials: v3's bill
    new_v2(h, sim, mchid=v3["mchid"], bill_source="v2")
    run = svc.run("wechatpay", v3["mchid"], "2024-05-03")
    assert run["bill_source"] == "v2" and "bill_source v2" in run["bill_source_why"]
    assert run["status"] == "QUIET" and "No Bill Exist" in run["reason"]
