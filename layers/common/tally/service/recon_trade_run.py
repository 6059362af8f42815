"""One trade-bill run of a merchant's day: the bill fetched from the channel (or read back from S3) and kept, its
layout gated, parsed once and guarded (R31–R33), then matched (recon_matching.py)."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from tally.domain.recon import CHINA, BillIndex, BillParseError, check_guards, previous_day
from tally.observability import M, count
from tally.service.recon_endings import NO_BILL_SOURCE, QUIET, RETRY
from tally.service.recon_layout import LAYOUT_QUARANTINED
from tally.service.recon_matching import TradeMatching
from tally.service.recon_partition import Partitioned, partition_bill, partition_file, tmp_dir
from tally.service.recon_sources import NO_STATEMENT, NOT_READY, DownloadFailed, OpenedBill
from tally.store.recon import recon_pk
from tally.store.tables import iso_now


class TradeRuns(TradeMatching):
    """`run`: one reconciliation of one merchant's trade bill of a day, up to its guards; re-running is idempotent."""

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


def _clean(work: Path, downloaded: Path | None) -> None:
    shutil.rmtree(work, ignore_errors=True)
    if downloaded is not None:
        downloaded.unlink(missing_ok=True)


def _sha1(data: bytes) -> str:
    from tally.service.recon_sources import sha1_hex

    return sha1_hex(data)


def _is_zip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"PK"
