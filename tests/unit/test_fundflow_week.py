"""R43 + R45 rehearsed on a week, pure: coupons of every kind on WeChat Pay v3, v2 and Alipay, the channels'
fund flows written in their own layouts (WeChat T+1 net of fee, refunds the same day; Alipay the same day with
its fee rows), parsed back, and every ledger day checked three ways. Zero false differences; one planted
shortfall is found on its day only. The simulator will play the same week through the stack (docs/settlement.md
§6.8); this is the arithmetic it must agree with."""

from datetime import date, timedelta

from tally.channels.alipay.fundflow import HEADER as ALI_HEADER
from tally.channels.alipay.fundflow import AlipayFundFlowParser
from tally.channels.alipay.settlement import alipay_payment
from tally.channels.wechatpay_v2.settlement import wechat_v2_payment
from tally.channels.wechatpay_v3.fundflow import HEADER, SUMMARY_HEADER, WeChatFundFlowParser
from tally.channels.wechatpay_v3.settlement import wechat_v3_payment, wechat_v3_refund
from tally.domain.fundflow import AGREED, FUND_DIFFERS, PENDING, SETTLEMENT, FundFlowDay, check_day
from tally.domain.money import format_cents
from tally.domain.recon import PASSED, QUIET, check_guards
from tally.domain.statement import summarize

from tests.unit.fundflow_terms import lag_for

START = date(2026, 11, 23)
DAYS = [(START + timedelta(days=n)).isoformat() for n in range(7)]
RATE_E4 = 60  # 0.60 %


def fee(cents):
    return (cents * RATE_E4 + 5000) // 10000  # half up to the fen


def wechat_day(n):
    """Day n's v3 and v2 payments: a CASH coupon, a NOCASH coupon, both, none; a v2 NO_CASH coupon."""
    base = 1000 * (n + 1)
    return [
        wechat_v3_payment({"total": base + 500, "payer_total": base}, [{"type": "CASH", "amount": 500}]),
        wechat_v3_payment(
            {"total": base + 300, "payer_total": base},
            [{"type": "NOCASH", "amount": 300, "merchant_contribute": 300}],
        ),
        wechat_v3_payment(
            {"total": base + 900, "payer_total": base},
            [
                {"type": "CASH", "amount": 400, "wechatpay_contribute": 400},
                {"type": "NOCASH", "amount": 500, "merchant_contribute": 500},
            ],
        ),
        wechat_v3_payment({"total": base + 7, "payer_total": base + 7}),
        wechat_v2_payment(
            {
                "total_fee": str(base + 200),
                "cash_fee": str(base),
                "settlement_total_fee": str(base),
                "coupon_fee": "200",
                "coupon_count": "1",
                "coupon_type_0": "NO_CASH",
                "coupon_fee_0": "200",
            }
        ),  # fmt: skip
    ]


def wechat_refunds(n):
    if n % 2:
        return []
    return [wechat_v3_refund({"total": 2000, "refund": 100 * (n + 1), "payer_refund": 100 * (n + 1),
                              "settlement_refund": 100 * (n + 1)})]  # fmt: skip


def bt(*values):
    return ",".join("`" + v for v in values)


def wechat_fund_file(on, credits, debits):
    """One BASIC-account day as WeChat writes it: credits net of fee (memo states the split), refunds net of the
    fee given back."""
    lines, balance, income, expense = [HEADER], 10**7, 0, 0
    for i, (gross, f) in enumerate(credits):
        balance += gross - f
        income += gross - f
        lines.append(bt(f"{on} 03:10:00", f"T{i}", f"C{i}", "交易", "交易", "收入", format_cents(gross - f),
                        format_cents(balance), "system", f"总金额{format_cents(gross)}元;含手续费{format_cents(f)}元", ""))  # fmt: skip
    for i, (gross, f) in enumerate(debits):
        balance -= gross - f
        expense += gross - f
        lines.append(bt(f"{on} 10:00:00", f"R{i}", f"D{i}", "退款", "退款", "支出", format_cents(gross - f),
                        format_cents(balance), "api", f"退款总金额{format_cents(gross)}元;含手续费{format_cents(f)}元", ""))  # fmt: skip
    n_in, n_out = len(credits), len(debits)
    summary = bt(str(n_in + n_out), str(n_in), format_cents(income), str(n_out), format_cents(expense))
    return ("\n".join([*lines, SUMMARY_HEADER, summary]) + "\n").encode()


def parsed_wechat(data):
    parser = WeChatFundFlowParser(iter(data.splitlines(keepends=True)))
    rows = list(parser.rows())
    assert check_guards(parser.totals).code in (PASSED, QUIET)
    return FundFlowDay().extend(rows)


def wechat_week(drop=None):
    """Fund-flow day D: the credits of ledger day D−1, the refunds of D. `drop` = (ledger day, payment index)."""
    fund = {}
    for d in range(len(DAYS) + 1):
        credits = []
        if d >= 1:
            for i, p in enumerate(wechat_day(d - 1)):
                if drop != (d - 1, i):
                    credits.append((p.settlement_cent, fee(p.settlement_cent)))
        debits = (
            [(r.settlement_refund_cent, fee(r.settlement_refund_cent)) for r in wechat_refunds(d)]
            if d < len(DAYS)
            else []
        )
        on = (START + timedelta(days=d)).isoformat()
        fund[on] = parsed_wechat(wechat_fund_file(on, credits, debits))
    return fund


def wechat_ledger(n):
    payments, refunds = wechat_day(n), wechat_refunds(n)
    return summarize(
        payments,
        refunds,
        fee_cent=sum(fee(p.settlement_cent) for p in payments),
        fee_returned_cent=sum(fee(r.settlement_refund_cent) for r in refunds),
    ).figures()


def test_r45_a_coupon_week_on_wechat_reconciles_with_zero_false_differences():
    fund = wechat_week()
    del fund[(START + timedelta(days=7)).isoformat()]  # the last day's T+1 credit is not in yet
    verdicts = [
        check_day(
            "1900000109",
            "wechatpay",
            day,
            wechat_ledger(n),
            trade=wechat_ledger(n),
            fund_days=fund,
            lag=lag_for("wechatpay"),
        )
        for n, day in enumerate(DAYS)
    ]
    assert [v.code for v in verdicts] == [AGREED] * 6 + [PENDING]
    assert all(v.diffs == [] for v in verdicts)


def test_r45_a_planted_settlement_shortfall_is_found_on_its_day_only():
    fund = wechat_week(drop=(3, 1))  # day 3's NOCASH-coupon payment never credited
    codes = {}
    for n, day in enumerate(DAYS[:-1]):
        v = check_day(
            "1900000109",
            "wechatpay",
            day,
            wechat_ledger(n),
            trade=wechat_ledger(n),
            fund_days=fund,
            lag=lag_for("wechatpay"),
        )
        codes[day] = v.code
        if n == 3:
            lost = wechat_day(3)[1].settlement_cent
            assert {d.item: d.local_amount_cent - d.channel_amount_cent for d in v.diffs}[SETTLEMENT] == lost
    assert [d for d, c in codes.items() if c != AGREED] == [DAYS[3]]
    assert codes[DAYS[3]] == FUND_DIFFERS


def test_r45_a_coupon_week_on_alipay_reconciles_the_same_day():
    for n, day in enumerate(DAYS):
        base = 1000 * (n + 1)
        payments = [
            alipay_payment({"total_amount": format_cents(base), "receipt_amount": format_cents(base),
                            "buyer_pay_amount": format_cents(base)}),
            alipay_payment({"total_amount": format_cents(base + 20), "receipt_amount": format_cents(base),
                            "buyer_pay_amount": format_cents(base),
                            "voucher_detail_list": '[{"amount":"0.20","merchantContribute":"0.20","otherContribute":"0.00"}]'}),
        ]  # fmt: skip
        rows = ["#支付宝账务明细查询", ALI_HEADER]
        income = expense = 0
        for i, p in enumerate(payments):
            f = fee(p.settlement_cent)
            rows.append(
                f"A{n}{i}\t,B{n}{i}\t,O{n}{i}\t,x\t,{day} 09:00:00,\t,{format_cents(p.settlement_cent)},0.00,0.00,支付宝,在线支付,"
            )
            rows.append(
                f"F{n}{i}\t,B{n}{i}\t,O{n}{i}\t,x\t,{day} 09:00:01,\t,0.00,-{format_cents(f)},0.00,支付宝,收费,"
            )
            income, expense = income + p.settlement_cent, expense + f
        rows += [
            f"#支出合计：2笔，共-{format_cents(expense)}元",
            f"#收入合计：2笔，共{format_cents(income)}元",
        ]
        parser = AlipayFundFlowParser(iter([(r + "\r\n").encode("gbk") for r in rows]))
        day_flow = FundFlowDay(day).extend(parser.rows())
        assert check_guards(parser.totals).code == PASSED
        ledger = summarize(payments, [], fee_cent=expense).figures()
        v = check_day(
            "2088021109625633",
            "alipay",
            day,
            ledger,
            trade=ledger,
            fund_days={day: day_flow},
            lag=lag_for("alipay"),
        )
        assert (v.code, v.diffs) == (AGREED, []), v.reason
