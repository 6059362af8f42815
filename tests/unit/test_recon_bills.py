"""Bill parsers on files held as the channels write them (tests/fixtures/bills, made by make_fixtures.py):
BOM, CRLF, backticks, the summary block, the legacy header, GBK, TAB-suffixed ids, negative refunds."""

import gzip
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tally.channels.alipay import bills as ali
from tally.channels.wechatpay_v3.bills import WeChatBillParser
from tally.domain.money import yuan_to_cents
from tally.domain.recon import (
    EMPTY_BILL,
    PASSED,
    QUIET,
    SUMMARY_MISMATCH,
    BillParseError,
    check_guards,
    round_units,
    to_units,
)
from tally.service.recon_sources import OpenedBill

BILLS = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "bills"
ALIPAY_ZIP = BILLS / "alipay_20880211096256330156_20240501.csv.zip"


def wechat(name):
    parser = WeChatBillParser(open(BILLS / name, "rb"))
    items = list(parser.items())
    return items, parser.totals


def test_fixtures_are_framed_as_the_channels_write_them():
    assert (
        (BILLS / "wechat_all_bom_crlf.csv").read_bytes().startswith(b"\xef\xbb\xbf\xe4\xba\xa4")
    )  # BOM + 交
    assert b"\r\n" in (BILLS / "wechat_all_bom_crlf.csv").read_bytes()
    assert b"\r\n" not in (BILLS / "wechat_all_lf.csv").read_bytes()
    files = ali.open_zip(ALIPAY_ZIP.read_bytes())
    assert files.detail.startswith("#支付宝业务明细查询".encode("gbk"))
    assert sorted(files.names)[0].endswith("业务明细(汇总).csv")  # GBK member names decoded


@pytest.mark.parametrize(
    "name", ["wechat_all_bom_crlf.csv", "wechat_all_lf.csv", "wechat_all_float_count.csv"]
)
def test_wechat_all_bill_rows_summary_and_totals_R32_R35(name):
    items, totals = wechat(name)
    assert [i.kind for i in items] == ["PAYMENT", "PAYMENT", "REFUND", "PAYMENT"]
    pay, _, refund, _ = items
    assert (pay.key, pay.amount_cent, pay.status, pay.time) == (
        "wechatpay#4200000001202405010000000001",
        10000,
        "SUCCESS",
        "2024-05-01 09:15:02",
    )
    assert (refund.key, refund.amount_cent, refund.refund_no, refund.fee_e5) == (
        "wechatpay#R20240501X",
        2550,
        "R20240501X",
        -15000,
    )  # the refund keyed by out_refund_no (R30)
    assert pay.fee_e5 == 60000 == pay.expected_fee_e5  # 0.60000 yuan, exactly; 0.60 % of 100.00
    assert (totals.rows, totals.payment_cent, totals.refund_cent, totals.fee_e5) == (4, 11235, 2550, 52000)
    assert totals.stated_rows == 4 and all(c.ok for c in totals.checks) and len(totals.checks) == 7
    assert check_guards(totals).code == PASSED


def test_a_value_with_a_comma_stays_one_value():
    items, _ = wechat("wechat_all_lf.csv")
    assert items[0].out_trade_no == "T20240501A"  # 商品名称 "咖啡豆, 1kg" did not shift the columns


def test_wechat_success_refund_and_legacy_layouts_detected_by_header():
    items, totals = wechat("wechat_success.csv")
    assert (
        totals.layout == "SUCCESS"
        and [i.amount_cent for i in items] == [10000]
        and check_guards(totals).code == PASSED
    )
    items, totals = wechat("wechat_refund.csv")
    assert totals.layout == "REFUND" and items[0].kind == "REFUND" and items[0].amount_cent == 2550
    assert check_guards(totals).code == PASSED
    items, totals = wechat("wechat_legacy_success.csv")
    assert totals.layout == "LEGACY_SUCCESS" and [i.amount_cent for i in items] == [3250, 9500]
    assert [c.name for c in totals.checks] == [
        "总交易单数",
        "总交易额",
        "手续费总金额",
    ]  # 5-decimal fee total
    assert check_guards(totals).code == PASSED


def test_empty_bill_with_a_nonzero_summary_is_blocked_R31():
    _, totals = wechat("wechat_all_empty_nonzero_summary.csv")
    verdict = check_guards(totals)
    assert verdict.blocked and verdict.code == EMPTY_BILL and "R31" in verdict.reason


def test_a_zero_summary_is_a_quiet_day_R31():
    _, totals = wechat("wechat_all_quiet.csv")
    assert check_guards(totals).code == QUIET and not check_guards(totals).blocked


def test_parsed_amount_differing_from_the_summary_is_blocked_R32():
    _, totals = wechat("wechat_all_wrong_summary.csv")
    verdict = check_guards(totals)
    assert verdict.code == SUMMARY_MISMATCH and "应结订单总金额" in verdict.reason


def test_volume_below_ten_percent_of_the_previous_day_is_blocked_until_confirmed_R33():
    _, totals = wechat("wechat_all_lf.csv")  # 4 rows
    assert check_guards(totals, previous_rows=41).code == "VOLUME_DROP"
    assert check_guards(totals, previous_rows=40).code == PASSED  # 4 is exactly 10 %
    assert check_guards(totals, previous_rows=41, confirmed=True).code == PASSED
    assert check_guards(totals, previous_rows=41, min_ratio=0.05).code == PASSED  # configurable
    assert check_guards(totals, previous_rows=9, min_previous_rows=10).code == PASSED  # too small to judge


@pytest.mark.parametrize(
    "data, why",
    [
        ((BILLS / "wechat_error.html").read_bytes(), "HTML"),
        (
            (BILLS / "wechat_all_lf.csv")
            .read_bytes()
            .replace("应结订单金额".encode(), "结算金额".encode(), 1),
            "unknown header",
        ),
        (
            (BILLS / "wechat_all_lf.csv").read_bytes().replace("咖啡豆".encode(), "咖啡豆".encode("gbk"), 1),
            "not UTF-8",
        ),
        (b'{"code":"NO_STATEMENT_EXIST","message":"x"}', "JSON"),
        (b"", "empty"),
        ((BILLS / "wechat_all_lf.csv").read_bytes().replace(b",`0.60%", b"", 1), "values for 27 columns"),
        (
            (BILLS / "wechat_all_lf.csv").read_bytes().replace(b"`100.00", b"`100.001", 1),
            "at most 2 decimals",
        ),
        ((BILLS / "wechat_all_lf.csv").read_bytes() + b"trailing junk\n", "after the summary"),
    ],
)
def test_a_file_that_is_not_a_bill_fails_loudly(data, why):
    with pytest.raises(BillParseError, match=why):
        WeChatBillParser(iter(data.splitlines(keepends=True))).scan()


def test_gzip_as_downloaded_is_opened():
    data = gzip.compress((BILLS / "wechat_all_bom_crlf.csv").read_bytes())
    assert OpenedBill("wechatpay", data).parser().scan().rows == 4


def test_alipay_zip_gbk_tab_ids_negative_refunds_trailer_and_summary_R32_R35():
    opened = OpenedBill("alipay", ALIPAY_ZIP.read_bytes())
    parser = opened.parser()
    items = list(parser.items())
    totals = parser.totals
    assert [(i.key, i.kind, i.amount_cent) for i in items] == [
        ("alipay#2024050122001458860515315453", "PAYMENT", 2000),  # the TAB after the id is gone
        ("alipay#2024050122001458860515315460", "PAYMENT", 1),
        ("alipay#RF20240501001", "REFUND", 500),  # -5.00 in the bill: money paid back, positive here
    ]
    assert items[1].out_trade_no == "A20240501002"
    assert [c.name for c in totals.checks if c.unit == "rows"] == [
        "交易合计笔数",
        "退款合计笔数",
        "汇总交易订单总笔数",
        "汇总退款订单总笔数",
    ]
    assert check_guards(totals).code == PASSED


def test_alipay_detail_that_is_utf8_not_gbk_fails_loudly():
    with pytest.raises(BillParseError, match="not GBK"):
        OpenedBill("alipay", (BILLS / "alipay_detail_utf8.csv").read_bytes()).parser().scan()


def test_alipay_trailer_disagreeing_with_rows_is_blocked_R32():
    detail = ali.open_zip(ALIPAY_ZIP.read_bytes()).detail.replace(
        "共20.01元".encode("gbk"), "共20.02元".encode("gbk")
    )
    parser = ali.AlipayBillParser(ali.lines_of(detail))
    assert check_guards(parser.scan()).code == SUMMARY_MISMATCH


def test_alipay_without_trailer_has_no_summary_and_is_blocked_R32():
    detail = b"\r\n".join(
        line
        for line in ali.open_zip(ALIPAY_ZIP.read_bytes()).detail.split(b"\r\n")
        if not line.startswith("#交易合计".encode("gbk"))
    )
    assert check_guards(ali.AlipayBillParser(ali.lines_of(detail)).scan()).code == "NO_SUMMARY"


def test_alipay_unknown_business_type_fails_loudly():
    detail = ali.open_zip(ALIPAY_ZIP.read_bytes()).detail.replace(
        ",交易,".encode("gbk"), ",冻结,".encode("gbk"), 1
    )
    with pytest.raises(BillParseError, match="业务类型"):
        ali.AlipayBillParser(ali.lines_of(detail)).scan()


@given(st.integers(min_value=-(10**12), max_value=10**12), st.sampled_from(["{}", "{:.2f}", "{:.1f}"]))
def test_to_units_agrees_with_yuan_to_cents_R14(cents, shape):
    whole, frac = divmod(abs(cents), 100)
    text = ("-" if cents < 0 else "") + (
        f"{whole}.{frac:02d}"
        if shape == "{:.2f}"
        else f"{whole}.{frac // 10}"
        if shape == "{:.1f}" and frac % 10 == 0
        else f"{whole}.{frac:02d}"
    )
    assert to_units(text, 2) == yuan_to_cents(text)


def test_fee_with_five_decimals_is_exact_and_rounds_half_up_only_for_totals():
    assert to_units("0.01000", 5) == 1000 and to_units("-0.15000", 5) == -15000
    assert round_units(1500, 5, 2) == 2 and round_units(1499, 5, 2) == 1 and round_units(-1500, 5, 2) == -2
    with pytest.raises(ValueError):
        to_units("0.000001", 5)
    with pytest.raises(ValueError):
        to_units("1e3", 2)
