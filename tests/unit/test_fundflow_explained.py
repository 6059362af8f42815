"""R45 + R48: a trade-bill leg whose gap is exactly its rows' own differences is the same money as those rows
(already cases): the verdict says the trade bill differs, but no second difference opens; any other gap does."""

from tally.domain.fundflow import SETTLEMENT, TRADE_DIFFERS, DayFigures, check_day

from tests.unit.fundflow_terms import lag_for


def verdict(rows_explain):
    ledger = DayFigures(10_000, 0, 60, 0)
    trade = DayFigures(10_077, 0, 60, 0)  # the bill lists one more payment of 0.77
    return check_day(
        "1900000109",
        "wechatpay",
        "2024-05-01",
        ledger,
        trade=trade,
        fund_days={},
        rows_explain=rows_explain,
        lag=lag_for("wechatpay"),
    )


def test_a_gap_its_rows_explain_opens_no_leg_difference_but_the_verdict_still_differs():
    day = verdict({SETTLEMENT: 77})
    assert day.diffs == [] and day.code == TRADE_DIFFERS


def test_a_gap_the_rows_do_not_explain_is_a_difference_of_its_own():
    for explained in (None, {SETTLEMENT: 76}, {SETTLEMENT: -77}):
        day = verdict(explained)
        assert [(d.cls, d.item) for d in day.diffs] == [("SETTLEMENT_DIFFERS", "TRADE_SETTLEMENT")]
        assert day.code == TRADE_DIFFERS
