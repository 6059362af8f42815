"""Channel-generic pull: a registry of one query function and one close function per channel.

The poller and the return page only see `QueryResult` / `CloseResult` (domain/poll.py), whose `answer` comes
from the channel's explicit table (R22). Each channel's query and close live in its package
(channels/<name>/pull.py); `PullChannels.add` registers the one a `Channel` gives (bootstrap does it for
every registered channel).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tally.channels.registry import Channel, PullClient
from tally.domain.poll import Answer, CloseResult, QueryResult

__all__ = ["CloseResult", "PullChannels", "QueryResult"]  # QueryResult: its home is domain/poll.py


QueryFn = Callable[[dict[str, Any], bool], QueryResult]
CloseFn = Callable[[dict[str, Any]], CloseResult]


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
        self._calling = (
            threading.local()
        )  # the merchant this thread is calling for (its retries spend it too)

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
            self.sleep(wait_s)

    def retry_sleep(self, sleep: Callable[[float], None] = time.sleep) -> Callable[[float], None]:
        """The `sleep` a channel's pull hands `with_retries`: the backoff, then a grant for the merchant this
        thread is calling for, so a retry is paced like a first attempt (PullChannels sets the merchant)."""

        def backoff_then_grant(seconds: float) -> None:
            sleep(seconds)
            merchant = getattr(self._calling, "merchant", None)
            if merchant is not None:
                self.wait(merchant)

        return backoff_then_grant


def pace_key(api: str, order: dict[str, Any]) -> str:
    """Whose rate a call spends: the merchant whose credentials sign it (a provider's, for a sub-merchant)."""
    return f"{api}#{order.get('sp_mchid') or order.get('mchid')}"


class PullChannels:
    """channel name → (query, close). An order of a channel nobody registered goes to a person. With a
    `pace`, every call to a channel (first attempts here, retries through `MerchantPace.retry_sleep`) waits
    for the signing merchant's grant."""

    def __init__(self, pace: MerchantPace | None = None) -> None:
        self._entries: dict[str, tuple[QueryFn, CloseFn]] = {}
        self.pace = pace

    def register(self, channel: str, query: QueryFn, close: CloseFn) -> None:
        self._entries[channel] = (query, close)

    def add(self, channel: Channel, pull: PullClient) -> None:
        """The channel's pull, under the key orders carry: its `api` (WeChat v2) or its stored channel."""
        self.register(channel.api or channel.stored, pull.query, pull.close)

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
        return self._paced(order, lambda: entry[0](order, fast))

    def close(self, order: dict[str, Any]) -> CloseResult:
        entry = self._entries.get(self._key(order))
        if entry is None:
            return CloseResult(
                Answer.PERSON,
                "NO_CLOSE_CLIENT",
                detail=f"no close for channel {order.get('channel')!r}",
                mapped=False,
            )
        return self._paced(order, lambda: entry[1](order))

    def _paced(self, order: dict[str, Any], call: Callable[[], Any]) -> Any:
        if self.pace is None:
            return call()
        merchant = pace_key(self._key(order), order)
        self.pace._calling.merchant = merchant
        try:
            self.pace.wait(merchant)
            return call()
        finally:
            self.pace._calling.merchant = None
