"""WeChat Pay v2 pull: /pay/orderquery and /pay/closeorder (R21, R22), answers mapped by wire.py's tables."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tally import errors
from tally.channels.retry import with_retries
from tally.channels.wechatpay_v2 import wire as wx2
from tally.channels.wechatpay_v2.merchant import wechatpay_v2_desk
from tally.domain.poll import Answer, CloseResult, QueryResult, lookup


class WeChatPayV2Pull:
    """`/pay/orderquery` and `/pay/closeorder` with the merchant's API key, for orders created with
    `"channel": "wechatpay_v2"` (order row `api = wechatpay_v2`); answers mapped by wechatpay_v2/wire.py's
    tables (R22). A paid answer is keyed `wechatpay#transaction_id`, like the v2 and v3 callbacks (R23)."""

    def __init__(self, merchants: Any, *, attempts: int = 3, sleep: Callable[[float], None] = time.sleep):
        self.merchants = merchants
        self.attempts = attempts
        self.sleep = sleep

    def register(self, registry: Any) -> None:
        registry.register(wx2.API, self.query, self.close)

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult:
        try:
            client = wechatpay_v2_desk(self.merchants).wechatpay_v2_client(
                wechatpay_v2_desk(self.merchants).wechatpay_v2(order["mchid"])
            )
            data = with_retries(
                lambda: client.order_query(order["out_trade_no"]),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except errors.NotFound as exc:  # the merchant directory's UnknownMerchant
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx2.WeChatV2CallError as exc:
            answer, mapped = lookup(wx2.QUERY_ERROR, exc.word)
            return QueryResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        state = str(data.get("trade_state") or "")
        answer, mapped = lookup(wx2.QUERY_STATE, state)
        if not mapped:
            return QueryResult(
                answer, state or "NO_TRADE_STATE", detail="trade_state in no table", mapped=False
            )
        if data.get("out_trade_no") != order["out_trade_no"]:
            return QueryResult(Answer.PERSON, state, detail="answer is about another out_trade_no")  # R11
        notice = None
        if answer is Answer.PAID:
            try:
                notice = wx2.query_notice(data, mchid=order["mchid"])
            except wx2.ParseError as exc:
                return QueryResult(Answer.PERSON, state, detail=f"paid answer unusable: {exc}")
        return QueryResult(answer, state, notice=notice, body=json.dumps(data, ensure_ascii=False).encode())

    def close(self, order: dict[str, Any]) -> CloseResult:
        try:
            client = wechatpay_v2_desk(self.merchants).wechatpay_v2_client(
                wechatpay_v2_desk(self.merchants).wechatpay_v2(order["mchid"])
            )
            with_retries(
                lambda: client.close_order(order["out_trade_no"]), attempts=self.attempts, sleep=self.sleep
            )
        except errors.NotFound as exc:  # the merchant directory's UnknownMerchant
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx2.WeChatV2CallError as exc:
            answer, mapped = lookup(wx2.CLOSE_ANSWER, exc.word)
            return CloseResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        return CloseResult(Answer.CLOSED, "CLOSED_NOW")
