"""Where a 1M-fee day's FEE entries land in the ledger's by_bill_shard index (issue #33: a day's FEE writes must not
funnel into one GSI partition). Every FEE entry `fee_entry_rows` plans for a generated 1,000,000-row bill is given
its `bill_shard` by `with_bill_shard` (what `LedgerView.put_fees` writes); the bench counts entries per shard and
turns the fullest shard into the time the writes need at one partition's ~1,000 WCU/s (an entry < 1 KB: 1 WCU on
the GSI). moto has no partitions, so this is the spread, not a write rate against DynamoDB.

    python -m bench.fee_shards [--rows 1000000]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers/common"), str(ROOT)]

from bench.recon_1m import generate  # noqa: E402

PARTITION_WCU = 1_000  # one DynamoDB partition's write ceiling per second
LAMBDA_S = 900


def main() -> None:
    from tally.domain.recon import FeeBook
    from tally.service.recon import fee_entry_rows
    from tally.service.recon_sources import OpenedBill
    from tally.store.recon import LEDGER_SHARDS
    from tally.store.shards import with_bill_shard

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "ALL.csv"
        generate(path, args.rows)
        _, index = OpenedBill("wechatpay", path.read_bytes()).index()
    run = {"channel": "wechatpay", "mchid": "1900000109", "bill_date": "2024-05-01", "run_id": "run#bench"}
    t0 = time.perf_counter()
    shards = Counter(
        with_bill_shard(row)["bill_shard"]
        for row in fee_entry_rows(run, index, FeeBook(run["mchid"], {}), "2024-05-02T02:30:00.000Z")
    )
    entries, fullest = sum(shards.values()), max(shards.values())
    print(
        f"{entries:,} FEE entries over {len(shards)} bill_shard partitions (LEDGER_SHARDS {LEDGER_SHARDS}) "
        f"in {time.perf_counter() - t0:.1f}s: fewest {min(shards.values()):,}, most {fullest:,}"
    )
    print(
        f"at {PARTITION_WCU:,} WCU/s a partition: the fullest shard needs {fullest / PARTITION_WCU:.0f} s "
        f"(one partition a day: {entries / PARTITION_WCU:.0f} s; a Lambda has {LAMBDA_S} s)"
    )


if __name__ == "__main__":
    main()
