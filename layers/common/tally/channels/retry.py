"""Retries with full jitter for channel calls: only errors that say `retryable` are tried again."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from tally.errors import is_retryable

T = TypeVar("T")


def with_retries(
    call: Callable[[], T],
    *,
    attempts: int = 3,
    base_s: float = 0.2,
    cap_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run `call`; on a TallyError with `retryable = True`, sleep rand()*min(cap, base*2^i) and try again.

    Every attempt is a new call (a WeChat request is signed afresh with a new nonce and timestamp).
    The last error is raised as is; a non-retryable one at once.
    """
    attempts = max(1, attempts)
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            if not is_retryable(exc) or attempt == attempts - 1:
                raise
            sleep(rand() * min(cap_s, base_s * (2**attempt)))
    raise AssertionError("unreachable")
