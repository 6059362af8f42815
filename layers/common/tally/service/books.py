"""The books as finance reads them (docs/audit.md, docs/console.md "Books"): each recent Asia/Shanghai day per
merchant, sealed or not and when, its record count, a verify of one merchant-day, and a day's export as a zip.

* `days(n)`: the last `n` days (today first) from the journal's chain heads (one query a day: a chain head's
  seq is its record count) and ONE listing of the seals since the first day. Nothing is verified here: a whole
  list of verifies would be a page that never loads; the day page verifies its one merchant-day.
* `check(day, merchant)`: exactly what `tally audit verify --day` does (export to a temporary folder, verify it
  offline); every finding in its text, the first one also as a code a page puts into words (`finding_code`).
* `export_zip(day, merchant)`: the folder `tally audit export` writes, zipped in memory, every path under one
  top folder; refused past `DOWNLOAD_LIMIT` (a Lambda answer carries 6 MB, base64 included).
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tally.domain.journal import shanghai_day, split_chain
from tally.service.audit import AuditService, verify_export
from tally.store.audit import seal_key

DOWNLOAD_LIMIT = 4 * 1024 * 1024  # base64 makes it 5.6 MB: under the 6 MB a Lambda answer may carry
RECENT_DAYS = 14

# A finding's text (service/audit.py, domain/journal.py) → what it means, as a code a page puts into words
# (i18n/words.py AUDIT_FINDINGS). The first marker found in the text wins; the text itself stays behind details.
FINDING_CODES: tuple[tuple[str, str], ...] = (
    ("the day is not sealed", "not-sealed"),
    ("signature does not verify", "seal-signature"),
    ("another merchant's or day's", "seal-signature"),
    ("evidence list is not the one sealed", "evidence"),
    ("is missing from the export", "evidence"),
    ("does not hash to its name", "evidence"),
    ("not the body sealed", "raw-body"),
    ("a history line is missing", "history-line"),
    ("line is missing", "history-line"),
    ("journaled ", "row-changed"),  # "<table> row <key>: <field> is X, journaled Y"
    ("row ", "row-missing"),  # "<table> row <key> is missing"
    ("appended after the seal", "after-seal"),
    ("differs from the sealed head", "after-seal"),
    ("sealed head is seq", "after-seal"),
    ("chain not in the seal", "after-seal"),
    ("sealed chain has no records", "after-seal"),
    ("seal counts", "after-seal"),
    ("Merkle root differs", "after-seal"),
)
FINDING_DEFAULT = "record"  # a record that no longer hashes, a gap, a record out of its chain


def finding_code(text: str) -> str:
    """What a finding means, for the page's plain sentence (its text stays the technical detail)."""
    for marker, code in FINDING_CODES:
        if marker in text:
            return code
    return FINDING_DEFAULT


class TooLarge(Exception):
    """A day's export too large for a console download: the CLI writes it to a folder."""


@dataclass
class DayCheck:
    day: str
    merchant: str
    records: int
    sealed: bool
    findings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.sealed and not self.findings

    @property
    def first_code(self) -> str:
        return finding_code(self.findings[0]) if self.findings else ""


class BooksService:
    def __init__(self, audit: AuditService):
        self.audit = audit

    def recent_days(self, n: int = RECENT_DAYS) -> list[str]:
        today = self.audit.clock()
        return [shanghai_day(today - back * 86400) for back in range(n)]

    def days(
        self, n: int = RECENT_DAYS, merchant: str | None = None, day: str | None = None
    ) -> list[dict[str, Any]]:
        """One row per day and merchant with records or a seal (a day with neither: one row, merchant ""),
        today first (or `day` alone): day, merchant, records, sealed_at (ISO UTC, "" when not sealed), is_open
        (today or later)."""
        today = self.recent_days(1)[0]
        days = [day] if day else self.recent_days(n)
        seals = self.audit.vault.seals_since(min(days))
        rows: list[dict[str, Any]] = []
        for d in days:
            counted: dict[str, int] = {}
            for head in self.audit.journal.chains_of_day(d):
                m, _, _ = split_chain(head["pk"])
                counted[m] = counted.get(m, 0) + int(head.get("seq") or 0)
            merchants = set(counted) | {m for sd, m in seals if sd == d}
            if merchant:
                merchants &= {merchant}
            shown = sorted(merchants) or [""]  # a day with neither records nor seals: one row
            for m in shown:
                rows.append(
                    {
                        "day": d,
                        "merchant": m,
                        "records": counted.get(m, 0),
                        "sealed_at": seals.get((d, m), ""),
                        "is_open": d >= today,
                    }
                )
        return rows

    def seal(self, day: str, merchant: str) -> dict[str, Any] | None:
        """The locked seal of a merchant-day as it was written (its payload, algorithm, evidence list)."""
        import json

        data = self.audit.vault.get(seal_key(day, merchant))
        return None if data is None else dict(json.loads(data))

    def check(self, day: str, merchant: str) -> DayCheck:
        """Verify one merchant-day as an auditor would: export to a temporary folder, verify it offline."""
        with tempfile.TemporaryDirectory(prefix="tally-books-") as tmp:
            summary = self.audit.export(day, Path(tmp), merchant)
            verdict = verify_export(Path(tmp), merchant)
        mine = summary["merchants"].get(merchant) or {"records": 0, "sealed": False}
        return DayCheck(
            day,
            merchant,
            int(mine["records"]),
            bool(mine["sealed"]),
            [str(f) for f in verdict.merchants.get(merchant, [])],
        )

    def export_zip(self, day: str, merchant: str | None = None) -> tuple[str, bytes]:
        """(file name, zip bytes): the day's export folder, every path under `tally-books-<day>[-<merchant>]/`."""
        name = f"tally-books-{day}" + (f"-{merchant}" if merchant else "")
        buffer = io.BytesIO()
        with tempfile.TemporaryDirectory(prefix="tally-books-") as tmp:
            root = Path(tmp)
            self.audit.export(day, root, merchant)
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(p for p in root.rglob("*") if p.is_file()):
                    archive.write(path, f"{name}/{path.relative_to(root).as_posix()}")
                    if buffer.tell() > DOWNLOAD_LIMIT:
                        raise TooLarge(f"the export of {day} is over {DOWNLOAD_LIMIT} bytes zipped")
        data = buffer.getvalue()
        if len(data) > DOWNLOAD_LIMIT:
            raise TooLarge(f"the export of {day} is {len(data)} bytes zipped, over {DOWNLOAD_LIMIT}")
        return f"{name}.zip", data
