"""#17: the runbook points every alarm at the console page that answers it (docs/runbook.md, "Console pages
by alarm"): every alarm template.yaml defines is named in that table, and every row names a page or the log."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("Morning", "Queue", "Order story", "Recon day", "Refunds", "Merchants", "Ledger day", "Incidents")


def _table() -> list[tuple[set[str], str]]:
    text = (ROOT / "docs/runbook.md").read_text(encoding="utf-8")
    section = text[text.index("## Console pages by alarm") :]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and "`" in cells[0]:
            rows.append((set(re.findall(r"`([A-Za-z0-9]+Alarm)`", cells[0])), cells[1]))
    return rows


def test_every_alarm_in_the_template_is_pointed_at_a_console_page_or_the_log():
    template = (ROOT / "template.yaml").read_text(encoding="utf-8")
    alarms = set(re.findall(r"^  ([A-Za-z0-9]+Alarm):\n", template, re.M))
    rows = _table()
    named = set().union(*(names for names, _ in rows))
    assert len(alarms) > 40
    assert alarms - named == set(), "alarms with no console page in docs/runbook.md"
    assert named - alarms == set(), "the runbook names alarms the template does not define"
    for names, page in rows:
        assert any(f"**{p}**" in page for p in PAGES) or page.startswith("log"), (names, page)
