"""The local EventBridge: invoke every function that has a Schedule / ScheduleV2 event in template.yaml.

Each schedule `rate(N unit)` fires every N units × `scale` (scale < 1 compresses time: 0.01 runs a
one-minute poller every 0.6 s) with an EventBridge "Scheduled Event"-shaped event. `cron(...)`
schedules are listed but not fired (their next time needs a cron parser; nothing local uses one yet).
A handler exception is logged and the schedule keeps ticking, as EventBridge does.

    ticker = ScheduleTicker.from_template(template, root, scale=0.01).start()
    ticker.fire("PollerFunction")   # one run now (tests), returns the handler's result
    ticker.stop()
"""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tally_local.resources import LOCAL_ACCOUNT_ID, LambdaContext, function_specs, load_handler

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class Schedule:
    function: str  # logical id
    event_name: str
    expression: str
    every_s: float | None  # None: not a rate() (cron): not fired
    timeout_s: int = 3
    memory_mb: int = 128


def rate_seconds(expression: str) -> float | None:
    match = _RATE.match(expression.strip())
    if not match:
        return None
    return int(match.group(1)) * _UNIT_S[match.group(2).rstrip("s")]


def schedules_from_template(template: Mapping[str, Any], root: str | Path) -> list[Schedule]:
    specs = function_specs(template, root)
    found = []
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for name, event in (resource.get("Properties", {}).get("Events") or {}).items():
            if event.get("Type") not in ("Schedule", "ScheduleV2"):
                continue
            props = event.get("Properties") or {}
            expression = str(props.get("Schedule") or props.get("ScheduleExpression") or "")
            spec = specs[logical_id]
            found.append(
                Schedule(
                    logical_id, name, expression, rate_seconds(expression), spec.timeout_s, spec.memory_mb
                )
            )
    return found


def scheduled_event(
    schedule: Schedule, region: str = "us-east-1", now: float | None = None
) -> dict[str, Any]:
    """What EventBridge sends a Lambda target for a scheduled rule."""
    at = time.gmtime(time.time() if now is None else now)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": LOCAL_ACCOUNT_ID,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", at),
        "region": region,
        "resources": [
            f"arn:aws:events:{region}:{LOCAL_ACCOUNT_ID}:rule/{schedule.function}-{schedule.event_name}"
        ],
        "detail": {},
    }


class ScheduleTicker:
    def __init__(
        self, schedules: list[tuple[Schedule, Handler]], *, scale: float = 1.0, region: str = "us-east-1"
    ):
        self.entries = schedules
        self.scale = float(scale)
        self.region = region
        self.runs: dict[str, int] = {s.function: 0 for s, _ in schedules}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # one invocation at a time per ticker: the handlers share a process

    @classmethod
    def from_template(
        cls, template: Mapping[str, Any], root: str | Path, *, scale: float = 1.0, region: str = "us-east-1"
    ) -> ScheduleTicker:
        specs = function_specs(template, root)
        loaded: dict[str, Handler] = {}
        lock = threading.Lock()

        def lazy(function: str) -> Handler:
            """Import the handler at its first invocation (a cold start), once per function."""

            def handler(event: dict[str, Any], context: Any) -> Any:
                with lock:
                    if function not in loaded:
                        loaded[function] = load_handler(specs[function])
                return loaded[function](event, context)

            return handler

        entries = [
            (schedule, lazy(schedule.function)) for schedule in schedules_from_template(template, root)
        ]
        return cls(entries, scale=scale, region=region)

    def start(self) -> ScheduleTicker:
        self._stopping.clear()
        for schedule, handler in self.entries:
            if schedule.every_s is None:
                log.warning(
                    "ticker: %s %s %r is not a rate(): not fired locally",
                    schedule.function,
                    schedule.event_name,
                    schedule.expression,
                )
                continue
            thread = threading.Thread(
                target=self._loop, args=(schedule, handler), daemon=True, name=f"tick-{schedule.function}"
            )
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def fire(self, function: str) -> Any:
        """Invoke the function's schedule once, now (raises what the handler raises)."""
        for schedule, handler in self.entries:
            if schedule.function == function:
                return self._invoke(schedule, handler)
        raise KeyError(f"{function} has no schedule in the template")

    def _loop(self, schedule: Schedule, handler: Handler) -> None:
        assert schedule.every_s is not None
        interval = max(0.05, schedule.every_s * self.scale)
        while not self._stopping.wait(interval):
            try:
                self._invoke(schedule, handler)
            except Exception:  # noqa: BLE001 - as on AWS: the invocation failed, the schedule goes on
                log.error("%s raised on its schedule:\n%s", schedule.function, traceback.format_exc())

    def _invoke(self, schedule: Schedule, handler: Handler) -> Any:
        context = LambdaContext(schedule.function, schedule.timeout_s, schedule.memory_mb, self.region)
        with self._lock:
            self.runs[schedule.function] = self.runs.get(schedule.function, 0) + 1
            return handler(scheduled_event(schedule, self.region), context)
