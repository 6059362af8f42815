"""Load check on the embedded stack: 2,000 signed callbacks over HTTP from 16 concurrent senders;
throughput, p50/p99 ACK latency, and proof that every payment was booked exactly once.

    python -m bench.load [--callbacks 2000] [--senders 16]

The stack runs as `make run` does: moto in a process of its own, each HTTP function in up to
`--containers` (TALLY_LOCAL_CONTAINERS, default 4) container processes (`--ack-first`: the pumps give
way to the requests in flight, tally_local/ackfirst.py); `--containers 0 --warmup 0` is the stack of
sessions 2-8 (one in-thread notify handler). The senders share the stack's process. `--warmup` callbacks
(64) go first, in a row of their own: that is where new containers cold-start. The table gives the CPU
per callback of every process and the machine's load average, without which a throughput figure from a
shared machine means little, and how long after the last ACK the last booking landed. With 16 senders
always in flight the ACK latency is ~16 / throughput (Little's law).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

CALLBACKS = 2000
SENDERS = 16
DRAIN_S = 900
WARMUP = 64  # 4 per sender: enough for every container a burst of 16 starts


RESET = -1  # the status recorded for a connection refused or reset before an answer


def run(
    callbacks: int = CALLBACKS,
    senders: int = SENDERS,
    moto_process: bool = True,
    containers: int | None = None,
    ack_first: bool = False,
    warmup: int = WARMUP,
) -> list[tuple[str, ...]]:
    import boto3
    from tally import bootstrap

    from tally_local.containers import containers_setting
    from tally_local.demo import seed_demo
    from tally_local.stack import EmbeddedStack

    containers = containers_setting() if containers is None else containers

    load_before = os.getloadavg()[0]
    with EmbeddedStack(
        api_port=0,
        state_dir="/tmp/tally-bench-state",
        moto_process=moto_process,
        containers=containers,
        ack_first=ack_first,
        simulator_options={"fixed_keys": True},
    ) as stack:
        merchant = seed_demo(stack)
        mchid, sim = merchant["mchid"], stack.simulator
        orders = bootstrap.order_service()
        amounts = {f"LOAD{i:08d}": 100 + i for i in range(callbacks)}
        # the warm-up: paid before the measured burst, so its cold starts (new containers) are a row of their
        # own; booked and checked like the rest
        warm = {f"WARM{i:08d}": 100 + i for i in range(warmup)}
        with ThreadPoolExecutor(4) as pool:  # setup, not measured: the orders the callbacks pay
            list(
                pool.map(
                    lambda item: orders.create(
                        {
                            "mchid": mchid,
                            "out_trade_no": item[0],
                            "amount_cent": item[1],
                            "description": "load",
                            "prepay": False,
                        }
                    ),
                    [*warm.items(), *amounts.items()],
                )
            )
        url = f"{stack.api_url}/notify/wechatpay/{mchid}"
        trace: list[tuple[float, float]] | None = [] if os.environ.get("TALLY_LOAD_TRACE") else None
        started = time.perf_counter()

        def send(item: tuple[str, int]) -> tuple[int, float]:
            # signed when sent, as the channel does: the 300 s window holds however slow the stack is
            headers, body = sim.build_notification(mchid, sim.transaction_resource(mchid, *item))
            start = time.perf_counter()
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    status = resp.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except (ConnectionError, urllib.error.URLError):
                status = RESET  # refused or reset before any answer: the backlog, not the product
            if trace is not None:
                trace.append((start - started, (time.perf_counter() - start) * 1000))
            return status, (time.perf_counter() - start) * 1000

        started = time.perf_counter()
        with ThreadPoolExecutor(senders) as pool:
            warm_results = list(pool.map(send, warm.items()))
        warm_s = time.perf_counter() - started
        if stack.moto_pid is not None and os.environ.get("TALLY_MOTO_PROFILE"):
            os.kill(stack.moto_pid, signal.SIGUSR1)  # the moto profile counts from here (moto_process.py)
        front_door = stack.front_door
        container_before = (
            {pid: _proc_cpu_s(pid) for pid in front_door.container_pids()} if front_door else {}
        )
        cpu_before, started = _cpu_s(stack.moto_pid), time.perf_counter()
        with ThreadPoolExecutor(senders) as pool:
            results = list(pool.map(send, amounts.items()))
        elapsed, cpu_after = time.perf_counter() - started, _cpu_s(stack.moto_pid)
        # a container started during the burst: all of its CPU is the burst's (its cold start included)
        container_pids = front_door.container_pids() if front_door is not None else []
        container_ms = (
            sum(_proc_cpu_s(pid) - container_before.get(pid, 0.0) for pid in container_pids)
            / callbacks
            * 1000
        )
        drained = stack.drain(DRAIN_S)
        booked_after = time.perf_counter() - started
        if trace is not None:  # measurement only: (seconds after the first send, ACK ms) per callback
            with open(os.environ["TALLY_LOAD_TRACE"], "w", encoding="utf-8") as out:
                out.writelines(f"{at:.3f} {ms:.0f}\n" for at, ms in sorted(trace))
        ddb = boto3.client("dynamodb", endpoint_url=stack.endpoint_url, region_name="us-east-1")
        booked = Counter(  # this run's orders only: the stack's heartbeat books a synthetic payment a minute
            (row["out_trade_no"]["S"], int(row["amount_cent"]["N"]))
            for row in _scan(ddb, stack.env["LEDGER_TABLE"])
            if row["out_trade_no"]["S"] in amounts or row["out_trade_no"]["S"] in warm
        )
    load_after = os.getloadavg()[0]
    latencies = sorted(ms for _, ms in results)
    ok = sum(1 for status, _ in results if status in (200, 204))
    cpu_ms = [
        (after - before) / callbacks * 1000 for before, after in zip(cpu_before, cpu_after, strict=True)
    ] + [container_ms]
    exactly_once = drained and booked == Counter(amounts.items()) + Counter(warm.items())
    warm_ok = sum(1 for status, _ in warm_results if status in (200, 204))
    warm_latencies = sorted(ms for _, ms in warm_results) or [0.0]
    twice = sum(1 for n in booked.values() if n > 1)
    missing = sum(1 for item in [*amounts.items(), *warm.items()] if item not in booked)
    warm_rows = [
        (
            f"load: warm-up, {warmup} callbacks first (not in the rows below)",
            f"{warm_s:.1f} s",
            f"ACK p50 {_pct(warm_latencies, 50):.0f} ms, max {warm_latencies[-1]:.0f} ms",
            f"{warm_ok} success ACKs; new containers start here",
        ),
    ]
    return warm_rows[: 1 if warmup else 0] + [
        (
            f"load: {callbacks} callbacks, {senders} senders over HTTP",
            f"{callbacks / elapsed:.0f} /s",
            f"ACK p50 {_pct(latencies, 50):.0f} ms, p99 {_pct(latencies, 99):.0f} ms",
            f"{ok} success ACKs",
        ),
        (
            "load: failed deliveries",
            f"{sum(1 for status, _ in results if status == RESET)} resets",
            f"{sum(1 for status, _ in results if status >= 500)} 5xx, "
            f"{sum(1 for status, _ in results if 400 <= status < 500)} 4xx",
            "target: 0 resets, 0 5xx",
        ),
        (
            "load: CPU per callback",
            f"{sum(cpu_ms):.0f} ms",
            (f"{cpu_ms[0]:.0f} ms stack + senders, " if moto_process else "stack + moto + senders, ")
            + (f"{cpu_ms[2]:.0f} ms in {len(container_pids)} containers, " if container_pids else "")
            + (f"{cpu_ms[1]:.0f} ms moto" if moto_process else ""),
            f"load avg {load_before:.1f} → {load_after:.1f}, {os.cpu_count()} cores",
        ),
        (
            "load: booked exactly once",
            f"{sum(booked.values())} ledger entries",
            f"of {callbacks} + {warmup} payments, all booked {booked_after:.0f} s after the first send",
            "OK" if exactly_once and ok == callbacks else f"MISMATCH: {missing} missing, {twice} twice",
        ),
        (
            "load: booking drained",
            f"{booked_after - elapsed:.1f} s after the last ACK",
            f"sending took {elapsed:.0f} s",
            "the apply queue empty, no batch in flight"
            + (f"; the pumps gave way {stack.ack_first.waited_s:.0f} s in all" if stack.ack_first else ""),
        ),
    ]


def _cpu_s(moto_pid: int | None) -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of the moto server's process (0 if in this one)."""
    mine = os.times()
    return mine.user + mine.system, _proc_cpu_s(moto_pid) if moto_pid is not None else 0.0


def _proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of another process, from /proc (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:  # fields 14, 15: utime, stime in ticks
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(sorted_values: list[float], pct: int) -> float:
    """Nearest-rank percentile."""
    rank = max(1, -(-len(sorted_values) * pct // 100))
    return sorted_values[rank - 1]


def _scan(ddb, table: str):
    kwargs = {"TableName": table}
    while True:
        page = ddb.scan(**kwargs)
        yield from page["Items"]
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def main(argv: list[str] | None = None) -> int:
    import contextlib
    import io
    import logging

    from bench.common import table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callbacks", type=int, default=CALLBACKS)
    parser.add_argument("--senders", type=int, default=SENDERS)
    parser.add_argument(
        "--moto-in-process", action="store_true", help="moto in a thread of the stack's process"
    )
    parser.add_argument(
        "--containers",
        type=int,
        default=None,
        help="warm containers (processes) per HTTP function; 0 = one in-thread handler (default: "
        "TALLY_LOCAL_CONTAINERS or 4)",
    )
    parser.add_argument("--warmup", type=int, default=WARMUP, help="callbacks sent before the measured ones")
    parser.add_argument(
        "--ack-first",
        action="store_true",
        help="the pumps give way to the requests in flight (tally_local/ackfirst.py; measured: no help)",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)  # the product's log lines would drown the table
    with contextlib.redirect_stdout(io.StringIO()):  # the product's EMF metric lines
        rows = run(
            args.callbacks,
            args.senders,
            moto_process=not args.moto_in_process,
            containers=args.containers,
            ack_first=args.ack_first,
            warmup=args.warmup,
        )
    print(table("Tally load check (embedded stack)", rows, ("measure", "value", "reference", "note")))
    return 0 if dict((row[0], row[-1]) for row in rows)["load: booked exactly once"] == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
