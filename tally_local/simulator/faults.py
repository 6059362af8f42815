"""The one fault queue of the simulator: "the next N matching calls misbehave".

Every desk arms its faults here (the v3 API's ``inject_fault``, the Alipay gateway's, the v2 ``/pay`` APIs',
both trade bills' ``fault``) and every refund desk its behaviours (``set_refund_behaviour(count=N, …)``: the
next N new refunds, else the default):

    queue = FaultQueue()
    queue.arm({"kind": "error", "path_contains": "/v3/pay", "method": "GET"}, count=2)
    queue.take(path="/v3/pay/transactions/id/42", method="GET")   # → the fault (a copy), 1 left
    queue.take(path="/v3/certificates", method="GET")             # → None: does not match

A fault matches a call when each criterion it sets holds: ``path_contains`` is a substring of the call's
``path``, ``method`` equals the call's ``method``; a criterion that is None or absent matches every call.
The first matching fault is counted down and handed out (removed at zero); the order of arming is kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: fault criterion → how it matches the call's value
_MATCHERS: dict[str, tuple[str, Callable[[Any, Any], bool]]] = {
    "path_contains": ("path", lambda want, got: want in (got or "")),
    "method": ("method", lambda want, got: want == got),
}


def corrupted(signature: str) -> str:
    """The ``bad_signature`` fault: the signature with its first character changed (still well-formed)."""
    return ("A" if signature[:1] != "A" else "B") + signature[1:]


class FaultQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[dict[str, Any]] = []

    def arm(self, fault: dict[str, Any], count: int = 1) -> dict[str, Any]:
        """Queue ``fault`` for the next ``count`` matching calls; returns it with its ``count``."""
        entry = {**fault, "count": int(count)}
        with self._lock:
            self._armed.append(entry)
        return dict(entry)

    def take(self, **call: Any) -> dict[str, Any] | None:
        """The first armed fault that matches this call (a copy, its remaining count included), or None."""
        with self._lock:
            for fault in self._armed:
                if all(
                    fault.get(criterion) in (None, "") or matches(fault[criterion], call.get(field))
                    for criterion, (field, matches) in _MATCHERS.items()
                ):
                    fault["count"] -= 1
                    if fault["count"] <= 0:
                        self._armed.remove(fault)
                    return dict(fault)
        return None

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    def pending(self) -> list[dict[str, Any]]:
        """The armed faults (copies), oldest first."""
        with self._lock:
            return [dict(f) for f in self._armed]

    def __len__(self) -> int:
        with self._lock:
            return len(self._armed)


class Behaviour:
    """A default behaviour plus the next N calls' own: ``set(**options)`` changes the default,
    ``set(count=N, **options)`` arms N calls with the default overridden by ``options``; ``next()`` hands out
    the behaviour of one call. ``keys`` are the options it knows; ``check`` validates them (raises ValueError)."""

    def __init__(
        self,
        defaults: dict[str, Any],
        check: Callable[[dict[str, Any]], None] = lambda options: None,
    ):
        self._initial = dict(defaults)
        self.default = dict(defaults)
        self.check = check
        self.queue = FaultQueue()

    def set(self, count: int | None = None, **options: Any) -> dict[str, Any]:
        unknown = set(options) - set(self._initial)
        if unknown:
            raise ValueError(f"unknown refund behaviour {sorted(unknown)}")
        self.check(options)
        if count is None:
            self.default.update(options)
            return dict(self.default)
        plan = {**self.default, **options}
        if int(count) > 0:
            self.queue.arm(plan, int(count))
        return plan

    def next(self) -> dict[str, Any]:
        armed = self.queue.take()
        if armed is None:
            return dict(self.default)
        armed.pop("count")
        return armed

    def reset(self) -> None:
        """Back to the initial default, nothing armed."""
        self.queue.clear()
        self.default = dict(self._initial)
