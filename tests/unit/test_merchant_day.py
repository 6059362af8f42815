"""domain/merchant_day (R49): one arithmetic for a merchant-day — booked, fees (a cost, positive, whatever sign a
channel's bill writes), net, expected, landed, short by — and the day's verdict from its differences."""

from __future__ import annotations

from tally.domain.merchant_day import (
    DONE,
    IN_TRANSIT,
    LANDED,
    MISSING,
    NOT_CHECKED,
    SHORT,
    count_diffs,
    day_state,
    merchant_day,
)
from tally.domain.statement import DONE as STATEMENT_DONE
from tally.domain.statement import day_verdict, statement_row

D = "2026-12-01"

ENTRIES = [
    {"pk": "p1", "kind": "PAYMENT", "amount_cent": 10000, "settlement_cent": 10000},
    {"pk": "p2", "kind": "PAYMENT", "amount_cent": 2000, "settlement_cent": 1700, "total_cent": 2000},
    {"pk": "p3", "kind": "PAYMENT", "amount_cent": 500},  # booked before R43: its amount
    {"pk": "r1", "kind": "REFUND", "amount_cent": 300, "settlement_refund_cent": 300, "refund_no": "R1"},
    # Alipay's simulated 服务费 is written negative on payments: still a fee charged (of=PAYMENT)
    {"pk": "f1", "kind": "FEE", "amount_cent": -60, "of": "PAYMENT"},
    {"pk": "f2", "kind": "FEE", "amount_cent": 12, "of": "PAYMENT"},
    {"pk": "f3", "kind": "FEE", "amount_cent": -2, "of": "REFUND"},  # given back with the refund
    {"pk": "v1", "kind": "REVERSAL", "amount_cent": -500, "reverses": "p3"},  # p3 never settled: reversed
    {"pk": "v2", "kind": "REVERSAL", "amount_cent": -300, "reverses": "r1"},  # r1 never left: reversed
]


def test_r49_one_arithmetic_fees_a_positive_cost_reversals_signed_as_what_they_correct():
    day = merchant_day("alipay", "2088", D, ENTRIES)
    assert (day.payments, day.payment_cent, day.refunds, day.refund_cent) == (3, 12200, 1, 300)
    assert (day.fee_cent, day.fee_returned_cent, day.net_fee_cent) == (72, 2, 70)  # never negative
    assert (
        day.reversal_cent == -500 + 300
    )  # the payment's reversal takes money off, the refund's gives it back
    assert (day.settlement_cent, day.refunded_cent) == (11700, 0)
    assert day.net_cent == 12200 - 300 + (-200) - 72 + 2 == 11630
    assert day.net_cent <= day.payment_cent  # net never above gross for a day with fees
    row = day.as_dict()
    assert (row["fee_yuan"], row["net_yuan"], row["fees_status"]) == ("0.72", "116.30", "booked")

    # the statement is the same day: its settlement - refunds - fees + fees given back is the same net
    statement = statement_row("2088", "alipay", D, day, None)
    assert (statement["fees_yuan"], statement["net_yuan"], statement["settlement_yuan"]) == (
        "0.72",
        "116.30",
        "117.00",
    )


def test_r49_fees_not_booked_yet_are_an_empty_number_with_a_status_and_the_net_leaves_them_out():
    day = merchant_day("wechatpay", "19", D, ENTRIES[:3])
    row = day.as_dict()
    assert (row["fee_cent"], row["fee_yuan"], row["fees_status"]) == (None, "", "not booked yet")
    assert day.net_cent == 12200
    assert statement_row("19", "wechatpay", D, day, None)["fees_yuan"] == ""
    assert merchant_day("wechatpay", "19", D, ENTRIES[:3], fee_fallback_cent=36).net_cent == 12164


def test_r49_expected_landed_short_and_in_transit_turning_missing_by_itself():
    landed = merchant_day(
        "wechatpay", "19", D, ENTRIES, due="2026-12-02", landed_cent=11630, today="2026-12-04"
    )
    assert (landed.landing, landed.short_cent) == (LANDED, 0)
    short = merchant_day(
        "wechatpay", "19", D, ENTRIES, due="2026-12-02", landed_cent=10130, today="2026-12-04"
    )
    assert (short.landing, short.short_cent) == (SHORT, 1500)
    assert short.landing_words() == "expected 116.30, landed 101.30, short by 15.00"
    # not landed: in transit while the due day's fund flow can still come (the morning after the due day) …
    for today in ("2026-12-02", "2026-12-03"):
        waiting = merchant_day("wechatpay", "19", D, ENTRIES, due="2026-12-02", today=today)
        assert waiting.landing == IN_TRANSIT and "due 2026-12-02" in waiting.landing_words()
    # … and missing from the day after, by itself
    late = merchant_day("wechatpay", "19", D, ENTRIES, due="2026-12-02", today="2026-12-04")
    assert late.landing == MISSING and "missing" in late.landing_words()
    unread = merchant_day("x", "19", D, ENTRIES, due="2026-12-02", today="2026-12-04", fund_flow_read=False)
    assert unread.landing == NOT_CHECKED


def test_r49_a_day_whose_differences_are_all_worked_is_done_and_counts_apart():
    worked = [{"handle_status": "RESOLVED"}] * 24 + [{"handle_status": "IGNORED"}]
    assert day_state("DIFFS", count_diffs(worked)) == (DONE, "DIFFS: 25 resolved, 0 open")
    one_open = [*worked[:24], {"handle_status": "OPEN"}]
    assert day_state("DIFFS", count_diffs(one_open)) == ("DIFFS", "DIFFS: 24 resolved, 1 open")
    assert day_state("MATCHED", count_diffs([])) == ("MATCHED", "")
    assert day_state(None, count_diffs([])) == ("no run yet", "")
    in_transit = [*worked, {"handle_status": "EXPECTED"}]
    assert day_state("DIFFS", count_diffs(in_transit)) == (
        "EXPECTED",
        "DIFFS: 25 resolved, 0 open, 1 expected",
    )

    runs = [
        {"sk": "run#2#fundflow", "leg": "fundflow", "status": "MATCHED"},
        {"sk": "run#1#T+1", "status": "DIFFS", "reason": "25 open difference(s) for a person"},
    ]
    assert day_verdict(runs).code == "DIFFERS"
    done = day_verdict(runs, diffs=[{**d, "cls": "CHANNEL_ONLY"} for d in worked])
    assert done.code == STATEMENT_DONE and "25 resolved, 0 open" in done.reason
    waiting = day_verdict(runs, diffs=[{**d, "cls": "SETTLEMENT_DIFFERS"} for d in in_transit])
    assert waiting.code == "PENDING" and "1 expected" in waiting.reason  # in transit: neither done nor open
    still = day_verdict(runs, diffs=[{**d, "cls": "CHANNEL_ONLY"} for d in one_open])
    assert still.code == "DIFFERS" and still.legs == ("trade bill",)


def test_a_settlement_gap_is_the_money_short_with_both_days_the_next_step_and_its_codes():
    """#30 item 4: the gap, not the channel's figure; debits (a fee charged, a refund) count the other way."""
    from tally.domain.merchant_day import SETTLEMENT_CODES, settlement_gap

    credit = settlement_gap("SETTLEMENT", 4199, 2699, "2026-11-16", "2026-11-17", "2026-12-05")
    assert (credit["gap_cent"], credit["handle_status"]) == (1500, "OPEN")
    assert "short by 15.00" in credit["detail"] and "ask the channel" in credit["next_step"]
    assert "2026-11-16" in credit["detail"] and "2026-11-17" in credit["detail"]
    assert credit["codes"] == list(SETTLEMENT_CODES) and "refunded-by-hand" not in SETTLEMENT_CODES
    fee = settlement_gap("FEE", 25, 16, "2026-11-16", "2026-11-17", "2026-12-05")
    assert fee["gap_cent"] == -9 and "over by 0.09" in fee["detail"]  # charged less than booked: more landed
    fresh = settlement_gap("SETTLEMENT", 4199, 2699, "2026-12-03", "2026-12-04", "2026-12-05")
    assert (
        fresh["handle_status"] == "EXPECTED" and "wait for the fund flow of 2026-12-05" in fresh["next_step"]
    )


def test_the_bill_lag_a_local_only_just_before_midnight_is_expected_until_the_next_bill_is_read_R34():
    from tally.domain.merchant_day import bill_lag

    late = bill_lag("LOCAL_ONLY", "PAYMENT", "2024-05-01", "2024-05-01T23:58:00+08:00", due_bill_read=False)
    assert late is not None and (late["handle_status"], late["due"]) == ("EXPECTED", "2024-05-02")
    assert "wait for the channel's bill of 2024-05-02 (out on 2024-05-03)" in late["next_step"]
    utc = bill_lag("LOCAL_ONLY", "REFUND", "2024-05-01", "2024-05-01T15:59:59Z", due_bill_read=False)
    assert utc is not None and utc["handle_status"] == "EXPECTED"  # 23:59:59 in Asia/Shanghai
    missing = bill_lag("LOCAL_ONLY", "PAYMENT", "2024-05-01", "2024-05-01T23:58:00+08:00", due_bill_read=True)
    assert (
        missing is not None
        and missing["handle_status"] == "OPEN"
        and "nor of 2024-05-02" in missing["next_step"]
    )
    # not the bill lag: away from midnight, unknown time, the channel has it and we do not, a fee
    assert (
        bill_lag("LOCAL_ONLY", "PAYMENT", "2024-05-01", "2024-05-01T23:40:00+08:00", due_bill_read=False)
        is None
    )
    assert bill_lag("LOCAL_ONLY", "PAYMENT", "2024-05-01", "", due_bill_read=False) is None
    assert (
        bill_lag("LOCAL_ONLY", "PAYMENT", "2024-05-01", "2024-05-02T00:00:10+08:00", due_bill_read=False)
        is None
    )
    assert (
        bill_lag("CHANNEL_ONLY", "PAYMENT", "2024-05-01", "2024-05-01T23:58:00+08:00", due_bill_read=False)
        is None
    )
    assert (
        bill_lag("LOCAL_ONLY", "FEE", "2024-05-01", "2024-05-01T23:58:00+08:00", due_bill_read=False) is None
    )
    assert count_diffs([{"handle_status": "EXPECTED", "due": "2024-05-02"}]).words() == (
        "0 resolved, 0 open, 1 expected (in transit, due 2024-05-02)"
    )
