"""`make soak` / `python -m tests.sim.run`: many seeded days (and the front-door fuzz), one table.

    python -m tests.sim.run --seed 123 [--shape tiny]   # replay one day, print its timeline
    python -m tests.sim.run --seeds 10000 --fuzz 100000 --max-minutes 55   # the soak (2 processes)

Exit status 1 when any invariant broke or any error was unhandled; every failing seed is printed
with the one-line command that replays it.
"""

from __future__ import annotations

import argparse
import multiprocessing
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
    print("\n".join(result.timeline))
    print("faults:", dict(result.faults))
    for line in result.violations + result.unhandled:
        print("VIOLATION" if line in result.violations else "UNHANDLED", line)
    print("OK" if result.ok else f"FAILED: replay with {replay_command(seed, shape)}")
    return 0 if result.ok else 1


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
                print(
                    f"seed {r['seed']} FAILED: {(r['violations'] + r['unhandled'])[0]}\n"
                    f"  replay: {replay_command(r['seed'], shape)}",
                    flush=True,
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
    p.add_argument("--shape", choices=SHAPES, default="micro", help="day size (default micro: ~1.1 s a day)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fuzz", type=int, default=0, help="front-door fuzz inputs to run after the days")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=0,
        help="bound the whole soak (days, then fuzz); the table shows what ran (0: no limit)",
    )
    a = p.parse_args(argv)
    if a.seed is not None:
        return replay(a.seed, a.shape)
    return soak(range(a.start, a.start + a.seeds), a.shape, a.workers, a.fuzz, a.max_minutes)


if __name__ == "__main__":
    sys.exit(main())
