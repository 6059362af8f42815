"""R45: the day's fund flow, in aggregate, against the ledger's settlement, refunds and fees, allowing for the
channel's settlement lag; a difference is a diff like any other (tally.domain.fundflow.check_day).

The WeChat day: ledger day 2026-11-30 holds three v3 payments (a CASH coupon, a NOCASH coupon, none), fees
0.6 %; WeChat settles them T+1, so they are on the 2026-12-01 fund flow (fixture wechat_basic_20261201_day.csv),
each credited net of its fee. Refunds debit the day they are made."""

import pathlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tally.channels import registry
from tally.channels.alipay.fundflow import AlipayFundFlowParser
from tally.channels.alipay.settlement import alipay_payment
from tally.channels.wechatpay_v3.bills import WeChatBillParser
from tally.channels.wechatpay_v3.fundflow import WeChatFundFlowParser
from tally.channels.wechatpay_v3.settlement import wechat_v3_payment
from tally.domain.fundflow import (
    AGREED,
    FEE,
    FEE_RETURN,
    FUND_DIFFERS,
    PENDING,
    REFUND,
    SETTLEMENT,
    SETTLEMENT_DIFFERS,
    TRADE_DIFFERS,
    UNCLASSIFIED,
    DayFigures,
    FundFlowDay,
    FundFlowRow,
    SettlementLag,
    check_day,
    trade_figures,
)
from tally.domain.recon import Diff
from tally.domain.statement import summarize

from tests.unit.fundflow_terms import lag_for

HERE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills" / "fundflow"
M = "1900000109"

PAYMENTS = [
    wechat_v3_payment(
        {"total": 10000, "payer_total": 9000},
        [{"coupon_id": "C1", "type": "CASH", "amount": 1000, "wechatpay_contribute": 1000}],
    ),
    wechat_v3_payment(
        {"total": 5000, "payer_total": 4500},
        [{"coupon_id": "N1", "type": "NOCASH", "amount": 500, "merchant_contribute": 500}],
    ),
    wechat_v3_payment({"total": 2000, "payer_total": 2000}),
]
FEES = 60 + 27 + 12  # 0.6 % of each settlement amount, rounded to the fen


def fund_rows(name="wechat_basic_20261201_day.csv", drop=()):
    rows = list(WeChatFundFlowParser(open(HERE / name, "rb")).rows())
    return [r for r in rows if r.flow_id not in drop]


def fund_days(rows):
    return {"2026-11-30": FundFlowDay("2026-11-30"), "2026-12-01": FundFlowDay("2026-12-01").extend(rows)}


def ledger_1130():
    return summarize(PAYMENTS, [], fee_cent=FEES).figures()


def test_r45_a_coupon_day_agrees_three_ways_on_settlement_amounts():
    ledger = ledger_1130()
    assert ledger == DayFigures(16500, 0, 99, 0)
    v = check_day(
        M,
        "wechatpay",
        "2026-11-30",
        ledger,
        trade=ledger,
        fund_days=fund_days(fund_rows()),
        lag=lag_for("wechatpay"),
    )
    assert (v.code, v.diffs) == (AGREED, [])
    assert v.reason == "ledger = trade bill = fund flow"
    assert v.fund == DayFigures(16500, 0, 99, 0)


def test_r45_a_ledger_that_books_payer_amounts_is_told_it_differs():
    # what Tally books today (payer_total): the CASH coupon's 10.00 is money the fund flow did receive
    payer_booked = DayFigures(sum(p.payer_cent for p in PAYMENTS), 0, FEES, 0)
    v = check_day(
        M,
        "wechatpay",
        "2026-11-30",
        payer_booked,
        trade=payer_booked,
        fund_days=fund_days(fund_rows()),
        lag=lag_for("wechatpay"),
    )
    assert v.code == FUND_DIFFERS
    (diff,) = v.diffs
    assert (diff.cls, diff.item, diff.key, diff.channel_amount_cent, diff.local_amount_cent) == (
        SETTLEMENT_DIFFERS,
        SETTLEMENT,
        f"{M}#2026-11-30",
        16500,
        15500,
    )
    assert diff.sk == f"SETTLEMENT#{M}#2026-11-30" and isinstance(diff, Diff)


def test_r45_a_missing_settlement_credit_is_found_with_its_fee():
    v = check_day(
        M,
        "wechatpay",
        "2026-11-30",
        ledger_1130(),
        trade=ledger_1130(),
        fund_days=fund_days(fund_rows(drop={"FF0002"})),
        lag=lag_for("wechatpay"),
    )
    assert v.code == FUND_DIFFERS
    got = {d.item: (d.channel_amount_cent, d.local_amount_cent) for d in v.diffs}
    assert got == {SETTLEMENT: (12000, 16500), FEE: (72, 99)}
    assert (
        "fund flow of 2026-12-01 settlement 120.00 yuan ≠ ledger of 2026-11-30 165.00 yuan"
        in v.diffs[0].detail
    )


def test_r45_a_planted_fee_error_is_found():
    rows = fund_rows()
    wrong = replace(rows[0], amount_cent=9939, fee_cent=61)  # the channel took 0.61, the rate says 0.60
    v = check_day(
        M,
        "wechatpay",
        "2026-11-30",
        ledger_1130(),
        trade=ledger_1130(),
        fund_days=fund_days([wrong, *rows[1:]]),
        lag=lag_for("wechatpay"),
    )
    assert v.code == FUND_DIFFERS
    assert [(d.item, d.channel_amount_cent, d.local_amount_cent) for d in v.diffs] == [(FEE, 100, 99)]


def test_r45_refunds_and_fees_given_back_are_checked_on_the_day_they_are_made():
    # the 10.00 refund of 2026-12-01 (fee 0.06 given back) is debited on 12-01; its day is not over until the
    # 12-02 fund flow (T+1 settlement of 12-01's payments) is in
    ledger = DayFigures(0, 1000, 0, 6)
    days = fund_days(fund_rows())
    v = check_day(
        M, "wechatpay", "2026-12-01", ledger, trade=ledger, fund_days=days, lag=lag_for("wechatpay")
    )
    assert (v.code, v.fund) == (PENDING, None)
    assert "fund-flow bill of 2026-12-02 not in yet" in v.reason
    days["2026-12-02"] = FundFlowDay("2026-12-02")
    v = check_day(
        M, "wechatpay", "2026-12-01", ledger, trade=ledger, fund_days=days, lag=lag_for("wechatpay")
    )
    assert (v.code, v.fund) == (AGREED, DayFigures(0, 1000, 0, 6))
    short = DayFigures(0, 1000, 0, 0)  # a ledger that forgot the fee given back
    v = check_day(M, "wechatpay", "2026-12-01", short, trade=short, fund_days=days, lag=lag_for("wechatpay"))
    assert [(d.item, d.channel_amount_cent, d.local_amount_cent) for d in v.diffs] == [(FEE_RETURN, 6, 0)]


def test_r45_an_unknown_business_type_on_a_needed_day_is_a_diff():
    odd = FundFlowRow("BASIC", "FF9", "X1", "2026-12-01 09:00:00", "营销补差", UNCLASSIFIED, 300, 0)
    v = check_day(
        M,
        "wechatpay",
        "2026-11-30",
        ledger_1130(),
        trade=ledger_1130(),
        fund_days=fund_days([*fund_rows(), odd]),
        lag=lag_for("wechatpay"),
    )
    assert v.code == FUND_DIFFERS
    (diff,) = v.diffs
    assert (diff.item, diff.key, diff.channel_amount_cent, diff.local_amount_cent) == (
        UNCLASSIFIED,
        f"{M}#2026-12-01",
        300,
        None,
    )
    assert "营销补差 ×1" in diff.detail


def test_r45_trade_leg_differences_and_a_missing_trade_bill_are_never_agreement():
    ledger = ledger_1130()
    days = fund_days(fund_rows())
    trade = DayFigures(16400, 0, 99, 0)
    v = check_day(M, "wechatpay", "2026-11-30", ledger, trade=trade, fund_days=days, lag=lag_for("wechatpay"))
    assert v.code == TRADE_DIFFERS
    assert [(d.item, d.channel_amount_cent, d.local_amount_cent) for d in v.diffs] == [
        ("TRADE_SETTLEMENT", 16400, 16500)
    ]
    v = check_day(M, "wechatpay", "2026-11-30", ledger, trade=None, fund_days=days, lag=lag_for("wechatpay"))
    assert (v.code, v.reason) == (PENDING, "ledger = fund flow; trade bill not in yet")
    v = check_day(M, "wechatpay", "2026-11-30", ledger, trade=trade, fund_days={}, lag=lag_for("wechatpay"))
    assert (
        v.code == TRADE_DIFFERS and "not in yet" in v.reason
    )  # a known trade difference is not hidden by PENDING


def test_r45_alipay_settles_the_same_day():
    rows = list(AlipayFundFlowParser(open(HERE / "alipay_signcustomer_20261130_day.csv", "rb")).rows())
    a1 = alipay_payment({"total_amount": "20.00", "receipt_amount": "20.00", "buyer_pay_amount": "20.00"})
    a2 = alipay_payment(
        {"total_amount": "1.00", "receipt_amount": "0.80", "buyer_pay_amount": "0.80",
         "voucher_detail_list": '[{"amount":"0.20","merchantContribute":"0.00","otherContribute":"0.20"}]'}
    )  # fmt: skip
    ledger = DayFigures(a1.settlement_cent + a2.settlement_cent, 500, 12, 0)
    v = check_day("2088021109625633", "alipay", "2026-11-30", ledger, trade=ledger,
                  fund_days={"2026-11-30": FundFlowDay("2026-11-30").extend(rows)}, lag=lag_for("alipay"))  # fmt: skip
    assert (v.code, v.fund) == (AGREED, DayFigures(2080, 500, 12, 0))


def test_r45_the_lag_says_which_fund_flow_days_a_ledger_day_needs():
    wx = lag_for("wechatpay")
    assert [wx.day_of(i, "2026-12-31") for i in (SETTLEMENT, REFUND, FEE, FEE_RETURN)] == [
        "2027-01-01",
        "2026-12-31",
        "2027-01-01",
        "2026-12-31",
    ]
    assert wx.due("2026-12-31") == "2027-01-01" and lag_for("alipay").due("2026-12-31") == "2026-12-31"
    t7 = SettlementLag(7, 0, 7, 0, "T+7 industry")
    v = check_day(
        M,
        "wechatpay",
        "2026-11-30",
        ledger_1130(),
        trade=ledger_1130(),
        fund_days=fund_days(fund_rows()),
        lag=t7,
    )
    assert v.code == PENDING and "2026-12-07" in v.reason and "T+7 industry" in v.reason


@pytest.mark.parametrize("channel", registry.names())
def test_r45_every_channel_has_a_stated_lag(channel):
    terms = registry.get(channel).fund_flow_terms()
    assert terms is not None and terms.lag.source and terms.default_accounts


def test_r45_the_trade_leg_is_summed_from_the_bill_rows_with_fees_charged_and_given_back_apart():
    bills = (
        HERE.parent / "wechat_all_lf.csv"
    )  # 100.00 + 0.01 + 12.34 paid, 25.50 refunded; fees 0.60 + 0.07, −0.15
    figures = trade_figures(WeChatBillParser(open(bills, "rb")).items())
    assert figures == DayFigures(11235, 2550, 67, 15)
    assert figures.fee_cent - figures.fee_returned_cent == 52  # the bill's own 手续费总金额 0.52


# a random WeChat day: the fund flow the lag implies agrees; losing any one credit is a SETTLEMENT diff of exactly it
payments = st.lists(st.tuples(st.integers(1, 10**7), st.integers(0, 100)), min_size=1, max_size=20)
refund_list = st.lists(st.tuples(st.integers(1, 10**6), st.integers(0, 10)), max_size=5)


def _rows(pays, refs):
    credits = [
        FundFlowRow("BASIC", f"C{i}", f"T{i}", "2026-12-01 03:00:00", "交易", SETTLEMENT, s - min(f, s), 0, "", "", s, min(f, s))
        for i, (s, f) in enumerate(pays)
    ]  # fmt: skip
    debits = [
        FundFlowRow("BASIC", f"R{i}", f"R{i}", "2026-11-30 12:00:00", "退款", REFUND, -(r - min(f, r)), 0, "", "", r, min(f, r))
        for i, (r, f) in enumerate(refs)
    ]  # fmt: skip
    return credits, debits


@given(payments, refund_list, st.data())
def test_r45_property_the_lagged_fund_flow_agrees_and_a_lost_credit_is_found(pays, refs, data):
    credits, debits = _rows(pays, refs)
    ledger = DayFigures(
        sum(s for s, _ in pays),
        sum(r for r, _ in refs),
        sum(c.fee_cent for c in credits),
        sum(d.fee_cent for d in debits),
    )
    days = {"2026-11-30": FundFlowDay().extend(debits), "2026-12-01": FundFlowDay().extend(credits)}
    assert (
        check_day(
            M, "wechatpay", "2026-11-30", ledger, trade=ledger, fund_days=days, lag=lag_for("wechatpay")
        ).code
        == AGREED
    )
    lost = data.draw(st.integers(0, len(credits) - 1))
    days["2026-12-01"] = FundFlowDay().extend(c for i, c in enumerate(credits) if i != lost)
    v = check_day(
        M, "wechatpay", "2026-11-30", ledger, trade=ledger, fund_days=days, lag=lag_for("wechatpay")
    )
    assert v.code == FUND_DIFFERS
    got = {d.item: d.local_amount_cent - d.channel_amount_cent for d in v.diffs}
    assert got[SETTLEMENT] == credits[lost].gross_cent
    assert got.get(FEE, 0) == credits[lost].fee_cent
