"""Fuzz the front door: `fuzz_front_door(n)` (used by `make soak`) and `check_case` (used by CI).

Every answer must be the channel's failure ACK or a clean 4xx, or - only when the signature is
genuinely valid - the success ACK after a notify_event row (R5) or a raw row + enqueue. No exception
may escape the λ, no 5xx, and no input may write orders, ledger, transitions or refund tasks; an
unsigned input may write nothing at all.
"""

from __future__ import annotations

import multiprocessing
import time
import warnings
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hseed

from tests.fuzz.strategies import ROUTES, Case, Route, cases

WRITES = {
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
    "SendMessage",
    "SendMessageBatch",
}
SIGNED_MAY_WRITE = {"NOTIFY_EVENT_TABLE", "NOTIFY_RAW_TABLE", "sqs"}


class WriteLog:
    """Every write the product's clients attempt (before-call: attempted counts, succeeded or not)."""

    def __init__(self, world: Any):
        self.tables = {name: env for env, name in world.env.env.items() if env.endswith("_TABLE")}
        self.writes: list[str] = []
        for client in (world.env.product_ddb, world.env.product_sqs):
            client.meta.events.register("before-call", self._seen)

    def _seen(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name not in WRITES:
            return
        if model.service_model.service_name == "sqs":
            self.writes.append("sqs")
            return
        body = params.get("body")
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        self.writes += [env for name, env in self.tables.items() if f'"{name}"' in text] or ["?"]


def check_case(world: Any, log: WriteLog, route: Route, case: Case) -> list[str]:
    log.writes.clear()
    try:
        response = world.env.invoke(route.function, case.event)
    except Exception as exc:  # noqa: BLE001 - the finding itself
        return [f"unhandled {type(exc).__name__}: {str(exc)[:200]} ({case.what})"]
    status = response.get("statusCode", 0)
    problems = []
    if status >= 500:
        problems.append(f"answered {status} ({case.what})")
    written = set(log.writes)
    if not case.signed:
        # A configured merchant's callback that fails its signature is kept as a `rejected` event (7-day
        # TTL, replayable by a person after a key fix, never applied): evidence, not business state.
        written -= {"NOTIFY_EVENT_TABLE"}
        if written:
            problems.append(f"unsigned input wrote {sorted(written)} ({case.what})")
        if not route.is_failure_ack(response):
            problems.append(
                f"unsigned input answered {status} {str(response.get('body'))[:80]!r} ({case.what})"
            )
    else:
        if written - SIGNED_MAY_WRITE:
            problems.append(f"signed input wrote {sorted(written - SIGNED_MAY_WRITE)} ({case.what})")
        if route.is_success_ack(response):
            if not written & {"NOTIFY_EVENT_TABLE", "NOTIFY_RAW_TABLE"}:
                problems.append(f"success ACK without a row for a person or a raw row ({case.what})")
        elif not route.is_failure_ack(response):
            problems.append(
                f"signed input answered {status} {str(response.get('body'))[:80]!r} ({case.what})"
            )
    world.env.observer.take_metrics()
    return problems


def run(world: Any, log: WriteLog, route: Route, examples: int, seed: int | None = None) -> dict[str, Any]:
    stats: dict[str, Any] = {"inputs": 0, "problems": [], "unhandled": 0, "violations": 0}

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=seed is None,
        print_blob=True,
    )
    @given(cases(route, world))
    def prop(case: Case) -> None:
        stats["inputs"] += 1
        if stats["inputs"] % 500 == 0:
            world.env.clear_business_state()  # quarantined rows pile up otherwise
        problems = check_case(world, log, route, case)
        assert not problems, problems

    if seed is not None:
        prop = hseed(seed)(prop)
    try:
        prop()
    except AssertionError as exc:
        stats["problems"].append(str(exc)[:2000])
        text = str(exc)
        stats["unhandled" if "unhandled" in text or "answered 5" in text else "violations"] += 1
    return stats


_world: Any = None
_log: Any = None


def _init() -> None:
    global _world, _log
    warnings.filterwarnings("ignore")
    from tests.sim.scenario import World

    _world = World()
    _log = WriteLog(_world)


def _run_part(args: tuple[str, int, int]) -> dict[str, Any]:
    route, examples, seed = args
    return run(_world, _log, ROUTES[route], examples, seed)


FUZZ_PART = 1000  # inputs per work unit: a time budget stops between units, never in the middle of one


def fuzz_front_door(total: int, workers: int = 2, deadline: float | None = None) -> dict[str, Any]:
    """`total` inputs over every route, split over `workers` processes (each its own moto), in units of
    FUZZ_PART inputs with their own seeds. With `deadline` (a time.monotonic() instant) no unit starts after it;
    units still running are stopped and not counted (`stopped` says so)."""
    t0 = time.monotonic()
    per_route = max(1, total // len(ROUTES))
    parts = []
    for route in ROUTES:
        done, n = 0, 0
        while done < per_route:
            k = min(FUZZ_PART, per_route - done)
            parts.append((route, k, 1000 + n))
            done, n = done + k, n + 1
    parts.sort(key=lambda p: (p[2], p[0]))  # interleave the routes: a budget cut leaves every route covered
    out: dict[str, Any] = {"inputs": 0, "unhandled": 0, "violations": 0, "problems": [], "stopped": False}
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_init) as pool:
        for stats in pool.imap(_run_part, parts):
            for k in ("inputs", "unhandled", "violations"):
                out[k] += stats[k]
            out["problems"] += stats["problems"]
            if deadline is not None and time.monotonic() > deadline:
                out["stopped"] = True
                pool.terminate()
                break
    for problem in out["problems"]:
        print("FUZZ FINDING:", problem)
    out["seconds"] = time.monotonic() - t0
    return out
