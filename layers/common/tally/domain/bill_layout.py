"""A bill's layout as data: its shape, the shape's fingerprint, the structural difference against the nearest
layout we know, and a reviewed mapping that reads a new layout as a known one (docs/recon.md "Bill layouts").

Pure: no I/O. The known layouts are the parsers' own (tally.channels.bill_layouts lists them); a channel that
changes a layout changes the shape, so the day is quarantined (BLOCKED `LAYOUT_QUARANTINED`) with the
difference and a sample row, never read by guesswork, until a person maps the new shape onto a known one.

    shape, sample = sniff(head_lines, tail_lines)       # decoded text lines of the bill's start and end
    shape.fingerprint                                    # 16 hex digits: header + summary block
    diff = LayoutDiff.against(shape, known_layouts)      # added / removed / renamed / moved, summary changes
    mapping = Mapping.from_dict(reviewed_json, known)    # validated: every known column found in the new bill
    translated_lines = mapping.translate(bill_lines)     # the bill as the known layout, for the unchanged parser
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

BOM = "\ufeff"
_WIDE = str.maketrans("（）：，", "():,")
SAMPLE_CHARS = 40  # each sample value, cut (a case shows a row's shape, not a customer's data in full)


class LayoutError(ValueError):
    """A mapping that does not read its layout as the known one (a column it names is not there)."""


def columns_of(line: str) -> tuple[str, ...]:
    """A header or summary label line → its column names (full-width parentheses read as half-width)."""
    return tuple(c.strip().translate(_WIDE) for c in line.strip().lstrip(BOM).split(","))


@dataclass(frozen=True)
class Shape:
    """What a bill looks like: the detail header's columns and the summary block's label lines, in order."""

    header: tuple[str, ...]
    summary: tuple[tuple[str, ...], ...] = ()

    @property
    def fingerprint(self) -> str:
        text = json.dumps([list(self.header), [list(s) for s in self.summary]], ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "header": list(self.header),
            "summary": [list(s) for s in self.summary],
        }

    @classmethod
    def of(cls, header: str, *summary: str) -> Shape:
        return cls(columns_of(header), tuple(columns_of(s) for s in summary))


@dataclass(frozen=True)
class KnownLayout:
    """A layout a parser reads: `kind` names it (`trade ALL`, `fundflow`, `业务明细` …)."""

    channel: str
    kind: str
    shape: Shape
    marker: str = "`"  # every value of a row starts with it (WeChat); "" = plain CSV rows (Alipay)
    header_text: str = ""  # the header line as its parser wants it (default: the shape's columns joined)
    encoding: str = "utf-8"  # what its parser decodes (Alipay: GBK)

    @property
    def header_line(self) -> str:
        return self.header_text or ",".join(self.shape.header)


def _decoded(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("gbk", "replace")


def text_lines(data: bytes) -> list[str]:
    """Bytes → non-empty text lines (UTF-8, else GBK; a cut multi-byte character is replaced)."""
    return [s for s in (_decoded(x).rstrip("\r\n") for x in data.splitlines()) if s.strip()]


def sniff(head: Sequence[str], tail: Sequence[str], *, whole: bool = False) -> tuple[Shape, list[str]]:
    """The shape of a bill from its first and last text lines (`whole`: the two are the same, complete file),
    and its first row's values (the case's sample). WeChat framing: backtick rows, label lines after them; plain
    CSV (Alipay): `#` lines around the header, `#…合计…` trailers as the summary."""
    lines = [x.lstrip(BOM) for x in head if x.strip()]
    body = [x for x in lines if not x.startswith("#")]
    if not body:
        return Shape(()), []
    header_line = body[0]
    header = columns_of(header_line)
    first = body[1] if len(body) > 1 else ""
    sample: list[str] = []
    if first.startswith("`") or any(x.startswith("`") for x in tail):  # WeChat framing (a quiet day: no row)
        sample = first[1:].split(",`") if first.startswith("`") else []
        ends = list(tail) if whole else list(tail)[1:]  # the first tail line may be cut in the middle
        summary: tuple[tuple[str, ...], ...] = tuple(
            columns_of(text)
            for text in (x.lstrip(BOM) for x in ends)
            if text.strip() and not text.startswith("`") and text.strip() != header_line.strip()
        )
    else:
        sample = next(iter(_csv_rows([first]))) if first else []
        summary = ()  # plain CSV (Alipay): its `#…合计` trailers are optional; the header is the shape
    return Shape(header, summary), [v.strip()[:SAMPLE_CHARS] for v in sample]


def _csv_rows(lines: Iterable[str]) -> Iterator[list[str]]:
    return csv.reader(lines)


# ---------------------------------------------------------------- the structural difference


@dataclass
class LayoutDiff:
    """How `shape` differs from the nearest known layout: what a person reads before mapping it."""

    nearest: KnownLayout
    shape: Shape
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (known name, name in this bill)
    moved: list[tuple[str, int, int]] = field(default_factory=list)  # (column, known position, here)
    summary_added: list[list[str]] = field(default_factory=list)
    summary_removed: list[list[str]] = field(default_factory=list)

    @classmethod
    def against(cls, shape: Shape, known: Sequence[KnownLayout]) -> LayoutDiff | None:
        """The difference against the nearest known layout (most columns in common); None if none is known."""
        if not known:
            return None
        here = set(shape.header)

        def closeness(k: KnownLayout) -> tuple[int, int]:
            common = len(here & set(k.shape.header))
            return common, -abs(len(k.shape.header) - len(shape.header))

        nearest = max(known, key=closeness)
        return cls._of(nearest, shape)

    @classmethod
    def _of(cls, nearest: KnownLayout, shape: Shape) -> LayoutDiff:
        old, new = list(nearest.shape.header), list(shape.header)
        added = [c for c in new if c not in old]
        removed = [c for c in old if c not in new]
        renamed: list[tuple[str, str]] = []
        # a removed column whose neighbours stayed, with an added one in its place: a rename
        for name in list(removed):
            i = old.index(name)
            before = old[i - 1] if i > 0 else None
            after = old[i + 1] if i + 1 < len(old) else None
            for cand in added:
                j = new.index(cand)
                if (before is None or (j > 0 and new[j - 1] == before)) and (
                    after is None or (j + 1 < len(new) and new[j + 1] == after)
                ):
                    renamed.append((name, cand))
                    removed.remove(name)
                    added.remove(cand)
                    break
        common_old = [c for c in old if c in new]
        common_new = [c for c in new if c in old]
        moved = [
            (c, old.index(c), new.index(c)) for c in common_old if common_old.index(c) != common_new.index(c)
        ]
        known_summary = [list(s) for s in nearest.shape.summary]
        here_summary = [list(s) for s in shape.summary]
        return cls(
            nearest,
            shape,
            added,
            removed,
            renamed,
            moved,
            [s for s in here_summary if s not in known_summary],
            [s for s in known_summary if s not in here_summary],
        )

    @property
    def summary_changed(self) -> bool:
        return bool(self.summary_added or self.summary_removed)

    def lines(self) -> list[str]:
        """The difference for a person, one fact a line."""
        out = [
            f"layout {self.shape.fingerprint} is new; nearest known: {self.nearest.channel} {self.nearest.kind} "
            f"({len(self.nearest.shape.header)} columns; this bill {len(self.shape.header)})"
        ]
        out += [f"  + column added: {c} (position {self.shape.header.index(c) + 1})" for c in self.added]
        out += [f"  - column removed: {c}" for c in self.removed]
        out += [f"  ~ column renamed: {a} -> {b}" for a, b in self.renamed]
        out += [f"  > column moved: {c} (position {i + 1} -> {j + 1})" for c, i, j in self.moved]
        out += [f"  + summary line added: {','.join(s)}" for s in self.summary_added]
        out += [f"  - summary line removed: {','.join(s)}" for s in self.summary_removed]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.shape.fingerprint,
            "nearest": {"channel": self.nearest.channel, "kind": self.nearest.kind},
            "added": self.added,
            "removed": self.removed,
            "renamed": [list(r) for r in self.renamed],
            "moved": [list(m) for m in self.moved],
            "summary_added": self.summary_added,
            "summary_removed": self.summary_removed,
            "shape": self.shape.as_dict(),
            "lines": self.lines(),
        }

    def draft(self) -> dict[str, Any]:
        """A mapping to review: the renames read as renames, the added columns left out. A person checks it
        (and names every removed column in `defaults`, or it is refused) before `tally bill layout add`."""
        return {
            "channel": self.nearest.channel,
            "base": self.nearest.kind,
            "header": list(self.shape.header),
            "summary": [list(s) for s in self.shape.summary],
            "columns": {a: b for a, b in self.renamed},
            "summary_columns": {},
            "defaults": {},
            "note": "",
        }


# ---------------------------------------------------------------- the mapping


@dataclass(frozen=True)
class Mapping:
    """A reviewed reading of a new layout as a known one. `columns`/`summary_columns`: known name → the name in
    the new bill where it was renamed; `defaults`: a known column the new bill lacks and the value it reads as.
    Columns the new bill added are left out; summary lines it added are left out (the known summary line is
    still checked against the rows: R32)."""

    base: KnownLayout
    shape: Shape
    columns: dict[str, str]
    summary_columns: dict[str, str]
    defaults: dict[str, str]
    note: str = ""

    @property
    def fingerprint(self) -> str:
        return self.shape.fingerprint

    @classmethod
    def from_dict(cls, data: dict[str, Any], known: Sequence[KnownLayout]) -> Mapping:
        try:
            channel, base_kind = str(data["channel"]), str(data["base"])
            shape = Shape(
                tuple(str(c) for c in data["header"]),
                tuple(tuple(str(c) for c in s) for s in data.get("summary", [])),
            )
        except (KeyError, TypeError) as exc:
            raise LayoutError(f"a mapping needs channel, base, header (and summary): {exc}") from None
        base = next((k for k in known if k.channel == channel and k.kind == base_kind), None)
        if base is None:
            raise LayoutError(f"no known {channel} layout {base_kind!r} to map onto")
        if any(k.shape == shape for k in known):
            raise LayoutError("this layout is already known: nothing to map")
        mapping = cls(
            base,
            shape,
            {str(k): str(v) for k, v in (data.get("columns") or {}).items()},
            {str(k): str(v) for k, v in (data.get("summary_columns") or {}).items()},
            {str(k): str(v) for k, v in (data.get("defaults") or {}).items()},
            str(data.get("note") or ""),
        )
        mapping.plan()  # refuses a mapping that cannot read the bill
        return mapping

    def as_dict(self) -> dict[str, Any]:
        return {
            "channel": self.base.channel,
            "base": self.base.kind,
            "fingerprint": self.fingerprint,
            "header": list(self.shape.header),
            "summary": [list(s) for s in self.shape.summary],
            "columns": self.columns,
            "summary_columns": self.summary_columns,
            "defaults": self.defaults,
            "note": self.note,
        }

    def plan(self) -> tuple[list[int | str], int | None, list[int]]:
        """(for each known column: its index in the new row, or its default text; the summary label line to
        read, or None when the known layout has none; for each known summary column its index in that line)."""
        header = list(self.shape.header)
        picks: list[int | str] = []
        for col in self.base.shape.header:
            name = self.columns.get(col, col)
            if name in header:
                picks.append(header.index(name))
            elif col in self.defaults:
                picks.append(self.defaults[col])
            else:
                raise LayoutError(
                    f"known column {col!r} is not in the new header (map it in columns or defaults)"
                )
        for name in self.columns.values():
            if name not in header:
                raise LayoutError(f"mapped column {name!r} is not in the new header")
        if not self.base.shape.summary or not self.base.marker:
            return picks, None, []
        want = [self.summary_columns.get(c, c) for c in self.base.shape.summary[0]]
        for i, line in enumerate(self.shape.summary):
            if all(c in line for c in want):
                return picks, i, [list(line).index(c) for c in want]
        raise LayoutError(
            f"no summary line of the new bill carries {','.join(want)} (map it in summary_columns)"
        )

    def translate(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        """The bill's lines (bytes) read as the known layout (in its parser's encoding, LF): header, rows,
        summary."""
        if not self.base.marker:
            yield from self._translate_csv(lines)
            return
        picks, s_line, s_picks = self.plan()
        width = len(self.shape.header)
        header_done = False
        label_no = -1
        keep_values = False
        for raw in lines:
            text = _decoded(raw).rstrip("\r\n").lstrip(BOM)
            if not text.strip():
                continue
            if not header_done:
                header_done = True
                yield (self.base.header_line + "\n").encode("utf-8")
                continue
            if text.startswith("`"):
                values = text[1:].split(",`")
                if label_no < 0:  # a detail row
                    if len(values) != width:
                        yield raw  # the parser refuses it with its line number (a broken row, not a layout)
                        continue
                    out = [values[p] if isinstance(p, int) else p for p in picks]
                    yield ("`" + ",`".join(out) + "\n").encode("utf-8")
                elif keep_values:
                    yield ("`" + ",`".join(values[p] for p in s_picks) + "\n").encode("utf-8")
                    keep_values = False
                continue
            label_no += 1
            keep_values = label_no == s_line
            if keep_values:
                yield (",".join(self.base.shape.summary[0]) + "\n").encode("utf-8")

    def _translate_csv(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        """Plain CSV (Alipay): `#` lines (the 合计 trailers the parser checks) as they are, the header and each
        row read as the known layout, in the parser's encoding."""
        picks, _, _ = self.plan()
        width, encoding = len(self.shape.header), self.base.encoding
        header_done = False
        for raw in lines:
            text = _decoded(raw).rstrip("\r\n").lstrip(BOM)
            if not text.strip() or text.startswith("#"):
                yield raw
                continue
            if not header_done:
                header_done = True
                yield (self.base.header_line + "\n").encode(encoding)
                continue
            (values,) = list(csv.reader([text]))
            if len(values) != width:
                yield raw  # the parser refuses it with its line number
                continue
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerow(
                [values[p] if isinstance(p, int) else p for p in picks]
            )
            yield out.getvalue().encode(encoding)
