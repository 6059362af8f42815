"""WeChat Pay v3 pull: query and close an order (R21, R22), answers mapped by wire.py's tables."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tally import errors
from tally.channels.retry import with_retries
from tally.channels.wechatpay_v3 import combine
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.domain.poll import Answer, CloseResult, QueryResult, lookup


class WeChatPayV3Pull:
    """Query and close with the credentials the order was created with (R22): the merchant's own, or in
    partner mode the service provider's with the order's merchant as sub_mchid."""

    def __init__(self, merchants: Any, *, attempts: int = 3, sleep: Callable[[float], None] = time.sleep):
        self.merchants = merchants
        self.attempts = attempts
        self.sleep = sleep

    def register(self, registry: Any) -> None:
        registry.register(wx.STORED, self.query, self.close)

    def _client(self, order: dict[str, Any]) -> tuple[wx.WeChatPayClient, str | None]:
        sp = order.get("sp_mchid") or None
        merchant = wechatpay_v3_desk(self.merchants).wechatpay(sp or order["mchid"])
        return wechatpay_v3_desk(self.merchants).client(merchant), (order["mchid"] if sp else None)

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult:
        if order.get("combine_out_trade_no"):
            return self._query_combine(order, fast)
        try:
            client, sub = self._client(order)
            response = with_retries(
                lambda: client.query_by_out_trade_no(order["out_trade_no"], sub_mchid=sub),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except errors.NotFound as exc:  # the merchant directory's UnknownMerchant
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx.WeChatCallError as exc:
            answer, mapped = lookup(wx.QUERY_ERROR, exc.word)
            return QueryResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        data = response.data if isinstance(response.data, dict) else {}
        state = str(data.get("trade_state") or "")
        answer, mapped = lookup(wx.QUERY_STATE, state)
        if not mapped:
            return QueryResult(
                answer, state or "NO_TRADE_STATE", detail="trade_state in no table", mapped=False
            )
        problem = _not_this_order(data, order)
        if problem:
            return QueryResult(Answer.PERSON, state, detail=problem)
        notice = None
        if data.get("transaction_id"):
            try:
                notice = wx.to_payment_notice(data, source="query")
            except wx.DecryptError as exc:
                return QueryResult(Answer.PERSON, state, detail=f"paid answer unusable: {exc}")
        if answer is Answer.PAID and notice is None:
            return QueryResult(Answer.PERSON, state, detail="paid answer without transaction_id")
        return QueryResult(answer, state, notice=notice, body=response.raw, headers=response.headers)

    def _query_combine(self, order: dict[str, Any], fast: bool) -> QueryResult:
        """A sub-order of a combine order is asked about through its combine order (GET
        /v3/combine-transactions/out-trade-no/{combine_out_trade_no}) with the combine merchant's credentials;
        only the sub-order that is this order (number and merchant) is read from the answer (R11)."""
        combine_no = str(order["combine_out_trade_no"])
        try:
            client = wechatpay_v3_desk(self.merchants).client(
                wechatpay_v3_desk(self.merchants).wechatpay(order.get("combine_mchid") or order["mchid"])
            )
            response = with_retries(
                lambda: combine.query(client, combine_no),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except errors.NotFound as exc:
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx.WeChatCallError as exc:
            answer, mapped = lookup(wx.QUERY_ERROR, exc.word)
            return QueryResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        data = response.data if isinstance(response.data, dict) else {}
        try:
            combine_mchid, answered_no, notices = combine.sub_notices(data, source="query")
        except wx.DecryptError as exc:
            return QueryResult(Answer.PERSON, "COMBINE_UNUSABLE", detail=str(exc)[:300])
        if answered_no != combine_no or combine_mchid != client.creds.mchid:
            return QueryResult(Answer.PERSON, "OTHER_COMBINE", detail=f"answer is about {answered_no[:40]!r}")
        mine = [n for n in notices if n.out_trade_no == order["out_trade_no"] and n.mchid == order["mchid"]]
        if len(mine) != 1:
            return QueryResult(Answer.PERSON, "NO_SUB_ORDER", detail=f"{len(mine)} sub-orders are this order")
        notice = mine[0]
        answer, mapped = lookup(wx.QUERY_STATE, notice.trade_state)
        if not mapped:
            return QueryResult(answer, notice.trade_state, detail="trade_state in no table", mapped=False)
        if answer is Answer.PAID and not notice.transaction_id:
            return QueryResult(Answer.PERSON, notice.trade_state, detail="paid answer without transaction_id")
        return QueryResult(
            answer,
            notice.trade_state,
            notice=notice if notice.transaction_id else None,
            body=response.raw,
            headers=response.headers,
        )

    def close(self, order: dict[str, Any]) -> CloseResult:
        if order.get("combine_out_trade_no"):
            return self._close_combine(order)
        try:
            client, sub = self._client(order)
            response = with_retries(
                lambda: client.close(order["out_trade_no"], sub_mchid=sub),
                attempts=self.attempts,
                sleep=self.sleep,
            )
        except errors.NotFound as exc:  # the merchant directory's UnknownMerchant
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx.WeChatCallError as exc:
            answer, mapped = lookup(wx.CLOSE_ANSWER, exc.word)
            return CloseResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        return _close_answer(response)

    def _close_combine(self, order: dict[str, Any]) -> CloseResult:
        """A sub-order of a combine order can only be closed with the combine close (POST
        /v3/combine-transactions/out-trade-no/{combine_out_trade_no}/close), signed by the combine merchant. The
        sub-orders it names come from the combine query's signed answer, which must name this order (R11): the
        first expired sub-order closes them all at the channel, each sibling's own close then answers
        ORDER_CLOSED, and each is closed locally only on what its own query then says (R22, R24)."""
        combine_no = str(order["combine_out_trade_no"])
        try:
            merchant = wechatpay_v3_desk(self.merchants).wechatpay(
                order.get("combine_mchid") or order["mchid"]
            )
            client = wechatpay_v3_desk(self.merchants).client(merchant)
            asked = with_retries(
                lambda: combine.query(client, combine_no), attempts=self.attempts, sleep=self.sleep
            )
            data = asked.data if isinstance(asked.data, dict) else {}
            subs = combine.close_list(data)
        except errors.NotFound as exc:
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx.DecryptError as exc:
            return CloseResult(Answer.PERSON, "COMBINE_UNUSABLE", detail=str(exc)[:300])
        except wx.WeChatCallError as exc:
            answer, mapped = lookup(wx.CLOSE_ANSWER, exc.word)
            return CloseResult(answer, exc.word, detail=f"combine query: {str(exc)[:280]}", mapped=mapped)
        me = client.creds.mchid
        if data.get("combine_out_trade_no") != combine_no or data.get("combine_mchid") != me:
            return CloseResult(
                Answer.PERSON, "OTHER_COMBINE", detail="the combine answer is about another order"
            )
        if any(sub["mchid"] != me for sub in subs):
            return CloseResult(Answer.PERSON, "OTHER_COMBINE", detail="a sub-order names another initiator")
        mine = [
            s
            for s in subs
            if s["out_trade_no"] == order["out_trade_no"] and s.get("sub_mchid", me) == order["mchid"]
        ]
        if len(mine) != 1:
            return CloseResult(Answer.PERSON, "NO_SUB_ORDER", detail=f"{len(mine)} sub-orders are this order")
        try:
            response = with_retries(
                lambda: combine.close(client, combine_no, combine_appid=merchant.appid, sub_orders=subs),
                attempts=self.attempts,
                sleep=self.sleep,
            )
        except wx.WeChatCallError as exc:
            answer, mapped = lookup(wx.CLOSE_ANSWER, exc.word)
            return CloseResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        return _close_answer(response)


def _close_answer(response: wx.Response) -> CloseResult:
    """A close call's 2xx answer: 204 = closed now; another (202 USER_PAYING) by its code (CLOSE_ANSWER)."""
    if response.status == 204:
        return CloseResult(Answer.CLOSED, "CLOSED_NOW")
    word = (
        str(response.data.get("code") or f"HTTP_{response.status}")
        if isinstance(response.data, dict)
        else f"HTTP_{response.status}"
    )
    answer, mapped = lookup(wx.CLOSE_ANSWER, word)
    return CloseResult(answer, word, detail=f"close answered {response.status}", mapped=mapped)


def _not_this_order(data: dict[str, Any], order: dict[str, Any]) -> str:
    """An answer about another order is never applied to this one (R11)."""
    partner = "sp_mchid" in data
    mchid = data.get("sub_mchid") if partner else data.get("mchid")
    if data.get("out_trade_no") != order["out_trade_no"]:
        return f"answer is about out_trade_no {str(data.get('out_trade_no'))[:40]!r}"
    if str(mchid) != order["mchid"]:
        return f"answer is about merchant {str(mchid)[:40]!r}"
    if partner and str(data.get("sp_mchid")) != str(order.get("sp_mchid")):
        return f"answer is about service provider {str(data.get('sp_mchid'))[:40]!r}"
    return ""
