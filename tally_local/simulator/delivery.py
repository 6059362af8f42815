"""The one notification delivery / retry engine of the simulator (v3 payments and refunds, v2 payments and
refunds, Alipay payments and refunds).

A desk describes one copy of a notification as a ``Chain``: where it goes, how each attempt is composed
(freshly signed per attempt where the channel does so), what counts as acknowledged, how an attempt is
recorded, and the channel's retry schedule. ``DeliveryEngine.send(chains, delay=…)`` runs every chain on its
own daemon thread, all starting together (``duplicates=N`` are N concurrent copies); a chain stops at the
first acknowledged attempt, when the schedule runs out, or when the simulator stops. ``DeliveryLog`` keeps
the desk's attempt records and lets a test wait for acknowledged ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .kernel import Kernel, Reply, log, post

#: WeChat Pay (v3 §1.9, and v2): channel seconds between the 16 attempts, × time_scale.
WECHATPAY_RETRY_S: tuple[int, ...] = (
    15,
    15,
    30,
    180,
    600,
    1200,
    1800,
    1800,
    1800,
    3600,
    10800,
    10800,
    10800,
    21600,
    21600,
)
#: Alipay §5.4: 4m, 10m, 10m, 1h, 2h, 6h, 15h between the 8 attempts (× time_scale).
ALIPAY_RETRY_S: tuple[int, ...] = (240, 600, 600, 3600, 7200, 21600, 54000)


@dataclass
class Chain:
    """One copy of one notification, attempted until acknowledged (``schedule=()``: a single attempt)."""

    url: str
    compose: Callable[[], tuple[dict[str, str], bytes]]  # one attempt's (headers, body)
    acknowledged: Callable[[Reply], bool]
    record: Callable[[int, dict[str, str], Reply, bool], Any]  # (attempt, headers sent, reply, acknowledged)
    schedule: tuple[int, ...]
    label: str = ""  # for the log when it gives up


class DeliveryEngine:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def send(self, chains: list[Chain], *, delay: float = 0.0, name: str = "notify") -> None:
        """Start every chain now (``delay``: wall-clock seconds, not scaled, before the first attempts)."""
        barrier = threading.Barrier(max(1, len(chains)))
        threads = [
            threading.Thread(target=self._run, args=(chain, barrier, delay), daemon=True, name=name)
            for chain in chains
        ]
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + threads
        for t in threads:
            t.start()

    def _run(self, chain: Chain, barrier: threading.Barrier, delay: float) -> None:
        stopping = self.kernel.stopping
        try:
            barrier.wait(timeout=5)  # every copy starts together
        except threading.BrokenBarrierError:
            pass
        if delay and stopping.wait(delay):
            return
        for attempt in range(1, len(chain.schedule) + 2):
            if attempt > 1 and self.kernel.wait(chain.schedule[attempt - 2]):
                return
            if stopping.is_set():
                return
            headers, body = chain.compose()
            reply = post(chain.url, body, headers, self.kernel.notify_timeout)
            ok = chain.acknowledged(reply)
            chain.record(attempt, headers, reply, ok)
            if ok:
                return
        if chain.schedule:
            log.warning("notification %s gave up after %d attempts", chain.label, len(chain.schedule) + 1)

    def join(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` seconds in all) for the delivery threads after a stop."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))


class DeliveryLog:
    """A desk's delivery attempts (one record each), and waiting for acknowledged ones."""

    def __init__(self, stopping: threading.Event | None = None):
        self._cond = threading.Condition()
        self._records: list[dict[str, Any]] = []
        self._stopping = stopping

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            self._records.append(record)
            self._cond.notify_all()
        return record

    def records(self) -> list[dict[str, Any]]:
        """Copies of every record so far."""
        with self._cond:
            return [dict(r) for r in self._records]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records())

    def __len__(self) -> int:
        with self._cond:
            return len(self._records)

    def clear(self) -> None:
        with self._cond:
            self._records.clear()

    def wait(
        self,
        mine: Callable[[dict[str, Any]], bool],
        acknowledged: Callable[[dict[str, Any]], bool],
        *,
        what: str,
        timeout: float,
        count: int = 1,
    ) -> list[dict[str, Any]]:
        """Block until ``count`` of ``mine`` records are acknowledged; returns them (copies). Raises
        ``TimeoutError`` (listing ``what``'s attempts) after ``timeout`` seconds or when the simulator stops."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                done = [r for r in self._records if mine(r) and acknowledged(r)]
                if len(done) >= count:
                    return [dict(r) for r in done]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self._stopping is not None and self._stopping.is_set()):
                    raise TimeoutError(
                        f"{what}: {len(done)}/{count} acknowledged deliveries after {timeout}s; "
                        f"attempts: {[r for r in self._records if mine(r)]}"
                    )
                self._cond.wait(min(remaining, 0.2))  # a stop is seen within 0.2 s
