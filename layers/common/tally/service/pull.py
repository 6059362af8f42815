"""Channel-generic pull: a registry of one query function and one close function per channel.

The poller and the return page only see `QueryResult` / `CloseResult` (domain/poll.py), whose `answer` comes
from the channel's explicit table (R22). Each channel's query and close live in its package
(channels/<name>/pull.py); `PullChannels.add` registers the one a `Channel` gives (bootstrap does it for
every registered channel).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.channels.registry import Channel, PullClient
from tally.domain.poll import Answer, CloseResult, QueryResult

__all__ = ["CloseResult", "PullChannels", "QueryResult"]  # QueryResult: its home is domain/poll.py


QueryFn = Callable[[dict[str, Any], bool], QueryResult]
CloseFn = Callable[[dict[str, Any]], CloseResult]


class PullChannels:
    """channel name → (query, close). An order of a channel nobody registered goes to a person."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[QueryFn, CloseFn]] = {}

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
