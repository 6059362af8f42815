"""R43 at the parse step: every channel's payment notice (notification and query answer) carries its settlement
figures, or why they are unknown; recon's fold matches the settlement amount and counts what it cannot."""

from __future__ import annotations

import json

from tally.channels.alipay import wire as ali
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v3 import wire as wx3
from tally.domain.recon import fold_ledger, matched_cent


def v3_resource(total=1000, payer=900, promotions=None):
    resource = {
        "mchid": "1900000109",
        "out_trade_no": "O-1",
        "transaction_id": "4200000001",
        "trade_state": "SUCCESS",
        "success_time": "2024-05-01T12:00:00+08:00",
        "amount": {"total": total, "payer_total": payer, "currency": "CNY"},
    }
    if promotions is not None:
        resource["promotion_detail"] = promotions
    return resource


def coupon(kind, amount, merchant=0, wechatpay=0):
    return {
        "coupon_id": "C1",
        "type": kind,
        "amount": amount,
        "merchant_contribute": merchant,
        "wechatpay_contribute": wechatpay,
        "other_contribute": amount - merchant - wechatpay,
    }


def test_r43_v3_cash_coupon_settles_the_order_amount_and_nocash_the_order_less_the_coupon():
    cash = wx3.to_payment_notice(v3_resource(promotions=[coupon("CASH", 100, wechatpay=100)]))
    assert cash.paid_cent == 900 and cash.settlement_error is None
    assert cash.settlement["settlement_cent"] == 1000 and cash.settlement["channel_funded_cent"] == 100
    nocash = wx3.to_payment_notice(v3_resource(promotions=[coupon("NOCASH", 100, merchant=100)]))
    assert nocash.settlement["settlement_cent"] == 900 and nocash.settlement["nocash_promotion_cent"] == 100
    query = wx3.to_payment_notice(v3_resource(total=300, payer=300), source="query")
    assert query.settlement["settlement_cent"] == 300 and query.source == "query"


def test_r43_v3_contradicting_or_missing_coupons_are_a_settlement_error_not_a_parse_failure():
    unknown = wx3.to_payment_notice(v3_resource())  # payer < total, no promotion_detail
    assert unknown.settlement is None and "promotion_detail" in unknown.settlement_error
    wrong = wx3.to_payment_notice(v3_resource(promotions=[coupon("CASH", 50, merchant=50)]))
    assert wrong.settlement is None and "promotions" in wrong.settlement_error
    assert wrong.paid_cent == 900  # what R12/R13 check and book is unchanged


def test_r43_v3_an_unpaid_state_carries_no_settlement():
    closed = wx3.to_payment_notice({**v3_resource(payer=1000), "trade_state": "CLOSED"})
    assert closed.settlement is None and closed.settlement_error is None


V2 = {
    "mch_id": "1900000109",
    "out_trade_no": "O-2",
    "result_code": "SUCCESS",
    "transaction_id": "4200000002",
    "total_fee": "150",
    "cash_fee": "50",
    "time_end": "20240501120000",
}


def test_r43_v2_settlement_total_fee_with_a_no_cash_coupon_notification_and_query():
    fields = {
        **V2,
        "settlement_total_fee": "50",
        "coupon_fee": "100",
        "coupon_count": "1",
        "coupon_type_0": "NO_CASH",
        "coupon_id_0": "X",
        "coupon_fee_0": "100",
    }
    notice = wx2.to_payment_notice(fields)
    assert notice.paid_cent == 50 and notice.settlement["settlement_cent"] == 50
    query = wx2.query_notice({**fields, "trade_state": "SUCCESS"}, mchid="1900000109")
    assert query.settlement == notice.settlement
    cash = wx2.to_payment_notice({**fields, "settlement_total_fee": "", "coupon_type_0": ""})
    assert cash.settlement["settlement_cent"] == 150 and cash.settlement["cash_promotion_cent"] == 100
    bad = wx2.to_payment_notice({**fields, "settlement_total_fee": "70"})
    assert bad.settlement is None and "settlement_total_fee" in bad.settlement_error


def test_r43_alipay_keeps_receipt_amount_and_the_voucher_split():
    params = {
        "app_id": "2021000000000001",
        "trade_no": "T1",
        "out_trade_no": "O-3",
        "trade_status": "TRADE_SUCCESS",
        "total_amount": "1.00",
        "receipt_amount": "0.80",
        "buyer_pay_amount": "0.80",
        "fund_bill_list": json.dumps(
            [
                {"amount": "0.80", "fundChannel": "ALIPAYACCOUNT"},
                {"amount": "0.20", "fundChannel": "MDISCOUNT"},
            ]
        ),
    }
    notice = ali.to_payment_notice(params)
    assert notice.settlement["settlement_cent"] == 80 and notice.settlement["merchant_funded_cent"] == 20
    bad = ali.to_payment_notice({**params, "fund_bill_list": '[{"amount":"0.50","fundChannel":"PCREDIT"}]'})
    assert bad.settlement is None and "fund_bill_list" in bad.settlement_error
    waiting = ali.to_payment_notice({**params, "trade_status": "WAIT_BUYER_PAY"})
    assert waiting.settlement is None and waiting.settlement_error is None


def test_r43_the_notice_travels_through_the_queue_message_and_back():
    notice = wx3.to_payment_notice(v3_resource(promotions=[coupon("CASH", 100, merchant=100)]))
    message = json.loads(json.dumps(notice.as_message()))
    assert type(notice)(**message) == notice


def test_r43_fold_matches_settlement_amounts_and_counts_legacy_and_unknown_entries():
    rows = [
        {"pk": "a", "kind": "PAYMENT", "amount_cent": 900, "settlement_cent": 1000},
        {"pk": "b", "kind": "PAYMENT", "amount_cent": 300},  # booked before R43
        {"pk": "c", "kind": "PAYMENT", "amount_cent": 500, "settlement_state": "UNKNOWN"},
        {"pk": "r", "kind": "REFUND", "amount_cent": 200, "settlement_refund_cent": 150},
        {"pk": "s", "kind": "REFUND", "amount_cent": 100},
        {"pk": "fee#wechatpay#x", "kind": "FEE", "amount_cent": 6},
        {"pk": "rev", "kind": "REVERSAL", "reverses": "a", "amount_cent": -1000},
    ]
    counts: dict[str, int] = {}
    local = fold_ledger(rows, counts)
    assert {k: e.amount_cent for k, e in local.items()} == {"b": 300, "c": 500, "r": 150, "s": 100}
    assert counts == {"legacy_payments": 1, "settlement_unknown": 1, "legacy_refunds": 1}
    assert matched_cent(rows[0]) == 1000 and matched_cent(rows[1]) == 300
