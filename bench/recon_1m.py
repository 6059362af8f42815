"""Reconciliation at scale: a generated 1,000,000-row WeChat ALL bill, parse + guards + match against
1,000,000 ledger entries + the day's FEE entries planned; seconds and peak RSS, side by side with
pandas.read_csv of the same file.

    python -m bench.recon_1m [--rows 1000000]

The bill carries settlement amounts and fees (issue #18): one row in ten has a NOCASH coupon (免充值券: 应结订单金额 =
订单金额 − the coupon, so the two columns differ) and one in ten a CASH coupon (充值券: 代金券金额 > 0, 应结订单金额 =
订单金额); every row has its 0.60 % fee. The ledger books settlement amounts (R43), so every row matches but one.
"fee figures" is the run's FEE booking up to the DynamoDB writes: every row's entry (key, cents rounded half up,
the row it was charged on) from the one parse's index (`FeeBook` + `fee_entry_rows`, what `_book_fees` hands to
`LedgerView.put_fees`); the conditional PutItems themselves are not timed (docs/cost.md counts them).

Each measurement runs in its own process so peak RSS (ru_maxrss) is its own. Targets (issue 6, #18, #33): at most 1.6x
pandas' read time, peak RSS under 1 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers/common"), str(ROOT)]

HEADER = (
    "交易时间,公众账号ID,商户号,特约商户号,设备号,微信订单号,商户订单号,用户标识,交易类型,交易状态,付款银行,货币种类,"
    "应结订单金额,代金券金额,微信退款单号,商户退款单号,退款金额,充值券退款金额,退款类型,退款状态,商品名称,商户数据包,"
    "手续费,费率,订单金额,申请退款金额,费率备注"
)
SUMMARY = "总交易单数,应结订单总金额,退款总金额,充值券退款总金额,手续费总金额,订单总金额,申请退款总金额"


def amount(i: int) -> int:
    """Row i's settlement amount (应结订单金额): what the ledger books and recon matches (R43)."""
    return 100 + (i * 7919) % 99_900  # 1.00 .. 999.99 yuan


def coupon(i: int) -> tuple[str, int]:
    """Row i's coupon: ("NOCASH" | "CASH" | "", cents). One row in ten of each kind, 0.50 .. 5.49 yuan."""
    kind = {3: "NOCASH", 7: "CASH"}.get(i % 10, "")
    return kind, (50 + i % 500 if kind else 0)


def order_total(i: int) -> int:
    """订单金额: the settlement amount plus a NOCASH coupon (the merchant gives it up); a CASH coupon is settled."""
    kind, cents = coupon(i)
    return amount(i) + (cents if kind == "NOCASH" else 0)


def fee_fen(cents: int) -> int:
    return (cents * 6 + 500) // 1000  # 0.60 %, half up


def tx(i: int) -> str:
    return f"4200000001202405{i:012d}"


def _yuan(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def generate(path: pathlib.Path, rows: int) -> None:
    settled = ordered = fees = 0
    with open(path, "wb") as out:
        out.write(b"\xef\xbb\xbf" + HEADER.encode() + b"\r\n")
        for i in range(rows):
            c, o, (_, k) = amount(i), order_total(i), coupon(i)
            settled += c
            ordered += o
            fees += fee_fen(
                c
            )  # the fee is charged on the settlement amount (the parser's rate check says so)
            out.write(
                (
                    f"`2024-05-01 {i % 24:02d}:{i % 60:02d}:{(i // 60) % 60:02d},`wx2421b1c4370ec43b,`1900000109,`0,`,"
                    f"`{tx(i)},`T{i:020d},`oUpF8uMuAJO_M2pxb1Q9zNjWeS6o,`NATIVE,`SUCCESS,`OTHERS,`CNY,`{_yuan(c)},"
                    f"`{_yuan(k)},`0,`0,`0.00,`0.00,`,`,`商品,`,`{_yuan(fee_fen(c))}000,`0.60%,`{_yuan(o)},"
                    f"`0.00,`\r\n"
                ).encode()
            )
        out.write(SUMMARY.encode() + b"\r\n")
        out.write(
            f"`{rows},`{_yuan(settled)},`0.00,`0.00,`{_yuan(fees)},`{_yuan(ordered)},`0.00\r\n".encode()
        )


def fee_total(rows: int) -> int:
    return sum(fee_fen(amount(i)) for i in range(rows))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_ours(path: str, rows: int) -> dict:
    from tally.domain.recon import FeeBook, LocalEntry, Matcher, check_guards
    from tally.service.recon import fee_entry_rows
    from tally.service.recon_sources import OpenedBill

    # the day's ledger as reconciliation holds it (what LedgerView.day + fold_ledger build from DynamoDB);
    # one entry differs so the matcher has something to report
    t0 = time.perf_counter()
    local = {
        f"wechatpay#{tx(i)}": LocalEntry(
            f"wechatpay#{tx(i)}", "PAYMENT", amount(i) + (1 if i == 7 else 0), "2024-05-01"
        )
        for i in range(rows)
    }
    t_ledger = time.perf_counter() - t0
    data = pathlib.Path(path).read_bytes()
    t0 = time.perf_counter()
    opened = OpenedBill("wechatpay", data)
    totals, index = opened.index()  # the one parse pass: totals for the guards + a compact row index
    verdict = check_guards(totals, previous_rows=rows)
    t_guard = time.perf_counter() - t0
    assert not verdict.blocked, verdict
    t0 = time.perf_counter()
    matcher = Matcher(local)
    diffs = list(matcher.match_index(index, opened.item_at))  # only after the guards passed
    t_match = time.perf_counter() - t0
    # the FEE entries a first run of the day books (nothing booked yet), up to the writes
    run = {"channel": "wechatpay", "mchid": "1900000109", "bill_date": "2024-05-01", "run_id": "run#bench"}
    t0 = time.perf_counter()
    entries = fee_cent = 0
    for row in fee_entry_rows(run, index, FeeBook("1900000109", {}), "2024-05-02T02:30:00.000Z"):
        entries += 1
        fee_cent += row["amount_cent"]
    t_fees = time.perf_counter() - t0
    assert fee_cent == fee_total(rows), (fee_cent, fee_total(rows))  # the bill's 手续费总金额, to the fen
    return {
        "rows": totals.rows,
        "guard": verdict.code,
        "diffs": len(diffs),
        "matched": matcher.stats.matched,
        "fee_entries": entries,
        "fee_cent": fee_cent,
        "ledger_build_s": round(t_ledger, 2),
        "parse_and_guards_s": round(t_guard, 2),
        "match_s": round(t_match, 2),
        "fees_s": round(t_fees, 2),
        "total_s": round(t_guard + t_match + t_fees, 2),
        "peak_rss_mb": round(peak_mb()),
    }


def run_pandas_c(path: str, rows: int) -> dict:
    import pandas as pd

    t0 = time.perf_counter()
    frame = pd.read_csv(path, encoding="utf-8-sig", dtype=str, nrows=rows)  # the C engine (no skipfooter)
    t = time.perf_counter() - t0
    return {"rows": len(frame), "read_csv_s": round(t, 2), "peak_rss_mb": round(peak_mb())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", choices=["ours", "pandas"])
    parser.add_argument("--file")
    parser.add_argument(
        "--table-rows", action="store_true", help="details to stderr, the bench table's row to stdout"
    )
    args = parser.parse_args()
    if args.child == "ours":
        print(json.dumps(run_ours(args.file, args.rows)))
        return
    if args.child == "pandas":
        print(json.dumps(run_pandas_c(args.file, args.rows)))
        return
    out = sys.stderr if args.table_rows else sys.stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "ALL.csv"
        t0 = time.perf_counter()
        generate(path, args.rows)
        print(
            f"generated {args.rows:,} rows, {path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f}s",
            file=out,
        )
        results = {}
        for child in ("pandas", "ours"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", child, "--file", str(path), "--rows", str(args.rows)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": f"{ROOT / 'layers/common'}:{ROOT}"},
            )
            results[child] = json.loads(done.stdout)
        p, o = results["pandas"], results["ours"]
        print(
            f"pandas.read_csv (C engine, strings): {p['read_csv_s']:6.2f}s   peak RSS {p['peak_rss_mb']} MB",
            file=out,
        )
        print(f"tally parse (one pass) + guards:     {o['parse_and_guards_s']:6.2f}s", file=out)
        print(
            f"tally match (compact index):         {o['match_s']:6.2f}s   "
            f"({o['matched']:,} matched, {o['diffs']} diff)",
            file=out,
        )
        print(
            f"tally fee figures (FEE entries):     {o['fees_s']:6.2f}s   "
            f"({o['fee_entries']:,} entries, {o['fee_cent'] / 100:,.2f} yuan; the DynamoDB writes not timed)",
            file=out,
        )
        print(
            f"tally total:                         {o['total_s']:6.2f}s   peak RSS {o['peak_rss_mb']} MB "
            f"(incl. {args.rows:,} ledger entries built in {o['ledger_build_s']}s)",
            file=out,
        )
        ratio = o["total_s"] / p["read_csv_s"]
        print(
            f"ratio to pandas read: {ratio:.2f}x (target <= 1.6x); peak RSS target < 1024 MB: "
            f"{'ok' if o['peak_rss_mb'] < 1024 else 'OVER'}",
            file=out,
        )
        if args.table_rows:  # the bench table's row, as JSON on the last stdout line
            print(
                json.dumps(
                    [
                        [
                            f"{args.rows:,}-row bill (coupons, fees): parse + guards + match + fee figures",
                            f"{o['total_s']:.1f} s, {o['peak_rss_mb']} MB",
                            f"pandas.read_csv {p['read_csv_s']:.1f} s, {p['peak_rss_mb']} MB",
                            f"ratio {ratio:.2f}× (target ≤ 1.6×, < 1 GB)",
                        ]
                    ]
                )
            )


if __name__ == "__main__":
    main()
