"""Pull-side facts (R21, R22): what a channel's answer to a query means, and when to ask again.

Pure stdlib. Each channel maps its own states and error codes to `Answer` through one explicit
table in its channels/ module; the poller only ever looks at `Answer`.
"""

from __future__ import annotations

from enum import Enum


class Answer(str, Enum):
    PAID = "PAID"  # the channel took the money: book it through the transit (R23)
    WAITING = "WAITING"  # not paid yet (NOTPAY, USERPAYING ...): ask again later
    CLOSED = "CLOSED"  # ended unpaid at the channel (closed, revoked, pay error): close locally
    NOT_CREATED = "NOT_CREATED"  # "order does not exist": NOT closed (R22); ask again later
    TRANSIENT = "TRANSIENT"  # the call failed in a way that may pass (5xx, rate limit): ask again, bounded
    PERSON = "PERSON"  # anything else, including codes nobody mapped: a person looks (R22)


# Seconds from one query to the next: the n-th query of an order is followed by BACKOFF_S[n]
# (the last value repeats) until the order expires (R21).
BACKOFF_S: tuple[int, ...] = (30, 60, 300, 900, 1800)
FIRST_QUERY_AFTER_S = BACKOFF_S[0]


def next_query_in(queries_done: int) -> int:
    """Seconds until the next query after `queries_done` queries (1 = the first one was just made)."""
    return BACKOFF_S[min(max(queries_done, 0), len(BACKOFF_S) - 1)]


def next_due(now_s: float, queries_done: int, expire_s: float) -> float:
    """When to look at the order again: the backoff, but never later than its expiry (then it is closed)."""
    return min(now_s + next_query_in(queries_done), max(expire_s, now_s))
