"""The fund-flow leg (R45): did a ledger day's money land? The fund-flow bills of the days the settlement lag puts
it on, per account, kept, gated, parsed and guarded, then checked against the ledger and the kept trade bill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
from tally.domain.merchant_day import FUND_ITEMS as FUND_GAP_ITEMS
from tally.domain.merchant_day import fee_charged, settlement_gap
from tally.domain.recon import (
    FEE,
    OPEN,
    PAYMENT,
    REFUND,
    RESOLVED,
    BillParseError,
    Diff,
    check_guards,
    china_date,
    fold_ledger,
)
from tally.observability import M, count, logger
from tally.service.recon_diffs import DiffRows, next_day
from tally.service.recon_endings import BLOCKED, DIFFS, FUND_FLOW_LATE, MATCHED, NO_BILL_SOURCE, QUIET, RETRY
from tally.service.recon_layout import LAYOUT_QUARANTINED
from tally.service.recon_sources import NO_STATEMENT, NOT_READY, DownloadFailed, OpenedBill
from tally.store.recon import recon_pk
from tally.store.tables import iso_now


class FundFlowChecks(DiffRows):
    """`fund_flow`: one fund-flow run of a ledger day, its SETTLEMENT_DIFFERS differences and its end."""

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
