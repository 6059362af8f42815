"""The rule catalogue is in the repo (docs/rules.md) and every R-id the project cites is in it."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "docs/rules.md"

# R12, "R31–R33" (both ends), `test_r41_…`; not RSA2, SECP256R1, "R1" inside a word
CITED_UPPER = re.compile(r"(?<![A-Za-z0-9])R(\d{1,3})(?![0-9A-Za-z])")
CITED_LOWER = re.compile(r"(?<![A-Za-z0-9])(?:test_)?r(\d{1,3})_")
DEFINED = re.compile(r"^- \*\*R(\d{1,3})\*\* \S", re.M)
SCANNED = ("layers", "functions", "tally_local", "tests", "bench", "events", "docs")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt"}


def defined_ids() -> list[int]:
    return [int(n) for n in DEFINED.findall(CATALOGUE.read_text(encoding="utf-8"))]


def citations() -> list[tuple[int, str]]:
    """(rule id, "path:line") for every citation in code, tests, docs, events and the top-level files."""
    paths = [ROOT / "template.yaml", ROOT / "README.md", ROOT / "Makefile"]
    for top in SCANNED:
        paths += [p for p in sorted((ROOT / top).rglob("*")) if p.is_file() and p.suffix in SUFFIXES]
    found = []
    for path in paths:
        if path in (CATALOGUE, pathlib.Path(__file__).resolve()) or ".venv" in path.parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for pattern in (CITED_UPPER, CITED_LOWER):
                found += [(int(m), f"{path.relative_to(ROOT)}:{number}") for m in pattern.findall(line)]
    return found


def test_catalogue_defines_r1_to_r47_once_each_in_order():
    ids = defined_ids()
    assert ids == list(range(1, len(ids) + 1)), "rules are numbered 1..N without gaps or repeats"
    assert len(ids) >= 47


def test_every_cited_rule_id_is_in_the_catalogue():
    known = set(defined_ids())
    cites = citations()
    assert len(cites) > 400, "the scan finds the project's citations (468 when the catalogue moved in)"
    unknown = sorted({where: rid for rid, where in cites if rid not in known}.items())
    assert not unknown, "cited rule ids missing from docs/rules.md: " + ", ".join(
        f"R{rid} at {where}" for where, rid in unknown
    )


def test_the_scan_would_catch_an_unknown_id():
    """The patterns find both citation forms, so an id the catalogue lacks cannot hide (this file is not
    scanned: its examples are not citations)."""
    line = "def test_r99_something():  # R98, see R31–R33; RSA2 and SECP256R1 are not rules"
    found = {int(m) for p in (CITED_UPPER, CITED_LOWER) for m in p.findall(line)}
    assert found == {99, 98, 31, 33}


def test_the_catalogue_says_where_it_came_from_and_where_rules_are_added():
    head = CATALOGUE.read_text(encoding="utf-8")[:1200]
    assert "RULES.md" in head and "added **here**" in head
