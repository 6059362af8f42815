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
    for key in merchants:
        row = rows[key]
        figures = data.recon_day(key[0], key[1], day)["day"]["figures"]
        seen = {
            "ledger": (row["payment_yuan"], row["fee_yuan"], row["net_yuan"]),
            "csv": (table[key]["payments_yuan"], table[key]["fees_yuan"], table[key]["net_yuan"]),
            "statement": (
                statement[key]["settlement_yuan"],
                statement[key]["fees_yuan"],
                statement[key]["net_yuan"],
            )
            if row["reversals"] == 0
            else (row["payment_yuan"], statement[key]["fees_yuan"], statement[key]["net_yuan"]),
            "console recon": (figures["payment_yuan"], figures["fee_yuan"], figures["net_yuan"]),
        }
        assert len(set(seen.values())) == 1, (day, key, seen)
        assert not row["fee_yuan"].startswith("-"), (day, key, row["fee_yuan"])
