"""Matching a guarded trade bill against the ledger, in memory or partition by partition (recon_partition.py,
recon_map.py); the bill's fees booked as FEE entries; the trade run's verdict from what it matched."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tally.domain.fundflow import SETTLEMENT_DIFFERS
from tally.domain.merchant_day import EXPECTED
from tally.domain.recon import (
    FEE,
    LEGACY_COUNTS,
    OPEN,
    PAYMENT,
    REFUND,
    BillIndex,
    BillItem,
    FeeBook,
    LocalEntry,
    Matcher,
    MatchStats,
    fee_differs,
    fee_entry_pk,
    fold_ledger,
)
from tally.observability import M, count
from tally.service.recon_diffs import DiffRows
from tally.service.recon_endings import DIFFS, MATCHED
from tally.service.recon_partition import Partitioned
from tally.service.recon_sources import OpenedBill
from tally.store.tables import iso_now


class TradeMatching(DiffRows):
    """The trade bill's index against the day's ledger: its differences written, its fees booked, the run concluded."""

    def _match(self, run: dict[str, Any], opened: OpenedBill, index: BillIndex) -> dict[str, Any]:
        """Only after the guards passed: the day's ledger is read and the index matched against it."""
        channel, mchid, bill_date = run["channel"], run["mchid"], run["bill_date"]
        legacy: dict[str, int] = {}
        local = fold_ledger(self.ledger.day(channel, mchid, bill_date), legacy)
        run["ledger_entries"] = len(local)
        matcher = Matcher(local, lambda key: self.ledger.booked_entry(key, mchid))
        diffs = list(matcher.match_index(index, opened.item_at))  # the diffs only (few)
        self._found_elsewhere(run, matcher.elsewhere)
        if self.progress is not None:
            self.progress(len(index))
        # the guards passed: the bill's fees become ledger entries (the day's booked ones: one Query)
        fees = self._book_fees(run, index, opened.item_at, self.ledger.fees(channel, mchid, bill_date))
        diffs += fees.pop("diffs")
        seen, new = self._write_diffs(run, diffs)
        return self._conclude(run, [{**_stats_of(matcher.stats, new), **legacy, **fees}], seen)

    def ledger_shard(self, run: dict[str, Any], p: int) -> dict[str, LocalEntry]:
        """The ledger side of partition `p`: one shard of the merchant's day, reversals folded."""
        counts: dict[str, int] = {}
        local = _Folded(
            fold_ledger(self.ledger.day_shard(run["channel"], run["mchid"], run["bill_date"], p), counts)
        )
        local.counts = counts  # R43: legacy / unknown entries of this shard, summed by conclude_partitions
        return local

    def match_partition(
        self, run: dict[str, Any], parts: Partitioned, p: int, local: dict[str, LocalEntry] | None = None
    ) -> dict[str, Any]:
        """One partition of the bill against one shard of the ledger (`local`, read here if not given); its diffs
        written. The result is what `conclude_partitions` merges (here, or in a Distributed Map's merge step)."""
        if local is None:
            local = self.ledger_shard(run, p)
        entries = len(local)
        index = parts.index(p)
        reader = parts.reader(p)
        try:
            matcher = Matcher(local, self.ledger.entry)
            diffs = list(matcher.match_index(index, reader.item_at))
            self._found_elsewhere(run, matcher.elsewhere)
            # this partition's FEE entries, as the in-memory path books the day's: its rows are one ledger shard,
            # so what it booked already is one Query of that shard (R43)
            booked = self.ledger.fee_shard(run["channel"], run["mchid"], run["bill_date"], p)
            fees = self._book_fees(run, index, reader.item_at, booked)
        finally:
            reader.close()
        if self.progress is not None:
            self.progress(len(index))
        diffs += fees.pop("diffs")
        _, new = self._write_diffs(run, diffs)
        legacy = getattr(local, "counts", {})
        return {
            "partition": p,
            "rows": len(index),
            **_stats_of(matcher.stats, new, entries),
            **legacy,
            **fees,
        }

    def conclude_partitions(self, run: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
        """Every partition matched: the run's verdict from all of them (diffs seen this run = last_seen_run)."""
        seen = {d["sk"] for d in self.store.diffs_of(run["pk"]) if d.get("last_seen_run") == run["run_id"]}
        run["ledger_entries"] = sum(int(r.get("ledger_entries", 0)) for r in results)
        run["partitions"] = len(results)
        return self._conclude(run, results, seen)

    def _match_partitioned(self, run: dict[str, Any], parts: Partitioned) -> dict[str, Any]:
        """Partition by partition; the next shard of the ledger is read while this one is matched (two
        partitions' ledgers in memory at most)."""
        results = []
        with ThreadPoolExecutor(1) as reader:
            ahead = reader.submit(self.ledger_shard, run, 0)
            for p in range(parts.partitions):
                local = ahead.result()
                if p + 1 < parts.partitions:
                    ahead = reader.submit(self.ledger_shard, run, p + 1)
                results.append(self.match_partition(run, parts, p, local))
        return self.conclude_partitions(run, results)

    def _conclude(self, run: dict[str, Any], results: list[dict[str, Any]], seen: set[str]) -> dict[str, Any]:
        channel, mchid = run["channel"], run["mchid"]
        healed = self._close_healed(run, seen, fund=False)
        self._open_missing(run)
        by_class: dict[str, int] = {}
        for r in results:
            for cls, n in r.get("by_class", {}).items():
                by_class[cls] = by_class.get(cls, 0) + int(n)
        total = {k: sum(int(r.get(k, 0)) for r in results) for k in _SUMMED}
        run["stats"] = {**total, "by_class": by_class, "auto_resolved": healed}
        rows = self.store.diffs_of(run["pk"])
        run["open_diffs"] = sum(1 for d in rows if d.get("handle_status") == OPEN)
        expected = [
            d for d in rows if d.get("handle_status") == EXPECTED and d.get("cls") != SETTLEMENT_DIFFERS
        ]
        if run["open_diffs"]:
            run.update(status=DIFFS, reason=f"{run['open_diffs']} open difference(s) for a person")
        elif expected:  # in transit to the channel's next bill day: not a person's yet, not agreed either
            due = max(str(d.get("due")) for d in expected)
            run.update(
                status=DIFFS,
                reason=f"0 open difference(s) for a person; {len(expected)} expected (in transit, due on the "
                f"channel's bill of {due})",
            )
        else:
            count(M.RECON_MATCHED, channel=channel, merchant=mchid)
            run.update(status=MATCHED, reason=f"{total['matched']} entries agree with the bill")
        run["statement_key"] = self._statement(run)
        return self._finish(run)

    def _book_fees(
        self,
        run: dict[str, Any],
        index: BillIndex,
        item_at: Callable[[int], BillItem],
        booked: dict[str, int],
    ) -> dict[str, Any]:
        """Each bill row's fee as a FEE ledger entry (docs/settlement.md §6.5), keyed by the row, written once:
        from the index the one parse built (its `fees`), no second pass. `booked` is what the ledger holds
        already (one Query: the day's entries in memory, the partition's shard on the partitioned path), so a
        re-run writes nothing; a fee that differs from the booked one is a FEE AMOUNT_DIFFERS (never an
        overwrite). Zero fees are not booked. New entries go out as batches of conditional Puts from a small
        bounded pool (`LedgerView.put_fees`); only the rows that differ are re-read in full (`item_at`), for
        their diff."""
        mchid = run["mchid"]
        book = FeeBook(mchid, booked)
        written, taken = self.ledger.put_fees(fee_entry_rows(run, index, book, iso_now(self.clock())))
        book.refused(index, taken)
        diffs = []
        for i, already in book.differs:
            item = item_at(index.where[i])
            diffs.append(fee_differs(item, fee_entry_pk(item.key, mchid), already))
        return {"fees_booked": written, "fee_diffs": len(diffs), "diffs": diffs}


def fee_entry_rows(
    run: dict[str, Any], index: BillIndex, book: FeeBook, now: str
) -> Iterator[dict[str, Any]]:
    """The FEE ledger entries `book` plans for `index`'s rows, as `LedgerView.put_fees` writes them, streamed
    (bench/recon_1m.py times this: every figure a run books, without the DynamoDB writes)."""
    same = {
        "kind": FEE,
        "channel": run["channel"],
        "mchid": run["mchid"],
        "bill_date": run["bill_date"],
        "source_run": run["run_id"],
        "booked_at": now,
        "pk": "",
        "amount_cent": 0,
        "fee_e5": 0,
    }
    # the row the fee was charged on, by its own id (its key): 微信订单号 / 支付宝交易号 of a payment, the refund
    # number of a refund. One template per kind with every key already in place: a row is a copy (its table
    # sized once) and four stores that overwrite, no resize (docs/recon.md "Session 9": ~-10 %)
    of_payment = {**same, "of": PAYMENT, "transaction_id": ""}
    of_refund = {**same, "of": REFUND, "refund_no": ""}
    keys, flags, fees, refund = index.keys, index.flags, index.fees, BillIndex.REFUND
    for pk, cents, i in book.new(index):
        if flags[i] & refund:
            row = of_refund.copy()
            row["refund_no"] = keys[i].partition("#")[2]
        else:
            row = of_payment.copy()
            row["transaction_id"] = keys[i].partition("#")[2]
        row["pk"] = pk
        row["amount_cent"] = cents
        row["fee_e5"] = fees[i]
        yield row


_SUMMED = (
    "matched",
    "cross_day",
    "duplicates",
    "pending_refunds",
    "new_diffs",
    *LEGACY_COUNTS,
    "fees_booked",
    "fee_diffs",
)


class _Folded(dict[str, LocalEntry]):
    """One ledger shard folded (`fold_ledger`), with its R43 legacy counts for the partition's result."""

    counts: dict[str, int]


def _stats_of(stats: MatchStats, new: int, ledger_entries: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "matched": stats.matched,
        "cross_day": stats.cross_day,
        "duplicates": stats.duplicates,
        "pending_refunds": stats.pending_refunds,
        "by_class": dict(stats.by_class),
        "new_diffs": new,
    }
    if ledger_entries is not None:
        out["ledger_entries"] = ledger_entries
    return out
