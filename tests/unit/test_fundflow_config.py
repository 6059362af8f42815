"""R45: a merchant's settlement_lag / fund_accounts (domain/fundflow.lag_of, accounts_of) — what the fund-flow
check uses, and a clear refusal naming the field for anything it could not use. Pure."""

import pytest
from tally.channels import registry
from tally.domain.fundflow import ConfigError, FlowTally, FundFlowRow, FundFlowTerms, accounts_of, lag_of


def terms(channel: str) -> FundFlowTerms:
    found = registry.fund_flow_terms(channel)
    assert found is not None
    return found


def test_r45_no_config_is_the_channel_default_and_settlement_days_carries_the_fee():
    assert lag_of(terms("wechatpay").lag, None) is terms("wechatpay").lag
    assert lag_of(terms("alipay").lag, {}) is terms("alipay").lag
    week = lag_of(terms("wechatpay").lag, {"settlement_days": 7})
    assert (week.settlement_days, week.fee_days, week.refund_days, week.fee_return_days) == (7, 7, 0, 0)
    assert week.due("2024-05-01") == "2024-05-08" and "settlement_days=7" in week.source
    own = lag_of(terms("wechatpay").lag, {"settlement_days": 1, "fee_days": 2, "refund_days": 1})
    assert (own.settlement_days, own.fee_days, own.refund_days) == (1, 2, 1)


@pytest.mark.parametrize(
    "config, why",
    [
        ({"settlement_days": -1}, "0..30"),
        ({"settlement_days": 31}, "0..30"),
        ({"settlement_days": 1.0}, "whole number"),
        ({"settlement_days": True}, "whole number"),
        ({"settlement_days": "1"}, "whole number"),
        ({"settle": 1}, "unknown field"),
        (["settlement_days", 1], "is an object"),
    ],
)
def test_r45_a_lag_the_check_cannot_use_is_refused_naming_the_field(config, why):
    with pytest.raises(ConfigError, match=why):
        lag_of(terms("wechatpay").lag, config)


def test_r45_fund_accounts_are_the_channel_s_words_each_once():
    assert accounts_of(terms("wechatpay"), None) == ("BASIC",) and accounts_of(terms("alipay"), []) == (
        "ALIPAY",
    )
    assert accounts_of(terms("wechatpay"), ["basic", "FEES"]) == ("BASIC", "FEES")
    for bad, why in [
        (["SAVINGS"], "not one of"),
        (["BASIC", "basic"], "twice"),
        ("BASIC", "is a list"),
        (["FEES"], None),
    ]:
        if why is None:
            assert accounts_of(terms("wechatpay"), bad) == ("FEES",)
            continue
        with pytest.raises(ConfigError, match=why):
            accounts_of(terms("wechatpay"), bad)
    with pytest.raises(ConfigError, match="not one of"):
        accounts_of(terms("alipay"), ["BASIC"])  # Alipay has one balance
    assert registry.fund_flow_terms("paypal") is None  # no channel of that name: nothing to read


def test_the_flow_tally_counts_income_expense_and_balance_breaks_for_both_parsers():
    def row(amount, balance, direction=0):
        return FundFlowRow("BASIC", "F", "B", "", "交易", "SETTLEMENT", amount, balance, direction=direction)

    tally = FlowTally()
    for r in (row(100, 100), row(-30, 70), row(0, 70, -1), row(50, 999)):
        tally.add(r)
    assert (tally.income_n, tally.income_cent, tally.expense_n, tally.expense_cent) == (2, 150, 2, 30)
    assert tally.balance_breaks == 1  # 70 + 50 ≠ 999
