"""`make soak` / `python -m tests.sim.run`: many seeded days (and the front-door fuzz), one table.

    python -m tests.sim.run --seed 123 [--shape tiny]   # replay one day, print its timeline
    python -m tests.sim.run --seeds 10000 --fuzz 100000 --max-minutes 55   # the soak (2 processes)

Exit status 1 when any invariant broke or any error was unhandled; every failing seed is printed
with the one-line command that replays it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.util
import sys
import time
import warnings
from collections import Counter
from typing import Any

SHAPES = ("small", "tiny", "micro")
_world: Any = None


RECYCLE_CHUNKS = 25  # chunks of 4 days: a fresh World (~8 s) every 100 days


def _init() -> None:
    global _world
    warnings.filterwarnings("ignore")
    from tests.sim.scenario import World

    _world = World()


def _run_seed(args: tuple[int, str]) -> dict[str, Any]:
    from tests.sim import day as d

    seed, shape = args
    result = _world.run(seed, getattr(d, shape.upper()))
    return {
        "seed": seed,
        "ok": result.ok,
        "faults": dict(result.faults),
        "violations": result.violations,
        "unhandled": result.unhandled,
        "payments": result.payments,
        "invocations": result.invocations,
        "cells": dict(result.cells),
    }


def _init_deploy(tree: str) -> None:
    global _world
    warnings.filterwarnings("ignore")
    from pathlib import Path

    from tests.sim.upgrade import UpgradeWorld

    _world = UpgradeWorld(tree=Path(tree))
    # a recycled worker stops its moto server and the old release's container, and removes its temporary files
    multiprocessing.util.Finalize(_world, _world.close, exitpriority=10)


def _run_deploy(args: tuple[int, str, str]) -> dict[str, Any]:
    from tests.sim import day as d

    seed, direction, shape = args
    result = _world.run_deploy(seed, direction, getattr(d, shape.upper()))
    return {"seed": seed, "direction": direction, "ok": result.ok, "faults": dict(result.faults)} | {
        "problems": result.violations + result.unhandled
    }


def deploy_replay_command(seed: int, direction: str, shape: str = "tiny") -> str:
    extra = "" if shape == "tiny" else f" --shape {shape}"
    return f"python -m tests.sim.run --seed {seed} --deploy {direction}{extra}"


def replay_deploy(seed: int, direction: str, shape: str) -> int:
    from tests.sim import day as d
    from tests.sim.upgrade import UpgradeWorld

    warnings.filterwarnings("ignore")
    world = UpgradeWorld()
    try:
        result = world.run_deploy(seed, direction, getattr(d, shape.upper()))
    finally:
        world.close()
    return _print_day(result, deploy_replay_command(seed, direction, shape))


def _print_day(result: Any, command: str) -> int:
    """A replayed day's timeline, faults and violations; its exit status."""
    print("\n".join(result.timeline))
    print("faults:", dict(result.faults))
    for line in result.violations + result.unhandled:
        print("VIOLATION" if line in result.violations else "UNHANDLED", line)
    print("OK" if result.ok else f"FAILED: replay with {command}")
    return 0 if result.ok else 1


def soak_deploys(seeds: range, shape: str, workers: int) -> int:
    """The upgrade-under-fault days (tests/sim/upgrade.py): each seed's day once as an upgrade (previous →
    current release) and once as a rollback (current → previous), every invariant checked; one table."""
    import tempfile
    from pathlib import Path

    from tests.sim.upgrade import ROLLBACK, UPGRADE, previous_release, release_tree

    t0 = time.monotonic()
    faults: Counter = Counter()
    failed: list[dict[str, Any]] = []
    jobs = [(s, direction, shape) for s in seeds for direction in (UPGRADE, ROLLBACK)]
    with (
        tempfile.TemporaryDirectory(prefix="tally-previous-release-") as tmp,
        multiprocessing.get_context("spawn").Pool(
            workers,
            initializer=_init_deploy,
            initargs=(str(release_tree(previous_release(), Path(tmp))),),
            maxtasksperchild=RECYCLE_CHUNKS,  # a fresh UpgradeWorld every 50 days: moto's rows stay bounded
        ) as pool,
    ):
        for r in pool.imap_unordered(_run_deploy, jobs, chunksize=2):
            faults.update(r["faults"])
            if not r["ok"]:
                failed.append(r)
                command = deploy_replay_command(r["seed"], r["direction"], shape)
                _failed(f"{r['seed']} {r['direction']}", r["problems"][0], command)
        pool.close()
        pool.join()  # the workers exit by themselves: their finalizers stop what each started
    rows = [(f"deploy days run (seeds {seeds.start}..{seeds.stop - 1}, {shape}, both directions)", len(jobs))]
    rows += [(kind, n) for kind, n in sorted(faults.items())]
    rows += [("failed deploy days", len(failed)), ("wall time (s)", round(time.monotonic() - t0))]
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"{k:<{width}}  {n:>9}" for k, n in rows))
    return 1 if failed else 0


def _failed(seed: str, problem: str, command: str) -> None:
    print(f"seed {seed} FAILED: {problem}\n  replay: {command}", flush=True)


def replay_command(seed: int, shape: str) -> str:
    extra = "" if shape == "micro" else f" --shape {shape}"
    make = f"make soak SEED={seed}" + ("" if shape == "micro" else f" SHAPE={shape}")
    return f"python -m tests.sim.run --seed {seed}{extra}   (or: {make})"


def replay(seed: int, shape: str) -> int:
    from tests.sim import day as d
    from tests.sim.scenario import World

    warnings.filterwarnings("ignore")
    world = World()
    try:
        result = world.run(seed, getattr(d, shape.upper()))
    finally:
        world.close()
    print(f"seed {seed}: {result.payments} payments, {result.invocations} invocations")
    return _print_day(result, replay_command(seed, shape))


SIM_SHARE = 0.75  # with a time budget and fuzzing: the days get this share of it, the fuzz the rest


def soak(seeds: range, shape: str, workers: int, fuzz: int, max_minutes: float = 0) -> int:
    """Run the days (and the fuzz), print one table. `max_minutes` bounds the whole soak: the days stop at
    SIM_SHARE of it (all of it without fuzz), the fuzz at the end; the table says what ran."""
    t0 = time.monotonic()
    end = t0 + max_minutes * 60 if max_minutes else None
    sim_end = (t0 + max_minutes * 60 * (SIM_SHARE if fuzz else 1)) if max_minutes else None
    budget_note = ""
    done = 0
    faults: Counter = Counter()
    cells: Counter = Counter()  # the coverage matrix (tests/sim/coverage.py)
    failed: list[dict[str, Any]] = []
    payments = invocations = violations = unhandled = 0
    ctx = multiprocessing.get_context("spawn")
    # a World keeps every day's rows in its in-process moto (~20 MB a micro day): a worker is replaced
    # after RECYCLE_CHUNKS chunks, or 10,000 days would outgrow the machine's memory
    with ctx.Pool(workers, initializer=_init, maxtasksperchild=RECYCLE_CHUNKS) as pool:
        for i, r in enumerate(pool.imap_unordered(_run_seed, [(s, shape) for s in seeds], chunksize=4), 1):
            done = i
            faults.update(r["faults"])
            cells.update(r["cells"])
            payments += r["payments"]
            invocations += r["invocations"]
            violations += len(r["violations"])
            unhandled += len(r["unhandled"])
            if not r["ok"]:
                failed.append(r)
                _failed(
                    str(r["seed"]), (r["violations"] + r["unhandled"])[0], replay_command(r["seed"], shape)
                )
            if i % 500 == 0:
                print(
                    f"... {i}/{len(seeds)} scenarios, {time.monotonic() - t0:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
            if sim_end is not None and time.monotonic() > sim_end:
                budget_note = f"time budget reached after {i} of {len(seeds)} scenarios"
                print(budget_note, flush=True)
                pool.terminate()
                break
    sim_s = time.monotonic() - t0
    fuzz_stats = {"inputs": 0, "unhandled": 0, "violations": 0, "seconds": 0.0}
    if fuzz:
        from tests.fuzz.run import fuzz_front_door

        fuzz_stats = fuzz_front_door(fuzz, workers=workers, deadline=end)
        if fuzz_stats.get("stopped"):
            budget_note += (
                "; " if budget_note else ""
            ) + f"fuzz stopped by the budget at {fuzz_stats['inputs']} inputs"
    rows = [
        (f"scenarios run (of seeds {seeds.start}..{seeds.stop - 1}, {shape} day)", done),
        ("payments taken by the channel", payments),
        ("λ invocations", invocations),
    ]
    rows += [(f"fault: {kind}", n) for kind, n in sorted(faults.items())]
    rows += [
        ("faults injected, total", sum(faults.values())),
        ("invariant violations", violations),
        ("unhandled errors (sim)", unhandled),
        (f"fuzz inputs (front door, of {fuzz})", fuzz_stats["inputs"]),
        ("fuzz: unhandled errors", fuzz_stats["unhandled"]),
        ("fuzz: contract violations", fuzz_stats["violations"]),
        ("failed seeds", len(failed)),
        ("wall time, simulation (s)", round(sim_s)),
        ("wall time, fuzz (s)", round(fuzz_stats["seconds"])),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n" + "-" * (width + 12))
    for k, n in rows:
        print(f"{k:<{width}}  {n:>9}")
    print("-" * (width + 12))
    if budget_note:
        print(f"budget of {max_minutes:g} min: {budget_note}")
    from tests.sim import coverage

    print("\n" + coverage.render(cells))
    print(coverage.render_gaps(cells))
    for r in failed[:20]:
        print(f"replay seed {r['seed']}: {replay_command(r['seed'], shape)}")
    return 1 if failed or fuzz_stats["unhandled"] or fuzz_stats["violations"] else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, help="replay this one seed and print its timeline")
    p.add_argument("--seeds", type=int, default=10_000, help="how many seeds (default 10000)")
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument(
        "--shape", choices=SHAPES, help="day size (default micro: ~1.1 s a day; deploy days: tiny, ~1.5 s)"
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fuzz", type=int, default=0, help="front-door fuzz inputs to run after the days")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=0,
        help="bound the whole soak (days, then fuzz); the table shows what ran (0: no limit)",
    )
    p.add_argument(
        "--deploys",
        type=int,
        default=0,
        help="run this many seeds' upgrade and rollback days instead (tests/sim/upgrade.py; default shape tiny)",
    )
    p.add_argument("--deploy", choices=("upgrade", "rollback"), help="with --seed: replay that deploy day")
    a = p.parse_args(argv)
    if a.deploy or a.deploys:
        shape = a.shape or "tiny"
        if a.seed is not None:
            return replay_deploy(a.seed, a.deploy or "upgrade", shape)
        return soak_deploys(range(a.start, a.start + a.deploys), shape, a.workers)
    if a.seed is not None:
        return replay(a.seed, a.shape or "micro")
    return soak(range(a.start, a.start + a.seeds), a.shape or "micro", a.workers, a.fuzz, a.max_minutes)


if __name__ == "__main__":
    sys.exit(main())
