"""Reconcile one merchant's day: download → keep in S3 → parse (pass 1) → guards → match (pass 2) → diffs.

Every way a run can end leaves a recon_runs row a person can read, and every end that is not "matched" or
"quiet" also counts an alarmed metric (R31–R33, R38):

    MATCHED   bill and ledger agree                          ReconMatched
    DIFFS     differences written to recon_diff (R36)        ReconDiffOpened (alarm) for each new one
    QUIET     no bill and no ledger entries, or a zero bill  ReconQuietDay
    RETRY     STATEMENT_CREATING: the next tick retries      ReconStatementNotReady (last tick: BLOCKED)
    RUNNING   a big bill's partitions on the Distributed Map  (ends MATCHED / DIFFS / BLOCKED: recon_map.py)

Every finished run (MATCHED, DIFFS, QUIET, BLOCKED) also counts ReconRunCompleted, a heartbeat: no finished run
for 30 hours is an alarm (ReconNotRunAlarm), so "recon never ran" is never silent.
    BLOCKED   a guard refused the bill, the file is not a    ReconBlocked (alarm) [+ ReconParseFailed /
              bill, or no bill while we booked money          ReconDownloadFailed (alarms)]
"""

from __future__ import annotations

import csv
import functools
import io
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from tally import errors
from tally.channels import registry as channel_registry
from tally.domain.fundflow import ITEMS as FUND_ITEMS
from tally.domain.fundflow import (
    PENDING,
    SETTLEMENT,
    SETTLEMENT_DIFFERS,
    ConfigError,
    DayFigures,
    FundFlowDay,
    SettlementLag,
    accounts_of,
    check_day,
    lag_of,
    trade_figures,
)
from tally.domain.merchant_day import EXPECTED, bill_lag, fee_charged, published, settlement_gap
from tally.domain.merchant_day import FUND_ITEMS as FUND_GAP_ITEMS
from tally.domain.money import format_cents
from tally.domain.recon import (
    AMOUNT_DIFFERS,
    CHANNEL_ONLY,
    CHINA,
    FEE,
    IGNORED,
    LEGACY_COUNTS,
    LOCAL_ONLY,
    OPEN,
    PAYMENT,
    REFUND,
    RESOLVED,
    REVERSAL,
    VOLUME_DROP,
    BillIndex,
    BillItem,
    BillParseError,
    Diff,
    FeeBook,
    LocalEntry,
    Matcher,
    MatchStats,
    check_guards,
    china_date,
    fee_differs,
    fee_entry_pk,
    fold_ledger,
    local_only,
    previous_day,
    scheduled_days,
)
from tally.observability import M, count, logger
from tally.service.journal import DecisionJournal
from tally.service.ledger_day import merchant_lag, statement_text
from tally.service.recon_layout import LAYOUT_QUARANTINED, Layouts
from tally.service.recon_partition import (
    SPLIT_BYTES,
    Partitioned,
    partition_bill,
    partition_file,
    tmp_dir,
)
from tally.service.recon_sources import NO_STATEMENT, NOT_READY, DownloadFailed, OpenedBill
from tally.store.journal import pinned_ref
from tally.store.recon import BillArchive, LedgerView, ReconStore, recon_pk
from tally.store.tables import EventStore, event_key, iso_now

MATCHED, DIFFS, QUIET, RETRY, BLOCKED = "MATCHED", "DIFFS", "QUIET", "RETRY", "BLOCKED"
NO_BILL_SOURCE = "NO_BILL_SOURCE"  # the block code of a merchant without a bill download (R44)
FUND_FLOW_LATE = "FUND_FLOW_LATE"  # a fund-flow bill still missing past its due day + 1 (R45)
RUNNING = "RUNNING"  # on the Distributed Map (service/recon_map.py)
FINISHED = {MATCHED, DIFFS, QUIET, BLOCKED}
DIFF_REFS = 400  # difference rows one journal record pins (~350 bytes each: a record stays below 400 KB)


class ReconError(errors.Conflict, ValueError):
    """A person asked for something that cannot be done (unknown diff, not OPEN, no bill to re-run)."""


class ReconService:
    def __init__(
        self,
        store: ReconStore,
        ledger: LedgerView,
        archive: BillArchive,
        sources: dict[str, Any],
        recover: Callable[[str, str, str], str] | None,
        merchants: Callable[[], list[tuple[str, str]]],
        *,
        clock: Callable[[], float] = time.time,
        min_ratio: float = 0.10,
        min_previous_rows: int = 10,
        last_retry_hour: int = 16,
        progress: Callable[[int], None] | None = None,
        fund_sources: dict[str, Any] | None = None,
        partition_bytes: int = 64 << 20,
        map_bytes: int = 1 << 30,
        split_bytes: int = SPLIT_BYTES,
        workers: int = 0,
        distributed: Any = None,
        map_stale_s: float = 4 * 3600,
        fund_config: Callable[[str, str], dict[str, Any]] | None = None,
        events: EventStore | None = None,
        journal: DecisionJournal | None = None,
    ):
        self.store = store
        self.ledger = ledger
        self.archive = archive
        self.sources = sources
        self.recover = recover
        self.merchants = merchants
        self.clock = clock
        self.min_ratio = min_ratio
        self.min_previous_rows = min_previous_rows
        self.last_retry_hour = last_retry_hour
        self.progress = progress
        self.fund_sources = fund_sources or {}
        self.partition_bytes = partition_bytes  # a bill at least this big is matched partition by partition
        self.map_bytes = (
            map_bytes  # … and at least this big on the Distributed Map (when `distributed` is set)
        )
        self.split_bytes = (
            split_bytes  # a bill on disk at least this big is parsed in pieces on several cores
        )
        self.workers = workers  # … by this many processes (0: one per CPU, recon_partition.cores)
        self.distributed = distributed  # service.recon_map.DistributedRecon or None
        self.map_stale_s = map_stale_s  # a Map run without a result after this is BLOCKED (MAP_STALE)
        # (stored channel, merchant) -> {"settlement_lag": …, "fund_accounts": …} from the merchant records (R45)
        self.fund_config = fund_config
        self.events = events  # notify_event: the work-queue item of an uploaded bill nobody can file (L5)
        self.journal = journal  # a finished run's verdict and the differences it saw (docs/audit.md)

    # ------------------------------------------------------------ entry points

    @functools.cached_property
    def layouts(self) -> Layouts:
        """The bill layouts a run reads (the parsers', the repo's mappings, the stored ones)."""
        return Layouts(self.store)

    def scheduled(self) -> list[dict[str, Any]]:
        """The daily tick (10:30 Asia/Shanghai, hourly retries until 16:30): T+1, then T+2 and T+3 re-runs
        (R34). A day already finished for a pass is not run again by the schedule. Every configured merchant
        is due (R44): one whose channel has no bill download is a BLOCKED run NO_BILL_SOURCE, never skipped;
        the tick then counts merchants due / reconciled / blocked for T+1 (`day_counts`)."""
        results = []
        days = scheduled_days(self.clock())
        due = self.due_merchants()
        for channel, mchid in due:
            for bill_date, pass_ in days:
                runs = [
                    self._unless_stale(r) for r in self.store.run_rows(recon_pk(channel, mchid, bill_date))
                ]
                done = {
                    r.get("pass")
                    for r in runs
                    if (r.get("status") in FINISHED or r.get("status") == RUNNING)  # RUNNING: on the Map now
                    and r.get("leg") != "fundflow"
                }
                if pass_ in done:
                    continue
                results.append(self.run(channel, mchid, bill_date, pass_=pass_))
            if channel in self.fund_sources:  # R45: T+2 and T+3, once the lagged fund flow can be out
                for bill_date, _pass in days[1:]:
                    if not any(
                        r.get("leg") == "fundflow" and r.get("status") in FINISHED
                        for r in self.store.run_rows(recon_pk(channel, mchid, bill_date))
                    ):
                        results.append(self.fund_flow(channel, mchid, bill_date))
        figures = self.day_counts(due, days[0][0])
        count(M.RECON_MERCHANTS_DUE, figures["due"])
        count(M.RECON_MERCHANTS_RECONCILED, figures["reconciled"])
        count(M.RECON_MERCHANTS_BLOCKED, figures["blocked"])
        logger.info("recon: merchants of the day", extra=figures)
        return results

    def due_merchants(self) -> list[tuple[str, str]]:
        """(stored channel, merchant id) of every configured merchant, once: a WeChat merchant with v3 and v2
        records is one bill (stored "wechatpay"); a kind no channel knows keeps its own name (and blocks)."""
        due: dict[tuple[str, str], None] = {}
        for kind, mchid in self.merchants():
            owner = channel_registry.by_merchant_kind(kind)
            due[(owner.stored if owner is not None else kind, mchid)] = None
        return list(due)

    def day_counts(self, due: list[tuple[str, str]], bill_date: str) -> dict[str, Any]:
        """For one bill date: how many merchants are due, reconciled (the latest finished run MATCHED, DIFFS or
        QUIET), blocked (BLOCKED), and the rest pending (retrying or not run); R44."""
        figures: dict[str, Any] = {"bill_date": bill_date, "due": len(due), "reconciled": 0, "blocked": 0}
        for channel, mchid in due:
            runs = [
                r
                for r in self.store.run_rows(recon_pk(channel, mchid, bill_date))
                if r.get("status") in FINISHED and r.get("leg") != "fundflow"
            ]
            latest = max(runs, key=lambda r: r["sk"]) if runs else None
            if latest is None:
                continue
            figures["blocked" if latest["status"] == BLOCKED else "reconciled"] += 1
        figures["pending"] = figures["due"] - figures["reconciled"] - figures["blocked"]
        return figures

    def _unless_stale(self, run: dict[str, Any]) -> dict[str, Any]:
        """A run on the Distributed Map that never came back (its execution aborted, timed out, or its merge
        never ran) is BLOCKED after `map_stale_s`: a person sees it, ReconBlocked counts it; never silent."""
        if run.get("status") != RUNNING:
            return run
        since = float(run.get("running_since_s") or 0)
        if self.clock() - since < self.map_stale_s:
            return run
        return self._blocked(
            run,
            "MAP_STALE",
            f"on the Distributed Map since {iso_now(since)} without a result "
            f"(execution {run.get('execution_name')}): look at it in Step Functions, then re-run the day",
        )

    def run(
        self, channel: str, mchid: str, bill_date: str, *, pass_: str = "manual", s3_key: str | None = None
    ) -> dict[str, Any]:
        """One reconciliation of one merchant's day; re-running is idempotent (R36)."""
        started = self.clock()
        run: dict[str, Any] = {
            "pk": recon_pk(channel, mchid, bill_date),
            "sk": f"run#{iso_now(started)}#{pass_}",
            "channel": channel,
            "mchid": mchid,
            "bill_date": bill_date,
            "pass": pass_,
            "started_at": iso_now(started),
        }
        run["run_id"] = run["sk"]
        try:
            data, name = self._bill(run, s3_key)
        except DownloadFailed as exc:
            if (
                exc.code == NO_BILL_SOURCE
            ):  # R44: a merchant we cannot fetch a bill for is blocked, not skipped
                count(M.RECON_NO_BILL_SOURCE, channel=channel, merchant=mchid)
            else:
                count(M.RECON_DOWNLOAD_FAILED, channel=channel, merchant=mchid)
            return self._blocked(run, exc.code, str(exc))
        if data is None:  # NO_STATEMENT / NOT_READY, decided (and maybe already recorded) in _bill
            if (
                run.get("status") == QUIET
            ):  # the channel's bill of the day lists nothing: nothing arrived on it
                self._open_missing(run)
            return run if "finished_at" in run else self._finish(run)
        parts: Partitioned | None = None
        work = tmp_dir(f"{run['pk']}/{run['sk']}")
        downloaded = data if isinstance(data, Path) else None
        try:
            if isinstance(data, Path) and _is_zip(data):
                data = (
                    data.read_bytes()
                )  # a zip (Alipay's) is opened in memory (its rows are still partitioned)
            # the layout first (its first and last lines): a new shape is quarantined, a mapped one read as known
            gate = self.layouts.gate(channel, data)
            run.update(gate.record())
            if gate.diff is not None:
                _clean(work, downloaded)
                return self._blocked(run, LAYOUT_QUARANTINED, gate.reason(channel))
            data = gate.read_as_known(data, work)
            size = data.stat().st_size if isinstance(data, Path) else len(data)
            if isinstance(data, Path) or size >= self.partition_bytes:  # bounded memory (recon_partition.py)
                run["path"] = "partitioned"
                opened = OpenedBill(channel, b"" if isinstance(data, Path) else data, name)
                if isinstance(data, Path):  # a big plain one on several cores at once
                    parts = partition_file(
                        opened, work, data, workers=self.workers, split_bytes=self.split_bytes
                    )
                else:
                    parts = partition_bill(opened, work)
                assert parts.totals is not None
                run["pieces"] = parts.pieces
                totals = parts.totals
                index = BillIndex()
            else:
                # the one parse: totals + a compact row index; nothing matched yet
                opened = OpenedBill(channel, data, name)
                totals, index = opened.index()
        except BillParseError as exc:
            _clean(work, downloaded)
            count(M.RECON_PARSE_FAILED, channel=channel, merchant=mchid)
            return self._blocked(run, "PARSE_FAILED", f"not a bill we can read: {exc}")
        except BaseException:
            _clean(work, downloaded)  # a warm container keeps /tmp: nothing of this run stays there
            raise
        run["totals"] = totals.as_dict()
        pk = run["pk"]
        confirmation = self.store.confirmation(pk)
        verdict = check_guards(
            totals,
            previous_rows=self.store.latest_parsed_rows(recon_pk(channel, mchid, previous_day(bill_date))),
            min_ratio=self.min_ratio,
            min_previous_rows=self.min_previous_rows,
            confirmed=confirmation is not None,
        )
        run["guard"] = verdict.code
        if confirmation is not None:
            run["confirmed_by"] = confirmation.get("confirmed_by")
        if parts is None:
            if verdict.blocked:
                return self._blocked(run, verdict.code, verdict.reason)
            return self._match(run, opened, index)
        try:
            if verdict.blocked:
                return self._blocked(run, verdict.code, verdict.reason)
            if self.distributed is not None and size >= self.map_bytes:
                return self.distributed.start(self, run, parts)  # Step Functions Distributed Map
            return self._match_partitioned(run, parts)
        finally:
            _clean(work, downloaded)

    def from_s3_event(self, key: str) -> dict[str, Any] | None:
        """A bill a person dropped under bills/{channel}/{mchid}/{bill_date}/…; our own downloads are skipped."""
        parts = key.split("/")
        if len(parts) < 5 or parts[0] != "bills" or not parts[4]:
            logger.warning(
                "recon: object outside bills/{channel}/{mchid}/{bill_date}/ ignored", extra={"key": key}
            )
            return None
        if self.archive.origin(key) == "download":
            return None  # written by a run, which already reconciled it
        channel, mchid, bill_date = parts[1], parts[2], parts[3]
        try:
            datetime.strptime(bill_date, "%Y-%m-%d")
        except ValueError:
            count(M.RECON_PARSE_FAILED, channel=channel, merchant=mchid)
            logger.error("recon: dropped bill with a bad date folder", extra={"key": key})
            if self.events is not None:  # a person dropped it there: a work-queue item names the file (L5)
                self.events.put(
                    event_key("bill_upload", channel[:32], mchid[:32], key[:512]),
                    "bill_upload",
                    self.clock(),
                    manual_kind="bill_upload",
                    channel=channel[:32],
                    mchid=mchid[:32],
                    s3_key=key[:1024],
                    reason=f"uploaded bill {key[:300]} is not under a bills/{{channel}}/{{mchid}}/YYYY-MM-DD/ "
                    "folder: nothing was reconciled from it; upload it again under its day's folder",
                )
            return None
        return self.run(channel, mchid, bill_date, pass_="s3", s3_key=key)

    def confirm(self, channel: str, mchid: str, bill_date: str, by: str, note: str) -> dict[str, Any]:
        """A person confirms a volume drop (R33); the day is re-run from the bill already kept in S3."""
        if not by:
            raise ReconError("say who confirms (--by)")
        pk = recon_pk(channel, mchid, bill_date)
        runs = self.store.run_rows(pk)
        kept = next((r["bill_key"] for r in runs if r.get("bill_key")), None)
        if kept is None:
            raise ReconError(f"no bill kept for {pk}: run it first")
        at = iso_now(self.clock())
        if self.journal is None:
            self.store.put_confirmation(pk, by, note, at)
        else:  # a person's action: who and why, in the write that records it (the run that follows has its own)
            self.journal.commit(
                mchid,
                pk,
                kind="recon.confirm",
                at=at,
                facts={"channel": channel, "bill_date": bill_date, "by": by, "note": note, "bill_key": kept},
                items=[self.store.confirmation_put(pk, by, note, at)],
                transact=self.store.transact,
            )
        return self.run(channel, mchid, bill_date, pass_="confirm", s3_key=kept)

    # ------------------------------------------------------------ the bill

    def _bill(self, run: dict[str, Any], s3_key: str | None) -> tuple[bytes | Path | None, str]:
        channel, mchid, bill_date = run["channel"], run["mchid"], run["bill_date"]
        if s3_key is not None:
            run["bill_key"] = s3_key
            name = s3_key.rsplit("/", 1)[-1]
            size, meta = self.archive.size(s3_key)
            if size >= self.partition_bytes and meta.get(
                "sha1"
            ):  # a big bill is streamed to disk, never held
                path = tmp_dir(f"{run['pk']}/{run['sk']}").with_suffix(".bill")
                self.archive.download(s3_key, path)
                run["sha1"] = meta["sha1"]
                return path, name
            data, meta = self.archive.read(s3_key)
            run["sha1"] = meta.get("sha1") or _sha1(data)
            return data, name
        source = self.sources.get(channel)
        if source is None:
            raise DownloadFailed(f"no bill download for channel {channel}", code=NO_BILL_SOURCE)
        fetched = source.fetch(mchid, bill_date)
        if fetched.extra.get("bill_source"):  # which download (WeChat: v3 or v2), shown in the run (R44)
            run["bill_source"] = fetched.extra["bill_source"]
            run["bill_source_why"] = fetched.extra.get("bill_source_why", "")
        if fetched.status == NOT_READY:
            hour = datetime.fromtimestamp(self.clock(), CHINA).hour
            if hour >= self.last_retry_hour:
                self._blocked(
                    run, "STATEMENT_LATE", f"still being generated at {hour}:xx Asia/Shanghai: {fetched.note}"
                )
            else:
                count(M.RECON_NOT_READY, channel=channel, merchant=mchid)
                run.update(
                    status=RETRY, reason=f"statement being generated, retried next tick: {fetched.note}"
                )
            return None, ""
        if fetched.status == NO_STATEMENT:
            if self.ledger.has_entries(channel, mchid, bill_date):
                count(M.RECON_DOWNLOAD_FAILED, channel=channel, merchant=mchid)
                self._blocked(
                    run,
                    "NO_STATEMENT_BUT_LEDGER",
                    "the channel says there is no bill for this day but "
                    f"our ledger has entries: {fetched.note}",
                )
            else:
                count(M.RECON_QUIET_DAY, channel=channel, merchant=mchid)
                run.update(status=QUIET, reason=f"no bill and no ledger entries: {fetched.note}")
            return None, ""
        key = self.archive.keep(
            channel,
            mchid,
            bill_date,
            fetched.name,
            fetched.data,
            fetched.sha1,
            {"channel-hash": fetched.channel_hash} if fetched.channel_hash else None,
        )
        run.update(bill_key=key, sha1=fetched.sha1)
        if fetched.channel_hash and fetched.channel_hash != fetched.sha1:
            count(M.RECON_PARSE_FAILED, channel=channel, merchant=mchid)
            raise DownloadFailed(
                f"SHA-1 of the bill {fetched.sha1} != the channel's hash_value "
                f"{fetched.channel_hash} (kept at {key})",
                code="HASH_MISMATCH",
            )
        return fetched.data, fetched.name

    # ------------------------------------------------------------ matching and diffs

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

    # ------------------------------------------------------------ the partitioned path (recon_partition.py)

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

    def _write_diffs(self, run: dict[str, Any], diffs: list[Diff]) -> tuple[set[str], int]:
        channel, mchid = run["channel"], run["mchid"]
        seen = set()
        new = 0
        today = china_date(self.clock()).isoformat()
        for diff in diffs:
            seen.add(diff.sk)
            recovery = self._recover(channel, mchid, diff)
            row = self._diff_row(run, diff, recovery)
            lag = self._in_bill_lag(row, diff.local_time, today)
            if self.store.put_new_diff(row):
                new += row["handle_status"] == OPEN
            else:
                self.store.seen_again(run["pk"], diff.sk, run["run_id"], recovery)
                if lag is not None and lag["handle_status"] == OPEN:
                    new += self._missing(row, "still not in the channel's bill past its lag")
        if new:
            count(M.RECON_DIFF_OPENED, new, channel=channel, merchant=mchid)
        return seen, new

    def _in_bill_lag(self, row: dict[str, Any], at: str, today: str) -> dict[str, Any] | None:
        """A LOCAL_ONLY found just before midnight: EXPECTED (in transit to the channel's next bill day, out of
        the open index) until that bill has been read or is overdue (domain/merchant_day.bill_lag)."""
        due = next_day(row["bill_date"])
        lag = bill_lag(row["cls"], row["item"], row["bill_date"], at, due_bill_read=today > published(due))
        if lag is None:
            return None
        row.update(lag)
        row["detail"] = f"{row['detail']}. Next: {lag['next_step']}"
        row["history"] = [{**row["history"][0], "note": row["detail"]}]
        if row["handle_status"] != OPEN:
            row.pop("open_pk", None)
        return lag

    def _missing(self, row: dict[str, Any], note: str) -> bool:
        """An EXPECTED difference past its lag opens for a person, by itself, once (#30); ReconDiffOpened."""
        return self.store.open_expected(
            row["pk"],
            row["sk"],
            iso_now(self.clock()),
            f"{note}: {row['next_step']}",
            {"detail": row["detail"], "next_step": row["next_step"]},
        )

    def _found_elsewhere(self, run: dict[str, Any], entries: list[LocalEntry]) -> None:
        """Money this bill lists that the ledger booked on a neighbouring day (the bill day boundary, R34): that
        day's LOCAL_ONLY difference for it is closed (it landed on the channel's other bill day); a day not
        reconciled yet gets it closed already, so its run finds nothing to open."""
        now = iso_now(self.clock())
        for entry in entries:
            if not entry.bill_date or entry.bill_date == run["bill_date"]:
                continue
            pk = recon_pk(run["channel"], run["mchid"], entry.bill_date)
            sk = f"{entry.kind}#{entry.key}"
            note = (
                f"in the channel's bill of {run['bill_date']} (booked for {entry.bill_date}: the bill day "
                f"boundary, R34) at {run['run_id']}"
            )
            row = self.store.diff(pk, sk)
            if row is None:
                closed = {
                    **self._diff_row(
                        {**run, "pk": pk, "bill_date": entry.bill_date}, local_only(entry), None
                    ),
                    "handle_status": RESOLVED,
                    "handler": "recon",
                    "handled_at": now,
                }
                closed.pop("open_pk", None)
                closed["history"] = [{"at": now, "by": "recon", "action": RESOLVED, "note": note}]
                self.store.put_new_diff(closed)
            elif row.get("cls") == LOCAL_ONLY and row.get("handle_status") in (OPEN, EXPECTED):
                if self.store.close_diff(pk, sk, RESOLVED, "recon", note, now, expect=(OPEN, EXPECTED)):
                    count(M.RECON_DIFF_RESOLVED, channel=run["channel"], merchant=run["mchid"])

    def _open_missing(self, run: dict[str, Any]) -> int:
        """The day before's EXPECTED differences due on this bill day that this bill did not list either (those
        it listed were closed by `_found_elsewhere`): missing now, open for a person."""
        opened = 0
        pk = recon_pk(run["channel"], run["mchid"], previous_day(run["bill_date"]))
        for row in self.store.diffs_of(pk):
            if row.get("handle_status") != EXPECTED or row.get("due") != run["bill_date"]:
                continue
            lag = bill_lag(
                str(row.get("cls")), str(row.get("item")), str(row.get("bill_date")), row.get("local_time"),
                due_bill_read=True,
            )  # fmt: skip
            if lag is None:
                continue
            words = {
                **row,
                **lag,
                "detail": f"{str(row.get('detail', '')).split('. Next: ')[0]}. Next: {lag['next_step']}",
            }
            opened += self._missing(words, f"not in the channel's bill of {run['bill_date']} either")
        if opened:
            count(M.RECON_DIFF_OPENED, opened, channel=run["channel"], merchant=run["mchid"])
        return opened

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

    def _statement(self, run: dict[str, Any]) -> str:
        """The day's statement next to the run's report (docs/settlement.md §6.7), rewritten by every run that
        matched: the ledger's entries of the day (its payments, refunds, FEE entries and reversals)."""
        channel, mchid, bill_date = run["channel"], run["mchid"], run["bill_date"]
        entries = [
            *self.ledger.day(channel, mchid, bill_date),
            *self.ledger.fee_rows(channel, mchid, bill_date),
        ]
        key = f"reports/{channel}/{mchid}/{bill_date}/statement.csv"
        runs = [run, *(r for r in self.store.run_rows(run["pk"]) if r.get("sk") != run.get("sk"))]
        runs.sort(key=lambda r: str(r.get("sk")), reverse=True)  # newest first, this run included
        lag = merchant_lag(channel, self.fund_config(channel, mchid) if self.fund_config else None)
        today = china_date(self.clock()).isoformat()
        text = statement_text(channel, mchid, bill_date, entries, runs, lag=lag, today=today)
        self.archive.put_report(key, text.encode("utf-8"), "text/csv; charset=utf-8")
        return key

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

    def _recover(self, channel: str, mchid: str, diff: Diff) -> str | None:
        if diff.cls != CHANNEL_ONLY or diff.item != PAYMENT or self.recover is None:
            return None
        try:
            return self.recover(channel, mchid, diff.transaction_id)
        except Exception as exc:  # noqa: BLE001 - the diff stays OPEN and alarmed whatever happened here
            count(M.RECON_RECOVER_FAILED, channel=channel, merchant=mchid)
            logger.exception("recon: recovery failed", extra={"key": diff.key})
            return f"QUERY_FAILED: {type(exc).__name__}: {exc}"

    def _diff_row(self, run: dict[str, Any], diff: Diff, recovery: str | None) -> dict[str, Any]:
        now = iso_now(self.clock())
        return {
            "pk": run["pk"],
            "sk": diff.sk,
            "channel": run["channel"],
            "mchid": run["mchid"],
            "bill_date": run["bill_date"],
            "cls": diff.cls,
            "item": diff.item,
            "key": diff.key,
            "channel_amount_cent": diff.channel_amount_cent,
            "local_amount_cent": diff.local_amount_cent,
            "channel_status": diff.channel_status,
            "local_status": diff.local_status,
            "transaction_id": diff.transaction_id,
            "out_trade_no": diff.out_trade_no,
            "refund_no": diff.refund_no,
            "detail": diff.detail,
            "recovery": recovery,
            "handle_status": OPEN,
            "open_pk": OPEN,
            "opened_at": now,
            "handler": None,
            "history": [{"at": now, "by": "recon", "action": "OPENED", "note": diff.detail}],
            "run_id": run["run_id"],
            "last_seen_run": run["run_id"],
            "seen_count": 1,
        }

    def _settlement_row(
        self, run: dict[str, Any], diff: Diff, lag: SettlementLag, ledger_day: str, today: str
    ) -> dict[str, Any]:
        """A fund-flow difference as a person works it (#30): the gap rather than the channel's figure, the
        ledger day and the fund-flow day, the next step and its codes; inside the lag it is EXPECTED (in transit,
        out of the open index), past it OPEN."""
        row = self._diff_row(run, diff, None)
        if diff.item not in FUND_GAP_ITEMS or diff.local_amount_cent is None:
            return row
        gap = settlement_gap(
            diff.item,
            int(diff.local_amount_cent),
            int(diff.channel_amount_cent or 0),
            ledger_day,
            lag.day_of(diff.item, ledger_day),
            today,
        )
        row.update(gap)
        row["history"] = [{**row["history"][0], "note": gap["detail"]}]
        if row["handle_status"] != OPEN:
            row.pop("open_pk", None)
        return row

    def _close_healed(self, run: dict[str, Any], seen: set[str], *, fund: bool) -> int:
        """OPEN diffs of this day that the bill and ledger no longer show (e.g. booked by the pull path). A
        trade run heals only trade diffs, a fund-flow run only SETTLEMENT_DIFFERS (R45): neither sees the other's."""
        healed = 0
        for row in self.store.diffs_of(run["pk"]):
            if (row.get("cls") == SETTLEMENT_DIFFERS) != fund:
                continue
            if row.get("handle_status") == EXPECTED and row["sk"] not in seen:  # it landed: closed as healed
                if self.store.open_expected(row["pk"], row["sk"], iso_now(self.clock()), "no longer differs"):
                    row["handle_status"] = OPEN
            if row.get("handle_status") == OPEN and row["sk"] not in seen:
                if self.store.close_diff(
                    run["pk"],
                    row["sk"],
                    RESOLVED,
                    "recon",
                    f"no longer differs at {run['run_id']}",
                    iso_now(self.clock()),
                ):
                    healed += 1
                    count(M.RECON_DIFF_RESOLVED, channel=run.get("channel"), merchant=run.get("mchid"))
        return healed

    # ------------------------------------------------------------ the fund-flow leg (R45)

    def fund_flow(
        self,
        channel: str,
        mchid: str,
        ledger_day: str,
        *,
        accounts: tuple[str, ...] | None = None,
        lag: SettlementLag | None = None,
        pass_: str = "fundflow",
    ) -> dict[str, Any]:
        """Did ledger day L's money land? The fund-flow bills of the days the lag puts L's money on are
        downloaded per account, kept (hash-checked, never overwritten), parsed and guarded (R31/R32), then
        `fundflow.check_day` against the ledger and the kept trade bill. SETTLEMENT_DIFFERS diffs go to the
        same recon_diff rows (same handle status and history). A fund flow still missing past its due day + 1
        is BLOCKED FUND_FLOW_LATE (alarmed); before that the run is RETRY (PENDING), never agreed."""
        started = self.clock()
        lag, accounts, config_error = self._fund_settings(channel, mchid, lag, accounts)
        run: dict[str, Any] = {
            "pk": recon_pk(channel, mchid, ledger_day),
            "sk": f"run#{iso_now(started)}#{pass_}",
            "channel": channel,
            "mchid": mchid,
            "bill_date": ledger_day,
            "pass": pass_,
            "leg": "fundflow",
            "started_at": iso_now(started),
            "lag": lag.source,
            "accounts": list(accounts),
        }
        run["run_id"] = run["sk"]
        source = self.fund_sources.get(channel)
        if config_error is not None:
            return self._fund_end(run, BLOCKED, config_error, "BAD_MERCHANT_CONFIG")
        if source is None:
            count(M.RECON_NO_BILL_SOURCE, channel=channel, merchant=mchid)
            return self._fund_end(
                run, BLOCKED, f"no fund-flow download for channel {channel}", NO_BILL_SOURCE
            )
        trade = self._trade_figures(channel, mchid, ledger_day)
        ledger = self._ledger_figures(channel, mchid, ledger_day, trade)
        fund_days: dict[str, FundFlowDay] = {}
        run["fund_bills"] = []
        late: list[str] = []
        needs = _needs(ledger, lag, ledger_day)
        for day in sorted({lag.day_of(item, ledger_day) for item in FUND_ITEMS}):
            flow = FundFlowDay(day)
            read = []
            for account in accounts:
                ended, status = self._fund_account(run, source, channel, mchid, day, account, flow)
                if ended is not None:
                    return ended
                read.append(status)
            complete = NOT_READY not in read
            if complete and read.count(NO_STATEMENT) == len(accounts) and needs.get(day):
                # "no bill" for a day the ledger says money moved on: not "nothing moved" (Alipay answers both
                # the same way; WeChat's day not out): not in yet, FUND_FLOW_LATE once overdue (R45)
                run["fund_bills"].append({"day": day, "status": "NO_STATEMENT_BUT_LEDGER"})
                complete = False
            if complete:
                fund_days[day] = flow
            else:
                late.append(day)
        result = check_day(
            mchid,
            channel,
            ledger_day,
            ledger,
            trade=trade,
            fund_days=fund_days,
            lag=lag,
            rows_explain=self._rows_explain(run["pk"]),
        )
        run["fund_verdict"] = result.code
        run["figures"] = {
            "ledger": _figures(result.ledger),
            "trade": _figures(result.trade) if result.trade else None,
            "fund": _figures(result.fund) if result.fund else None,
        }
        seen = self._keep_settlement_diffs(run, result, lag, ledger_day)
        if result.code == PENDING:
            today = china_date(self.clock()).isoformat()
            if late and today > next_day(lag.due(ledger_day)):
                count(M.RECON_FUND_FLOW_LATE, channel=channel, merchant=mchid)
                return self._fund_end(
                    run,
                    BLOCKED,
                    f"fund flow of {', '.join(late)} still not in on {today}: {result.reason}",
                    FUND_FLOW_LATE,
                )
            return self._fund_end(run, RETRY, result.reason)
        run["auto_resolved"] = self._close_healed(run, seen, fund=True)
        if result.diffs:
            return self._fund_end(
                run, DIFFS, f"{result.code}: {len(result.diffs)} difference(s): {result.reason}"
            )
        count(M.RECON_MATCHED, channel=channel, merchant=mchid)
        return self._fund_end(run, MATCHED, result.reason)

    def _fund_account(
        self,
        run: dict[str, Any],
        source: Any,
        channel: str,
        mchid: str,
        day: str,
        account: str,
        flow: FundFlowDay,
    ) -> tuple[dict[str, Any] | None, str]:
        """One account's fund-flow bill of `day`: downloaded, kept (hash-checked, never overwritten), its layout
        gated, parsed into `flow` and guarded (R31/R32). Returns (the run, ended BLOCKED, "") or (None, how the
        download answered: NOT_READY, NO_STATEMENT or read)."""
        try:
            fetched = source.fetch(mchid, day, account)
        except DownloadFailed as exc:
            failed = M.RECON_NO_BILL_SOURCE if exc.code == NO_BILL_SOURCE else M.RECON_DOWNLOAD_FAILED
            count(failed, channel=channel, merchant=mchid)
            return self._fund_blocked(run, BLOCKED, f"fund flow {day} {account}: {exc}", exc.code)
        for name in ("fund_source", "fund_source_why"):  # which download the records chose (R45)
            if fetched.extra.get(name):
                run[name] = fetched.extra[name]
        if fetched.status == NOT_READY:
            return None, NOT_READY
        if fetched.status == NO_STATEMENT:  # no movement on that account that day
            run["fund_bills"].append({"day": day, "account": account, "status": "NO_STATEMENT"})
            return None, NO_STATEMENT
        key = self.archive.keep(
            f"fundflow/{channel}",
            mchid,
            day,
            fetched.name,
            fetched.data,
            fetched.sha1,
            {"channel-hash": fetched.channel_hash} if fetched.channel_hash else None,
        )
        run["fund_bills"].append({"day": day, "account": account, "bill_key": key, "sha1": fetched.sha1})
        if fetched.channel_hash and fetched.channel_hash != fetched.sha1:
            count(M.RECON_PARSE_FAILED, channel=channel, merchant=mchid)
            return self._fund_blocked(
                run,
                BLOCKED,
                f"fund flow {day} {account}: SHA-1 {fetched.sha1} != hash_value "
                f"{fetched.channel_hash} (kept at {key})",
                "HASH_MISMATCH",
            )
        try:
            gate = self.layouts.fund_gate(channel, fetched.data)  # its layout first, as a trade bill's
            run["fund_bills"][-1]["layout_fingerprint"] = gate.shape.fingerprint
            if gate.diff is not None:
                run.update(gate.record())
                return self._fund_blocked(
                    run,
                    BLOCKED,
                    f"fund flow {day} {account}: {gate.reason(channel)}",
                    LAYOUT_QUARANTINED,
                )
            parser = fund_flow_parser(channel, gate.read_as_known(fetched.data, Path()), account)
            flow.extend(parser.rows())
        except BillParseError as exc:
            count(M.RECON_PARSE_FAILED, channel=channel, merchant=mchid)
            return self._fund_blocked(
                run,
                BLOCKED,
                f"fund flow {day} {account} is not a bill we can read: {exc}",
                "PARSE_FAILED",
            )
        verdict = check_guards(parser.totals)
        if verdict.blocked:
            return self._fund_blocked(
                run, BLOCKED, f"fund flow {day} {account}: {verdict.reason}", verdict.code
            )
        return None, "READ"

    def _fund_blocked(
        self, run: dict[str, Any], status: str, reason: str, code: str | None
    ) -> tuple[dict[str, Any], str]:
        return self._fund_end(run, status, reason, code), ""

    def _fund_settings(
        self, channel: str, mchid: str, lag: SettlementLag | None, accounts: tuple[str, ...] | None
    ) -> tuple[SettlementLag, tuple[str, ...], str | None]:
        """The lag and accounts a run uses: the caller's, else the merchant's records (R45), else the channel's
        defaults. A record someone wrote by hand that does not parse is an error (loud), never a default in its
        place."""
        terms = channel_registry.fund_flow_terms(channel)
        if terms is None:
            raise ConfigError(f"channel {channel!r} has no fund flow")
        config_error = None
        if lag is None or accounts is None:
            try:
                config = self.fund_config(channel, mchid) if self.fund_config else {}
                lag = lag or lag_of(terms.lag, config.get("settlement_lag"))
                accounts = accounts or accounts_of(terms, config.get("fund_accounts"))
            except ConfigError as exc:
                config_error = f"merchant {mchid}: {exc}"
        return lag or terms.lag, accounts or terms.default_accounts, config_error

    def _keep_settlement_diffs(
        self, run: dict[str, Any], result: Any, lag: SettlementLag, ledger_day: str
    ) -> set[str]:
        """The run's SETTLEMENT_DIFFERS differences on recon_diff: a new one written (OPEN counted), one seen
        again noted, and an EXPECTED one past the lag opened by itself. Returns the differences' keys."""
        channel, mchid = run["channel"], run["mchid"]
        seen, new = set(), 0
        today = china_date(self.clock()).isoformat()
        for diff in result.diffs:
            seen.add(diff.sk)
            row = self._settlement_row(run, diff, lag, ledger_day, today)
            if self.store.put_new_diff(row):
                new += row["handle_status"] == OPEN
            else:
                self.store.seen_again(run["pk"], diff.sk, run["run_id"], None)
                if (
                    row["handle_status"] == OPEN
                    and "next_step" in row
                    and self.store.open_expected(
                        run["pk"],
                        diff.sk,
                        iso_now(self.clock()),
                        f"still differs past the lag: {row['next_step']}",
                        {"detail": row["detail"], "next_step": row["next_step"]},
                    )
                ):  # an expected difference turns missing by itself, and opens then (#30)
                    new += 1
        if new:
            count(M.RECON_DIFF_OPENED, new, channel=channel, merchant=mchid)
        return seen

    def _ledger_figures(self, channel: str, mchid: str, day: str, trade: DayFigures | None) -> DayFigures:
        """The ledger's day for check_day: settlement amounts folded with reversals (R43), settlement refunds,
        and the day's FEE entries (docs/settlement.md §6.5) by the row they were charged on (a payment's fee is
        charged, a refund's given back, whichever sign the channel writes); a day without any FEE entry: the
        trade bill's fees stand in."""
        local = fold_ledger(self.ledger.day(channel, mchid, day))
        fees = list(self.ledger.fee_rows(channel, mchid, day))
        charged = sum(abs(int(f["amount_cent"])) for f in fees if fee_charged(f))
        returned = sum(abs(int(f["amount_cent"])) for f in fees if not fee_charged(f))
        return DayFigures(
            sum(e.amount_cent for e in local.values() if e.kind == PAYMENT),
            sum(e.amount_cent for e in local.values() if e.kind != PAYMENT),
            charged if fees else (trade.fee_cent if trade else 0),
            returned if fees else (trade.fee_returned_cent if trade else 0),
        )

    def _trade_figures(self, channel: str, mchid: str, day: str) -> DayFigures | None:
        """The kept trade bill's sums for `day` (the latest run's bill); zero for a QUIET day (no bill, no
        ledger entries); None while there is neither."""
        runs = self.store.run_rows(recon_pk(channel, mchid, day))
        key = next((r["bill_key"] for r in runs if r.get("bill_key")), None)
        if key is None:
            quiet = any(r.get("status") == QUIET and r.get("leg") != "fundflow" for r in runs)
            return DayFigures() if quiet else None
        data, _ = self.archive.read(key)
        return trade_figures(OpenedBill(channel, data).parser(check_fees=False).items())

    def _fund_end(
        self, run: dict[str, Any], status: str, reason: str, code: str | None = None
    ) -> dict[str, Any]:
        """A fund-flow run's end: its own recon_runs row; only a BLOCKED one touches the day's work-queue marker
        (a fund flow that agrees must not clear a trade run's block)."""
        run.update(status=status, reason=reason, finished_at=iso_now(self.clock()))
        if any(r.get("leg") != "fundflow" for r in self.store.run_rows(run["pk"])):
            run["statement_key"] = self._statement(run)  # the day's statement now carries this verdict (R45)
        if status == BLOCKED:
            count(M.RECON_BLOCKED, channel=run["channel"], merchant=run["mchid"])
            run.update(block_code=code, guard=code)
            logger.error(
                "recon: fund-flow run blocked", extra={"pk": run["pk"], "code": code, "reason": reason}
            )
        self._put_verdict(run)
        if status == BLOCKED:
            self.store.mark_day(run)
        logger.info("recon fund-flow run finished", extra={k: run.get(k) for k in ("pk", "status", "reason")})
        return run

    # ------------------------------------------------------------ a person's hand

    def resolve(
        self,
        channel: str,
        mchid: str,
        bill_date: str,
        sk: str,
        *,
        by: str,
        note: str,
        ignore: bool = False,
        reverse: bool = False,
    ) -> dict[str, Any]:
        """Close an OPEN diff. `reverse` writes a reversing ledger entry (kind REVERSAL, signed) in the same
        transaction, for the classes where our books moved money the channel did not (R36). Nothing deleted."""
        if not by or not note:
            raise ReconError("say who resolves (--by) and why (--note)")
        pk = recon_pk(channel, mchid, bill_date)
        diff = self.store.diff(pk, sk)
        if diff is None:
            raise ReconError(f"no diff {sk} for {pk}")
        if diff.get("handle_status") != OPEN:
            raise ReconError(f"diff {sk} is {diff.get('handle_status')}, not OPEN")
        status = IGNORED if ignore else RESOLVED
        now = iso_now(self.clock())
        if not reverse:
            if not self.store.close_diff(pk, sk, status, by, note, now):
                raise ReconError(f"diff {sk} changed under us; look again")
            count(M.RECON_DIFF_RESOLVED, channel=channel, merchant=mchid)
            return self.store.diff(pk, sk) or {}
        entry, amount = self._reversal(diff, by, note, now)
        update = self.store.close_diff_update(
            pk, sk, status, by, note, now, {"reversal": entry["pk"], "amount_cent": amount}
        )
        if not self.ledger.close_with_reversal(update, entry):
            raise ReconError(f"diff {sk} changed under us, or its reversal exists; look again")
        count(M.RECON_DIFF_RESOLVED, channel=channel, merchant=mchid)
        logger.info(
            "recon: diff resolved with a reversing entry",
            extra={"diff": sk, "reversal": entry["pk"], "amount_cent": amount, "by": by},
        )
        return self.store.diff(pk, sk) or {}

    def _reversal(self, diff: dict[str, Any], by: str, note: str, now: str) -> tuple[dict[str, Any], int]:
        if diff["item"] == FEE or diff["cls"] not in (LOCAL_ONLY, AMOUNT_DIFFERS):
            raise ReconError(
                f"{diff['cls']} {diff['item']}: no money moved in our books to reverse; "
                "resolve without --reverse (channel-only payments are booked by the pull path)"
            )
        target = self.ledger.booked(diff["key"], diff["mchid"])
        if target is None:
            raise ReconError(f"ledger entry {diff['key']} not found")
        local = int(diff["local_amount_cent"])
        amount = -local if diff["cls"] == LOCAL_ONLY else int(diff["channel_amount_cent"]) - local
        entry = {
            "pk": f"{target['pk']}#{REVERSAL}#{diff['bill_date']}",
            "kind": REVERSAL,
            "reverses": target["pk"],
            "amount_cent": amount,
            "channel": diff["channel"],
            "mchid": diff["mchid"],
            "order_pk": target.get("order_pk"),
            "transaction_id": target.get("transaction_id"),
            "refund_no": target.get("refund_no"),
            "bill_date": target.get("bill_date", diff["bill_date"]),
            "booked_at": now,
            "source": "recon",
            "reason": f"{diff['cls']} resolved by {by}: {note}",
            "diff": f"{diff['pk']}/{diff['sk']}",
        }
        return entry, amount

    # ------------------------------------------------------------ reading

    def show(self, channel: str, mchid: str, bill_date: str) -> dict[str, Any]:
        pk = recon_pk(channel, mchid, bill_date)
        runs = self.store.run_rows(pk)
        latest = runs[0] if runs else None
        view = {
            "pk": pk,
            "runs": runs,
            "diffs": self.store.diffs_of(pk),
            "confirmation": self.store.confirmation(pk),
        }
        if latest and latest.get("report_key"):
            view["report_url"] = self.archive.link(latest["report_key"])
        return view

    # ------------------------------------------------------------ endings

    def _rows_explain(self, pk: str) -> dict[str, int]:
        """Per leg, the channel-minus-ledger sum of the day's row differences that still stand (not healed by a
        later run): what the trade bill's sums may differ by without a difference of their own (R48)."""
        legs = {PAYMENT: SETTLEMENT, REFUND: REFUND, FEE: FEE}
        explained: dict[str, int] = {}
        for row in self.store.diffs_of(pk):
            leg = legs.get(str(row.get("item")))
            healed = (
                row.get("handle_status") == RESOLVED and (row.get("history") or [{}])[-1].get("by") == "recon"
            )
            if row.get("cls") == SETTLEMENT_DIFFERS or leg is None or healed:
                continue
            gap = int(row.get("channel_amount_cent") or 0) - int(row.get("local_amount_cent") or 0)
            explained[leg] = explained.get(leg, 0) + gap
        return explained

    def block(self, run: dict[str, Any], code: str, reason: str) -> dict[str, Any]:
        """End a run BLOCKED (the Distributed Map's merge step uses it for a failed partition)."""
        return self._blocked(run, code, reason)

    def _blocked(self, run: dict[str, Any], code: str, reason: str) -> dict[str, Any]:
        count(M.RECON_BLOCKED, channel=run.get("channel"), merchant=run.get("mchid"))
        run.update(status=BLOCKED, guard=run.get("guard") or code, block_code=code, reason=reason)
        if code == VOLUME_DROP:
            run["reason"] += (
                f" (tally recon confirm --channel {run['channel']} --mchid {run['mchid']} "
                f"--date {run['bill_date']} --by NAME)"
            )
        logger.error("recon: run blocked", extra={"pk": run["pk"], "code": code, "reason": reason})
        return self._finish(run)

    def _finish(self, run: dict[str, Any]) -> dict[str, Any]:
        run["finished_at"] = iso_now(self.clock())
        if run.get("status") in FINISHED:  # a finance person reads every finished day, blocked and quiet too
            run["report_key"] = self._report(run)
        self._put_verdict(run)
        if run.get("status") in FINISHED:  # the day's marker for the work queue (R41): blocked or cleared
            self.store.mark_day(run)
        if run.get("status") in FINISHED:  # the heartbeat: its absence for a day is ReconNotRunAlarm
            count(M.RECON_RUN_COMPLETED)
        logger.info("recon run finished", extra={k: run.get(k) for k in ("pk", "pass", "status", "reason")})
        return run

    def _put_verdict(self, run: dict[str, Any]) -> None:
        """The run row; a finished one (its verdict) with its journal record in the same transaction. The record
        pins the run row and every difference row of the day this run saw (opened, or found again: a difference
        a crashed run opened is pinned by the next run that sees it). A run that saw more than DIFF_REFS
        differences journals them first in records of their own (`recon.pinned_diffs`), DIFF_REFS a record, each
        before the verdict that counts them: a journal item stays far below DynamoDB's 400 KB."""
        if self.journal is None or run.get("status") not in FINISHED:
            self.store.put_run(run)
            return
        mchid, pk = str(run["mchid"]), str(run["pk"])
        at = str(run.get("finished_at") or iso_now(self.clock()))
        seen = [
            pinned_ref("recon_diff", d)
            for d in self.store.diffs_of(pk)
            if d.get("last_seen_run") == run["run_id"]
        ]
        facts: dict[str, Any] = {
            "channel": run["channel"],
            "bill_date": run["bill_date"],
            "pass": run.get("pass"),
            "leg": run.get("leg") or "trade",
            "run_id": run["run_id"],
            "status": run["status"],
            "reason": str(run.get("reason") or ""),
            "block_code": run.get("block_code"),
            "open_diffs": run.get("open_diffs"),
            "diffs_seen": len(seen),
            "confirmed_by": run.get("confirmed_by"),  # R33: a volume drop a person let through
        }
        chunks = [seen[i : i + DIFF_REFS] for i in range(0, len(seen), DIFF_REFS)] or [[]]
        for n, chunk in enumerate(chunks[:-1], start=1):
            self.journal.commit(
                mchid,
                pk,
                kind="recon.pinned_diffs",
                at=at,
                facts={"run_id": run["run_id"], "part": n, "parts": len(chunks), "diffs": len(chunk)},
                items=[],
                transact=self.store.transact,
                refs=chunk,
            )
        self.journal.commit(
            mchid,
            pk,
            kind=f"recon.{str(run['status']).lower()}",
            at=at,
            facts=facts,
            items=[self.store.run_put(run)],
            transact=self.store.transact,
            refs=chunks[-1],
        )

    def _report(self, run: dict[str, Any]) -> str:
        """A CSV a finance person opens in a spreadsheet (UTF-8 with BOM): the run, then every diff."""
        out = io.StringIO()
        w = csv.writer(out)
        totals = run.get("totals", {})
        w.writerow(
            [
                "channel",
                "mchid",
                "bill_date",
                "run",
                "status",
                "reason",
                "bill rows",
                "payments",
                "payment total",
                "refunds",
                "refund total",
                "ledger entries",
                "matched",
            ]
        )
        w.writerow(
            [
                run["channel"],
                run["mchid"],
                run["bill_date"],
                run["run_id"],
                run["status"],
                run.get("reason"),
                totals.get("rows"),
                totals.get("payments"),
                format_cents(totals.get("payment_cent", 0)),
                totals.get("refunds"),
                format_cents(totals.get("refund_cent", 0)),
                run.get("ledger_entries"),
                run.get("stats", {}).get("matched"),
            ]
        )
        w.writerow([])
        w.writerow(
            [
                "difference",
                "item",
                "key",
                "channel amount",
                "our amount",
                "channel status",
                "our status",
                "handle status",
                "handler",
                "detail",
                "recovery",
            ]
        )
        for d in self.store.diffs_of(run["pk"]):
            w.writerow(
                [
                    d["cls"],
                    d["item"],
                    d["key"],
                    _yuan(d.get("channel_amount_cent")),
                    _yuan(d.get("local_amount_cent")),
                    d.get("channel_status"),
                    d.get("local_status"),
                    d.get("handle_status"),
                    d.get("handler") or "",
                    d.get("detail"),
                    d.get("recovery") or "",
                ]
            )
        key = f"reports/{run['channel']}/{run['mchid']}/{run['bill_date']}/{run['run_id'].replace('#', '_')}.csv"
        self.archive.put_report(key, ("\ufeff" + out.getvalue()).encode("utf-8"), "text/csv; charset=utf-8")
        return key


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


def _figures(f: DayFigures) -> dict[str, int]:
    return {
        "settlement_cent": f.settlement_cent,
        "refund_cent": f.refund_cent,
        "fee_cent": f.fee_cent,
        "fee_returned_cent": f.fee_returned_cent,
    }


def _needs(ledger: DayFigures, lag: SettlementLag, ledger_day: str) -> dict[str, bool]:
    """Fund-flow day -> whether the ledger says some of this day's money moves on it."""
    figures = {
        "SETTLEMENT": ledger.settlement_cent,
        "REFUND": ledger.refund_cent,
        "FEE": ledger.fee_cent,
        "FEE_RETURN": ledger.fee_returned_cent,
    }
    needs: dict[str, bool] = {}
    for item in FUND_ITEMS:
        day = lag.day_of(item, ledger_day)
        needs[day] = needs.get(day, False) or bool(figures[item])
    return needs


def fund_flow_parser(channel: str, data: bytes, account: str) -> Any:
    """The channel's fund-flow parser over one kept file (WeChat: the decompressed CSV)."""
    for owner in channel_registry.all_channels():
        if owner.stored == channel:
            parser = owner.open_fund_flow(data, account)
            if parser is not None:
                return parser
    raise BillParseError(f"no fund-flow parser for channel {channel!r}")


def next_day(day: str) -> str:
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat()


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


def _clean(work: Path, downloaded: Path | None) -> None:
    shutil.rmtree(work, ignore_errors=True)
    if downloaded is not None:
        downloaded.unlink(missing_ok=True)


def _yuan(cents: Any) -> str:
    return "" if cents is None else format_cents(int(cents))


def _sha1(data: bytes) -> str:
    from tally.service.recon_sources import sha1_hex

    return sha1_hex(data)


def _is_zip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"PK"
