"""Alipay pull: alipay.trade.query / alipay.trade.close (R21, R22), answers mapped by wire.py's tables."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tally import errors
from tally.channels.alipay import wire as ali
from tally.channels.alipay.merchant import alipay_desk
from tally.channels.retry import with_retries
from tally.domain.poll import Answer, CloseResult, QueryResult, answers, lookup


class AlipayPull:
    """alipay.trade.query / alipay.trade.close with the order's own app (or its provider's app with
    the merchant's app_auth_token), answers mapped by alipay/wire.py's tables (R22)."""

    def __init__(self, merchants: Any, *, attempts: int = 3, sleep: Callable[[float], None] = time.sleep):
        self.merchants = merchants
        self.attempts = attempts
        self.sleep = sleep

    def register(self, registry: Any) -> None:
        registry.register(ali.STORED, self.query, self.close)

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult:
        try:
            client = alipay_desk(self.merchants).alipay_client(
                alipay_desk(self.merchants).alipay(order["mchid"])
            )
            data = with_retries(
                lambda: client.trade_query(out_trade_no=order["out_trade_no"]),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except errors.NotFound as exc:  # the merchant directory's UnknownMerchant
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except ali.AlipayCallError as exc:
            word = ali.error_word(exc)
            answer, mapped = lookup(answers(ali.QUERY_ERROR), word)
            return QueryResult(answer, word, detail=str(exc)[:300], mapped=mapped)
        state = str(data.get("trade_status") or "")
        answer, mapped = lookup(answers(ali.QUERY_STATE), state)
        if not mapped:
            return QueryResult(
                answer, state or "NO_TRADE_STATUS", detail="trade_status in no table", mapped=False
            )
        if data.get("out_trade_no") != order["out_trade_no"]:
            return QueryResult(Answer.PERSON, state, detail="answer is about another out_trade_no")
        notice = None
        if answer is Answer.PAID:
            try:
                notice = client.query_notice(data, mchid=order["mchid"], sp_mchid=order.get("sp_mchid"))
            except ali.ParseError as exc:
                return QueryResult(Answer.PERSON, state, detail=f"paid answer unusable: {exc}")
        return QueryResult(answer, state, notice=notice, body=json.dumps(data, ensure_ascii=False).encode())

    def close(self, order: dict[str, Any]) -> CloseResult:
        try:
            client = alipay_desk(self.merchants).alipay_client(
                alipay_desk(self.merchants).alipay(order["mchid"])
            )
            with_retries(
                lambda: client.trade_close(out_trade_no=order["out_trade_no"]),
                attempts=self.attempts,
                sleep=self.sleep,
            )
        except errors.NotFound as exc:  # the merchant directory's UnknownMerchant
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except ali.AlipayCallError as exc:
            word = ali.error_word(exc)
            answer, mapped = lookup(answers(ali.CLOSE_ANSWER), word)
            return CloseResult(answer, word, detail=str(exc)[:300], mapped=mapped)
        return CloseResult(Answer.CLOSED, "CLOSED_NOW")
