"""The layout canary, end to end on moto + S3 with the simulator (docs/recon.md "Bill layouts"): the channel
changes its bill's layout; the day is quarantined with the difference (the run, `tally recon show`, the work
queue), a person maps the new layout (a dry run first, which writes nothing), every quarantined day with it is
re-run from its kept bill and matched, and the next bill of that layout is read through the mapping at once."""

from __future__ import annotations

import html
import json
import random

import pytest
from tally import bootstrap
from tally.service.recon_layout import read_offline

from tally_cli.recon import render_run
from tests.integration.recon_helpers import D_BEFORE, D, metric, pay

# R50 parks money reported on a finished day; these tests reconcile fixed days of 2024 (days_of_2024)
pytestmark = pytest.mark.usefixtures("days_of_2024")


def console_page(mchid: str) -> str:
    from tally.console import app, data

    view = data.recon_day("wechatpay", mchid, D)
    return app.render(
        "recon.html", None, view=view, channel="wechatpay", mchid=mchid, date=D, merchants=[], channels=[]
    ).body


@pytest.mark.parametrize(
    "fault, what",
    [
        ("changed_header", ("renamed", [["应结订单金额", "结算金额"]])),
        ("column_added", ("added", ["优惠标签"])),
        ("column_moved", ("moved", [["微信订单号", 5, 6], ["商户订单号", 6, 5]])),
        ("summary_line_added", ("summary_added", [["营销总金额"]])),
    ],
)
def test_r38_r41_a_drifted_bill_is_quarantined_mapped_once_and_every_day_re_run_to_matched(
    h, svc, cli, tmp_path, fault, what
):
    """R38/R41: quarantine -> case -> mapping (dry run, then stored) -> re-process -> MATCHED."""
    mchid = str(random.randrange(10**9, 10**10))
    h.add_merchant(mchid=mchid)
    for day in (D_BEFORE, D):
        for i in range(2):
            pay(h, mchid, 100 + i, f"{day}T1{i}:00:00+08:00")
    runs = {}
    for day in (D_BEFORE, D):
        h.sim.bills.fault(fault)
        try:
            runs[day] = svc.run("wechatpay", mchid, day)
        finally:
            h.sim.clear_faults()
    run = runs[D]
    # quarantined, not failed: BLOCKED with the structural difference and a sample row, the bill kept
    assert (run["status"], run["block_code"]) == ("BLOCKED", "LAYOUT_QUARANTINED"), run["reason"]
    assert run["layout_diff"][what[0]] == what[1] and run["layout_diff"]["nearest"]["kind"] == "trade ALL"
    assert run["layout_sample"]["交易类型"] == "NATIVE" and run["bill_key"]
    assert "stats" not in run and metric(h, "ReconBlocked") == 2 and metric(h, "ReconParseFailed") == 0
    shown = render_run(svc.show("wechatpay", mchid, D)["runs"][0])
    assert "layout: new, quarantined" in shown and "sample row:" in shown
    assert run["layout_diff"]["lines"][1].strip() in shown
    page = console_page(mchid)  # the console's recon day shows the same difference and sample
    assert "New bill layout: the day is held" in page and html.escape(run["layout_diff"]["lines"][1]) in page
    # the case a person works: one item per day, of its own kind
    items = [i for i in bootstrap.work_queue().list("kind=bill-layout") if mchid in i["id"]]
    assert len(items) == 2 and "layout" in items[0]["what"]

    # the person drafts a mapping from the kept bill and reviews it
    kept, _ = svc.archive.read(run["bill_key"])
    draft = read_offline("wechatpay", kept, "ALL.csv")["draft_mapping"]
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({**draft, "note": "canary"}, ensure_ascii=False))

    # a dry run shows what each re-run would match, and writes nothing
    before = {day: len(svc.show("wechatpay", mchid, day)["runs"]) for day in (D_BEFORE, D)}
    dry = cli("bill", "layout", "add", str(mapping), "--by", "alice", "--dry-run", "--json")
    assert sorted(
        (d["pk"].rsplit("#", 1)[1], d["verdict"], d["matched"], d["diffs"]) for d in dry["days"]
    ) == [
        (D_BEFORE, "PASSED", 2, 0),
        (D, "PASSED", 2, 0),
    ]
    assert {day: len(svc.show("wechatpay", mchid, day)["runs"]) for day in (D_BEFORE, D)} == before
    assert svc.store.layout("wechatpay", dry["fingerprint"]) is None

    # stored: every quarantined day with that layout is re-run from its kept bill
    done = cli("bill", "layout", "add", str(mapping), "--by", "alice", "--json")
    assert done["stored"] and sorted((d["status"], d["matched"]) for d in done["days"]) == [
        ("MATCHED", 2),
        ("MATCHED", 2),
    ]
    latest = svc.show("wechatpay", mchid, D)["runs"][0]
    assert latest["pass"] == "layout" and latest["layout_mapped_onto"] == "trade ALL"
    assert latest["bill_key"] == run["bill_key"]  # the kept bill, not a new download
    assert [i for i in bootstrap.work_queue().list("kind=bill-layout") if mchid in i["id"]] == []
    assert svc.store.quarantined("wechatpay", dry["fingerprint"]) == []
    # the next bill of that layout is read through the mapping at once
    h.sim.bills.fault(fault)
    try:
        again = svc.run("wechatpay", mchid, D, pass_="T+3")
    finally:
        h.sim.clear_faults()
    assert again["status"] == "MATCHED" and again["layout_mapped_onto"] == "trade ALL"


def test_every_run_records_its_bill_layout(h, svc):
    mchid = str(random.randrange(10**9, 10**10))
    h.add_merchant(mchid=mchid)
    pay(h, mchid, 100, f"{D}T10:00:00+08:00")
    run = svc.run("wechatpay", mchid, D)
    assert (
        run["status"] == "MATCHED"
        and run["layout_kind"] == "trade ALL"
        and len(run["layout_fingerprint"]) == 16
    )


def test_a_big_drifted_bill_is_read_through_its_mapping_on_the_partitioned_path(h, svc):
    """A bill kept in S3 above RECON_PARTITION_BYTES is streamed to disk: its shape is read from the file's head
    and tail, the mapping translates the file, and the partitioned path matches it (R32 on the translated bill)."""
    mchid = str(random.randrange(10**9, 10**10))
    h.add_merchant(mchid=mchid)
    for i in range(3):
        pay(h, mchid, 200 + i, f"{D}T1{i}:00:00+08:00")
    h.sim.bills.fault("column_moved")
    try:
        run = svc.run("wechatpay", mchid, D)
    finally:
        h.sim.clear_faults()
    assert run["block_code"] == "LAYOUT_QUARANTINED", run["reason"]
    kept, _ = svc.archive.read(run["bill_key"])
    draft = read_offline("wechatpay", kept, "ALL.csv")["draft_mapping"]
    svc.partition_bytes = 1  # every kept bill is "big": streamed to /tmp, partitioned
    done = svc.layouts.add(svc, draft, by="alice", dry_run=False)
    (day,) = done["days"]
    assert (day["status"], day["matched"]) == ("MATCHED", 3), day["reason"]
    latest = svc.show("wechatpay", mchid, D)["runs"][0]
    assert latest["path"] == "partitioned" and latest["layout_mapped_onto"] == "trade ALL"
    assert latest["totals"]["rows"] == 3 and all(c["ok"] for c in latest["totals"]["checks"])


def test_r45_a_drifted_fund_flow_is_quarantined_mapped_and_its_leg_re_run(h, sim, svc):
    """R45: the fund-flow leg quarantines a new layout like a trade bill; its mapping re-runs the leg, which
    downloads the day's files again and reads them through the mapping."""
    mchid = str(random.randrange(10**9, 10**10))
    h.add_merchant(mchid=mchid)
    pay(h, mchid, 300, f"{D}T10:00:00+08:00")
    assert svc.run("wechatpay", mchid, D)["status"] == "MATCHED"  # the trade bill the leg checks against
    try:
        sim.bills.fundflow.fault("column_added", count=2)  # D (refunds) and D+1 (the credit)
        run = svc.fund_flow("wechatpay", mchid, D)
        assert (run["status"], run["block_code"]) == ("BLOCKED", "LAYOUT_QUARANTINED"), run["reason"]
        kept = next(b["bill_key"] for b in run["fund_bills"] if b.get("bill_key"))
        data, _ = svc.archive.read(kept)
        draft = read_offline("wechatpay", data, kept)["draft_mapping"]
        assert draft["base"] == "fundflow"
        dry = svc.layouts.add(svc, draft, by="alice", dry_run=True)
        assert [d["verdict"] for d in dry["days"]] == ["FUND_FLOW"]
        sim.bills.fundflow.fault("column_added", count=2)  # the channel keeps sending the new layout
        done = svc.layouts.add(svc, draft, by="alice", dry_run=False)
    finally:
        sim.bills.fundflow.faults.clear()
    assert [d["status"] for d in done["days"]] == ["MATCHED"], done
    latest = svc.show("wechatpay", mchid, D)["runs"][0]
    assert latest["leg"] == "fundflow" and latest["fund_verdict"] == "AGREED"


def test_r32_an_alipay_layout_change_is_quarantined_mapped_and_matched(h, svc):
    """R32: the Alipay 业务明细 with a column renamed (the zip as downloaded) is quarantined; its mapping reads the
    kept zip's detail as the known layout (GBK), both 合计 trailers still checked, and the day matches."""
    from tests.integration.channel_kit import Alipay
    from tests.integration.recon_helpers import alipay_pay

    app = Alipay(h).setup()
    for i in range(2):
        alipay_pay(h, app, 100 + i, f"{D} 1{i}:00:00")
    h.sim.alipay.bills.fault("changed_header")
    try:
        run = svc.run("alipay", app, D)
    finally:
        h.sim.clear_faults()
    assert run["block_code"] == "LAYOUT_QUARANTINED", run["reason"]
    assert run["layout_diff"]["renamed"] == [["商家实收(元)", "实收金额(元)"]]
    kept, _ = svc.archive.read(run["bill_key"])
    draft = read_offline("alipay", kept, "bill.zip")["draft_mapping"]
    (day,) = svc.layouts.add(svc, draft, by="alice", dry_run=True)["days"]
    assert (day["verdict"], day["matched"], day["diffs"]) == ("PASSED", 2, 0)
    (day,) = svc.layouts.add(svc, draft, by="alice", dry_run=False)["days"]
    assert (day["status"], day["matched"]) == ("MATCHED", 2), day["reason"]
    latest = svc.show("alipay", app, D)["runs"][0]
    assert latest["layout_mapped_onto"] == "trade 业务明细" and all(
        c["ok"] for c in latest["totals"]["checks"]
    )
