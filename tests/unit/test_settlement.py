"""R43: a payment or refund keeps the order amount, the payer amount, the settlement amount and the promotion
split (tally.domain.settlement). The examples are the channels' own (sources in docs/settlement.md):

- WeChat Pay coupon product page: 预充值 (CASH) "订单金额100元，用户实付90元，商户实收100元"; 免充值 (NOCASH)
  "订单金额100元，用户实付90元，商户实收90元";
- the v3 notification plaintext example (amount total = payer_total = 100), the refund notification example
  (999 / 999), a recorded v3 refund query answer (total 100, payer 90, discount_refund 10);
- v2 community threads quoted with their numbers (1.50 order, 1.00 免充值券 → 结算 0.50; 36.00 order, 5.29
  代金券 → 结算 36.00; total_fee 32900, cash_fee 32400, coupon_fee 500);
- Alipay's notification signing example (total 1.00, receipt 0.80, a 0.20 voucher) and query example (20.00).
"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tally.channels.alipay.settlement import alipay_payment, alipay_refund
from tally.channels.wechatpay_v2.settlement import wechat_v2_payment, wechat_v2_refund
from tally.channels.wechatpay_v3.bills import HEADERS, SUMMARY_HEADERS, WeChatBillParser
from tally.channels.wechatpay_v3.settlement import wechat_v3_payment, wechat_v3_refund
from tally.domain.money import MAX_CENT, format_cents
from tally.domain.recon import AMOUNT_DIFFERS, PASSED, PAYMENT, LocalEntry, Matcher, check_guards
from tally.domain.settlement import CASH, NOCASH, Promotion, Refund, Settlement, SettlementError

# ---------------------------------------------------------------- WeChat Pay v3


def test_r43_v3_official_example_without_coupon_settles_the_order_amount():
    s = wechat_v3_payment({"payer_total": 100, "total": 100, "currency": "CNY", "payer_currency": "CNY"})
    assert (s.channel, s.total_cent, s.payer_cent, s.settlement_cent) == ("wechatpay", 100, 100, 100)
    assert s.promotions == () and s.discount_cent == 0 and s.unattributed_cent == 0


def test_r43_v3_cash_coupon_is_settled_to_the_merchant():
    # 预充值代金券 满100减10: 订单金额100元，用户实付90元，商户实收100元 (funded by WeChat Pay here)
    s = wechat_v3_payment(
        {"total": 10000, "payer_total": 9000},
        [{"coupon_id": "109519", "type": "CASH", "amount": 1000, "wechatpay_contribute": 1000,
          "merchant_contribute": 0, "other_contribute": 0}],
    )  # fmt: skip
    assert (s.total_cent, s.payer_cent, s.settlement_cent) == (10000, 9000, 10000)
    assert (s.cash_promotion_cent, s.nocash_promotion_cent) == (1000, 0)
    assert (s.merchant_funded_cent, s.channel_funded_cent, s.other_funded_cent) == (0, 1000, 0)


def test_r43_v3_nocash_coupon_is_given_up_by_the_merchant():
    # 免充值代金券 满100减10: 订单金额100元，用户实付90元，商户实收90元 — 应结订单金额 = 订单金额 − 免充值券
    s = wechat_v3_payment(
        {"total": 10000, "payer_total": 9000},
        [{"coupon_id": "2", "type": "NOCASH", "amount": 1000, "merchant_contribute": 1000}],
    )
    assert (s.total_cent, s.payer_cent, s.settlement_cent) == (10000, 9000, 9000)
    assert (s.cash_promotion_cent, s.nocash_promotion_cent, s.merchant_funded_cent) == (0, 1000, 1000)


def test_r43_v3_cash_and_nocash_together_split_by_funder():
    s = wechat_v3_payment(
        {"total": 10000, "payer_total": 8500},
        [
            {
                "coupon_id": "C",
                "type": "CASH",
                "amount": 500,
                "wechatpay_contribute": 200,
                "other_contribute": 300,
            },
            {"coupon_id": "N", "type": "NOCASH", "amount": 1000, "merchant_contribute": 1000},
        ],
    )
    assert s.settlement_cent == 9000  # 10000 − the NOCASH 1000; the CASH 500 is paid to the merchant
    assert (s.merchant_funded_cent, s.channel_funded_cent, s.other_funded_cent, s.unattributed_cent) == (
        1000,
        200,
        300,
        0,
    )
    fields = s.entry_fields()
    assert (
        fields["settlement_cent"] == 9000 and fields["payer_cent"] == 8500 and fields["total_cent"] == 10000
    )
    assert all(isinstance(v, int) for v in fields.values())


def test_r43_v3_merchant_funded_cash_coupon_still_settles():
    # a CASH coupon the merchant pre-funded: the money was locked from its balance beforehand, so it is settled
    s = wechat_v3_payment(
        {"total": 2000, "payer_total": 1500},
        [{"coupon_id": "M", "type": "CASH", "amount": 500, "merchant_contribute": 500}],
    )
    assert (s.settlement_cent, s.merchant_funded_cent, s.channel_funded_cent) == (2000, 500, 0)


@pytest.mark.parametrize(
    ("amount", "promotions", "why"),
    [
        ({"total": 100, "payer_total": 90}, None, "no promotion_detail"),
        ({"total": 100, "payer_total": 90}, [{"type": "CASH", "amount": 5}], "!= total"),
        ({"total": 100, "payer_total": 120}, None, "no promotion_detail"),
        ({"total": 100, "payer_total": 90}, [{"type": "DISCOUNT", "amount": 10}], "neither CASH nor NOCASH"),
        (
            {"total": 100, "payer_total": 90},
            [{"type": "CASH", "amount": 10, "merchant_contribute": 3}],
            "!= amount",
        ),
        ({"total": -1, "payer_total": -1}, None, "never negative"),
        ({"total": 1.5, "payer_total": 1.5}, None, "integer cents"),
        ({"total": True, "payer_total": True}, None, "integer cents"),
        ({"total": "100", "payer_total": "100"}, None, "integer cents"),
        ({"payer_total": 100}, None, "missing total"),
        ({"total": MAX_CENT + 1, "payer_total": MAX_CENT + 1}, None, "outside"),
    ],
)
def test_r43_v3_inconsistent_input_is_refused(amount, promotions, why):
    with pytest.raises(SettlementError, match=why):
        wechat_v3_payment(amount, promotions)


def test_r43_v3_refund_query_keeps_the_split():
    # a recorded v3 refund query answer: total 100, refund 100, payer 90/90, settlement 100/100, discount 10
    r = wechat_v3_refund(
        {"total": 100, "refund": 100, "payer_total": 90, "payer_refund": 90, "settlement_refund": 100,
         "settlement_total": 100, "discount_refund": 10, "currency": "CNY"}
    )  # fmt: skip
    assert (r.refund_cent, r.settlement_refund_cent, r.payer_refund_cent, r.discount_refund_cent) == (
        100,
        100,
        90,
        10,
    )
    assert r.entry_fields() == {
        "refund_cent": 100,
        "settlement_refund_cent": 100,
        "payer_refund_cent": 90,
        "discount_refund_cent": 10,
        "total_cent": 100,
    }


def test_r43_v3_refund_notification_needs_the_payment_to_know_its_settlement_refund():
    amount = {"total": 999, "refund": 999, "payer_total": 999, "payer_refund": 999}  # the official example
    with pytest.raises(SettlementError, match="query the refund"):
        wechat_v3_refund(amount)
    payment = wechat_v3_payment({"total": 999, "payer_total": 999})
    r = wechat_v3_refund(amount, payment)
    assert (r.settlement_refund_cent, r.payer_refund_cent, r.discount_refund_cent) == (999, 999, 0)
    nocash = wechat_v3_payment(
        {"total": 999, "payer_total": 899}, [{"type": "NOCASH", "amount": 100, "merchant_contribute": 100}]
    )
    with pytest.raises(SettlementError, match="NOCASH"):
        wechat_v3_refund({"total": 999, "refund": 500, "payer_refund": 450}, nocash)


def test_r43_v3_nocash_refund_settles_less_than_it_refunds():
    r = wechat_v3_refund(
        {
            "total": 10000,
            "refund": 10000,
            "payer_refund": 9000,
            "settlement_refund": 9000,
            "discount_refund": 1000,
        }
    )
    assert (r.refund_cent, r.settlement_refund_cent) == (10000, 9000)


@pytest.mark.parametrize(
    ("amount", "why"),
    [
        (
            {
                "total": 100,
                "refund": 100,
                "payer_refund": 90,
                "discount_refund": 20,
                "settlement_refund": 100,
            },
            "!= refund",
        ),
        ({"total": 100, "refund": 100, "payer_refund": 90, "settlement_refund": 110}, "exceeds the refund"),
        (
            {"total": 100, "refund": 120, "payer_refund": 90, "settlement_refund": 100},
            "exceeds the order amount",
        ),
        ({"total": 100, "refund": 50, "payer_refund": 60, "settlement_refund": 50}, "payer_refund"),
    ],
)
def test_r43_v3_inconsistent_refund_is_refused(amount, why):
    with pytest.raises(SettlementError, match=why):
        wechat_v3_refund(amount)


# ---------------------------------------------------------------- WeChat Pay v2


def test_r43_v2_nocash_coupon_settles_the_rest():
    # "订单金额1.5元，使用了1元的免充值券，结算金额是0.5元"
    s = wechat_v2_payment(
        {"total_fee": "150", "cash_fee": "50", "settlement_total_fee": "50", "coupon_fee": "100",
         "coupon_count": "1", "coupon_type_0": "NO_CASH", "coupon_id_0": "10001", "coupon_fee_0": "100"}
    )  # fmt: skip
    assert (s.channel, s.total_cent, s.payer_cent, s.settlement_cent) == ("wechatpay-v2", 150, 50, 50)
    assert s.promotions == (Promotion("10001", NOCASH, 100, 100),)
    assert s.merchant_funded_cent == 100


def test_r43_v2_cash_coupon_settles_the_order_amount():
    # "订单金额36.00元，使用了5.29元的代金券，结算金额是36.00元"
    s = wechat_v2_payment(
        {"total_fee": "3600", "cash_fee": "3071", "coupon_fee": "529", "coupon_count": "1",
         "coupon_type_0": "CASH", "coupon_fee_0": "529"}
    )  # fmt: skip
    assert (s.total_cent, s.payer_cent, s.settlement_cent) == (3600, 3071, 3600)
    assert (s.cash_promotion_cent, s.unattributed_cent) == (529, 529)  # v2 does not say who funded it


def test_r43_v2_coupon_without_type_before_the_nocash_upgrade_is_cash():
    # a real notification: total_fee 32900, cash_fee 32400, coupon_fee 500, no coupon_type_0, no settlement_total_fee
    s = wechat_v2_payment(
        {"total_fee": "32900", "cash_fee": "32400", "coupon_count": "1", "coupon_fee": "500",
         "coupon_fee_0": "500", "coupon_id_0": "28232857918"}
    )  # fmt: skip
    assert (s.settlement_cent, s.cash_promotion_cent) == (32900, 500)


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"total_fee": "150", "cash_fee": "50", "settlement_total_fee": "100", "coupon_fee": "100",
          "coupon_count": "1", "coupon_type_0": "NO_CASH", "coupon_fee_0": "100"}, "settlement_total_fee"),
        ({"total_fee": "150", "cash_fee": "50", "coupon_fee": "90", "coupon_count": "1", "coupon_fee_0": "100"},
         "coupon_fee"),
        ({"total_fee": "150", "cash_fee": "60", "coupon_fee": "100", "coupon_count": "1", "coupon_fee_0": "100"},
         "cash_fee"),
        ({"total_fee": "1.50", "cash_fee": "150"}, "whole number of fen"),
        ({"total_fee": "-150", "cash_fee": "150"}, "whole number of fen"),
        ({"cash_fee": "150"}, "missing total_fee"),
        ({"total_fee": "150", "cash_fee": "150", "coupon_count": "100000"}, "implausible"),
        ({"total_fee": "150", "cash_fee": "50", "settlement_total_fee": "50", "coupon_count": "1",
          "coupon_fee_0": "100"}, "neither CASH nor NO_CASH"),
    ],
)  # fmt: skip
def test_r43_v2_inconsistent_input_is_refused(fields, why):
    with pytest.raises(SettlementError, match=why):
        wechat_v2_payment(fields)


def test_r43_v2_refund_uses_settlement_refund_fee():
    r = wechat_v2_refund({"refund_fee": "150", "settlement_refund_fee": "50", "total_fee": "150"})
    assert (r.channel, r.refund_cent, r.settlement_refund_cent, r.payer_refund_cent) == (
        "wechatpay-v2",
        150,
        50,
        None,
    )
    plain = wechat_v2_payment({"total_fee": "100", "cash_fee": "100"})
    r = wechat_v2_refund({"refund_fee": "100", "total_fee": "100"}, plain)
    assert (r.settlement_refund_cent, r.payer_refund_cent, r.discount_refund_cent) == (100, 100, 0)
    r = wechat_v2_refund({"refund_fee": "100", "cash_refund_fee": "90", "total_fee": "100"})
    assert (r.settlement_refund_cent, r.payer_refund_cent, r.discount_refund_cent) == (100, 90, 10)
    with pytest.raises(SettlementError, match="query the refund"):
        wechat_v2_refund({"refund_fee": "100", "total_fee": "150", "settlement_total_fee": "50"})


# ---------------------------------------------------------------- Alipay


ALIPAY_NOTIFY = {  # Alipay's own notification-signing example (yuan strings; the lists are JSON strings)
    "total_amount": "1.00",
    "receipt_amount": "0.80",
    "invoice_amount": "0.80",
    "buyer_pay_amount": "0.80",
    "point_amount": "0.00",
    "fund_bill_list": '[{"amount":"0.80","fundChannel":"ALIPAYACCOUNT"},{"amount":"0.20","fundChannel":"MDISCOUNT"}]',
    "voucher_detail_list": '[{"amount":"0.20","merchantContribute":"0.00","name":"5折券","otherContribute":"0.20",'
    '"type":"ALIPAY_DISCOUNT_VOUCHER","voucherId":"2016101200073002586200003BQ4"}]',
}


def test_r43_alipay_discount_example_settles_receipt_amount():
    s = alipay_payment(ALIPAY_NOTIFY)
    assert (s.channel, s.total_cent, s.payer_cent, s.settlement_cent, s.invoice_cent) == (
        "alipay",
        100,
        80,
        80,
        80,
    )
    assert s.promotions == (
        Promotion("2016101200073002586200003BQ4", "ALIPAY_DISCOUNT_VOUCHER", 20, 0, 0, 20),
    )
    assert (s.merchant_funded_cent, s.other_funded_cent, s.unattributed_cent, s.discount_cent) == (
        0,
        20,
        0,
        20,
    )
    assert s.entry_fields()["invoice_cent"] == 80


def test_r43_alipay_query_example_without_discount():
    s = alipay_payment(
        {"total_amount": "20.00", "receipt_amount": "20.00", "buyer_pay_amount": "20.00", "point_amount": "0.00",
         "invoice_amount": "20.00", "fund_bill_list": [{"amount": "20.00", "fund_channel": "ALIPAYACCOUNT"}]}
    )  # fmt: skip
    assert (s.total_cent, s.payer_cent, s.settlement_cent, s.discount_cent) == (2000, 2000, 2000, 0)


def test_r43_alipay_merchant_discount_channel_without_voucher_list_is_merchant_funded():
    s = alipay_payment(
        {"total_amount": "10.00", "receipt_amount": "9.00", "buyer_pay_amount": "9.00",
         "fund_bill_list": json.dumps([{"amount": "9.00", "fundChannel": "ALIPAYACCOUNT"},
                                       {"amount": "1.00", "fundChannel": "MCOUPON"}])}
    )  # fmt: skip
    assert (s.settlement_cent, s.merchant_funded_cent, s.unattributed_cent) == (900, 100, 0)


def test_r43_alipay_points_are_part_of_the_discount_not_of_the_payer_amount():
    s = alipay_payment(
        {
            "total_amount": "10.00",
            "receipt_amount": "10.00",
            "buyer_pay_amount": "9.50",
            "point_amount": "0.50",
        }
    )
    assert (s.payer_cent, s.point_cent, s.discount_cent, s.settlement_cent) == (950, 50, 0, 1000)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"receipt_amount": "1.20"}, "exceeds the order amount"),
        ({"total_amount": "1.001"}, "at most 2 decimals"),
        ({"total_amount": "-1.00"}, "never negative"),
        ({"total_amount": 1.0}, "is a string"),
        ({"buyer_pay_amount": ""}, "missing buyer_pay_amount"),
        ({"fund_bill_list": '[{"amount":"0.70","fundChannel":"ALIPAYACCOUNT"}]'}, "fund_bill_list"),
        ({"fund_bill_list": "not json"}, "not JSON"),
        ({"fund_bill_list": "[" + ",".join(['{"amount":"0.01"}'] * 101) + "]"}, "at most 100"),
        (
            {
                "voucher_detail_list": '[{"amount":"0.20","merchantContribute":"0.05","otherContribute":"0.20"}]'
            },
            "!= amount",
        ),
        ({"invoice_amount": "2.00"}, "invoice amount"),
        ({"buyer_pay_amount": "0.90"}, "exceeds the discount"),  # a 0.20 voucher on a 0.10 discount
    ],
)
def test_r43_alipay_inconsistent_input_is_refused(change, why):
    with pytest.raises(SettlementError, match=why):
        alipay_payment({**ALIPAY_NOTIFY, **change})


def test_r43_alipay_refund_settles_less_the_merchant_funded_channels():
    payment = alipay_payment(ALIPAY_NOTIFY)
    items = [
        {"fund_channel": "ALIPAYACCOUNT", "amount": "0.80"},
        {"fund_channel": "MDISCOUNT", "amount": "0.20"},
    ]
    r = alipay_refund("1.00", send_back_fee="0.80", refund_detail_item_list=items, payment=payment)
    assert (r.refund_cent, r.settlement_refund_cent, r.payer_refund_cent, r.discount_refund_cent) == (
        100,
        80,
        80,
        20,
    )
    with pytest.raises(SettlementError, match="query with query_options"):
        alipay_refund("1.00", payment=payment)
    plain = alipay_payment({"total_amount": "20.00", "receipt_amount": "20.00", "buyer_pay_amount": "20.00"})
    r = alipay_refund("5.00", payment=plain)
    assert (r.settlement_refund_cent, r.payer_refund_cent, r.total_cent) == (500, 500, 2000)
    with pytest.raises(SettlementError, match="exceeds the order amount"):
        alipay_refund("25.00", payment=plain)


# ---------------------------------------------------------------- the records themselves


def test_r43_records_refuse_contradictions_when_built_directly():
    with pytest.raises(SettlementError, match="settlement amount"):
        Settlement("wechatpay", 100, 100, 101)
    with pytest.raises(SettlementError, match="contributions"):
        Promotion("x", CASH, 10, 6, 6)
    with pytest.raises(SettlementError, match="settlement refund"):
        Refund("wechatpay", 10, 11)
    with pytest.raises(SettlementError, match="integer cents"):
        Refund("wechatpay", 10, 10.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------- properties

coupons = st.lists(
    st.tuples(
        st.sampled_from([CASH, NOCASH]), st.integers(1, 5000), st.integers(0, 2), st.integers(0, 10**6)
    ),
    max_size=4,
)


@given(st.integers(1, 10**7), coupons)
def test_r43_property_v3_and_v2_agree_and_settlement_lies_between_payer_and_total(extra, cs):
    total = extra + sum(c[1] for c in cs)
    details = []
    for i, (kind, amount, funder, _seed) in enumerate(cs):
        key = ("merchant_contribute", "wechatpay_contribute", "other_contribute")[funder]
        details.append({"coupon_id": str(i), "type": kind, "amount": amount, key: amount})
    payer = total - sum(c[1] for c in cs)
    s = wechat_v3_payment({"total": total, "payer_total": payer}, details)
    assert payer <= s.settlement_cent <= total
    assert s.settlement_cent == total - s.nocash_promotion_cent == payer + s.cash_promotion_cent
    assert s.merchant_funded_cent + s.channel_funded_cent + s.other_funded_cent == total - payer
    v2 = {"total_fee": str(total), "cash_fee": str(payer), "coupon_count": str(len(cs))}
    for i, (kind, amount, _f, _s) in enumerate(cs):
        v2[f"coupon_type_{i}"] = "NO_CASH" if kind == NOCASH else "CASH"
        v2[f"coupon_fee_{i}"] = str(amount)
    if s.nocash_promotion_cent:
        v2["settlement_total_fee"] = str(s.settlement_cent)
    s2 = wechat_v2_payment(v2)
    assert (s2.total_cent, s2.payer_cent, s2.settlement_cent) == (
        s.total_cent,
        s.payer_cent,
        s.settlement_cent,
    )


@given(st.integers(1, 10**7), coupons, st.integers(1, 1000))
def test_r43_property_a_payer_amount_that_does_not_add_up_is_always_refused(extra, cs, off):
    total = extra + sum(c[1] for c in cs)
    details = [{"type": kind, "amount": amount} for kind, amount, _f, _s in cs]
    payer = total - sum(c[1] for c in cs)
    with pytest.raises(SettlementError):
        wechat_v3_payment({"total": total, "payer_total": payer + off}, details)


# ---------------------------------------------------------------- what the trade bill compares (R43 → recon)


def _bill_row(tx, settle, coupon, total):
    values = ["2026-11-30 10:00:00", "wx1", "1900000109", "0", "", tx, f"O{tx}", "o1", "NATIVE", "SUCCESS",
              "OTHERS", "CNY", settle, coupon, "0", "0", "0.00", "0.00", "", "", "coffee", "", "0.00000", "0.60%",
              total, "0.00", ""]  # fmt: skip
    return ("`" + ",`".join(values) + "\n").encode()


def test_r43_the_trade_bill_compares_settlement_amounts_so_the_ledger_must_book_them():
    """WeChat's ALL bill writes 应结订单金额 = 订单金额 − NOCASH: a ledger of settlement amounts matches it row
    for row; today's ledger of payer amounts differs on every CASH coupon (docs/proof.md)."""
    cash = wechat_v3_payment({"total": 10000, "payer_total": 9000}, [{"type": "CASH", "amount": 1000}])
    nocash = wechat_v3_payment({"total": 10000, "payer_total": 9000}, [{"type": "NOCASH", "amount": 1000}])
    lines = [
        (HEADERS["ALL"] + "\n").encode(),
        _bill_row("4201", "100.00", "10.00", "100.00"),
        _bill_row("4202", "90.00", "10.00", "100.00"),
        (SUMMARY_HEADERS["ALL"] + "\n").encode(),
        b"`2,`190.00,`0.00,`0.00,`0.00000,`200.00,`0.00\n",
    ]
    parser = WeChatBillParser(iter(lines), check_fees=False)
    items = list(parser.items())
    assert check_guards(parser.totals).code == PASSED

    def diffs(amount_of):
        local = {
            "wechatpay#4201": LocalEntry("wechatpay#4201", PAYMENT, amount_of(cash)),
            "wechatpay#4202": LocalEntry("wechatpay#4202", PAYMENT, amount_of(nocash)),
        }
        return [(d.cls, d.key) for d in Matcher(local).match(items)]

    assert diffs(lambda s: s.settlement_cent) == []
    assert diffs(lambda s: s.payer_cent) == [(AMOUNT_DIFFERS, "wechatpay#4201")]


vouchers = st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000)), max_size=4)


@given(st.integers(1, 10**7), vouchers, st.integers(0, 100))
def test_r43_property_alipay_keeps_receipt_and_the_voucher_split(paid, vs, points):
    discount = sum(m + o for m, o in vs)
    total = paid + points + discount
    merchant = sum(m for m, _ in vs)

    yuan = format_cents
    fields = {
        "total_amount": yuan(total),
        "buyer_pay_amount": yuan(paid),
        "point_amount": yuan(points),
        "receipt_amount": yuan(total - merchant),
        "voucher_detail_list": json.dumps(
            [
                {"amount": yuan(m + o), "merchantContribute": yuan(m), "otherContribute": yuan(o)}
                for m, o in vs
            ]
        ),
        "fund_bill_list": json.dumps(
            [{"amount": yuan(paid), "fundChannel": "ALIPAYACCOUNT"}]
            + ([{"amount": yuan(points), "fundChannel": "POINT"}] if points else [])
            + ([{"amount": yuan(discount), "fundChannel": "DISCOUNT"}] if discount else [])
        ),
    }
    s = alipay_payment(fields)
    assert (s.total_cent, s.payer_cent, s.point_cent, s.settlement_cent) == (
        total,
        paid,
        points,
        total - merchant,
    )
    assert (s.merchant_funded_cent, s.other_funded_cent, s.unattributed_cent) == (
        merchant,
        discount - merchant,
        0,
    )
    with pytest.raises(SettlementError):
        alipay_payment({**fields, "total_amount": yuan(total + 1)})
