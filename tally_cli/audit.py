"""`tally audit`: the provable books (docs/audit.md).

* `tally audit export --day D --out DIR [--merchant M]`: the day's journal, seals, public key, evidence and
  the rows the records name, as they stand now, written to DIR for an auditor to take away.
* `tally audit verify --from DIR [--merchant M]`: checks an export OFFLINE (no AWS, no network): chains,
  Merkle root, the seal's signature with the public key in DIR, every evidence object's hash, every row.
* `tally audit verify --day D [--merchant M]`: the same against the stack (exported to a temporary folder).
* `tally audit seal --day D`: seal a closed day now (what the daily SealFunction does).
Exit 0: every record fits; 1: something does not (each finding names its record); 2: usage.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
from typing import Any

from tally_cli.common import UsageError, add_target, connect, emit


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="provable books: seals, exports, offline verify").add_subparsers(
        metavar="ACTION"
    )
    verify = audit.add_parser("verify", help="verify a day: an export folder offline (--from), or the stack")
    verify.add_argument("--day", help="YYYY-MM-DD (Asia/Shanghai); with --from, the export's own day")
    verify.add_argument("--from", dest="folder", type=pathlib.Path, help="an export folder: verified offline")
    verify.add_argument("--merchant", help="only this merchant")
    verify.add_argument("--json", action="store_true")
    add_target(verify)
    verify.set_defaults(run=audit_verify)
    export = audit.add_parser(
        "export", help="write a day's journal, seals, public key and evidence to a folder"
    )
    export.add_argument("--day", required=True, help="YYYY-MM-DD (Asia/Shanghai)")
    export.add_argument("--out", required=True, type=pathlib.Path, help="the folder (created)")
    export.add_argument("--merchant", help="only this merchant")
    export.add_argument("--json", action="store_true")
    add_target(export)
    export.set_defaults(run=audit_export)
    seal = audit.add_parser("seal", help="seal a closed day now (the daily SealFunction's work)")
    seal.add_argument("--day", required=True, help="YYYY-MM-DD (Asia/Shanghai), a day that has closed")
    seal.add_argument("--json", action="store_true")
    add_target(seal)
    seal.set_defaults(run=audit_seal)


def _day(text: str | None) -> str:
    from tally_cli.common import parse_date

    return parse_date(text)


def audit_verify(args: argparse.Namespace) -> int:
    from tally.service.audit import verify_export

    if args.folder is not None:
        if not (args.folder / "day.json").exists():
            raise UsageError(f"{args.folder} is not an audit export (no day.json)")
        verdict = verify_export(args.folder, args.merchant)
        if args.day and args.day != verdict.day:
            raise UsageError(f"the export in {args.folder} is of {verdict.day}, not {args.day}")
    else:
        if not args.day:
            raise UsageError("give --day D (the stack) or --from DIR (an export)")
        day = _day(args.day)
        connect(args)
        from tally import bootstrap

        with tempfile.TemporaryDirectory(prefix="tally-audit-") as tmp:
            bootstrap.audit_service().export(day, pathlib.Path(tmp), args.merchant)
            verdict = verify_export(pathlib.Path(tmp), args.merchant)
    document = {
        "day": verdict.day,
        "ok": verdict.ok,
        "records": verdict.records,
        "merchants": {m: [str(f) for f in found] for m, found in verdict.merchants.items()},
    }
    emit(document, lambda: _render(document), args)
    return 0 if verdict.ok else 1


def _render(document: dict[str, Any]) -> str:
    lines = [f"audit {document['day']}: {document['records']} record(s)"]
    if not document["merchants"]:
        lines.append("  no journal for this day: nothing to verify")
    for merchant, findings in sorted(document["merchants"].items()):
        if not findings:
            lines.append(f"  {merchant}: OK (chains, Merkle root, signature, evidence, rows)")
            continue
        lines.append(f"  {merchant}: {len(findings)} finding(s); the first record that does not fit:")
        lines += [f"    {f}" for f in findings]
    lines.append("VERIFIED" if document["ok"] else "NOT VERIFIED")
    return "\n".join(lines)


def audit_export(args: argparse.Namespace) -> int:
    day = _day(args.day)
    connect(args)
    from tally import bootstrap

    summary = bootstrap.audit_service().export(day, args.out, args.merchant)
    emit(
        summary,
        lambda: (
            f"exported {day} to {args.out}: "
            + ", ".join(
                f"{m} ({v['records']} records{'' if v['sealed'] else ', NOT SEALED'})"
                for m, v in summary["merchants"].items()
            )
            if summary["merchants"]
            else f"exported {day} to {args.out}: no journal for this day"
        ),
        args,
    )
    return 0


def audit_seal(args: argparse.Namespace) -> int:
    day = _day(args.day)
    connect(args)
    from tally import bootstrap

    try:
        sealed = bootstrap.audit_service().seal_day(day)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    emit({"day": day, "sealed": sealed}, lambda: f"sealed {day}: {len(sealed)} merchant day(s)", args)
    return 0
