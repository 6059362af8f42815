"""The finance view of one day (issue #14): payments, refunds, fees and net per merchant and channel for one
bill_date (the channel's day, Asia/Shanghai), next to that day's reconciliation verdict. Read-only (R42).

The ledger is read through its `by_bill_date` index (one paged Query for the day, never a scan); fees are what
the day's latest finished recon run recorded from the channel's bill (`totals.fee_e5`, rounded half up to the
fen): before a run has read the bill they are "not booked yet" and the net leaves them out, saying so.

    LedgerDayService(ledger, recon, merchants).day("2024-05-01", merchant=None) -> {
        "bill_date", "merchant",
        "rows": [{"channel", "mchid", "payments", "payment_cent", "payment_yuan", "refunds", "refund_cent",
                  "refund_yuan", "reversals", "reversal_cent", "reversal_yuan", "fee_cent" (None: not booked),
                  "fee_yuan" ("not booked yet"), "net_cent", "net_yuan", "net_includes_fee",
                  "recon": {"status", "reason", "run", "open_diffs", "finished_at"} or None}, ...],
        "totals": {same money fields summed},
    }
`csv_text(view)` renders it for a spreadsheet (UTF-8 with BOM, yuan with two decimals).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from tally.channels import registry as channel_registry
from tally.domain.money import format_cents
from tally.domain.recon import round_units
from tally.store.recon import recon_pk

NOT_BOOKED = "not booked yet"
RECONCILED_CHANNELS = (
    channel_registry.reconciled()
)  # the stored channels whose bills the recon function reads
FINISHED = ("MATCHED", "DIFFS", "QUIET", "BLOCKED")


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
            else:  # REVERSAL: signed corrections a person booked from a recon difference (R36)
                cell["reversals"] += 1
                cell["reversal_cent"] += amount
        for channel, mchid in self.merchants() if self.merchants else []:
            if channel in RECONCILED_CHANNELS and (merchant is None or mchid == merchant):
                cells.setdefault((channel, mchid), _empty())
        rows = []
        for (channel, mchid), cell in sorted(cells.items()):
            run = self._latest_run(channel, mchid, bill_date)
            if run is None and not any(cell[k] for k in ("payments", "refunds", "reversals")):
                continue  # a configured merchant with nothing booked and no run: nothing to show
            rows.append(_finish({"channel": channel, "mchid": mchid, **cell}, run))
        return {"bill_date": bill_date, "merchant": merchant, "rows": rows, "totals": _totals(rows)}

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
    }


def _finish(row: dict[str, Any], run: dict[str, Any] | None) -> dict[str, Any]:
    totals = (run or {}).get("totals") or {}
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
        }
        w.writerow([flat.get(key, "") for _, key in CSV_COLUMNS])
    return "\ufeff" + out.getvalue()
