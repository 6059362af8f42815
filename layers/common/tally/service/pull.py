"""Channel-generic pull: a registry of one query function and one close function per channel.

The poller and the return page only see `QueryResult` / `CloseResult`, whose `answer` comes from
the channel module's explicit table (R22). To add a channel: write `query(order, fast)` and
`close(order)` that return these, and `register` them (bootstrap does it for every channel).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tally.channels import alipay as ali
from tally.channels import wechatpay_v2 as wx2
from tally.channels import wechatpay_v3 as wx
from tally.channels.retry import with_retries
from tally.domain.notifications import PaymentNotice
from tally.domain.poll import Answer


@dataclass(frozen=True)
class QueryResult:
    answer: Answer
    word: str  # the channel's own state or error code, verbatim (or a local pseudo-code)
    notice: PaymentNotice | None = None  # the facts of a paid (or ended) answer, source="query"
    body: bytes | None = None  # the verified answer, kept with the raw row
    headers: dict[str, str] | None = None
    detail: str = ""
    mapped: bool = True  # False: the word is in no table (it went to PERSON because of that)


@dataclass(frozen=True)
class CloseResult:
    answer: Answer
    word: str
    detail: str = ""
    mapped: bool = True


class MerchantPace:
    """At most `per_s` channel calls per merchant start in any one-second window, however many threads ask
    (the poller queries with bounded concurrency, docs/pull.md). A call takes a grant: the grant times of the
    merchant's last `per_s` calls are kept, and a call waits until the oldest of them is a second old. By
    construction no window of one second holds more than `per_s` grants (no burst allowance, no float drift).
    `clock` and `sleep` are injected: the test drives a fake clock (tests/unit/test_poll_pace.py)."""

    def __init__(
        self,
        per_s: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        window_s: float = 1.0,
    ):
        if per_s < 1:
            raise ValueError(f"a per-merchant rate of {per_s}/s would never query")
        self.per_s = int(per_s)
        self.window_s = window_s
        self.clock = clock
        self.sleep = sleep
        self._granted: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self.waited_s = 0.0  # total time callers slept for a slot (the bench reports it)

    def wait(self, merchant: str) -> float:
        """Block until `merchant` may make one more call; returns the grant time."""
        while True:
            with self._lock:
                now = self.clock()
                granted = self._granted.setdefault(merchant, deque())
                while granted and granted[0] <= now - self.window_s:
                    granted.popleft()
                if len(granted) < self.per_s:
                    granted.append(now)
                    return now
                wait_s = granted[0] + self.window_s - now
                self.waited_s += wait_s
            self.sleep(wait_s)


def _no_pace(merchant: str) -> None:
    return None


QueryFn = Callable[[dict[str, Any], bool], QueryResult]
CloseFn = Callable[[dict[str, Any]], CloseResult]


class PullChannels:
    """channel name → (query, close). An order of a channel nobody registered goes to a person."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[QueryFn, CloseFn]] = {}

    def register(self, channel: str, query: QueryFn, close: CloseFn) -> None:
        self._entries[channel] = (query, close)

    def channels(self) -> list[str]:
        return sorted(self._entries)

    @staticmethod
    def _key(order: dict[str, Any]) -> str:
        """The API that queries the order: `api` when the channel has several (WeChat v2 orders), else channel."""
        return str(order.get("api") or order.get("channel"))

    def query(self, order: dict[str, Any], *, fast: bool = False) -> QueryResult:
        entry = self._entries.get(self._key(order))
        if entry is None:
            return QueryResult(
                Answer.PERSON,
                "NO_QUERY_CLIENT",
                detail=f"no query for channel {order.get('channel')!r}",
                mapped=False,
            )
        return entry[0](order, fast)

    def close(self, order: dict[str, Any]) -> CloseResult:
        entry = self._entries.get(self._key(order))
        if entry is None:
            return CloseResult(
                Answer.PERSON,
                "NO_CLOSE_CLIENT",
                detail=f"no close for channel {order.get('channel')!r}",
                mapped=False,
            )
        return entry[1](order)


def pace_key(channel: str, order: dict[str, Any]) -> str:
    """Whose rate a call spends: the merchant whose credentials sign it (a provider's, for a sub-merchant)."""
    return f"{channel}#{order.get('sp_mchid') or order.get('mchid')}"


def _paced(pace: Callable[[str], object], channel: str, order: dict[str, Any], call: Callable[..., Any]):
    """`call`, once the merchant's rate allows one more request (MerchantPace)."""
    pace(pace_key(channel, order))
    return call


def _lookup(table: dict[str, Answer], word: str) -> tuple[Answer, bool]:
    answer = table.get(word)
    return (answer, True) if answer is not None else (Answer.PERSON, False)


# ---------------------------------------------------------------- WeChat Pay v3


class WeChatPayV3Pull:
    """Query and close with the credentials the order was created with (R22): the merchant's own, or in
    partner mode the service provider's with the order's merchant as sub_mchid."""

    def __init__(
        self,
        merchants: Any,
        *,
        attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        pace: Callable[[str], object] = _no_pace,
    ):
        self.merchants = merchants
        self.attempts = attempts
        self.sleep = sleep
        self.pace = pace  # MerchantPace.wait: called before every attempt, retries included

    def register(self, registry: PullChannels) -> None:
        registry.register(wx.CHANNEL, self.query, self.close)

    def _client(self, order: dict[str, Any]) -> tuple[wx.WeChatPayClient, str | None]:
        sp = order.get("sp_mchid") or None
        merchant = self.merchants.wechatpay(sp or order["mchid"])
        return self.merchants.client(merchant), (order["mchid"] if sp else None)

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult:
        from tally.service.merchants import UnknownMerchant

        try:
            client, sub = self._client(order)
            response = with_retries(
                lambda: _paced(self.pace, wx.CHANNEL, order, client.query_by_out_trade_no)(
                    order["out_trade_no"], sub_mchid=sub
                ),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except UnknownMerchant as exc:
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx.ChannelError as exc:
            answer, mapped = _lookup(wx.QUERY_ERROR, exc.word)
            return QueryResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        data = response.data if isinstance(response.data, dict) else {}
        state = str(data.get("trade_state") or "")
        answer, mapped = _lookup(wx.QUERY_STATE, state)
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

    def close(self, order: dict[str, Any]) -> CloseResult:
        from tally.service.merchants import UnknownMerchant

        try:
            client, sub = self._client(order)
            response = with_retries(
                lambda: _paced(self.pace, wx.CHANNEL, order, client.close)(
                    order["out_trade_no"], sub_mchid=sub
                ),
                attempts=self.attempts,
                sleep=self.sleep,
            )
        except UnknownMerchant as exc:
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx.ChannelError as exc:
            answer, mapped = _lookup(wx.CLOSE_ANSWER, exc.word)
            return CloseResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        if response.status == 204:
            return CloseResult(Answer.CLOSED, "CLOSED_NOW")
        word = (
            str(response.data.get("code") or f"HTTP_{response.status}")
            if isinstance(response.data, dict)
            else f"HTTP_{response.status}"
        )
        answer, mapped = _lookup(wx.CLOSE_ANSWER, word)
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


# ---------------------------------------------------------------- Alipay


class AlipayPull:
    """alipay.trade.query / alipay.trade.close with the order's own app (or its provider's app with
    the merchant's app_auth_token), answers mapped by channels/alipay.py's tables (R22)."""

    def __init__(
        self,
        merchants: Any,
        *,
        attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        pace: Callable[[str], object] = _no_pace,
    ):
        self.merchants = merchants
        self.attempts = attempts
        self.sleep = sleep
        self.pace = pace  # MerchantPace.wait: called before every attempt, retries included

    def register(self, registry: PullChannels) -> None:
        registry.register(ali.CHANNEL, self.query, self.close)

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult:
        from tally.service.merchants import UnknownMerchant

        try:
            client = self.merchants.alipay_client(self.merchants.alipay(order["mchid"]))
            data = with_retries(
                lambda: _paced(self.pace, ali.CHANNEL, order, client.trade_query)(
                    out_trade_no=order["out_trade_no"]
                ),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except UnknownMerchant as exc:
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except ali.ChannelError as exc:
            word = ali.error_word(exc)
            answer, mapped = _lookup(_answers(ali.QUERY_ERROR), word)
            return QueryResult(answer, word, detail=str(exc)[:300], mapped=mapped)
        state = str(data.get("trade_status") or "")
        answer, mapped = _lookup(_answers(ali.QUERY_STATE), state)
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
        from tally.service.merchants import UnknownMerchant

        try:
            client = self.merchants.alipay_client(self.merchants.alipay(order["mchid"]))
            with_retries(
                lambda: _paced(self.pace, ali.CHANNEL, order, client.trade_close)(
                    out_trade_no=order["out_trade_no"]
                ),
                attempts=self.attempts,
                sleep=self.sleep,
            )
        except UnknownMerchant as exc:
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except ali.ChannelError as exc:
            word = ali.error_word(exc)
            answer, mapped = _lookup(_answers(ali.CLOSE_ANSWER), word)
            return CloseResult(answer, word, detail=str(exc)[:300], mapped=mapped)
        return CloseResult(Answer.CLOSED, "CLOSED_NOW")


def _answers(table: dict[str, str]) -> dict[str, Answer]:
    return {word: Answer(value) for word, value in table.items()}


# ---------------------------------------------------------------- WeChat Pay v2


class WeChatPayV2Pull:
    """`/pay/orderquery` and `/pay/closeorder` with the merchant's API key, for orders created with
    `"channel": "wechatpay_v2"` (order row `api = wechatpay_v2`); answers mapped by channels/wechatpay_v2.py's
    tables (R22). A paid answer is keyed `wechatpay#transaction_id`, like the v2 and v3 callbacks (R23)."""

    def __init__(
        self,
        merchants: Any,
        *,
        attempts: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        pace: Callable[[str], object] = _no_pace,
    ):
        self.merchants = merchants
        self.attempts = attempts
        self.sleep = sleep
        self.pace = pace  # MerchantPace.wait: called before every attempt, retries included

    def register(self, registry: PullChannels) -> None:
        registry.register(wx2.API, self.query, self.close)

    def query(self, order: dict[str, Any], fast: bool = False) -> QueryResult:
        from tally.service.merchants import UnknownMerchant

        try:
            client = self.merchants.wechatpay_v2_client(self.merchants.wechatpay_v2(order["mchid"]))
            data = with_retries(
                lambda: _paced(self.pace, wx2.API, order, client.order_query)(order["out_trade_no"]),
                attempts=1 if fast else self.attempts,
                sleep=self.sleep,
            )
        except UnknownMerchant as exc:
            return QueryResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx2.ChannelError as exc:
            answer, mapped = _lookup(wx2.QUERY_ERROR, exc.word)
            return QueryResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        state = str(data.get("trade_state") or "")
        answer, mapped = _lookup(wx2.QUERY_STATE, state)
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
        from tally.service.merchants import UnknownMerchant

        try:
            client = self.merchants.wechatpay_v2_client(self.merchants.wechatpay_v2(order["mchid"]))
            with_retries(
                lambda: _paced(self.pace, wx2.API, order, client.close_order)(order["out_trade_no"]),
                attempts=self.attempts,
                sleep=self.sleep,
            )
        except UnknownMerchant as exc:
            return CloseResult(Answer.PERSON, "UNKNOWN_MERCHANT", detail=str(exc))
        except wx2.ChannelError as exc:
            answer, mapped = _lookup(wx2.CLOSE_ANSWER, exc.word)
            return CloseResult(answer, exc.word, detail=str(exc)[:300], mapped=mapped)
        return CloseResult(Answer.CLOSED, "CLOSED_NOW")
