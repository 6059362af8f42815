"""Reconciliation in bounded memory (`make bench-big`): a generated 10,000,000-row WeChat ALL bill through the
partitioned path (service/recon_partition.py: the bill streamed into 16 partition files, matched partition by
partition against the ledger's shards), next to the same run's 1,000,000-row bill through today's in-memory
path, the partitioned path at 1M (their diffs and FEE entries must be identical) and pandas.read_csv of the 1M
file. Both paths include the FEE entries' figures (bench/recon_1m.py: coupons and fees in, the writes not timed).

    python -m bench.recon_10m [--rows 10000000] [--small 1000000]

Each measurement runs in a process of its own, so its peak RSS (ru_maxrss) is its own. The ledger is what
DynamoDB's by_bill_shard index holds, one file per shard, written before anything is timed (as recon_1m.py
builds its ledger dictionary before timing). Targets (issue 20): peak RSS <= 1.5 GB at 10M, time <= 12x the
1M-row time of the same run; the in-memory path at 1M stays <= 2x pandas.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from hashlib import sha256

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers/common"), str(ROOT)]

from tally.settings import Settings  # noqa: E402

from bench.recon_1m import amount, generate, peak_mb, run_pandas_c, tx  # noqa: E402

PARTITION_MB = (
    Settings._field_defaults["recon_partition_bytes"] >> 20
)  # recon's in-memory path stops here (docs/recon.md)


def cpu_s() -> float:
    """CPU seconds of this process and the pieces it started (user + system): what a loaded machine does not
    inflate as it does wall time."""
    import resource

    cpu = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        cpu += usage.ru_utime + usage.ru_stime
    return round(cpu, 1)


def peak_with_pieces_mb() -> float:
    """Peak RSS of this process plus the largest of the piece processes it started (they run at the same time
    as this one; with two cores there is one): the function's memory, not one process's."""
    import resource

    return peak_mb() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


SHARDS = 16  # store.recon.LEDGER_SHARDS (asserted in the child)
LOCAL_ONLY = "wechatpay#4200000001209999999999999999"


def ledger(rows: int):
    """(key, booked cents) of the day's ledger: every bill row booked, except one amount that differs, one
    payment never booked (channel-only) and one entry the bill lacks (local-only)."""
    for i in range(rows):
        if i == 11:
            continue
        yield f"wechatpay#{tx(i)}", amount(i) + (1 if i == 7 else 0)
    yield LOCAL_ONLY, 4200


def write_shards(directory: pathlib.Path, rows: int) -> None:
    """The ledger as by_bill_shard serves it: one file of `key amount` lines per shard."""
    directory.mkdir(parents=True, exist_ok=True)
    files = [open(directory / f"{s:02d}.tsv", "w") for s in range(SHARDS)]  # noqa: SIM115
    for key, cents in ledger(rows):
        shard = int(sha256(key.encode()).hexdigest()[:8], 16) % SHARDS  # store.tables.shard_of
        files[shard].write(f"{key}\t{cents}\n")
    for f in files:
        f.close()


def _diffs(diffs) -> list:
    return sorted([d.cls, d.sk, d.channel_amount_cent, d.local_amount_cent, d.detail] for d in diffs)


RUN = {"channel": "wechatpay", "mchid": "1900000109", "bill_date": "2024-05-01", "run_id": "run#bench"}


def fee_figures(index) -> tuple[int, int]:
    """The FEE entries a first run books from one index (service/recon.py `_book_fees` up to the writes):
    (entries, cents)."""
    from tally.domain.recon import FeeBook
    from tally.service.recon import fee_entry_rows

    entries = cents = 0
    for row in fee_entry_rows(RUN, index, FeeBook(RUN["mchid"], {}), "2024-05-02T02:30:00.000Z"):
        entries += 1
        cents += row["amount_cent"]
    return entries, cents


def run_memory(path: str, rows: int) -> dict:
    """Today's path (service/recon.py `_match`): the whole bill in memory, one index, one ledger dictionary,
    then the day's FEE entries (without the writes)."""
    from tally.domain.recon import LocalEntry, Matcher, check_guards
    from tally.service.recon_sources import OpenedBill

    t0 = time.perf_counter()
    local = {k: LocalEntry(k, "PAYMENT", c, "2024-05-01") for k, c in ledger(rows)}
    t_ledger = time.perf_counter() - t0
    data = pathlib.Path(path).read_bytes()
    t0 = time.perf_counter()
    opened = OpenedBill("wechatpay", data)
    totals, index = opened.index()
    verdict = check_guards(totals, previous_rows=rows)
    assert not verdict.blocked, verdict
    matcher = Matcher(local)
    diffs = list(matcher.match_index(index, opened.item_at))
    fees = fee_figures(index)
    total = time.perf_counter() - t0
    return {
        "rows": totals.rows,
        "diffs": _diffs(diffs),
        "matched": matcher.stats.matched,
        "fees": fees,
        "ledger_build_s": round(t_ledger, 2),
        "total_s": round(total, 2),
        "cpu_s": cpu_s(),  # incl. building the ledger dictionary
        "peak_rss_mb": round(peak_mb()),
    }


def run_partitioned(path: str, rows: int, shards: str, work: str) -> dict:
    from tally.domain.recon import LocalEntry, Matcher, check_guards
    from tally.service.recon_partition import cores, partition_file
    from tally.service.recon_sources import OpenedBill
    from tally.store.recon import LEDGER_SHARDS

    assert LEDGER_SHARDS == SHARDS
    t0 = time.perf_counter()
    parts = partition_file(OpenedBill("wechatpay", b""), pathlib.Path(work), pathlib.Path(path))
    verdict = check_guards(parts.totals, previous_rows=rows)
    assert not verdict.blocked, verdict
    t_parse = time.perf_counter() - t0
    diffs = []
    matched = 0
    fees = [0, 0]
    t_ledger = 0.0
    per_partition = []
    for p in range(parts.partitions):
        t1 = time.perf_counter()
        with open(pathlib.Path(shards) / f"{p:02d}.tsv") as f:  # one shard's Query, as fold_ledger holds it
            local = {}
            for line in f:
                key, cents = line.rstrip("\n").split("\t")
                local[key] = LocalEntry(key, "PAYMENT", int(cents), "2024-05-01")
        t2 = time.perf_counter()
        reader = parts.reader(p)
        matcher = Matcher(local)
        index = parts.index(p)
        diffs += matcher.match_index(index, reader.item_at)
        reader.close()
        matched += matcher.stats.matched
        entries, cents = fee_figures(index)  # the partition's FEE entries (match_partition, up to the writes)
        fees[0] += entries
        fees[1] += cents
        t3 = time.perf_counter()
        t_ledger += t2 - t1
        per_partition.append(round(t3 - t1, 2))
        del local, matcher, index
    total = time.perf_counter() - t0 - t_ledger
    return {
        "rows": parts.totals.rows,
        "diffs": _diffs(diffs),
        "matched": matched,
        "fees": fees,
        "parse_and_partition_s": round(t_parse, 2),
        "ledger_load_s": round(t_ledger, 2),
        "partition_s": per_partition,  # per partition: its ledger shard loaded + matched
        "total_s": round(total, 2),
        "cpu_s": cpu_s(),  # incl. loading the ledger shards and the pieces' processes
        "peak_rss_mb": round(peak_with_pieces_mb()),
        "cores": cores(),
    }


def child(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.recon_10m", "--child", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'layers/common'}:{ROOT}"},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--child", nargs="*")
    parser.add_argument(
        "--table-rows", action="store_true", help="details to stderr, the table's rows to stdout"
    )
    args = parser.parse_args()
    if args.child is not None:
        mode, *rest = args.child
        if mode == "memory":
            print(json.dumps(run_memory(rest[0], int(rest[1]))))
        elif mode == "pandas":
            print(json.dumps(run_pandas_c(rest[0], int(rest[1]))))
        else:
            print(json.dumps(run_partitioned(rest[0], int(rest[1]), rest[2], rest[3])))
        return
    out = sys.stderr if args.table_rows else sys.stdout
    with tempfile.TemporaryDirectory(dir=os.environ.get("TALLY_BENCH_TMP")) as tmp:
        base = pathlib.Path(tmp)
        results = {}
        for label, rows in (("small", args.small), ("big", args.rows)):
            bill = base / f"{label}.csv"
            t0 = time.perf_counter()
            generate(bill, rows)
            write_shards(base / f"{label}-ledger", rows)
            size = bill.stat().st_size
            print(
                f"generated {rows:,} rows ({size / 1e6:,.0f} MB) + ledger shards in {time.perf_counter() - t0:.0f}s",
                file=out,
                flush=True,
            )
            if label == "small":
                small_mb = size / 2**20
                results["pandas"] = child("pandas", str(bill), str(rows))
                results["memory"] = child("memory", str(bill), str(rows))
            results[label] = child(
                "partitioned",
                str(bill),
                str(rows),
                str(base / f"{label}-ledger"),
                str(base / f"{label}-parts"),
            )
            bill.unlink()
        p, m, s, b = results["pandas"], results["memory"], results["small"], results["big"]
        same = m["diffs"] == s["diffs"] and list(m["fees"]) == list(s["fees"])  # diffs and FEE entries
        ratio = b["total_s"] / m["total_s"]
        print(
            f"pandas.read_csv {args.small:,} rows:           {p['read_csv_s']:7.2f}s  peak RSS {p['peak_rss_mb']} MB",
            file=out,
        )
        print(
            f"in-memory path {args.small:,} rows:            {m['total_s']:7.2f}s  peak RSS {m['peak_rss_mb']} MB ({m['total_s'] / p['read_csv_s']:.2f}x pandas), CPU {m['cpu_s']}s",
            file=out,
        )
        print(
            f"partitioned    {args.small:,} rows:            {s['total_s']:7.2f}s  peak RSS {s['peak_rss_mb']} MB, CPU {s['cpu_s']}s; diffs identical: {same} ({len(s['diffs'])})",
            file=out,
        )
        print(
            f"the {args.small:,}-row bill as recon runs it (partitioned: {small_mb:,.0f} MB > RECON_PARTITION_BYTES "
            f"{PARTITION_MB} MB): {s['total_s'] / p['read_csv_s']:.2f}x pandas (target <= 1.6x)",
            file=out,
        )
        print(
            f"partitioned    {args.rows:,} rows:           {b['total_s']:7.2f}s  peak RSS {b['peak_rss_mb']} MB "
            f"(parse+partition {b['parse_and_partition_s']}s on {b['cores']} cores, ledger shards loaded {b['ledger_load_s']}s, "
            f"per partition {min(b['partition_s'])}-{max(b['partition_s'])}s), CPU {b['cpu_s']}s",
            file=out,
        )
        print(
            f"{args.rows:,} partitioned / {args.small:,} in-memory: {ratio:.1f}x (target <= 12x); "
            f"/ {args.small:,} partitioned: "
            f"{b['total_s'] / s['total_s']:.1f}x; peak RSS target <= 1536 MB: {'ok' if b['peak_rss_mb'] <= 1536 else 'OVER'}",
            file=out,
        )
        print(
            f"load average at the end: {os.getloadavg()[0]:.1f} (wall times assume an idle machine)", file=out
        )
        assert same, (m["diffs"], s["diffs"], m["fees"], s["fees"])
        assert b["matched"] == args.rows - 2 and len(b["diffs"]) == 3, (b["matched"], b["diffs"])
        if args.table_rows:
            print(
                json.dumps(
                    [
                        [
                            f"{args.rows:,}-row bill, partitioned: parse + guards + match",
                            f"{b['total_s']:.1f} s, {b['peak_rss_mb']} MB",
                            f"in-memory {args.small:,} rows {m['total_s']:.1f} s, {m['peak_rss_mb']} MB; "
                            f"pandas {p['read_csv_s']:.1f} s",
                            f"{ratio:.1f}× the 1M time (target ≤ 12×, ≤ 1.5 GB); 1M diffs identical: {same}",
                        ],
                        [
                            f"{args.small:,}-row bill as recon runs it (partitioned above {PARTITION_MB} MB)",
                            f"{s['total_s']:.2f} s, {s['peak_rss_mb']} MB",
                            f"pandas.read_csv {p['read_csv_s']:.2f} s",
                            f"{s['total_s'] / p['read_csv_s']:.2f}× pandas (target ≤ 1.6×)",
                        ],
                    ]
                )
            )


if __name__ == "__main__":
    main()
