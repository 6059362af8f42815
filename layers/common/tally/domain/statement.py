"""The daily statement per merchant and day (issue #18.5): gross, discounts by funder, refunds, fees, net, and
the three-way verdict (R45). Pure: figures in, CSV text out (people read yuan; the figures stay integer cents).

    summary = summarize(payments, refunds, fee_cent=…, fee_returned_cent=…)   # Settlement / Refund records
    verdict = check_day(mchid, channel, day, summary.figures(), trade=…, fund_days=…, lag=…)   # or, from the runs:
    verdict = day_verdict(recon_runs_rows_newest_first)                                   # AGREES / DIFFERS / …
    text = statement_csv([statement_row(mchid, channel, day, summary, verdict)])
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tally.domain.fundflow import AGREED, FUND_DIFFERS, TRADE_DIFFERS, DayFigures, DayVerdict
from tally.domain.merchant_day import EXPECTED, OPEN, MerchantDay
from tally.domain.money import format_cents
from tally.domain.recon import SETTLEMENT_DIFFERS
from tally.domain.settlement import Refund, Settlement

NOT_CHECKED = "NOT_CHECKED"  # no verdict was computed for the row (shown, never left blank), with the reason
# the statement's three-way verdict (ledger = trade bill = fund flow, R45), what finance reads
AGREES = "AGREES"  # all three agree
DIFFERS = "DIFFERS"  # a leg differs: `legs` says which (trade bill, fund flow)
PENDING = "PENDING"  # the fund flow (or the trade bill) is not in yet: not due, or retried until late
DONE = "DONE"  # a run found differences and a person has worked every one of them: done (R49)
STATEMENT_VERDICTS = (AGREES, DIFFERS, PENDING, NOT_CHECKED, DONE)
TRADE_LEG, FUND_LEG = "trade bill", "fund flow"
_FINISHED = ("MATCHED", "DIFFS", "QUIET", "BLOCKED")

COLUMNS = (
    "merchant",
    "channel",
    "day",
    "payments",
    "gross_yuan",
    "merchant_funded_discount_yuan",
    "channel_funded_discount_yuan",
    "unattributed_discount_yuan",
    "payer_paid_yuan",
    "settlement_yuan",
    "refunds",
    "refunded_yuan",
    "fees_yuan",
    "fees_returned_yuan",
    "net_yuan",
    "fund_flow_net_yuan",
    "verdict",
    "differs",
    "reason",
    "fees_status",  # "booked" or "not booked yet" (then fees_yuan is empty and the net leaves them out)
    "due",  # the fund-flow day the day's money is due on (the settlement lag)
    "landing",  # LANDED / SHORT / IN_TRANSIT / MISSING / NOT_CHECKED (domain/merchant_day)
    "short_by_yuan",  # net - fund flow net, once the fund flow is read
)


@dataclass(frozen=True, slots=True)
class DaySummary:
    """One merchant's day from its ledger entries (cents)."""

    payments: int = 0
    gross_cent: int = 0  # order amounts
    merchant_funded_cent: int = 0
    channel_funded_cent: int = (
        0  # the channel's and other funders' share (WeChat wechatpay+other, Alipay other)
    )
    unattributed_cent: int = (
        0  # discounts no funder field accounts for (v2 CASH coupons, bare Alipay discounts)
    )
    payer_cent: int = 0
    settlement_cent: int = 0
    refunds: int = 0
    refund_cent: int = 0  # settlement refunds
    fee_cent: int = 0
    fee_returned_cent: int = 0

    @property
    def net_cent(self) -> int:
        return self.settlement_cent - self.refund_cent - self.fee_cent + self.fee_returned_cent

    def figures(self) -> DayFigures:
        """What check_day compares with the trade bill and the fund flow."""
        return DayFigures(self.settlement_cent, self.refund_cent, self.fee_cent, self.fee_returned_cent)


def summarize(
    payments: Iterable[Settlement],
    refunds: Iterable[Refund],
    *,
    fee_cent: int = 0,
    fee_returned_cent: int = 0,
) -> DaySummary:
    """Add one day's payment and refund records; fees come from the FEE entries (charged, given back)."""
    if fee_cent < 0 or fee_returned_cent < 0:
        raise ValueError("fees charged and fees given back are each given as positive cents")
    n = gross = merchant = channel = unattributed = payer = settlement = 0
    for p in payments:
        n += 1
        gross += p.total_cent
        merchant += p.merchant_funded_cent
        channel += p.channel_funded_cent + p.other_funded_cent
        unattributed += p.unattributed_cent
        payer += p.payer_cent
        settlement += p.settlement_cent
    r = refunded = 0
    for refund in refunds:
        r += 1
        refunded += refund.settlement_refund_cent
    return DaySummary(
        n, gross, merchant, channel, unattributed, payer, settlement, r, refunded, fee_cent, fee_returned_cent
    )


@dataclass(frozen=True, slots=True)
class StatementVerdict:
    """One merchant's day, three ways, as the statement, `tally ledger day` and the console show it."""

    code: str  # one of STATEMENT_VERDICTS
    reason: str
    legs: tuple[str, ...] = ()  # DIFFERS: which leg(s) (TRADE_LEG, FUND_LEG)
    fund_net_cent: int | None = None  # what the fund flow moved for the day (lag applied), when checked

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "reason": self.reason,
            "differs": list(self.legs),
            "fund_net_cent": self.fund_net_cent,
        }


def from_check(verdict: DayVerdict) -> StatementVerdict:
    """fundflow.check_day's verdict in the statement's words (AGREED → AGREES, *_DIFFERS → DIFFERS + leg)."""
    legs: tuple[str, ...] = ()
    if verdict.code in (FUND_DIFFERS, TRADE_DIFFERS):
        kinds = {d.item.startswith("TRADE_") for d in verdict.diffs}
        legs = tuple(leg for leg, on in ((TRADE_LEG, True in kinds), (FUND_LEG, False in kinds)) if on) or (
            (FUND_LEG,) if verdict.code == FUND_DIFFERS else (TRADE_LEG,)
        )
    code = {AGREED: AGREES, FUND_DIFFERS: DIFFERS, TRADE_DIFFERS: DIFFERS}.get(verdict.code, PENDING)
    fund = verdict.fund.net_cent if verdict.fund is not None else None
    return StatementVerdict(code, verdict.reason, legs, fund)


def day_verdict(
    runs: Iterable[Mapping[str, Any]],
    *,
    fund_flow_source: bool = True,
    diffs: Iterable[Mapping[str, Any]] | None = None,
) -> StatementVerdict:
    """The three-way verdict of one merchant's day from its recon_runs rows (newest first, as ReconStore.run_rows
    answers): the latest finished trade run (R31–R36) and the latest fund-flow run (R45). Pure.

    DIFFERS   the trade run found differences (trade bill) and/or the fund-flow run did (fund flow, or its
              trade-bill sums: trade bill)
    AGREES    the trade run MATCHED (or QUIET) and the fund-flow run MATCHED (ledger = trade bill = fund flow)
    PENDING   the fund-flow check has not run yet (the schedule runs it on T+2 and T+3, when the lagged bill can
              be out) or is retrying because a fund-flow day is not in yet
    NOT_CHECKED with the reason: no trade run yet, the trade or fund-flow run BLOCKED (guard, late, no source,
              a bad merchant record), or no fund-flow source for the channel
    DONE      `diffs` given (the day's recon_diff rows as they are now, R49): a leg whose run ended DIFFS
              differs only while one of its differences is open; when a person has worked them all the day
              is DONE, the differences counted worked and open apart"""
    if diffs is not None:
        return _worked(day_verdict(runs, fund_flow_source=fund_flow_source), list(diffs))
    trade = fund = None
    for run in runs:
        if run.get("leg") == "fundflow":
            fund = fund or run
        elif trade is None and run.get("status") in _FINISHED:
            trade = run
    fund_net = _fund_net(fund)
    if trade is None:
        return StatementVerdict(NOT_CHECKED, "no reconciliation run has finished for this day", (), fund_net)
    if trade.get("status") == "BLOCKED":
        return StatementVerdict(
            NOT_CHECKED,
            f"trade bill BLOCKED {trade.get('block_code') or ''}: {trade.get('reason', '')}".strip(),
            (),
            fund_net,
        )
    legs = [TRADE_LEG] if trade.get("status") == "DIFFS" else []
    reasons = [f"trade bill: {trade.get('reason', '')}"] if legs else []
    if not fund_flow_source:
        if legs:
            return StatementVerdict(DIFFERS, "; ".join(reasons), tuple(legs), None)
        return StatementVerdict(NOT_CHECKED, "no fund-flow source for this channel", (), None)
    status = (fund or {}).get("status")
    if status == "DIFFS":
        code = (fund or {}).get("fund_verdict")
        leg = TRADE_LEG if code == TRADE_DIFFERS else FUND_LEG
        if leg not in legs:
            legs.append(leg)
        reasons.append(f"fund-flow check: {(fund or {}).get('reason', '')}")
    if legs:
        return StatementVerdict(DIFFERS, "; ".join(reasons), tuple(legs), fund_net)
    if fund is None:
        return StatementVerdict(
            PENDING, "fund flow not checked yet (due once the settlement lag has passed)", (), None
        )
    if status == "RETRY":
        return StatementVerdict(PENDING, str(fund.get("reason", "fund flow not in yet")), (), fund_net)
    if status == "BLOCKED":
        return StatementVerdict(
            NOT_CHECKED,
            f"fund flow BLOCKED {fund.get('block_code') or ''}: {fund.get('reason', '')}".strip(),
            (),
            fund_net,
        )
    return StatementVerdict(AGREES, "ledger = trade bill = fund flow", (), fund_net)


def _worked(verdict: StatementVerdict, diffs: list[Mapping[str, Any]]) -> StatementVerdict:
    """A DIFFERS verdict read against the differences as they are now: the legs with an open difference still
    differ; none open: DONE, with the worked and open counts."""
    if verdict.code != DIFFERS:
        return verdict
    open_legs = {
        FUND_LEG
        if d.get("cls") == SETTLEMENT_DIFFERS and not str(d.get("item", "")).startswith("TRADE_")
        else TRADE_LEG
        for d in diffs
        if d.get("handle_status") == OPEN
    }
    n_open = sum(1 for d in diffs if d.get("handle_status") == OPEN)
    n_expected = sum(1 for d in diffs if d.get("handle_status") == EXPECTED)
    counts = f"DIFFS: {len(diffs) - n_open - n_expected} resolved, {n_open} open"
    legs = tuple(leg for leg in verdict.legs if leg in open_legs)
    if not legs and n_expected:
        return StatementVerdict(
            PENDING,
            f"{counts}, {n_expected} expected (in transit, inside the lag)",
            (),
            verdict.fund_net_cent,
        )
    if not legs:
        return StatementVerdict(DONE, f"{counts}: every difference worked", (), verdict.fund_net_cent)
    return StatementVerdict(DIFFERS, f"{counts}; {verdict.reason}", legs, verdict.fund_net_cent)


def _fund_net(fund: Mapping[str, Any] | None) -> int | None:
    figures = ((fund or {}).get("figures") or {}).get("fund")
    if not figures:
        return None
    return DayFigures(
        int(figures["settlement_cent"]),
        int(figures["refund_cent"]),
        int(figures["fee_cent"]),
        int(figures["fee_returned_cent"]),
    ).net_cent


def summary_of(day: MerchantDay) -> DaySummary:
    """The statement's figures of a merchant-day (domain/merchant_day, R49): reversals folded into the
    settlement or refund they correct, fees not booked yet as zero (the row says so in `fees_status`)."""
    return DaySummary(
        day.payments,
        day.gross_cent,
        day.merchant_funded_cent,
        day.channel_funded_cent,
        day.unattributed_cent,
        day.payer_cent,
        day.settlement_cent,
        day.refunds,
        day.refunded_cent,
        day.fee_cent or 0,
        day.fee_returned_cent,
    )


def statement_row(
    merchant: str,
    channel: str,
    day: str,
    summary: DaySummary | MerchantDay,
    verdict: DayVerdict | StatementVerdict | None,
) -> dict[str, str]:
    """One CSV row: yuan for people, the three-way verdict, which leg differs, and why (NOT_CHECKED, with a
    reason, when there is none). Given the merchant-day (R49), its fee status, due day, landing and shortfall
    too; a figure not known is an empty cell, its status in the column beside it."""
    if isinstance(verdict, DayVerdict):
        verdict = from_check(verdict)
    if verdict is None:
        verdict = StatementVerdict(NOT_CHECKED, "no three-way check was run for this day")
    the_day = summary if isinstance(summary, MerchantDay) else None
    if isinstance(summary, MerchantDay):
        summary = summary_of(summary)
    fund_net = verdict.fund_net_cent
    fees_known = the_day is None or the_day.fees_known
    short = the_day.short_cent if the_day is not None else None
    return {
        "merchant": merchant,
        "channel": channel,
        "day": day,
        "payments": str(summary.payments),
        "gross_yuan": format_cents(summary.gross_cent),
        "merchant_funded_discount_yuan": format_cents(summary.merchant_funded_cent),
        "channel_funded_discount_yuan": format_cents(summary.channel_funded_cent),
        "unattributed_discount_yuan": format_cents(summary.unattributed_cent),
        "payer_paid_yuan": format_cents(summary.payer_cent),
        "settlement_yuan": format_cents(summary.settlement_cent),
        "refunds": str(summary.refunds),
        "refunded_yuan": format_cents(summary.refund_cent),
        "fees_yuan": format_cents(summary.fee_cent) if fees_known else "",
        "fees_returned_yuan": format_cents(summary.fee_returned_cent),
        "net_yuan": format_cents(summary.net_cent),
        "fund_flow_net_yuan": format_cents(fund_net) if fund_net is not None else "",
        "verdict": verdict.code,
        "differs": ", ".join(verdict.legs),
        "reason": verdict.reason,
        "fees_status": "booked" if fees_known else "not booked yet",
        "due": (the_day.due or "") if the_day is not None else "",
        "landing": the_day.landing if the_day is not None else "",
        "short_by_yuan": format_cents(short) if short is not None else "",
    }


def statement_csv(rows: Iterable[dict[str, str]]) -> str:
    """The statement as CSV text for a spreadsheet: a BOM first (as service.ledger_day.csv_text writes, so Excel
    reads the UTF-8), the header, one line per row (CRLF, as csv writes them)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="raise")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return "\ufeff" + out.getvalue()
