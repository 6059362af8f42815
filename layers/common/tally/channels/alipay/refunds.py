"""Alipay refunds: `alipay.trade.refund` and `alipay.trade.fastpay.refund.query` (channel-spec §6.3, §6.4), the
refund notification (§5.1, §5.3), and the explicit tables mapping Alipay's words to outcomes (R22, R29).

Signed and verified by the existing gateway client (alipay/wire.py `AlipayClient.call`: RSA2 request
signature, response signature over the exact `<method>_response` text, certificate mode included).

Decisions, each from the spec:
- `out_request_no` = our refund_no (R30: WeChat `out_refund_no` and Alipay `out_request_no` are one column).
  A retry re-sends the same out_request_no with the same amount (§6.3), so Alipay refunds it once (R26, R28).
- The synchronous answer `code=10000` is ACCEPTED, even with `fund_change=Y`. §6.3 reads `fund_change=Y` as
  "refund succeeded", but R29 says success comes only from a notification or a refund query, so a
  fund_change=Y answer is never booked by itself: the refund becomes ACCEPTED and the poller's first query
  (60 s later) or the notification books it. Cost: the booking waits up to a minute; gain: exactly one
  path books refunds on every channel, and a forged or misread synchronous answer cannot book money.
  The answer's `refund_fee` is CUMULATIVE over the trade (§6.3), so it is never compared with this refund.
- The query: success ⇔ `code=10000` ∧ `refund_status=REFUND_SUCCESS` ∧ the query's `refund_amount` (this
  refund's own amount) — compared with ours by the service (R29 mismatch → a person). A missing
  refund_status with refund data = not (yet) refunded (the newer doc generation, §6.4): keep polling; the
  refund expires to a person, never to FAIL. No refund data at all (an unknown out_request_no still answers
  10000, §6.4) = NOT_FOUND.
- Notifications carry `refund_fee` = the cumulative refunded total of the trade and `out_biz_no` = our
  out_request_no (§5.3). They are stored as status REFUND_SUCCESS (the query's word: a refund notification
  is only sent for refunded money), under the same raw key a query answer gets (R7, R23), and the service
  checks the cumulative total against the order's books (domain.refunds.check_cumulative).
"""

from __future__ import annotations

from typing import Any

from tally.channels.alipay import wire as ali
from tally.channels.alipay.settlement import alipay_refund_basis
from tally.channels.settlement import refund_fields
from tally.domain.money import MoneyError
from tally.domain.refunds import AnswerKind, ChannelAnswer, RefundEvent, RefundNotice

REFUND = "alipay.trade.refund"
REFUND_QUERY = "alipay.trade.fastpay.refund.query"
REFUND_SUCCESS = "REFUND_SUCCESS"

# refund_status (query) / a refund notification → event. Alipay reports only success: a refund that does not
# succeed simply never says REFUND_SUCCESS (polled until expiry, then a person).
REFUND_STATUS: dict[str, RefundEvent | None] = {
    REFUND_SUCCESS: RefundEvent.SUCCEED,
}

# Errors of alipay.trade.refund (sub_code first, then the gateway code; §6.1 and the refund API's error list).
# RETRY: the same out_request_no later (R28). REJECTED: a verified, definitive refusal: the refund never
# existed at Alipay, the reservation is released and the refund_no spent (R29). UNKNOWN: a person.
CREATE_ERRORS: dict[str, AnswerKind] = {
    "ACQ.SYSTEM_ERROR": AnswerKind.RETRY,  # "use the same parameters to try again"
    "aop.ACQ.SYSTEM_ERROR": AnswerKind.RETRY,
    "isp.unknow-error": AnswerKind.RETRY,
    "ACQ.REFUND_CHARGE_ERROR": AnswerKind.RETRY,  # fee refund error: "retry after a while"
    "ACQ.SELLER_BALANCE_NOT_ENOUGH": AnswerKind.RETRY,  # top up, then the same request: until expiry, then a person
    "20000": AnswerKind.RETRY,  # service unavailable
    "40005": AnswerKind.RETRY,  # rate limit
    "ACQ.INVALID_PARAMETER": AnswerKind.REJECTED,
    "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL": AnswerKind.REJECTED,  # more than the trade's refundable amount
    "ACQ.REASON_TRADE_REFUND_FEE_ERR": AnswerKind.REJECTED,  # invalid refund amount
    "ACQ.TRADE_NOT_EXIST": AnswerKind.REJECTED,
    "ACQ.TRADE_HAS_FINISHED": AnswerKind.REJECTED,  # refund window over
    "ACQ.TRADE_STATUS_ERROR": AnswerKind.REJECTED,  # not paid
    "ACQ.TRADE_NOT_ALLOW_REFUND": AnswerKind.REJECTED,
    "40002": AnswerKind.REJECTED,  # invalid argument (signed answer only: see _error_answer)
    "40006": AnswerKind.REJECTED,  # no permission for the refund API
    "20001": AnswerKind.REJECTED,  # app_auth_token lacks the permission
    # a person, explicitly: the trade is frozen at Alipay; our out_request_no was used with other terms
    "ACQ.REASON_TRADE_BEEN_FREEZEN": AnswerKind.UNKNOWN,
    "ACQ.DISCORDANT_REPEAT_REQUEST": AnswerKind.UNKNOWN,
}

# Errors of the refund query: a definitive "no such refund" vs. try again later.
QUERY_ERRORS: dict[str, AnswerKind] = {
    "ACQ.TRADE_NOT_EXIST": AnswerKind.NOT_FOUND,
    "ACQ.SYSTEM_ERROR": AnswerKind.RETRY,
    "aop.ACQ.SYSTEM_ERROR": AnswerKind.RETRY,
    "isp.unknow-error": AnswerKind.RETRY,
    "20000": AnswerKind.RETRY,
    "40005": AnswerKind.RETRY,
}


def refund_notice(params: dict[str, str]) -> RefundNotice:
    """A verified refund notification (`refund_fee`/`gmt_refund`/`out_biz_no` present, §5.3) → the neutral notice.
    Raises ali.ParseError (quarantined: signed but unusable, R5)."""
    out_biz_no = params.get("out_biz_no") or ""
    out_trade_no = params.get("out_trade_no") or ""
    if not out_biz_no:
        raise ali.ParseError("refund notification without out_biz_no")
    if not out_trade_no:
        raise ali.ParseError("refund notification without out_trade_no")
    mchid, sp = ali.merchant_ids(params)
    return RefundNotice(
        channel=ali.STORED,
        refund_no=out_biz_no,
        refund_id="",
        status=REFUND_SUCCESS,
        event=REFUND_STATUS[REFUND_SUCCESS],
        mchid=mchid,
        sp_mchid=sp,
        out_trade_no=out_trade_no,
        transaction_id=str(params.get("trade_no") or ""),
        refund_cent=None,
        total_cent=ali.amount_cents(params, "total_amount"),
        success_time=_refund_time(params.get("gmt_refund")),
        source="notify",
        cumulative_cent=ali.amount_cents(params, "refund_fee"),
        # R43: the notification names no amount of this refund: the apply step settles it from the refund's
        # own amount and the payment, or asks the refund query (refund_detail_item_list)
        **refund_fields(None),
    )


def _refund_time(text: str | None) -> str | None:
    """ "2021-07-14 09:51:36.631" (Beijing, milliseconds, §5.1) → RFC 3339 with +08:00."""
    return ali.beijing_iso(text[:19]) if text else None


class AlipayRefunds:
    """The per-channel refund client the RefundService calls (create / query), Alipay."""

    channel = ali.STORED

    def __init__(self, client: ali.AlipayClient, *, mchid: str, sp_mchid: str | None = None):
        self.client = client
        self.mchid = mchid
        self.sp_mchid = sp_mchid

    def create(self, refund: dict[str, Any]) -> ChannelAnswer:
        biz: dict[str, Any] = {
            "refund_amount": ali.format_yuan(int(refund["amount_cent"])),
            "out_request_no": refund["refund_no"],
        }
        biz.update(_trade_ref(refund))
        if refund.get("reason"):
            biz["refund_reason"] = refund["reason"]
        try:
            answer = self.client.call(REFUND, biz)
        except ali.AlipayCallError as exc:
            return _error_answer(exc, CREATE_ERRORS)
        fund_change = str(answer.get("fund_change") or "")
        # ACCEPTED whatever fund_change says (module docstring, R29); refund_fee is cumulative: not compared.
        return ChannelAnswer(
            AnswerKind.ACCEPTED,
            refund_id=None,
            code=f"fund_change={fund_change or '-'}",
            message=f"accepted; cumulative refund_fee {answer.get('refund_fee', '?')}",
        )

    def query(self, refund: dict[str, Any]) -> ChannelAnswer:
        biz = {
            "out_request_no": refund["refund_no"],
            **_trade_ref(refund),
            "query_options": ["refund_detail_item_list"],  # R43: the fund channels of the refund (§6.4)
        }
        try:
            answer = self.client.call(REFUND_QUERY, biz)
        except ali.AlipayCallError as exc:
            word = ali.error_word(exc)
            kind = QUERY_ERRORS.get(word, AnswerKind.RETRY) if not exc.unsigned else AnswerKind.RETRY
            return ChannelAnswer(kind, code=word, message=str(exc))
        return query_answer(answer, refund, mchid=self.mchid, sp_mchid=self.sp_mchid)


def query_answer(
    answer: dict[str, Any], refund: dict[str, Any], *, mchid: str, sp_mchid: str | None
) -> ChannelAnswer:
    """A verified code=10000 refund-query answer → outcome (§6.4)."""
    if not answer.get("out_request_no") and not answer.get("refund_amount"):
        return ChannelAnswer(
            AnswerKind.NOT_FOUND,
            code="NO_REFUND_DATA",
            message="Alipay knows no refund with this out_request_no",
        )
    if answer.get("out_request_no") and answer["out_request_no"] != refund["refund_no"]:
        return ChannelAnswer(
            AnswerKind.UNKNOWN,
            code="OTHER_REFUND",
            message=f"asked for {refund['refund_no']}, Alipay answered {answer['out_request_no']}",
        )
    status = str(answer.get("refund_status") or "")
    if not status:
        return ChannelAnswer(
            AnswerKind.OUTCOME, event=None, code="NO_REFUND_STATUS", message="refund not (yet) done at Alipay"
        )
    if status not in REFUND_STATUS:
        return ChannelAnswer(AnswerKind.UNKNOWN, code=status, message=f"unmapped refund_status {status!r}")
    try:
        amount = ali.amount_cents(answer, "refund_amount")
        basis = alipay_refund_basis(
            str(answer["refund_amount"]), answer.get("send_back_fee"), answer.get("refund_detail_item_list")
        )
        total = (
            ali.amount_cents(answer, "total_amount")
            if answer.get("total_amount")
            else int(refund["total_cent"])
        )
        notice = RefundNotice(
            channel=ali.STORED,
            refund_no=refund["refund_no"],
            refund_id="",
            status=status,
            event=REFUND_STATUS[status],
            mchid=mchid,
            sp_mchid=sp_mchid,
            out_trade_no=str(answer.get("out_trade_no") or refund["out_trade_no"]),
            transaction_id=str(answer.get("trade_no") or ""),
            refund_cent=amount,
            total_cent=total,
            success_time=_refund_time(answer.get("gmt_refund_pay")),
            source="query",
            **refund_fields(basis),
            settlement_basis=basis,
        )
    except (ali.ParseError, MoneyError, ValueError) as exc:
        return ChannelAnswer(AnswerKind.UNKNOWN, code=status, message=f"refund query answer unusable: {exc}")
    return ChannelAnswer(
        AnswerKind.OUTCOME,
        event=notice.event,
        refund_cent=amount,
        success_time=notice.success_time,
        code=status,
        notice=notice,
    )


def _trade_ref(refund: dict[str, Any]) -> dict[str, str]:
    if refund.get("transaction_id"):  # Alipay's trade_no (a refund task refunds that very payment)
        return {"trade_no": str(refund["transaction_id"])}
    return {"out_trade_no": str(refund["out_trade_no"])}


def _error_answer(exc: ali.AlipayCallError, table: dict[str, AnswerKind]) -> ChannelAnswer:
    word = ali.error_word(exc)
    if exc.retryable or word == "NETWORK" or not (exc.code or exc.sub_code):
        # no answer, a timeout, or an answer whose signature did not verify: "sent, outcome unknown" (R28)
        return ChannelAnswer(AnswerKind.RETRY, code=word, message=str(exc))
    kind = table.get(exc.sub_code) or table.get(exc.code) or AnswerKind.UNKNOWN
    if exc.unsigned and kind is AnswerKind.REJECTED:
        kind = (
            AnswerKind.UNKNOWN
        )  # an unsigned refusal proves nothing: a person looks before we release (§6.1)
    return ChannelAnswer(kind, code=word, message=str(exc))
