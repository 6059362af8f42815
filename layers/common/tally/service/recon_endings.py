"""How a reconciliation run ends: its statuses, BLOCKED, the finished run's row with its journal record, the CSV
report a finance person reads and the day's statement."""

from __future__ import annotations

import csv
import io
from typing import Any

from tally.domain.money import format_cents, format_stored
from tally.domain.recon import VOLUME_DROP, china_date
from tally.observability import M, count, logger
from tally.service.ledger_day import merchant_lag, statement_text
from tally.service.recon_setup import ReconSetup
from tally.store.journal import pinned_ref
from tally.store.tables import iso_now

MATCHED, DIFFS, QUIET, RETRY, BLOCKED = "MATCHED", "DIFFS", "QUIET", "RETRY", "BLOCKED"
NO_BILL_SOURCE = "NO_BILL_SOURCE"  # the block code of a merchant without a bill download (R44)
FUND_FLOW_LATE = "FUND_FLOW_LATE"  # a fund-flow bill still missing past its due day + 1 (R45)
RUNNING = "RUNNING"  # on the Distributed Map (service/recon_map.py)
FINISHED = {MATCHED, DIFFS, QUIET, BLOCKED}
DIFF_REFS = 400  # difference rows one journal record pins (~350 bytes each: a record stays below 400 KB)


class RunEndings(ReconSetup):
    """Ending a run (trade or fund-flow leg): BLOCKED, or finished with its report, verdict and day marker."""

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
                    format_stored(d.get("channel_amount_cent")),
                    format_stored(d.get("local_amount_cent")),
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
