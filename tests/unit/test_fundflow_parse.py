"""Fund-flow bill parsers (tally.channels.wechatpay_v3.fundflow / alipay.fundflow) on files held as the channels write
them (tests/fixtures/bills/fundflow, made by make_fixtures.py), and the same guards as trade bills (R31, R32):
zero rows vs the summary, counts and amounts vs the summary. R45 needs a fund flow it can trust."""

import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tally.channels.alipay.fundflow import AlipayFundFlowParser
from tally.channels.wechatpay_v3.fundflow import HEADER, SUMMARY_HEADER, WeChatFundFlowParser
from tally.domain.fundflow import FEE, OTHER, REFUND, SETTLEMENT, UNCLASSIFIED, FundFlowDay
from tally.domain.money import format_cents
from tally.domain.recon import (
    EMPTY_BILL,
    NO_SUMMARY,
    PASSED,
    QUIET,
    SUMMARY_MISMATCH,
    BillParseError,
    check_guards,
)

HERE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills" / "fundflow"


def wechat(name, account="BASIC"):
    parser = WeChatFundFlowParser(open(HERE / name, "rb"), account=account)
    return list(parser.rows()), parser


def wechat_bytes(text, account="BASIC"):
    parser = WeChatFundFlowParser(iter(text.encode("utf-8").splitlines(keepends=True)), account=account)
    return list(parser.rows()), parser


def alipay(name):
    parser = AlipayFundFlowParser(open(HERE / name, "rb"))
    return list(parser.rows()), parser


def bt(*values):
    return ",".join("`" + v for v in values)


ROW = bt("2026-12-01 03:10:00", "4200", "FF1", "交易", "交易", "收入", "1.00", "1.00", "system", "", "4200")

# ---------------------------------------------------------------- WeChat Pay


def test_r32_wechat_official_sample_row_is_read_exactly_and_its_excerpt_summary_blocks():
    rows, parser = wechat("wechat_basic_doc_sample.csv")
    (row,) = rows
    assert (row.time, row.business_no, row.flow_id) == (
        "2018-02-01 04:21:23",
        "50000305742018020103387128253",
        "1900009231201802015884652186",
    )
    assert (row.business_type, row.category, row.amount_cent, row.balance_cent) == ("退款", REFUND, -2, 17)
    assert (row.reference, row.memo, row.gross_cent, row.fee_cent) == (
        "REF4200000068201801293084726067",
        "缺货",
        2,
        0,
    )
    totals = parser.totals
    assert (totals.rows, totals.stated_rows) == (1, 20)  # the document prints one row of a 20-row day
    verdict = check_guards(totals)
    assert verdict.code == SUMMARY_MISMATCH and "资金流水总笔数: summary 20 != parsed 1" in verdict.reason


def test_r32_wechat_recorded_v3_answer_half_width_header_memo_split_and_missing_income_row():
    rows, parser = wechat("wechat_basic_go_sample.csv")
    assert [r.amount_cent for r in rows] == [-1, -1]
    assert [(r.gross_cent, r.fee_cent) for r in rows] == [(1, 0), (1, 0)]  # 退款总金额0.01元;含手续费0.00元
    assert parser.balance_breaks == 0 and parser.memo_mismatches == 0  # 0.22 → 0.21: a running balance
    verdict = check_guards(
        parser.totals
    )  # summary: 3 rows, 1 income of 0.01 — the excerpt holds the 2 refunds
    assert verdict.code == SUMMARY_MISMATCH
    assert (
        "收入笔数: summary 1 != parsed 0" in verdict.reason
        and "收入金额: summary 1 != parsed 0" in verdict.reason
    )


def test_r32_wechat_coherent_day_passes_and_adds_up_by_category():
    raw = (HERE / "wechat_basic_20261201_day.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw  # BOM + CRLF as the channel may ship it
    rows, parser = wechat("wechat_basic_20261201_day.csv")
    assert check_guards(parser.totals).code == PASSED
    assert [r.category for r in rows] == [SETTLEMENT, SETTLEMENT, SETTLEMENT, REFUND, OTHER]
    assert (rows[0].amount_cent, rows[0].gross_cent, rows[0].fee_cent) == (9940, 10000, 60)  # net of its fee
    assert (rows[3].amount_cent, rows[3].gross_cent, rows[3].fee_cent) == (-994, 1000, 6)  # fee given back
    day = FundFlowDay("2026-12-01").extend(rows)
    assert (day.settlement_cent, day.fee_cent, day.refund_cent, day.fee_returned_cent) == (16500, 99, 1000, 6)
    assert (day.other_cent, day.unclassified_cent, day.rows, day.accounts) == (-60000, 0, 5, {"BASIC"})
    assert day.net_cent == sum(r.amount_cent for r in rows) == -44593
    assert day.net_cent == (
        day.settlement_cent - day.refund_cent - day.fee_cent + day.fee_returned_cent + day.other_cent
    )
    assert parser.balance_breaks == 0


def test_r32_wechat_fees_account_rows_are_fees():
    rows, parser = wechat("wechat_fees_20261201_day.csv", account="FEES")
    assert check_guards(parser.totals).code == PASSED  # counts written `2.0 are whole numbers
    assert [(r.account, r.category, r.amount_cent) for r in rows] == [("FEES", FEE, -60), ("FEES", FEE, -27)]
    assert FundFlowDay().extend(rows).fee_cent == 87


def test_r31_wechat_zero_rows_against_a_non_zero_summary_is_blocked():
    _, parser = wechat_bytes(f"{HEADER}\n{SUMMARY_HEADER}\n{bt('2', '1', '1.00', '1', '0.50')}\n")
    assert check_guards(parser.totals).code == EMPTY_BILL


def test_r31_wechat_quiet_day_and_a_bill_without_summary():
    _, parser = wechat_bytes(f"{HEADER}\n{SUMMARY_HEADER}\n{bt('0', '0', '0.00', '0', '0.00')}\n")
    assert check_guards(parser.totals).code == QUIET
    _, parser = wechat_bytes(f"{HEADER}\n{ROW}\n")
    assert check_guards(parser.totals).code == NO_SUMMARY


def test_r32_wechat_amount_total_off_by_one_cent_is_blocked():
    _, parser = wechat_bytes(f"{HEADER}\n{ROW}\n{SUMMARY_HEADER}\n{bt('1', '1', '1.01', '0', '0.00')}\n")
    verdict = check_guards(parser.totals)
    assert verdict.code == SUMMARY_MISMATCH and "收入金额: summary 101 != parsed 100" in verdict.reason


def test_wechat_unknown_business_type_is_unclassified_not_dropped():
    row = bt(
        "2026-12-01 09:00:00", "X1", "FF9", "营销补差", "营销补差", "收入", "3.00", "4.00", "system", "", "X1"
    )
    rows, parser = wechat_bytes(
        f"{HEADER}\n{ROW}\n{row}\n{SUMMARY_HEADER}\n{bt('2', '2', '4.00', '0', '0.00')}\n"
    )
    assert check_guards(parser.totals).code == PASSED
    day = FundFlowDay().extend(rows)
    assert (rows[1].category, day.unclassified_cent, day.unclassified) == (UNCLASSIFIED, 300, {"营销补差": 1})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("<html><body>502 Bad Gateway</body></html>\n", "HTML"),
        ("<xml><return_code><![CDATA[FAIL]]></return_code></xml>\n", "HTML or XML"),
        ('{"code":"NO_STATEMENT_EXIST","message":"请求的账单文件不存在"}\n', "JSON answer"),
        ("交易时间,公众账号ID,商户号\n", "unknown header"),
        ("", "no header"),
        (f"{HEADER}\n`2026-12-01 03:10:00,`4200\n", "2 values for 11 columns"),
        (f"{HEADER}\n" + ROW.replace("收入", "入账") + "\n", "收支类型"),
        (f"{HEADER}\n" + ROW.replace("`1.00,`1.00", "`-1.00,`1.00") + "\n", "negative"),
        (f"{HEADER}\n" + ROW.replace("`1.00,`1.00", "`1.001,`1.00") + "\n", "at most 2 decimals"),
        (f"{HEADER}\n" + ROW.replace("`FF1", "`") + "\n", "资金流水单号"),
        (
            f"{HEADER}\n{ROW}\n{SUMMARY_HEADER}\n{bt('1', '1', '1.00', '0', '0.00')}\n{ROW}\n",
            "after the summary",
        ),
        (f"{HEADER}\n{ROW}\n{SUMMARY_HEADER}\n{bt('1.5', '1', '1.00', '0', '0.00')}\n", "not a whole number"),
        (f"{HEADER}\n{ROW}\n{SUMMARY_HEADER}\n1,1,1.00,0,0.00\n", "backtick"),
        (f"{HEADER}\nsomething else\n", "unexpected line"),
    ],
)
def test_wechat_what_is_not_a_fund_flow_bill_is_refused_loudly(text, why):
    with pytest.raises(BillParseError, match=why):
        wechat_bytes(text)


def test_wechat_not_utf8_and_unknown_account_are_refused():
    with pytest.raises(BillParseError, match="not UTF-8"):
        list(WeChatFundFlowParser(iter([HEADER.encode("gbk") + b"\n"])).rows())
    with pytest.raises(ValueError, match="account_type"):
        WeChatFundFlowParser(iter([]), account="SAVINGS")


# a day of random movements written as WeChat writes it: the parse adds up, and losing any row is caught (R32)
movements = st.lists(
    st.tuples(st.sampled_from(["交易", "退款", "扣除交易手续费", "提现"]), st.integers(1, 10**7)), max_size=30
)


def _day_file(moves):
    balance, lines, income_n, income, expense_n, expense = 10**8, [HEADER], 0, 0, 0, 0
    for i, (kind, cents) in enumerate(moves):
        out = kind != "交易"
        balance += -cents if out else cents
        if out:
            expense_n, expense = expense_n + 1, expense + cents
        else:
            income_n, income = income_n + 1, income + cents
        lines.append(
            bt("2026-12-01 10:00:00", f"B{i}", f"F{i}", kind, kind, "支出" if out else "收入", format_cents(cents),
               format_cents(balance), "system", "", f"B{i}")
        )  # fmt: skip
    summary = bt(str(len(moves)), str(income_n), format_cents(income), str(expense_n), format_cents(expense))
    return lines, summary, income - expense


@given(movements)
def test_r32_property_a_day_parses_to_its_summary_and_a_lost_row_is_caught(moves):
    lines, summary, net = _day_file(moves)
    text = "\n".join([*lines, SUMMARY_HEADER, summary]) + "\n"
    rows, parser = wechat_bytes(text)
    assert check_guards(parser.totals).code in (PASSED, QUIET)
    assert FundFlowDay().extend(rows).net_cent == net and parser.balance_breaks == 0
    if moves:
        dropped = "\n".join([*lines[:1], *lines[2:], SUMMARY_HEADER, summary]) + "\n"
        _, parser = wechat_bytes(dropped)
        assert check_guards(parser.totals).code in (SUMMARY_MISMATCH, EMPTY_BILL)


# ---------------------------------------------------------------- Alipay 账务明细


def test_r32_alipay_real_excerpt_gbk_tabs_and_its_day_trailer_blocks():
    rows, parser = alipay("alipay_signcustomer_sample.csv")
    assert [(r.flow_id, r.business_no, r.reference) for r in rows][0] == (
        "54632446537371",
        "2012122923922029",
        "3226563",
    )  # the TAB after each id is gone
    assert [(r.category, r.amount_cent) for r in rows] == [
        (SETTLEMENT, 227400),
        (SETTLEMENT, 39300),
        (SETTLEMENT, 111100),
    ]
    assert parser.balance_breaks == 2  # newest first: row order is not a running balance, so it never blocks
    verdict = check_guards(parser.totals)
    assert verdict.code == SUMMARY_MISMATCH and "收入合计笔数: summary 18 != parsed 3" in verdict.reason


def test_r32_alipay_coherent_day_passes_and_adds_up_by_category():
    rows, parser = alipay("alipay_signcustomer_20261130_day.csv")
    assert check_guards(parser.totals).code == PASSED  # 支出合计 written -5.12 and read as the 5.12 it counts
    assert [r.category for r in rows] == [SETTLEMENT, FEE, SETTLEMENT, REFUND]
    day = FundFlowDay("2026-11-30").extend(rows)
    assert (day.settlement_cent, day.fee_cent, day.refund_cent, day.net_cent) == (2080, 12, 500, 1568)
    assert parser.balance_breaks == 0


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (["<!DOCTYPE html><html>"], "HTML"),
        (["支付宝交易号,商户订单号,业务类型"], "unknown header"),
        (["#支付宝账务明细查询"], "no 账务明细 header"),
        (
            ["{header}", "1\t,2\t,3\t,x\t,2026-11-30 09:00:00,y\t,1.00,-1.00,1.00,支付宝,在线支付,"],
            "both an income",
        ),
        (["{header}", "1\t,2\t,3\t,x\t,2026-11-30 09:00:00,y\t,1.00,0.00,1.00,支付宝,在线支付"], "11 values"),
        (
            ["{header}", "\t,2\t,3\t,x\t,2026-11-30 09:00:00,y\t,1.00,0.00,1.00,支付宝,在线支付,"],
            "账务流水号",
        ),
        (["{header}", "1\t,2\t,3\t,x\t,2026-11-30 09:00:00,y\t,1.0x,0.00,1.00,支付宝,在线支付,"], "amount"),
    ],
)
def test_alipay_what_is_not_a_fund_flow_bill_is_refused_loudly(lines, why):
    from tally.channels.alipay.fundflow import HEADER as ALI

    data = [(line.replace("{header}", ALI) + "\r\n").encode("gbk") for line in lines]
    with pytest.raises(BillParseError, match=why):
        list(AlipayFundFlowParser(iter(data)).rows())


def test_alipay_not_gbk_is_refused():
    with pytest.raises(BillParseError, match="not GBK"):
        list(AlipayFundFlowParser(iter([b"\xff\xfe\xfd\n"])).rows())


def test_wechat_a_zero_amount_debit_keeps_its_direction():
    # a 0.01 refund whose 0.01 fee is given back moves nothing, yet it is a 支出 and a refund of 0.01
    row = bt("2026-12-01 10:00:00", "503", "FF7", "退款", "退款", "支出", "0.00", "1.00", "api",
             "退款总金额0.01元;含手续费0.01元", "R7")  # fmt: skip
    rows, parser = wechat_bytes(f"{HEADER}\n{row}\n{SUMMARY_HEADER}\n{bt('1', '0', '0.00', '1', '0.00')}\n")
    assert check_guards(parser.totals).code == PASSED
    day = FundFlowDay().extend(rows)
    assert (rows[0].sign, day.refund_cent, day.fee_returned_cent, day.net_cent) == (-1, 1, 1, 0)


def test_r33_a_fund_flow_volume_drop_is_blocked_like_a_trade_bill_s():
    from tally.domain.recon import VOLUME_DROP

    _, parser = wechat("wechat_basic_20261201_day.csv")  # 5 rows
    assert check_guards(parser.totals, previous_rows=100).code == VOLUME_DROP
    assert check_guards(parser.totals, previous_rows=100, confirmed=True).code == PASSED
