"""R43 for refunds, pure: a refund report's basis rebuilt with its payment's Settlement (domain/settlement.py
`build_refund`, `settlement_of_entry`, the bases the channels' refund parsers keep), and the parsers' notices."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tally.channels.alipay import refunds as ali_refunds
from tally.channels.alipay.settlement import alipay_refund_basis
from tally.channels.settlement import build_refund, refund_fields
from tally.channels.wechatpay_v2 import refunds as v2_refunds
from tally.channels.wechatpay_v2.settlement import v2_refund_basis
from tally.channels.wechatpay_v3 import refunds as v3_refunds
from tally.channels.wechatpay_v3.settlement import v3_refund_basis, wechat_v3_payment
from tally.domain.settlement import SettlementError, settlement_of_entry

CASH_ENTRY = {  # a booked 10.00 payment with a 1.00 CASH coupon (store/payments.py's fields)
    "channel": "wechatpay",
    "amount_cent": 900,
    "order_total_cent": 1000,
    "total_cent": 1000,
    "payer_cent": 900,
    "settlement_cent": 1000,
    "cash_promotion_cent": 100,
    "nocash_promotion_cent": 0,
    "point_cent": 0,
    "settlement_state": "KNOWN",
}
NOCASH_ENTRY = {**CASH_ENTRY, "settlement_cent": 900, "cash_promotion_cent": 0, "nocash_promotion_cent": 100}


def test_r43_a_v3_notification_of_a_cash_coupon_payment_settles_with_the_payment_only():
    """The notification states total/refund/payer_total/payer_refund: alone it cannot tell (refused), with
    the booked payment (no NOCASH) the settlement refund is the refund; the coupon's share is kept."""
    basis = v3_refund_basis({"total": 1000, "refund": 500, "payer_total": 900, "payer_refund": 450})
    alone = refund_fields(basis)
    assert alone["settlement"] is None and "NOCASH" in alone["settlement_error"]
    refund = build_refund(basis, settlement_of_entry(CASH_ENTRY))
    assert (refund.settlement_refund_cent, refund.payer_refund_cent, refund.discount_refund_cent) == (
        500,
        450,
        50,
    )
    with pytest.raises(SettlementError):
        build_refund(basis, settlement_of_entry(NOCASH_ENTRY))  # NOCASH: only the query can say


def test_r43_a_query_answer_settles_itself_and_the_basis_keeps_only_the_builders_fields():
    amount = {
        "total": 2000,
        "refund": 1000,
        "payer_total": 1500,
        "payer_refund": 750,
        "settlement_refund": 750,
    }
    basis = v3_refund_basis({**amount, "from": [{"account": "AVAILABLE", "amount": 1000}], "currency": "CNY"})
    assert set(basis["amount"]) == set(amount)
    assert refund_fields(basis)["settlement"]["settlement_refund_cent"] == 750


def test_r43_a_refund_without_any_figures_of_its_own_settles_only_when_the_payment_was_not_discounted():
    plain = {**CASH_ENTRY, "amount_cent": 1000, "payer_cent": 1000, "cash_promotion_cent": 0}
    refund = build_refund(None, settlement_of_entry(plain), 300)
    assert (refund.settlement_refund_cent, refund.payer_refund_cent, refund.discount_refund_cent) == (
        300,
        300,
        0,
    )
    refund = build_refund(None, settlement_of_entry(CASH_ENTRY), 300)  # CASH: settled in full, payer unknown
    assert (refund.settlement_refund_cent, refund.payer_refund_cent) == (300, None)
    for payment in (settlement_of_entry(NOCASH_ENTRY), None):
        with pytest.raises(SettlementError):
            build_refund(None, payment, 300)
    with pytest.raises(SettlementError):
        build_refund(None, settlement_of_entry(plain))  # no figures and no amount


def test_r43_a_legacy_payment_entry_settles_in_full_only_when_the_payer_paid_the_whole_order():
    assert (
        settlement_of_entry(
            {"channel": "alipay", "amount_cent": 500, "order_total_cent": 500}
        ).settlement_cent
        == 500
    )
    assert settlement_of_entry({"channel": "alipay", "amount_cent": 400, "order_total_cent": 500}) is None
    assert settlement_of_entry({**CASH_ENTRY, "settlement_state": "UNKNOWN", "settlement_cent": None}) is None
    assert settlement_of_entry(None) is None


@given(
    total=st.integers(1, 10**7),
    data=st.data(),
)
def test_r43_a_v3_payment_round_trips_through_its_entry_fields(total, data):
    """What store/payments.py writes comes back as the same settlement figures (property)."""
    payer = data.draw(st.integers(0, total))
    nocash = data.draw(st.integers(0, total - payer))
    promotions = [
        p
        for p in (
            {"coupon_id": "C", "type": "CASH", "amount": total - payer - nocash},
            {"coupon_id": "N", "type": "NOCASH", "amount": nocash},
        )
        if p["amount"]
    ]
    settlement = wechat_v3_payment({"total": total, "payer_total": payer}, promotions)
    again = settlement_of_entry({"channel": "wechatpay", **settlement.entry_fields()})
    assert again is not None and again.entry_fields() == settlement.entry_fields()


def test_r43_v2_bases_from_the_notification_and_the_query():
    note = v2_refund_basis(
        {"refund_fee": "1000", "settlement_refund_fee": "750", "total_fee": "2000", "x": "1"}
    )
    assert note["fields"] == {"refund_fee": "1000", "settlement_refund_fee": "750", "total_fee": "2000"}
    refund = build_refund(note)
    assert (refund.settlement_refund_cent, refund.payer_refund_cent) == (750, None)
    query = v2_refund_basis(
        {"refund_fee": "1000", "settlement_refund_fee": "750", "coupon_refund_fee": "250"}
    )
    refund = build_refund(query)
    assert (refund.settlement_refund_cent, refund.payer_refund_cent, refund.discount_refund_cent) == (
        750,
        750,
        250,
    )


def test_r43_alipay_basis_is_bounded_and_settles_from_the_fund_channels():
    items = [
        {"fund_channel": "ALIPAYACCOUNT", "amount": "8.00", "real_amount": 8.0},  # a float: never stored
        {"fundChannel": "MDISCOUNT", "amount": "2.00"},
    ]
    basis = alipay_refund_basis("10.00", "8.00", items)
    assert basis["refund_detail_item_list"] == [
        {"fund_channel": "ALIPAYACCOUNT", "amount": "8.00"},
        {"fund_channel": "MDISCOUNT", "amount": "2.00"},
    ]
    refund = build_refund(basis)
    assert (refund.settlement_refund_cent, refund.payer_refund_cent, refund.discount_refund_cent) == (
        800,
        800,
        200,
    )
    assert (
        len(alipay_refund_basis("1.00", None, [{"amount": "0.01"}] * 500)["refund_detail_item_list"]) == 101
    )
    assert refund_fields(alipay_refund_basis("1.00", None, "not json"))["settlement"] is None


def test_r43_the_refund_parsers_put_the_figures_and_the_basis_on_the_notice():
    resource = {
        "mchid": "1900000109",
        "out_trade_no": "T1",
        "transaction_id": "4200",
        "out_refund_no": "R1",
        "refund_id": "5030",
        "refund_status": "SUCCESS",
        "amount": {
            "total": 2000,
            "refund": 1000,
            "payer_total": 1500,
            "payer_refund": 750,
            "settlement_refund": 750,
        },
    }
    notice = v3_refunds.to_refund_notice(resource, source="query")
    assert (
        notice.settlement["settlement_refund_cent"] == 750
        and notice.settlement_basis["builder"] == "wechatpay"
    )
    answer = {
        "out_refund_no_0": "R1",
        "refund_id_0": "5030",
        "refund_status_0": "SUCCESS",
        "refund_fee_0": "1000",
        "settlement_refund_fee_0": "750",
        "coupon_refund_fee_0": "250",
        "total_fee": "2000",
        "settlement_total_fee": "1500",
        "out_trade_no": "T1",
        "transaction_id": "4200",
    }
    found = v2_refunds.query_answer(answer, {"refund_no": "R1"}, "1900000109")
    assert found.notice.settlement["discount_refund_cent"] == 250
    ali = ali_refunds.query_answer(
        {
            "out_request_no": "R1",
            "refund_amount": "10.00",
            "total_amount": "20.00",
            "refund_status": "REFUND_SUCCESS",
            "send_back_fee": "8.00",
            "refund_detail_item_list": [
                {"fund_channel": "ALIPAYACCOUNT", "amount": "8.00"},
                {"fund_channel": "MDISCOUNT", "amount": "2.00"},
            ],
        },
        {"refund_no": "R1", "out_trade_no": "T1", "total_cent": 2000},
        mchid="2021",
        sp_mchid=None,
    )
    assert ali.notice.settlement["settlement_refund_cent"] == 800


def test_r43_a_basis_keeps_only_what_can_be_stored_and_built():
    """Hostile or odd values in a signed report never reach the raw row's basis (a float would fail the put)."""
    basis = v3_refund_basis({"refund": 100, "payer_refund": 1.5, "total": True, "settlement_refund": "100"})
    assert basis["amount"] == {"refund": 100}
    basis = v2_refund_basis({"refund_fee": "100", "settlement_refund_fee": 7, "total_fee": "9" * 50})
    assert basis["fields"] == {"refund_fee": "100", "total_fee": "9" * 20}
