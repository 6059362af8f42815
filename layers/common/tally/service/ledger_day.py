"""The finance view of one day (issue #14): payments, refunds, fees and net per merchant and channel for one
bill_date (the channel's day, Asia/Shanghai), next to that day's reconciliation verdict. Read-only (R42).

The ledger is read through its `by_bill_date` index (one paged Query for the day, never a scan); fees are the
day's FEE entries (booked by recon from the bill's rows once its guards passed, docs/settlement.md §6.5); a day
reconciled before FEE entries existed falls back to its latest finished run's `totals.fee_e5` (rounded half up
to the fen); before a run has read the bill they are "not booked yet" and the net leaves them out, saying so.

    LedgerDayService(ledger, recon, merchants).day("2024-05-01", merchant=None) -> {
        "bill_date", "merchant",
        "rows": [{"channel", "mchid", "payments", "payment_cent", "payment_yuan", "refunds", "refund_cent",
                  "refund_yuan", "reversals", "reversal_cent", "reversal_yuan", "fee_cent" (None: not booked),
                  "fee_yuan" ("not booked yet"), "net_cent", "net_yuan", "net_includes_fee",
                  "recon": {"status", "reason", "run", "open_diffs", "finished_at"} or None,
                  "verdict": {"code" AGREES|DIFFERS|PENDING|NOT_CHECKED, "reason", "differs", "fund_net_cent"}}, ...],
        "totals": {same money fields summed},
    }
`csv_text(view)` renders it for a spreadsheet (UTF-8 with BOM, yuan with two decimals).

The daily statement (docs/settlement.md §5, §6.7) is built from the same entries by `day_summary` (settlement
figures per entry, R43; an entry without them counts at `amount_cent`, as recon matches it) and rendered by
`domain/statement`: `LedgerDayService.statement(day)` for `tally ledger day --statement`, `statement_text`
for the recon run that writes `reports/{channel}/{mchid}/{day}/statement.csv`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from tally.channels import registry as channel_registry
from tally.domain.money import format_cents
from tally.domain.recon import matched_cent, round_units
from tally.domain.statement import (
    NOT_CHECKED,
    DaySummary,
    StatementVerdict,
    day_verdict,
    statement_csv,
    statement_row,
)
from tally.store.recon import recon_pk

NOT_BOOKED = "not booked yet"
RECONCILED_CHANNELS = (
    channel_registry.reconciled()
)  # the stored channels whose bills the recon function reads
FINISHED = ("MATCHED", "DIFFS", "QUIET", "BLOCKED")


def day_summary(entries: Any) -> DaySummary:
    """One merchant's and channel's day from its ledger entries: PAYMENT (settlement figures, R43), REFUND
    (settlement refund), FEE (charged > 0, given back < 0), REVERSAL (added to the settlement or refund it
    corrects, as recon folds it). The statement's one way to build a day."""
    n = gross = merchant = channel = unattributed = payer = settlement = 0
    r = refunded = fee = returned = 0
    kinds: dict[str, str] = {}
    reversals = []
    for e in entries:
        kind = e.get("kind", "PAYMENT")
        kinds[str(e.get("pk"))] = kind
        if kind == "PAYMENT":
            n += 1
            amount = int(e.get("amount_cent", 0))
            gross += int(e.get("total_cent", e.get("order_total_cent", amount)))
            merchant += int(e.get("merchant_funded_cent", 0))
            channel += int(e.get("channel_funded_cent", 0)) + int(e.get("other_funded_cent", 0))
            unattributed += int(e.get("unattributed_cent", 0))
            payer += int(e.get("payer_cent", amount))
            settlement += matched_cent(e)
        elif kind == "REFUND":
            r += 1
            refunded += matched_cent(e)
        elif kind == "FEE":  # charged on a payment row, given back on a refund row, whatever the sign (R45)
            cents = int(e["amount_cent"])
            charged = e.get("of") == "PAYMENT" if e.get("of") else cents > 0
            fee, returned = (fee + abs(cents), returned) if charged else (fee, returned + abs(cents))
        else:
            reversals.append(e)
    for e in reversals:  # a person's correction of a recon difference (R36), signed
        if kinds.get(str(e.get("reverses"))) == "REFUND":
            refunded += int(e["amount_cent"])
        else:
            settlement += int(e["amount_cent"])
    return DaySummary(
        n, gross, merchant, channel, unattributed, payer, settlement, r, refunded, fee, returned
    )


def statement_text(
    channel: str, mchid: str, bill_date: str, entries: Any, runs: list[dict[str, Any]] | None = None
) -> str:
    """The statement CSV of one merchant's day, with its three-way verdict from the day's recon runs (R45)."""
    verdict = day_verdict(runs) if runs is not None else None
    return statement_csv([statement_row(mchid, channel, bill_date, day_summary(entries), verdict)])


class LedgerDayService:
    def __init__(self, ledger: Any, recon: Any, merchants: Callable[[], list[tuple[str, str]]] | None = None):
        self.ledger = ledger  # store.recon.LedgerView
        self.recon = recon  # store.recon.ReconStore
        self.merchants = merchants  # store.tables.MerchantStore.configured: (channel, merchant id)

    def day(self, bill_date: str, merchant: str | None = None) -> dict[str, Any]:
        cells: dict[tuple[str, str], dict[str, Any]] = {}
        for entry in self.ledger.all_of_day(bill_date, mchid=merchant):
            cell = cells.setdefault((str(entry.get("channel")), str(entry.get("mchid"))), _empty())
            amount = int(entry.get("amount_cent", 0))
            kind = entry.get("kind", "PAYMENT")
            if kind == "PAYMENT":
                cell["payments"] += 1
                cell["payment_cent"] += amount
            elif kind == "REFUND":
                cell["refunds"] += 1
                cell["refund_cent"] += amount
            elif kind == "FEE":  # charged (positive) or given back (negative), one entry per bill row
                cell["fee_entries"] += 1
                cell["fee_entry_cent"] += amount
            else:  # REVERSAL: signed corrections a person booked from a recon difference (R36)
                cell["reversals"] += 1
                cell["reversal_cent"] += amount
        for channel, mchid in self.merchants() if self.merchants else []:
            if channel in RECONCILED_CHANNELS and (merchant is None or mchid == merchant):
                cells.setdefault((channel, mchid), _empty())
        rows = []
        for (channel, mchid), cell in sorted(cells.items()):
            run = self._latest_run(channel, mchid, bill_date)
            if run is None and not any(cell[k] for k in ("payments", "refunds", "reversals", "fee_entries")):
                continue  # a configured merchant with nothing booked and no run: nothing to show
            row = _finish({"channel": channel, "mchid": mchid, **cell}, run)
            row["verdict"] = self._verdict(channel, mchid, bill_date).as_dict()
            rows.append(row)
        return {"bill_date": bill_date, "merchant": merchant, "rows": rows, "totals": _totals(rows)}

    def statement(self, bill_date: str, merchant: str | None = None) -> list[dict[str, str]]:
        """The statement rows of the day, one per merchant and channel (the same rows the recon run writes)."""
        cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for entry in self.ledger.all_of_day(bill_date, mchid=merchant):
            cells.setdefault((str(entry.get("channel")), str(entry.get("mchid"))), []).append(entry)
        return [
            statement_row(
                mchid, channel, bill_date, day_summary(entries), self._verdict(channel, mchid, bill_date)
            )
            for (channel, mchid), entries in sorted(cells.items())
        ]

    def _verdict(self, channel: str, mchid: str, bill_date: str) -> StatementVerdict:
        """ledger = trade bill = fund flow for the day, from its recon runs (domain/statement.day_verdict)."""
        if channel not in RECONCILED_CHANNELS:
            return StatementVerdict(NOT_CHECKED, f"channel {channel} is not reconciled")
        return day_verdict(self.recon.run_rows(recon_pk(channel, mchid, bill_date)))

    def _latest_run(self, channel: str, mchid: str, bill_date: str) -> dict[str, Any] | None:
        if channel not in RECONCILED_CHANNELS:
            return None
        runs = self.recon.run_rows(recon_pk(channel, mchid, bill_date))  # newest first
        finished = [r for r in runs if r.get("status") in FINISHED]
        return (finished or runs or [None])[0]


def _empty() -> dict[str, Any]:
    return {
        "payments": 0,
        "payment_cent": 0,
        "refunds": 0,
        "refund_cent": 0,
        "reversals": 0,
        "reversal_cent": 0,
        "fee_entries": 0,
        "fee_entry_cent": 0,
    }


def _finish(row: dict[str, Any], run: dict[str, Any] | None) -> dict[str, Any]:
    totals = (run or {}).get("totals") or {}
    if row["fee_entries"]:
        fee: int | None = row["fee_entry_cent"]  # from the ledger (FEE entries)
    else:  # a day reconciled before FEE entries were booked: the run's own figure
        fee = round_units(int(totals["fee_e5"]), 5, 2) if isinstance(totals.get("fee_e5"), int) else None
    row["fee_cent"] = fee
    net = row["payment_cent"] - row["refund_cent"] + row["reversal_cent"] - (fee or 0)
    row["net_cent"] = net
    row["net_includes_fee"] = fee is not None
    row["recon"] = (
        None
        if run is None
        else {
            "status": run.get("status"),
            "reason": run.get("reason", ""),
            "run": run.get("sk"),
            "open_diffs": run.get("open_diffs", 0),
            "finished_at": run.get("finished_at"),
        }
    )
    return _yuans(row)


def _yuans(row: dict[str, Any]) -> dict[str, Any]:
    for name in ("payment", "refund", "reversal", "fee", "net"):
        cents = row.get(f"{name}_cent")
        row[f"{name}_yuan"] = NOT_BOOKED if cents is None else format_cents(int(cents))
    return row


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {k: sum(r[k] for r in rows) for k in _empty()}
    fees = [r["fee_cent"] for r in rows if r["fee_cent"] is not None]
    total["fee_cent"] = sum(fees) if fees else None
    total["fees_missing_for"] = sum(1 for r in rows if r["fee_cent"] is None)
    total["net_cent"] = sum(r["net_cent"] for r in rows)
    return _yuans(total)


CSV_COLUMNS = [
    ("bill_date", "bill_date"),
    ("channel", "channel"),
    ("merchant", "mchid"),
    ("payments", "payments"),
    ("payments_yuan", "payment_yuan"),
    ("refunds", "refunds"),
    ("refunds_yuan", "refund_yuan"),
    ("reversals_yuan", "reversal_yuan"),
    ("fees_yuan", "fee_yuan"),
    ("net_yuan", "net_yuan"),
    ("recon", "recon_status"),
    ("open_diffs", "open_diffs"),
    ("recon_reason", "recon_reason"),
    ("verdict", "verdict_code"),  # ledger = trade bill = fund flow (R45)
    ("differs", "verdict_differs"),
    ("verdict_reason", "verdict_reason"),
]


def csv_text(view: dict[str, Any]) -> str:
    """The day for a spreadsheet: one line per merchant and channel, then the total (UTF-8 with BOM)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow([title for title, _ in CSV_COLUMNS])
    for row in [*view["rows"], {**view["totals"], "channel": "TOTAL", "mchid": ""}]:
        recon = row.get("recon") or {}
        flat = {
            **row,
            "bill_date": view["bill_date"],
            "recon_status": recon.get("status")
            or ("" if row.get("channel") == "TOTAL" else "not reconciled"),
            "open_diffs": recon.get("open_diffs", ""),
            "recon_reason": recon.get("reason", ""),
            "verdict_code": (row.get("verdict") or {}).get("code", ""),
            "verdict_differs": ", ".join((row.get("verdict") or {}).get("differs", [])),
            "verdict_reason": (row.get("verdict") or {}).get("reason", ""),
        }
        w.writerow([flat.get(key, "") for _, key in CSV_COLUMNS])
    return "\ufeff" + out.getvalue()
