"""ACK first: the asynchronous consumers give way to the HTTP requests in flight (issue #20 item 6).

On AWS the SQS event source mapping, the worker and the stream consumers do not run on the CPU that answers
WeChat; in the embedded stack they share two cores and one moto process with the front door, and 78 % of moto's
work per callback is theirs (docs/embedded-stack.md, session 8). The design is "store raw, enqueue, ACK; apply
later": so while the front door has requests in flight, a pump waits before its next receive, up to
`max_wait_s`; then it takes its turn anyway (one batch), so booking never stops under a long burst and catches
up from the queue after it. A person watching `make run` sees no difference (no burst, no wait).

    gate = AckFirst(max_wait_s=1.0)
    with gate.request():  ...            # the front door, around each request
    gate.wait_turn(stopping)             # a pump, before each receive / poll
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_MAX_WAIT_S = 1.0


class AckFirst:
    def __init__(self, max_wait_s: float = DEFAULT_MAX_WAIT_S):
        self.max_wait_s = max_wait_s
        self.waited_s = 0.0  # how long the consumers gave way, in all (bench.load reports it)
        self._in_flight = 0
        self._condition = threading.Condition()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextmanager
    def request(self) -> Iterator[None]:
        with self._condition:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._condition:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._condition.notify_all()

    def wait_turn(self, stopping: threading.Event | None = None) -> float:
        """Wait while requests are in flight, at most max_wait_s (or until `stopping` is set); seconds waited."""
        started = time.monotonic()
        deadline = started + self.max_wait_s
        with self._condition:
            while self._in_flight and not (stopping is not None and stopping.is_set()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._condition.wait(min(left, 0.1))  # 0.1: see `stopping` soon
            waited = time.monotonic() - started
            self.waited_s += waited
        return waited
