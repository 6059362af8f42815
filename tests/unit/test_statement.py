"""The daily statement (issue #18.5, R43/R45): gross, discounts by funder, refunds, fees, net and the three-way
verdict per merchant and day, as CSV finance can open (tally.domain.statement)."""

import csv
import io

import pytest
from tally.channels.wechatpay_v2.settlement import wechat_v2_payment
from tally.channels.wechatpay_v3.settlement import wechat_v3_payment, wechat_v3_refund
from tally.domain.fundflow import AGREED, SETTLEMENT, DayFigures, FundFlowDay, FundFlowRow, check_day
from tally.domain.statement import COLUMNS, NOT_CHECKED, statement_csv, statement_row, summarize

from tests.unit.fundflow_terms import lag_for

PAYMENTS = [
    wechat_v3_payment(
        {"total": 10000, "payer_total": 9000},
        [
            {
                "coupon_id": "C1",
                "type": "CASH",
                "amount": 1000,
                "wechatpay_contribute": 600,
                "other_contribute": 400,
            }
        ],
    ),
    wechat_v3_payment(
        {"total": 5000, "payer_total": 4500},
        [{"coupon_id": "N1", "type": "NOCASH", "amount": 500, "merchant_contribute": 500}],
    ),
    wechat_v2_payment(  # a v2 CASH coupon: its funder is not stated
        {
            "total_fee": "2000",
            "cash_fee": "1800",
            "coupon_count": "1",
            "coupon_type_0": "CASH",
            "coupon_fee_0": "200",
        }
    ),
]
REFUNDS = [wechat_v3_refund({"total": 2000, "refund": 1000, "payer_refund": 1000, "settlement_refund": 1000})]


def test_r43_the_day_summary_splits_discounts_by_funder_and_nets_settlement():
    s = summarize(PAYMENTS, REFUNDS, fee_cent=99, fee_returned_cent=6)
    assert (s.payments, s.gross_cent, s.payer_cent, s.settlement_cent) == (3, 17000, 15300, 16500)
    assert (s.merchant_funded_cent, s.channel_funded_cent, s.unattributed_cent) == (500, 1000, 200)
    assert s.gross_cent - s.payer_cent == s.merchant_funded_cent + s.channel_funded_cent + s.unattributed_cent
    assert (s.refunds, s.refund_cent, s.net_cent) == (1, 1000, 16500 - 1000 - 99 + 6)
    assert s.figures() == DayFigures(16500, 1000, 99, 6)


def test_r45_statement_row_and_csv_carry_the_verdict_in_yuan():
    s = summarize(PAYMENTS, [], fee_cent=99)
    credit = FundFlowRow(
        "BASIC", "F1", "T1", "2026-12-01 03:00:00", "交易", SETTLEMENT, 16401, 16401, "", "", 16500, 99
    )
    fund = {"2026-11-30": FundFlowDay("2026-11-30"), "2026-12-01": FundFlowDay("2026-12-01").extend([credit])}
    verdict = check_day(
        "1900000109",
        "wechatpay",
        "2026-11-30",
        s.figures(),
        trade=s.figures(),
        fund_days=fund,
        lag=lag_for("wechatpay"),
    )
    assert verdict.code == AGREED
    row = statement_row("1900000109", "wechatpay", "2026-11-30", s, verdict)
    assert (
        row["gross_yuan"] == "170.00" and row["settlement_yuan"] == "165.00" and row["net_yuan"] == "164.01"
    )
    assert row["merchant_funded_discount_yuan"] == "5.00" and row["channel_funded_discount_yuan"] == "10.00"
    assert row["unattributed_discount_yuan"] == "2.00" and row["fees_yuan"] == "0.99"
    assert (row["verdict"], row["fund_flow_net_yuan"], row["differs"]) == ("AGREES", "164.01", "")
    unchecked = statement_row("1900000109", "wechatpay", "2026-12-01", summarize([], []), None)
    assert (
        unchecked["verdict"] == NOT_CHECKED and unchecked["reason"] and unchecked["fund_flow_net_yuan"] == ""
    )
    text = statement_csv([row, unchecked])
    assert text.startswith("\ufeffmerchant,channel,day,")
    back = list(csv.DictReader(io.StringIO(text[1:])))
    assert tuple(back[0]) == COLUMNS and back == [row, unchecked]


def test_statement_refuses_negative_fee_figures_and_unknown_columns():
    with pytest.raises(ValueError, match="positive cents"):
        summarize([], [], fee_cent=-1)
    with pytest.raises(ValueError):
        statement_csv([{"merchant": "x", "surprise": "1"}])


def _run(sk, status, **more):
    return {"sk": sk, "status": status, "reason": f"{status.lower()} reason", **more}


FUND_FIGURES = {"fund": {"settlement_cent": 1000, "refund_cent": 100, "fee_cent": 6, "fee_returned_cent": 1}}


def test_r45_day_verdict_says_which_leg_differs_and_why_it_was_not_checked():
    from tally.domain.statement import AGREES, DIFFERS, NOT_CHECKED, PENDING, day_verdict

    trade_ok = _run("run#2#T+1", "MATCHED")
    fund_ok = _run("run#3#fundflow", "MATCHED", leg="fundflow", fund_verdict="AGREED", figures=FUND_FIGURES)
    agreed = day_verdict([fund_ok, trade_ok])
    assert (agreed.code, agreed.legs, agreed.fund_net_cent) == (AGREES, (), 895)
    fund_diff = {**fund_ok, "status": "DIFFS", "fund_verdict": "FUND_DIFFERS"}
    assert day_verdict([fund_diff, trade_ok]).legs == ("fund flow",)
    both = day_verdict([fund_diff, _run("run#2#T+1", "DIFFS")])
    assert both.code == DIFFERS and both.legs == ("trade bill", "fund flow") and "trade bill:" in both.reason
    sums = day_verdict([{**fund_diff, "fund_verdict": "TRADE_DIFFERS"}, trade_ok])
    assert sums.legs == ("trade bill",)
    assert day_verdict([trade_ok]).code == PENDING  # the fund-flow check runs on T+2 / T+3
    retry = day_verdict(
        [{**fund_ok, "status": "RETRY", "reason": "fund-flow bill of 2024-05-02 not in yet"}, trade_ok]
    )
    assert retry.code == PENDING and "not in yet" in retry.reason
    late = day_verdict([{**fund_ok, "status": "BLOCKED", "block_code": "FUND_FLOW_LATE"}, trade_ok])
    assert late.code == NOT_CHECKED and "FUND_FLOW_LATE" in late.reason
    blocked = day_verdict([fund_ok, _run("run#2#T+1", "BLOCKED", block_code="EMPTY_BILL")])
    assert blocked.code == NOT_CHECKED and "EMPTY_BILL" in blocked.reason
    assert (
        day_verdict([]).code == NOT_CHECKED and day_verdict([_run("run#1#T+1", "RETRY")]).code == NOT_CHECKED
    )
    assert day_verdict([_run("run#1#T+1", "QUIET"), fund_ok]).code == AGREES
    assert day_verdict([trade_ok], fund_flow_source=False).code == NOT_CHECKED
