"""The explicit refund tables of Alipay and WeChat Pay v2 (R22, R29): every answer maps to one outcome."""

from __future__ import annotations

import pytest
from tally.channels.alipay import refunds as alr
from tally.channels.alipay import wire as ali
from tally.channels.wechatpay_v2 import refunds as w2r
from tally.domain.refunds import AnswerKind, RefundEvent, check_cumulative, mismatches

ROW = {
    "refund_no": "RN0001",
    "out_trade_no": "ORDER-1",
    "amount_cent": 40,
    "total_cent": 100,
    "mchid": "2021001",
    "transaction_id": "2026113022001",
    "currency": "CNY",
    "reason": "",
}


# ---------------------------------------------------------------- Alipay


def test_R29_alipay_query_answers():
    found = alr.query_answer(
        {
            "code": "10000",
            "out_request_no": "RN0001",
            "refund_amount": "0.40",
            "total_amount": "1.00",
            "refund_status": "REFUND_SUCCESS",
            "out_trade_no": "ORDER-1",
            "trade_no": "2026113022001",
            "gmt_refund_pay": "2026-11-30 10:00:00",
        },
        ROW,
        mchid="2021001",
        sp_mchid=None,
    )
    assert found.kind is AnswerKind.OUTCOME and found.event is RefundEvent.SUCCEED
    notice = found.notice
    assert (notice.refund_cent, notice.total_cent, notice.source, notice.raw_key) == (
        40,
        100,
        "query",
        "alipay#2021001#RN0001",
    )
    assert notice.success_time == "2026-11-30T10:00:00+08:00" and mismatches(notice, ROW) == []
    # §6.4: an unknown out_request_no answers 10000 without refund data
    assert (
        alr.query_answer({"code": "10000", "msg": "Success"}, ROW, mchid="2021001", sp_mchid=None).kind
        is AnswerKind.NOT_FOUND
    )
    # refund data without refund_status: not (yet) refunded — keep polling, never FAIL
    waiting = alr.query_answer(
        {"code": "10000", "out_request_no": "RN0001", "refund_amount": "0.40"},
        ROW,
        mchid="2021001",
        sp_mchid=None,
    )
    assert waiting.kind is AnswerKind.OUTCOME and waiting.event is None
    odd = alr.query_answer(
        {
            "code": "10000",
            "out_request_no": "RN0001",
            "refund_amount": "0.40",
            "refund_status": "REFUND_SOMETHING",
        },
        ROW,
        mchid="2021001",
        sp_mchid=None,
    )
    assert odd.kind is AnswerKind.UNKNOWN
    other = alr.query_answer(
        {
            "code": "10000",
            "out_request_no": "RN9999",
            "refund_amount": "0.40",
            "refund_status": "REFUND_SUCCESS",
        },
        ROW,
        mchid="2021001",
        sp_mchid=None,
    )
    assert other.kind is AnswerKind.UNKNOWN
    inexact = alr.query_answer(
        {
            "code": "10000",
            "out_request_no": "RN0001",
            "refund_amount": "0.401",
            "refund_status": "REFUND_SUCCESS",
        },
        ROW,
        mchid="2021001",
        sp_mchid=None,
    )
    assert inexact.kind is AnswerKind.UNKNOWN  # R14: never a float, never rounded


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            ali.AlipayCallError("x", code="40004", sub_code="ACQ.SYSTEM_ERROR", retryable=True),
            AnswerKind.RETRY,
        ),
        (ali.AlipayCallError("timeout", retryable=True), AnswerKind.RETRY),
        (ali.AlipayCallError("response signature does not verify"), AnswerKind.RETRY),  # outcome unknown
        (ali.AlipayCallError("x", code="40004", sub_code="ACQ.SELLER_BALANCE_NOT_ENOUGH"), AnswerKind.RETRY),
        (ali.AlipayCallError("x", code="40004", sub_code="ACQ.TRADE_HAS_FINISHED"), AnswerKind.REJECTED),
        (
            ali.AlipayCallError("x", code="40004", sub_code="ACQ.REFUND_AMT_NOT_EQUAL_TOTAL"),
            AnswerKind.REJECTED,
        ),
        (ali.AlipayCallError("x", code="40002", sub_code="isv.invalid-signature"), AnswerKind.REJECTED),
        (
            ali.AlipayCallError("x", code="40002", sub_code="isv.invalid-signature", unsigned=True),
            AnswerKind.UNKNOWN,
        ),
        (
            ali.AlipayCallError("x", code="40004", sub_code="ACQ.DISCORDANT_REPEAT_REQUEST"),
            AnswerKind.UNKNOWN,
        ),
        (ali.AlipayCallError("x", code="40004", sub_code="ACQ.NEVER_SEEN"), AnswerKind.UNKNOWN),
    ],
)
def test_R22_R28_alipay_create_errors(error, kind):
    """Transient → same out_request_no later (R28); signed refusal → FAIL; unsigned or unmapped → a person."""
    assert alr._error_answer(error, alr.CREATE_ERRORS).kind is kind


def test_R29_alipay_refund_notification_is_cumulative():
    params = {
        "app_id": "2021001",
        "out_trade_no": "ORDER-1",
        "trade_no": "T1",
        "trade_status": "TRADE_SUCCESS",
        "total_amount": "1.00",
        "refund_fee": "0.60",
        "out_biz_no": "RN0001",
        "gmt_refund": "2021-07-14 09:51:36.631",
    }
    notice = alr.refund_notice(params)
    assert (notice.refund_no, notice.status, notice.event) == (
        "RN0001",
        "REFUND_SUCCESS",
        RefundEvent.SUCCEED,
    )
    assert (notice.refund_cent, notice.cumulative_cent, notice.success_time) == (
        None,
        60,
        "2021-07-14T09:51:36+08:00",
    )
    assert mismatches(notice, ROW) == []  # the per-refund amount is not compared: check_cumulative is
    with pytest.raises(ali.ParseError):
        alr.refund_notice({**params, "out_biz_no": ""})
    with pytest.raises(ali.ParseError):
        alr.refund_notice({**params, "refund_fee": "0.6.0"})


@pytest.mark.parametrize(
    ("cumulative", "ok"), [(40, True), (60, True), (100, True), (39, False), (101, False)]
)
def test_R27_R29_cumulative_bounds(cumulative, ok):
    """This refund 40 of an order paid 100 with refundable 0 (all booked or held): 40 ≤ cumulative ≤ 100."""
    assert (check_cumulative(cumulative, 40, 100, 0) == []) is ok


def test_cumulative_counts_a_refund_held_on_a_task():
    assert check_cumulative(140, 40, 100, 0, extra_held_cent=40) == []


# ---------------------------------------------------------------- WeChat Pay v2


def _query(status, **extra):
    return {
        "return_code": "SUCCESS",
        "result_code": "SUCCESS",
        "out_trade_no": "ORDER-1",
        "transaction_id": "42",
        "total_fee": "100",
        "refund_count": "2",
        "out_refund_no_0": "OTHER",
        "refund_status_0": "SUCCESS",
        "out_refund_no_1": "RN0001",
        "refund_id_1": "5030",
        "refund_fee_1": "40",
        "refund_status_1": status,
        **extra,
    }


@pytest.mark.parametrize(
    ("word", "kind", "event"),
    [
        ("SUCCESS", AnswerKind.OUTCOME, RefundEvent.SUCCEED),
        ("REFUNDCLOSE", AnswerKind.OUTCOME, RefundEvent.FAIL),
        ("CHANGE", AnswerKind.OUTCOME, RefundEvent.ABNORMAL),
        ("PROCESSING", AnswerKind.OUTCOME, None),
        ("NOTSURE", AnswerKind.UNKNOWN, None),
    ],
)
def test_R22_R29_wechatpay_v2_refundquery_status_table(word, kind, event):
    answer = w2r.query_answer(_query(word, refund_success_time_1="2026-11-30 10:00:00"), ROW, "1900000001")
    assert (answer.kind, answer.event) == (kind, event)
    if event is not None:
        notice = answer.notice
        assert (notice.channel, notice.raw_key, notice.refund_cent, notice.source) == (
            "wechatpay",
            "wechatpay#1900000001#RN0001",
            40,
            "query",
        )


def test_wechatpay_v2_refundquery_without_our_number_is_not_found():
    answer = w2r.query_answer({**_query("SUCCESS"), "out_refund_no_1": "ELSE"}, ROW, "1900000001")
    assert answer.kind is AnswerKind.NOT_FOUND


class _Canned:
    mchid = "1900000001"

    def __init__(self, answer):
        self.answer = answer

    def request(self, path, fields):
        return self.answer


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (
            {
                "return_code": "SUCCESS",
                "result_code": "SUCCESS",
                "out_refund_no": "RN0001",
                "refund_id": "5030",
                "refund_fee": "40",
            },
            AnswerKind.ACCEPTED,
        ),
        ({"return_code": "SUCCESS", "result_code": "FAIL", "err_code": "SYSTEMERROR"}, AnswerKind.RETRY),
        (
            {"return_code": "SUCCESS", "result_code": "FAIL", "err_code": "BIZERR_NEED_RETRY"},
            AnswerKind.RETRY,
        ),
        ({"return_code": "SUCCESS", "result_code": "FAIL", "err_code": "TRADE_OVERDUE"}, AnswerKind.REJECTED),
        ({"return_code": "SUCCESS", "result_code": "FAIL", "err_code": "ERROR"}, AnswerKind.UNKNOWN),
        ({"return_code": "SUCCESS", "result_code": "FAIL", "err_code": "BRAND_NEW"}, AnswerKind.UNKNOWN),
        (
            {"return_code": "FAIL", "return_msg": "invalid refund_fee"},
            AnswerKind.UNKNOWN,
        ),  # unsigned: a person
    ],
)
def test_R22_R28_wechatpay_v2_create_table(answer, kind):
    result = w2r.WeChatV2Refunds(_Canned(answer), "http://127.0.0.1/notify").create(ROW)
    assert result.kind is kind
    if kind is AnswerKind.ACCEPTED:
        assert (result.refund_id, result.refund_cent) == ("5030", 40)  # v2's refund_fee is this refund's own
