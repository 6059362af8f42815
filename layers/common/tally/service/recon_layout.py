"""Bill layouts in reconciliation: the fingerprint every run records, the quarantine of a bill whose shape is new,
the mapping a person adds for it and the re-run of every quarantined day with that shape (docs/recon.md
"Bill layouts"); and `read_offline`, what `tally bill parse` runs on a file of any kind.

A run reads its bill through `Layouts.gate`: a known shape goes on to the parser as before; a shape with a
reviewed mapping (the repo's channels/layouts/*.json, or one `tally bill layout add` stored) is read as its known
layout, through the same parser and the same summary checks (R32); any other table is **quarantined**: the run
is BLOCKED `LAYOUT_QUARANTINED` (ReconBlocked, the day's work-queue item, R38/R41) with the structural
difference against the nearest known layout and a sample row, and the kept bill waits for its mapping.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tally.channels import bill_layouts as layouts
from tally.channels import registry as channel_registry
from tally.channels.bill_source import lines_of
from tally.domain.bill_layout import KnownLayout, LayoutDiff, LayoutError, Mapping, Shape
from tally.domain.recon import BillParseError, Matcher, check_guards, fold_ledger, previous_day
from tally.service.recon_sources import OpenedBill
from tally.store.recon import ReconStore, recon_pk
from tally.store.tables import iso_now

LAYOUT_QUARANTINED = "LAYOUT_QUARANTINED"


@dataclass
class Gate:
    """What a run learnt of its bill's layout before parsing it."""

    shape: Shape
    layout: KnownLayout | None = None
    mapping: Mapping | None = None
    diff: LayoutDiff | None = None
    sample: dict[str, str] = field(default_factory=dict)
    detail: bytes | None = None  # the detail CSV the shape was read from (a bill in memory: decompressed)

    def record(self) -> dict[str, Any]:
        """What the run row keeps: every bill's fingerprint and kind; a quarantined one's difference and sample."""
        out: dict[str, Any] = {"layout_fingerprint": self.shape.fingerprint}
        if self.layout is not None:
            out["layout_kind"] = self.layout.kind
        if self.mapping is not None:
            out["layout_mapped_onto"] = self.mapping.base.kind
        if self.diff is not None:
            out["layout_diff"] = self.diff.as_dict()
            out["layout_sample"] = self.sample
        return out

    def reason(self, channel: str) -> str:
        assert self.diff is not None
        what = "; ".join(x.strip() for x in self.diff.lines())
        return (
            what
            + f". The bill is kept; map the layout (draft: tally bill parse {channel} FILE --draft-mapping), "
            "then `tally bill layout add MAPPING.json --by NAME` re-runs every day quarantined with it"
        )

    def read_as_known(self, data: Any, work: Path) -> Any:
        """The bill as its known layout: unchanged for a known shape; a mapped one translated (bytes, or a file
        in the run's work folder for a bill on disk)."""
        if self.mapping is None:
            return data
        if isinstance(data, Path):
            out = work / "mapped.csv"
            work.mkdir(parents=True, exist_ok=True)
            with _open_lines(data) as lines, out.open("wb") as f:
                f.writelines(self.mapping.translate(lines))
            return out
        return b"".join(self.mapping.translate(lines_of(data if self.detail is None else self.detail)))


@contextmanager
def _open_lines(path: Path) -> Iterator[Iterator[bytes]]:
    """A plain or gzip bill on disk, as lines."""
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else path.open("rb") as lines:
        yield iter(lines)


def detail_of(channel: str, data: bytes) -> bytes:
    """The detail CSV of a trade bill as the channel ships it (WeChat: gunzipped; Alipay: the zip's 业务明细)."""
    owner = channel_registry.by_stored(channel)
    bill = owner.open_bill(data) if owner is not None and owner.reconciled else None
    if bill is None:
        raise BillParseError(f"no bill parser for channel {channel!r}")
    return bytes(bill.data)


class Layouts:
    """The layouts a run may read: the parsers' own, the repo's reviewed mappings, the stored ones."""

    def __init__(self, store: ReconStore):
        self.store = store

    def mapping(self, channel: str, fingerprint: str) -> Mapping | None:
        found = layouts.repo_mappings(channel).get(fingerprint)
        if found is not None:
            return found
        stored = self.store.layout(channel, fingerprint)
        if not stored:
            return None
        try:
            return layouts.mapping_from(stored)
        except LayoutError as exc:  # stored once, then a release changed the layout it maps onto: loud
            raise BillParseError(
                f"the stored mapping of layout {fingerprint} no longer reads it: {exc}"
            ) from None

    def gate(self, channel: str, data: bytes | Path) -> Gate:
        """The bill's shape against the known layouts (reads its first and last lines only; the stored
        mappings only for a shape no parser knows)."""
        if isinstance(data, Path):
            shape, sample = layouts.shape_of_file(data)
            return judge(
                channel, shape, sample, lambda: self.mapping(channel, shape.fingerprint), layouts.TRADE
            )
        return self._judged(channel, detail_of(channel, data), layouts.TRADE)

    def fund_gate(self, channel: str, data: bytes) -> Gate:
        """The same for a fund-flow file (the leg of R45): known, mapped or quarantined."""
        return self._judged(channel, layouts.detail_any(channel, data), layouts.FUNDFLOW)

    def _judged(self, channel: str, detail: bytes, family: str) -> Gate:
        shape, sample = layouts.shape_of(detail)
        gate = judge(channel, shape, sample, lambda: self.mapping(channel, shape.fingerprint), family)
        gate.detail = detail
        return gate

    # ------------------------------------------------------------ map once, re-process

    def add(self, recon: Any, data: dict[str, Any], *, by: str, dry_run: bool) -> dict[str, Any]:
        """A person's mapping: checked, then (dry run) what re-running each quarantined day with it would
        match, writing nothing; or stored and every quarantined day with its fingerprint re-run from its
        kept bill."""
        if not by:
            raise LayoutError("say who maps it (--by)")
        mapping = layouts.mapping_from(data)
        channel = mapping.base.channel
        days = self.store.quarantined(channel, mapping.fingerprint)
        result: dict[str, Any] = {
            "fingerprint": mapping.fingerprint,
            "mapping": mapping.as_dict(),
            "dry_run": dry_run,
        }
        if dry_run:
            result["days"] = [self.preview(recon, mapping, day) for day in days]
            return result
        result["stored"] = self.store.put_layout(
            channel, {**mapping.as_dict(), "added_by": by, "added_at": iso_now(recon.clock())}
        )
        result["days"] = []
        for day in days:
            if (
                day.get("leg") == "fundflow"
            ):  # the fund-flow leg downloads its files again, read with the mapping
                run = recon.fund_flow(channel, day["mchid"], day["bill_date"], pass_="layout")
            else:
                run = recon.run(
                    channel, day["mchid"], day["bill_date"], pass_="layout", s3_key=day["bill_key"]
                )
            result["days"].append(
                {
                    "pk": run["pk"],
                    "status": run["status"],
                    "reason": run.get("reason", ""),
                    "matched": (run.get("stats") or {}).get("matched"),
                }
            )
        return result

    def preview(self, recon: Any, mapping: Mapping, day: dict[str, Any]) -> dict[str, Any]:
        """What re-running one quarantined day with `mapping` would find: guards, matched, differences. Reads
        the kept bill and the ledger only (a dry run never acts)."""
        channel, mchid, bill_date = mapping.base.channel, day["mchid"], day["bill_date"]
        out: dict[str, Any] = {"pk": recon_pk(channel, mchid, bill_date), "bill_key": day.get("bill_key")}
        if day.get("leg") == "fundflow":
            return {**out, "verdict": "FUND_FLOW", "reason": "the fund-flow leg is re-run from the channel"}
        try:
            data, _ = recon.archive.read(day["bill_key"])
            opened = OpenedBill(channel, b"".join(mapping.translate(lines_of(detail_of(channel, data)))))
            totals, index = opened.index()
        except (BillParseError, LayoutError) as exc:
            return {**out, "verdict": "PARSE_FAILED", "reason": str(exc)}
        verdict = check_guards(
            totals,
            previous_rows=recon.store.latest_parsed_rows(recon_pk(channel, mchid, previous_day(bill_date))),
            min_ratio=recon.min_ratio,
            min_previous_rows=recon.min_previous_rows,
            confirmed=recon.store.confirmation(out["pk"]) is not None,
        )
        out.update(verdict=verdict.code, reason=verdict.reason, rows=totals.rows)
        if verdict.blocked:
            return out
        local = fold_ledger(recon.ledger.day(channel, mchid, bill_date), {})
        matcher = Matcher(local, lambda key: recon.ledger.booked_entry(key, mchid))
        diffs = list(matcher.match_index(index, opened.item_at))
        out.update(matched=matcher.stats.matched, diffs=len(diffs), by_class=dict(matcher.stats.by_class))
        return out


def judge(channel: str, shape: Shape, sample: list[str], find_mapping: Any, family: str | None) -> Gate:
    """Known, mapped, quarantined (a table of a new shape: the difference against the nearest known layout of
    `family`, any if None), or not a bill at all (no layout: the parser says what it is, PARSE_FAILED)."""
    known = layouts.classify(channel, shape)
    if known is not None:
        return Gate(shape, known)
    mapping = find_mapping()
    if mapping is not None:
        return Gate(shape, mapping.base, mapping)
    if not layouts.looks_like_a_bill(shape):
        return Gate(shape)
    candidates = [k for k in layouts.known(channel) if family is None or layouts.family(k) == family]
    diff = LayoutDiff.against(shape, candidates)
    return Gate(shape, diff=diff, sample=dict(zip(shape.header, sample, strict=False)))


# ---------------------------------------------------------------- offline: `tally bill parse`


def read_offline(
    channel: str,
    data: bytes,
    name: str = "",
    *,
    account: str | None = None,
    mapping: dict[str, Any] | None = None,
    previous_rows: int | None = None,
    rows: int = 20,
    progress: Any = None,
) -> dict[str, Any]:
    """Any bill of the channel, recognised from the file: its kind, rows, summary checks and the guards' verdict
    (the recon function's parser and guards). A new layout: its structural difference (exit 1). Never raises
    for a bad file: the answer says PARSE_FAILED and why."""
    try:
        return _read(channel, data, name, account, mapping, previous_rows, rows, progress)
    except (BillParseError, LayoutError) as exc:
        return {"ok": False, "verdict": "PARSE_FAILED", "reason": str(exc)}


def _read(
    channel: str,
    data: bytes,
    name: str,
    account: str | None,
    mapping_data: dict[str, Any] | None,
    previous_rows: int | None,
    limit: int,
    progress: Any,
) -> dict[str, Any]:
    from tally.service.recon import fund_flow_parser

    detail = layouts.detail_any(channel, data)
    shape, sample = layouts.shape_of(detail)
    given = layouts.mapping_from(mapping_data) if mapping_data else None

    def find_mapping() -> Mapping | None:
        if given is not None and given.fingerprint == shape.fingerprint:
            return given
        return layouts.repo_mappings(channel).get(shape.fingerprint)

    gate = judge(channel, shape, sample, find_mapping, None)
    out: dict[str, Any] = {"channel": channel, "fingerprint": shape.fingerprint}
    if gate.diff is not None:
        return {
            **out,
            "ok": False,
            "verdict": LAYOUT_QUARANTINED,
            "reason": "; ".join(x.strip() for x in gate.diff.lines()),
            "diff": gate.diff.as_dict(),
            "sample": gate.sample,
            "draft_mapping": gate.diff.draft(),
        }
    layout, mapping = gate.layout, gate.mapping
    out["kind"] = layout.kind if layout is not None else "unknown"
    if mapping is not None:
        out["mapped_onto"] = mapping.base.kind
        detail = data = b"".join(mapping.translate(lines_of(detail)))
    parser: Any
    listed: Iterator[dict[str, Any]]
    if layout is not None and layouts.family(layout) == layouts.FUNDFLOW:
        out["account"] = account or layouts.fund_account(channel, name)
        parser = fund_flow_parser(channel, detail, out["account"])
        listed = (
            {
                "time": row.time,
                "business_type": row.business_type,
                "category": row.category,
                "amount_cent": row.amount_cent,
                "key": row.flow_id,
            }
            for row in parser.rows()
        )
    else:
        parser = OpenedBill(channel, data, name).parser()  # not a bill at all: this parser says why
        listed = (
            {
                "key": item.key,
                "kind": item.kind,
                "amount_cent": item.amount_cent,
                "status": item.status,
                "time": item.time,
                "out_trade_no": item.out_trade_no,
                "fee_e5": item.fee_e5,
            }
            for item in parser.items()
        )
    shown: list[dict[str, Any]] = []
    for n, row in enumerate(listed, 1):
        if len(shown) < limit:
            shown.append(row)
        if progress and n % 50_000 == 0:
            progress(n)
    totals = parser.totals
    verdict = check_guards(totals, previous_rows=previous_rows)
    return {
        **out,
        "ok": not verdict.blocked,
        "verdict": verdict.code,
        "reason": verdict.reason,
        "totals": totals.as_dict(),
        "rows": shown,
    }
