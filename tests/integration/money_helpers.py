"""R49's check shared by the merchant-day tests, the simulated week and the demo morning: every view of a
day shows the same payments, fees and net."""

from __future__ import annotations

import csv
import io

from tally import bootstrap
from tally.console import data


def assert_views_agree(day: str, merchants: list[tuple[str, str]]) -> None:
    """R49 for a whole day: the ledger day's rows, its CSV, the statement and the console's Recon page carry
    the same payments, fees and net per merchant, and no fee is negative."""
    wrong = views_disagree(day, merchants)
    assert not wrong, wrong


def views_disagree(day: str, merchants: list[tuple[str, str]]) -> list[str]:
    """What `assert_views_agree` checks, as lines naming the day, merchant and each view's figures (the
    simulation reports them as violations of its day)."""
    from tally.service.ledger_day import csv_text

    service = bootstrap.ledger_day_service()
    view = service.day(day)
    table = {
        (r["channel"], r["merchant"]): r
        for r in csv.DictReader(io.StringIO(csv_text(view).lstrip("\ufeff")))
        if r["channel"] != "TOTAL"
    }
    statement = {(r["channel"], r["merchant"]): r for r in service.statement(day)}
    rows = {(r["channel"], r["mchid"]): r for r in view["rows"]}
    wrong: list[str] = []
    for key in merchants:
        if key not in rows:
            wrong.append(f"R49 {day} {key}: not in the ledger day's rows")
            continue
        row = rows[key]
        figures = data.recon_day(key[0], key[1], day)["day"]["figures"]
        seen = {
            "ledger": (row["payment_yuan"], row["fee_yuan"], row["net_yuan"]),
            "csv": (table[key]["payments_yuan"], table[key]["fees_yuan"], table[key]["net_yuan"]),
            "console recon": (figures["payment_yuan"], figures["fee_yuan"], figures["net_yuan"]),
        }
        if key in statement:
            seen["statement"] = (
                statement[key]["settlement_yuan"] if row["reversals"] == 0 else row["payment_yuan"],
                statement[key]["fees_yuan"],
                statement[key]["net_yuan"],
            )
        elif (row["payments"], row["refunds"], row["reversals"], row["net_cent"]) != (0, 0, 0, 0):
            wrong.append(f"R49 {day} {key}: money booked ({row['net_yuan']}) but no statement row")
        if len(set(seen.values())) != 1:
            wrong.append(f"R49 {day} {key}: the views differ: {seen}")
        if row["fee_yuan"].startswith("-"):
            wrong.append(f"R49 {day} {key}: a negative fee {row['fee_yuan']}")
    return wrong
