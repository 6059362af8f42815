"""`tally audit`: the provable books (docs/audit.md).

* `tally audit export --day D --out DIR [--merchant M]`: the day's journal, seals, public key, evidence and
  the rows the records name, as they stand now, written to DIR for an auditor to take away.
* `tally audit verify --from DIR [--merchant M]`: checks an export OFFLINE (no AWS, no network): chains,
  Merkle root, the seal's signature with the public key in DIR, every evidence object's hash, every row.
* `tally audit verify --day D [--merchant M]`: the same against the stack (exported to a temporary folder).
* `tally audit seal --day D`: seal a closed day now (what the daily SealFunction does).
Exit 0: every record fits; 1: something does not (each finding names its record); 2: usage.
The human lines speak the CLI's language (tally_cli/speak.py); a finding stays the technical text it is, the
first one also said in plain words (service/books.py, the console's sentence); `--json` is the same in every
language.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
from typing import Any

from tally.i18n import N_

from tally_cli.common import UsageError, add_target, connect, emit
from tally_cli.speak import _, fault, ngettext, words


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help=_("provable books: seals, exports, offline verify")).add_subparsers(
        metavar="ACTION"
    )
    verify = audit.add_parser(
        "verify", help=_("verify a day: an export folder offline (--from), or the stack")
    )
    verify.add_argument("--day", help=_("YYYY-MM-DD (Asia/Shanghai); with --from, the export's own day"))
    verify.add_argument(
        "--from", dest="folder", type=pathlib.Path, help=_("an export folder: verified offline")
    )
    verify.add_argument("--merchant", help=_("only this merchant"))
    verify.add_argument("--json", action="store_true")
    add_target(verify)
    verify.set_defaults(run=audit_verify)
    export = audit.add_parser(
        "export", help=_("write a day's journal, seals, public key and evidence to a folder")
    )
    export.add_argument("--day", required=True, help=_("YYYY-MM-DD (Asia/Shanghai)"))
    export.add_argument("--out", required=True, type=pathlib.Path, help=_("the folder (created)"))
    export.add_argument("--merchant", help=_("only this merchant"))
    export.add_argument("--json", action="store_true")
    add_target(export)
    export.set_defaults(run=audit_export)
    seal = audit.add_parser("seal", help=_("seal a closed day now (the daily SealFunction's work)"))
    seal.add_argument("--day", required=True, help=_("YYYY-MM-DD (Asia/Shanghai), a day that has closed"))
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
            raise fault(
                UsageError,
                N_("%(folder)s is not an audit export (no day.json)"),
                {"folder": str(args.folder)},
            )
        verdict = verify_export(args.folder, args.merchant)
        if args.day and args.day != verdict.day:
            raise fault(
                UsageError,
                N_("the export in %(folder)s is of %(day)s, not %(asked)s"),
                {"folder": str(args.folder), "day": verdict.day, "asked": args.day},
            )
    else:
        if not args.day:
            raise fault(UsageError, N_("give --day D (the stack) or --from DIR (an export)"))
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
    from tally.service.books import finding_code

    lines = [
        ngettext("audit %(day)s: %(n)s record", "audit %(day)s: %(n)s records", document["records"])
        % {"day": document["day"], "n": document["records"]}
    ]
    if not document["merchants"]:
        lines.append("  " + _("no journal for this day: nothing to verify"))
    for merchant, findings in sorted(document["merchants"].items()):
        if not findings:
            lines.append(
                "  "
                + _("%(merchant)s: OK (chains, Merkle root, signature, evidence, rows)")
                % {"merchant": merchant}
            )
            continue
        lines.append(
            "  "
            + ngettext(
                "%(merchant)s: %(n)s finding; the first record that does not fit:",
                "%(merchant)s: %(n)s findings; the first record that does not fit:",
                len(findings),
            )
            % {"merchant": merchant, "n": len(findings)}
        )
        lines.append("    " + words().audit_finding(finding_code(findings[0])))
        lines += [f"    {f}" for f in findings]
    lines.append(_("VERIFIED") if document["ok"] else _("NOT VERIFIED"))
    return "\n".join(lines)


def audit_export(args: argparse.Namespace) -> int:
    day = _day(args.day)
    connect(args)
    from tally import bootstrap

    summary = bootstrap.audit_service().export(day, args.out, args.merchant)
    emit(summary, lambda: _exported(day, args.out, summary), args)
    return 0


def _exported(day: str, out: pathlib.Path, summary: dict[str, Any]) -> str:
    if not summary["merchants"]:
        return _("exported %(day)s to %(out)s: no journal for this day") % {"day": day, "out": out}
    merchants = ", ".join(
        (
            ngettext("%(merchant)s (%(n)s record)", "%(merchant)s (%(n)s records)", v["records"])
            if v["sealed"]
            else ngettext(
                "%(merchant)s (%(n)s record, NOT SEALED)",
                "%(merchant)s (%(n)s records, NOT SEALED)",
                v["records"],
            )
        )
        % {"merchant": m, "n": v["records"]}
        for m, v in summary["merchants"].items()
    )
    return _("exported %(day)s to %(out)s: %(merchants)s") % {"day": day, "out": out, "merchants": merchants}


def audit_seal(args: argparse.Namespace) -> int:
    day = _day(args.day)
    connect(args)
    from tally import bootstrap

    try:
        sealed = bootstrap.audit_service().seal_day(day)
    except ValueError:
        raise fault(
            UsageError,
            N_("%(day)s has not closed yet (Asia/Shanghai): a seal covers a whole day"),
            {"day": day},
        ) from None
    emit(
        {"day": day, "sealed": sealed},
        lambda: (
            ngettext("sealed %(day)s: %(n)s merchant day", "sealed %(day)s: %(n)s merchant days", len(sealed))
            % {"day": day, "n": len(sealed)}
        ),
        args,
    )
    return 0
