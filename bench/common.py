"""Shared bench helpers: a stable timer and one table printer."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_us(
    fn: Callable[[], object], n: int = 2000, repeat: int = 5, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Best-of-`repeat` mean time per call, in microseconds (best-of: least disturbed run). `clock`:
    wall time by default; time.process_time for a CPU figure that other processes on the box do not inflate."""
    fn()
    runs = []
    for _ in range(repeat):
        start = clock()
        for _ in range(n):
            fn()
        runs.append((clock() - start) / n * 1e6)
    return min(runs)


def interleaved_per_call_us(
    fns: dict[str, Callable[[], object]],
    n: int = 1000,
    rounds: int = 15,
    clock: Callable[[], float] = time.process_time,
) -> dict[str, float]:
    """Each function's best-of-`rounds` mean time per call, in microseconds, the functions taking turns within
    every round: a ratio between them then compares runs made under the same conditions (a neighbour's burst
    or a frequency step lands on both sides), where timing one after the other compares different minutes."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            start = clock()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (clock() - start) / n * 1e6)
    return best


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(title: str, rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = [title, line, "  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out + [line, ""])


def print_section(run: Callable[[], list[tuple[str, ...]]]) -> None:
    """`python -m bench.<section>`: one section's rows as a table, the product's log and EMF lines held back
    (as `make bench` does)."""
    import contextlib
    import io
    import logging

    logging.disable(logging.INFO)
    with contextlib.redirect_stdout(io.StringIO()):
        rows = run()
    width = max(len(r) for r in rows)
    header = ("measure", "value", "reference", "note", *[""] * width)[:width]
    rows = [tuple(r) + ("",) * (width - len(r)) for r in rows]
    print(table(time.strftime("%Y-%m-%d %H:%M:%S"), rows, header))
