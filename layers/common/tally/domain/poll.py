"""Pull-side facts (R21, R22): what a channel's answer to a query means, and when to ask again.

Pure stdlib. Each channel maps its own states and error codes to `Answer` through one explicit
table in its channels/ module; the poller only ever looks at `Answer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tally.domain.notifications import PaymentNotice


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


@dataclass(frozen=True)
class QueryResult:
    """A channel's answer to "is this order paid?", mapped (channels/<name>/pull.py)."""

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


def lookup(table: dict[str, Answer], word: str) -> tuple[Answer, bool]:
    """The table's answer for a word, and whether it had one: a word in no table is a person's (R22)."""
    answer = table.get(word)
    return (answer, True) if answer is not None else (Answer.PERSON, False)


def answers(table: dict[str, str]) -> dict[str, Answer]:
    """A table written with the Answer values as strings (Alipay's) as `Answer`s."""
    return {word: Answer(value) for word, value in table.items()}
