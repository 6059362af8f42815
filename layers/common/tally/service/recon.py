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

from datetime import datetime
from typing import Any

from tally.channels import registry as channel_registry
from tally.domain.recon import scheduled_days
from tally.observability import M, count, logger
from tally.service.recon_endings import BLOCKED, FINISHED, RUNNING
from tally.service.recon_fund_flow import FundFlowChecks
from tally.service.recon_fund_flow import (
    fund_flow_parser as fund_flow_parser,  # recon_layout.py reads it here
)
from tally.service.recon_matching import fee_entry_rows as fee_entry_rows  # bench/ times it from here
from tally.service.recon_resolve import DiffResolution, ReconError
from tally.service.recon_trade_run import TradeRuns
from tally.store.recon import recon_pk
from tally.store.tables import event_key, iso_now


class ReconService(TradeRuns, FundFlowChecks, DiffResolution):
    """Reconciliation of every configured merchant's days: the daily schedule, a bill dropped in S3, a person's
    confirmation, and the view of a day. Each run's use case lives in its own module: the trade bill's run
    (recon_trade_run.py, matching in recon_matching.py), the fund-flow leg (recon_fund_flow.py), the difference rows
    (recon_diffs.py), how a run ends (recon_endings.py) and a person resolving a difference (recon_resolve.py)."""

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
