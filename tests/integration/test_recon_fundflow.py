"""R45, the fund-flow leg on moto + real HTTP to the simulator: WeChat's 资金账单 (BASIC) downloaded, kept
(hash-named, never overwritten), parsed and guarded, then checked per ledger day with the T+1 lag against the
ledger and the kept trade bill; SETTLEMENT_DIFFERS diffs share recon_diff's handle status and history."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from tests.integration.recon_helpers import metric, pay, s3_keys

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"
D1 = "2024-05-02"
CST = dt.timezone(dt.timedelta(hours=8))


@pytest.fixture
def m(h):
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


@pytest.fixture(autouse=True)
def _clean(sim):
    yield
    sim.bills.fundflow.faults.clear()


def a_day(h, svc, mchid, amounts=(100, 2550, 999)):
    for i, cents in enumerate(amounts):
        pay(h, mchid, cents, f"{D}T1{i}:00:00+08:00")
    assert svc.run("wechatpay", mchid, D)["status"] == "MATCHED"  # the trade bill, kept


def fund_diffs(svc, mchid):
    return {d["sk"]: d for d in svc.show("wechatpay", mchid, D)["diffs"] if d["cls"] == "SETTLEMENT_DIFFERS"}


def test_r45_a_day_whose_money_landed_agrees_and_the_fund_flow_is_kept_once(h, svc, m):
    a_day(h, svc, m["mchid"])
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["status"] == "MATCHED" and run["fund_verdict"] == "AGREED", run["reason"]
    assert run["figures"]["fund"]["settlement_cent"] == 3649 == run["figures"]["ledger"]["settlement_cent"]
    assert run["figures"]["fund"]["fee_cent"] == run["figures"]["trade"]["fee_cent"] > 0
    keys = s3_keys(f"bills/fundflow/wechatpay/{m['mchid']}/{D1}/")
    assert len(keys) == 1 and keys[0].startswith(f"bills/fundflow/wechatpay/{m['mchid']}/{D1}/BASIC.")
    again = svc.fund_flow("wechatpay", m["mchid"], D)
    assert again["status"] == "MATCHED"
    assert (
        s3_keys(f"bills/fundflow/wechatpay/{m['mchid']}/{D1}/") == keys
    )  # never overwritten, no second copy


def test_r45_a_missing_settlement_credit_and_a_planted_fee_error_are_diffs_with_history(h, sim, svc, m):
    a_day(h, svc, m["mchid"])
    sim.bills.fundflow.fault("drop_credit", count=2)  # both fund-flow days asked (D for refunds, D+1 credits)
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["status"] == "DIFFS" and run["fund_verdict"] == "FUND_DIFFERS", run["reason"]
    diffs = fund_diffs(svc, m["mchid"])
    settlement = diffs[f"SETTLEMENT#{m['mchid']}#{D}"]
    assert (
        settlement["local_amount_cent"] - settlement["channel_amount_cent"] == 100
    )  # the dropped 1.00 credit
    assert settlement["handle_status"] == "OPEN" and settlement["history"][0]["action"] == "OPENED"
    assert metric(h, "ReconDiffOpened") >= 1
    # the trade run of the same day does not heal the fund-flow diffs (neither sees the other's)
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "DIFFS"
    assert fund_diffs(svc, m["mchid"])[settlement["sk"]]["handle_status"] == "OPEN"
    # the money lands (a clean bill): the diff is resolved by recon, with a history line
    healed = svc.fund_flow("wechatpay", m["mchid"], D)
    assert healed["status"] == "MATCHED", healed["reason"]
    after = fund_diffs(svc, m["mchid"])[settlement["sk"]]
    assert after["handle_status"] == "RESOLVED" and after["history"][-1]["by"] == "recon"


def test_r45_a_fee_charged_one_fen_off_is_a_fee_diff(h, sim, svc, m):
    a_day(h, svc, m["mchid"])
    sim.bills.fundflow.fault("fee_off_by_one", count=2)
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["fund_verdict"] == "FUND_DIFFERS"
    fee = fund_diffs(svc, m["mchid"])[f"FEE#{m['mchid']}#{D}"]
    assert fee["channel_amount_cent"] - fee["local_amount_cent"] == 1 and fee["handle_status"] == "OPEN"


def test_r45_a_late_fund_flow_is_blocked_not_agreed(h, sim, svc, m, monkeypatch):
    a_day(h, svc, m["mchid"])
    sim.bills.fundflow.fault("late_day", count=2)
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 2, 11, 0, tzinfo=CST).timestamp())  # wait
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["status"] == "RETRY" and "not in yet" in run["reason"]
    sim.bills.fundflow.fault("late_day", count=2)
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 4, 11, 0, tzinfo=CST).timestamp())  # late
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["status"] == "BLOCKED" and run["block_code"] == "FUND_FLOW_LATE", run["reason"]
    assert metric(h, "ReconFundFlowLate") == 1 and metric(h, "ReconBlocked") == 1


@pytest.mark.parametrize(
    "fault, code",
    [
        ("html_error", "PARSE_FAILED"),
        ("wrong_summary", "SUMMARY_MISMATCH"),
        ("empty_nonzero_summary", "EMPTY_BILL"),
        ("column_added", "LAYOUT_QUARANTINED"),  # a new layout: quarantined with its diff (docs/recon.md)
    ],
)
def test_r45_a_broken_fund_flow_is_refused_by_the_guards_R31_R32(h, sim, svc, m, fault, code):
    a_day(h, svc, m["mchid"], amounts=(300,))
    svc.fund_flow("wechatpay", m["mchid"], D)  # clean first: the fault then hits both days below
    sim.bills.fundflow.fault(fault, count=2)
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["status"] == "BLOCKED" and run["block_code"] == code, run["reason"]
    if code == "LAYOUT_QUARANTINED":
        assert run["layout_diff"]["added"] == ["渠道"] and run["layout_diff"]["nearest"]["kind"] == "fundflow"
    assert all(len(b.get("layout_fingerprint", "x" * 16)) == 16 for b in run["fund_bills"])


def test_r45_the_schedule_checks_the_fund_flow_of_t2_and_t3_a_v2_only_merchant_through_downloadfundflow(
    h, sim, svc, m
):
    from tally.service.recon import ReconService

    from tests.integration.recon_helpers import new_v2

    a_day(h, svc, m["mchid"])
    v2 = new_v2(h, sim)
    tick = dt.datetime(2024, 5, 3, 10, 30, tzinfo=CST).timestamp()  # D is T+2
    service = ReconService(
        svc.store,
        svc.ledger,
        svc.archive,
        svc.sources,
        None,
        lambda: [("wechatpay", m["mchid"]), ("wechatpay_v2", v2["mch_id"])],
        clock=lambda: tick,
        fund_sources=svc.fund_sources,
    )
    fund = {(r["mchid"], r["bill_date"]): r for r in service.scheduled() if r.get("leg") == "fundflow"}
    assert set(fund) == {
        (m["mchid"], D),
        (m["mchid"], "2024-04-30"),
        (v2["mch_id"], D),
        (v2["mch_id"], "2024-04-30"),
    }
    assert fund[(m["mchid"], D)]["fund_verdict"] == "AGREED"
    v2_day = fund[(v2["mch_id"], D)]  # a v2-only merchant: /pay/downloadfundflow (no movement: agreed, quiet)
    assert v2_day["fund_verdict"] == "AGREED" and v2_day["fund_source"] == "v2", v2_day["reason"]
    assert not [r for r in service.scheduled() if r.get("leg") == "fundflow"]  # finished: not re-run


def test_r49_a_settlement_gap_inside_the_lag_is_expected_then_opens_by_itself_with_the_gap_and_next_step(
    h, sim, svc, m, monkeypatch
):
    """#30 items 3 and 4: found on T+2 (the fund flow of D+1 just out) the missing credit is EXPECTED: in
    transit, out of the queue, "wait for the fund flow of D+2"; the T+3 run still sees it: it opens for a person
    by itself, saying the gap (not the channel's figure), both days, "ask the channel" and the codes that fit."""
    from tally import bootstrap

    a_day(h, svc, m["mchid"])
    sk = f"SETTLEMENT#{m['mchid']}#{D}"
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 3, 10, 30, tzinfo=CST).timestamp())
    sim.bills.fundflow.fault("drop_credit", count=2)
    svc.fund_flow("wechatpay", m["mchid"], D)
    expected = fund_diffs(svc, m["mchid"])[sk]
    assert expected["handle_status"] == "EXPECTED" and "open_pk" not in expected
    assert (expected["gap_cent"], expected["ledger_day"], expected["fund_day"]) == (100, D, D1)
    assert "wait for the fund flow of 2024-05-03" in expected["next_step"]
    queue = [i for i in bootstrap.work_queue().list() if i.get("merchant") == m["mchid"]]
    assert not any(i["kind"] == "recon-diff" for i in queue)  # in transit: not a person's yet
    (row,) = bootstrap.ledger_day_service().day(D, merchant=m["mchid"])["rows"]
    assert row["recon"]["open_diffs"] == 0 and row["recon"]["expected_diffs"] >= 1
    assert row["recon"]["state"] == "EXPECTED" and row["verdict"]["code"] == "PENDING"  # in transit, not done

    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 4, 10, 30, tzinfo=CST).timestamp())
    sim.bills.fundflow.fault("drop_credit", count=2)
    svc.fund_flow("wechatpay", m["mchid"], D)
    missing = fund_diffs(svc, m["mchid"])[sk]
    assert missing["handle_status"] == "OPEN" and missing["history"][-1]["action"] == "OPENED"
    assert "ask the channel" in missing["history"][-1]["note"]
    assert "landed-late" in missing["codes"] and "refunded-by-hand" not in missing["codes"]
    (item,) = [i for i in bootstrap.work_queue().list() if i["id"].endswith(sk)]  # the day's case, led by it
    assert item["amount_cent"] == 100  # the gap, not the channel's 35.49
    assert "short by 1.00" in item["reason"] and D1 in item["reason"] and D in item["reason"]
    assert "ask the channel" in item["reason"] and "wait for" not in item["reason"]
    from tally.console import app
    from tally.console.auth import Identity
    from tally.console.web import Request

    who = Identity("sub-1", "ops", frozenset({"operators"}), "jti-1")
    page = app.item_page(Request("GET", "item", {"id": item["id"]}, {}, {}, "/console/item"), who)
    html = page.body.decode() if isinstance(page.body, bytes) else page.body
    assert "landed-late" in html and "channel-confirmed-short" in html and "refunded-by-hand" not in html


def test_r48_a_merchant_days_settlement_legs_are_one_case_and_one_decision_closes_them(
    h, sim, svc, m, monkeypatch
):
    """One missing credit moves the day's settlement and its fee: past the lag both legs differ, and a person
    gets one case for that merchant-day (its legs as parts), not one per leg; resolving it closes every leg."""
    from tally import bootstrap

    a_day(h, svc, m["mchid"])
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 4, 10, 30, tzinfo=CST).timestamp())
    sim.bills.fundflow.fault("drop_credit", count=2)
    svc.fund_flow("wechatpay", m["mchid"], D)
    legs = [d for d in fund_diffs(svc, m["mchid"]).values() if d["handle_status"] == "OPEN"]
    cases = [i for i in bootstrap.work_queue().list() if i.get("merchant") == m["mchid"]]
    assert len(cases) == 1, [(i["id"], i.get("cls")) for i in cases]
    (case,) = cases
    assert len(legs) == 2  # the settlement credit and its fee
    assert {p["id"] for p in case["parts"]} == {f"diff-{d['pk']}/{d['sk']}" for d in legs}
    bootstrap.work_queue().act(
        case["id"], "resolve", by="finance", reason="the channel paid it late", code="landed-late"
    )
    assert all(d["handle_status"] == "RESOLVED" for d in fund_diffs(svc, m["mchid"]).values())
    assert [i for i in bootstrap.work_queue().list() if i.get("merchant") == m["mchid"]] == []


def test_r48_a_trade_bill_leg_its_own_rows_explain_is_no_second_case(h, svc, m, monkeypatch):
    """A payment the channel took and the ledger never booked puts the trade bill's day 0.77 above the ledger:
    that is the CHANNEL_ONLY row's money, already a case. The day's verdict still says the trade bill differs,
    but no TRADE_SETTLEMENT difference opens for the same 0.77 (R48: one problem, one item)."""
    from tally import bootstrap

    a_day(h, svc, m["mchid"])
    pay(h, m["mchid"], 77, f"{D}T15:00:00+08:00", deliver=False)
    assert svc.run("wechatpay", m["mchid"], D)["status"] == "DIFFS"  # the row: CHANNEL_ONLY
    monkeypatch.setattr(svc, "clock", lambda: dt.datetime(2024, 5, 4, 10, 30, tzinfo=CST).timestamp())
    run = svc.fund_flow("wechatpay", m["mchid"], D)
    assert run["fund_verdict"] in ("TRADE_DIFFERS", "FUND_DIFFERS"), run
    assert not [sk for sk in fund_diffs(svc, m["mchid"]) if sk.startswith("TRADE_")]
    cases = [i for i in bootstrap.work_queue().list() if i.get("merchant") == m["mchid"]]
    assert [c.get("cls") for c in cases if c["kind"] == "recon-diff"].count("CHANNEL_ONLY") == 1


def test_r49_a_trade_bill_legs_item_says_how_far_bill_and_ledger_are_apart_not_the_bills_figure(h):
    """#30 item 4 for a trade-bill leg rows do not explain: the item's amount is the gap (0.77), not the bill's
    day total (37.26)."""
    from tally import bootstrap

    row = {
        "pk": "wechatpay#1900000109#2024-05-01",
        "sk": "TRADE_SETTLEMENT#1900000109#2024-05-01",
        "cls": "SETTLEMENT_DIFFERS",
        "item": "TRADE_SETTLEMENT",
        "channel": "wechatpay",
        "mchid": "1900000109",
        "bill_date": D,
        "channel_amount_cent": 3726,
        "local_amount_cent": 3649,
        "handle_status": "OPEN",
    }
    assert bootstrap.work_queue().from_rows._diff_item(row)["amount_cent"] == 77
