"""The daily statement per merchant and day (issue #18.5): gross, discounts by funder, refunds, fees, net, and
the three-way verdict (R45). Pure: figures in, CSV text out (people read yuan; the figures stay integer cents).

    summary = summarize(payments, refunds, fee_cent=…, fee_returned_cent=…)   # Settlement / Refund records
    verdict = check_day(mchid, channel, day, summary.figures(), trade=…, fund_days=…)
    text = statement_csv([statement_row(mchid, channel, day, summary, verdict)])
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass

from tally.domain.fundflow import DayFigures, DayVerdict
from tally.domain.money import format_cents
from tally.domain.settlement import Refund, Settlement

NOT_CHECKED = "NOT_CHECKED"  # no verdict was computed for the row (shown, never left blank)

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
    "reason",
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


def statement_row(
    merchant: str, channel: str, day: str, summary: DaySummary, verdict: DayVerdict | None
) -> dict[str, str]:
    """One CSV row: yuan for people, the verdict's code and reason (NOT_CHECKED when there is none)."""
    fund = verdict.fund if verdict is not None else None
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
        "fees_yuan": format_cents(summary.fee_cent),
        "fees_returned_yuan": format_cents(summary.fee_returned_cent),
        "net_yuan": format_cents(summary.net_cent),
        "fund_flow_net_yuan": format_cents(fund.net_cent) if fund is not None else "",
        "verdict": verdict.code if verdict is not None else NOT_CHECKED,
        "reason": verdict.reason if verdict is not None else "no three-way check was run for this day",
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
