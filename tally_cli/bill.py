"""`tally bill parse` (offline) and `tally bill layout add` (the stack).

`bill parse` needs no stack: the recon function's own parsers and guards on a file a person holds, any kind the
product downloads (WeChat trade ALL / SUCCESS / REFUND and the legacy sets, v2 downloadbill, fund flow BASIC /
OPERATION / FEES from v3 or v2; Alipay 业务明细 and 账务明细 / signcustomer), recognised from the file. A file of
a layout no parser knows prints the structural difference a quarantined recon run records, and
`--draft-mapping` a mapping to review. `bill layout add` stores a reviewed mapping and re-runs every day
quarantined with that layout (`--dry-run`: what each re-run would match, nothing written).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from tally.domain.money import format_cents

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.recon import CHANNELS, _progress_bar, stored_channel
from tally_cli.speak import _


def register(sub: argparse._SubParsersAction) -> None:
    bill = sub.add_parser("bill", help=_("bill files: parse offline, map a new layout")).add_subparsers(
        metavar="ACTION"
    )
    parse = bill.add_parser(
        "parse",
        help=_("recognise a bill, parse + guards; prints its kind, rows, summary, totals and verdict"),
    )
    parse.add_argument("channel", choices=CHANNELS, type=stored_channel)
    parse.add_argument(
        "file", type=pathlib.Path, help=_("WeChat .csv/.csv.gz (trade or fund flow), Alipay .zip or .csv")
    )
    parse.add_argument(
        "--account", help=_("fund flow: BASIC | OPERATION | FEES (default: from the file name)")
    )
    parse.add_argument("--mapping", type=pathlib.Path, help=_("read a new layout with this mapping (JSON)"))
    parse.add_argument(
        "--draft-mapping", action="store_true", help=_("a new layout: print a mapping to review")
    )
    parse.add_argument(
        "--previous-rows", type=int, help=_("the previous day's row count (volume guard, R33)")
    )
    parse.add_argument("--rows", type=int, default=20, help=_("detail rows to print (default 20)"))
    add_json(parse)
    parse.set_defaults(run=bill_parse)

    layout = bill.add_parser("layout", help=_("bill layouts")).add_subparsers(metavar="ACTION")
    add = layout.add_parser(
        "add", help=_("store a reviewed mapping and re-run every day quarantined with its layout")
    )
    add.add_argument(
        "mapping", type=pathlib.Path, help=_("the mapping (JSON; draft: bill parse --draft-mapping)")
    )
    add.add_argument("--by", required=True, help=_("who reviewed it"))
    add.add_argument(
        "--dry-run", action="store_true", help=_("show what each re-run would match; write nothing")
    )
    add_json(add)
    add_target(add)
    add.set_defaults(run=layout_add)


def bill_parse(args: argparse.Namespace) -> int:
    """Offline: exit 0 when the guards pass, 1 when they block, the file is not a bill or its layout is new."""
    from tally.service.recon_layout import read_offline

    mapping = json.loads(args.mapping.read_text("utf-8")) if args.mapping else None
    result = read_offline(
        args.channel,
        args.file.read_bytes(),
        args.file.name,
        account=args.account,
        mapping=mapping,
        previous_rows=args.previous_rows,
        rows=args.rows,
        progress=_progress_bar(),
    )
    if args.draft_mapping and result.get("draft_mapping"):
        print(json.dumps(result["draft_mapping"], ensure_ascii=False, indent=2))
        return 1
    emit(result, lambda: render_parse(result), args)
    return 0 if result["ok"] else 1


def render_parse(r: dict[str, Any]) -> str:
    if r["verdict"] == "PARSE_FAILED":
        return f"PARSE FAILED: {r['reason']}"
    if "diff" in r:
        lines = list(r["diff"]["lines"])
        if r.get("sample"):
            lines.append("  sample row: " + ", ".join(f"{k}={v}" for k, v in r["sample"].items()))
        lines.append("verdict: LAYOUT_QUARANTINED (recon would quarantine this day; --draft-mapping)")
        return "\n".join(lines)
    t = r["totals"]
    mapped = f" (a new layout {r['fingerprint']}, mapped)" if r.get("mapped_onto") else ""
    account = f", account {r['account']}" if r.get("account") else ""
    out = [f"{r['channel']} bill, kind {r['kind']}{account}{mapped}: {t['rows']} rows"]
    if not r.get("account"):
        out[0] += (
            f" ({t['payments']} payments {format_cents(t['payment_cent'])}, "
            f"{t['refunds']} refunds {format_cents(t['refund_cent'])}, fees {format_cents(_fen(t['fee_e5']))})"
        )
    for row in r["rows"]:
        what = row.get("kind") or row.get("business_type")
        status = row.get("status") or row.get("category")
        out.append(
            f"  {row['time']}  {what:<7} {format_cents(row['amount_cent']):>12}  {status:<10} {row['key']}"
        )
    if t["rows"] > len(r["rows"]):
        out.append(f"  … {t['rows'] - len(r['rows'])} more")
    out.append("  summary:")
    for c in t["checks"]:
        out.append(
            f"    {'ok ' if c['ok'] else 'BAD'} {c['name']}: stated {c['stated']}, parsed {c['parsed']} ({c['unit']})"
        )
    out.append(f"verdict: {r['verdict']}: {r['reason']}")
    return "\n".join(out)


def _fen(fee_e5: int) -> int:
    from tally.domain.recon import round_units

    return round_units(fee_e5, 5, 2)


def layout_add(args: argparse.Namespace) -> int:
    from tally.domain.bill_layout import LayoutError

    data = json.loads(args.mapping.read_text("utf-8"))
    connect(args)
    from tally import bootstrap

    service = bootstrap.recon_service()
    try:
        result = service.layouts.add(service, data, by=args.by, dry_run=args.dry_run)
    except LayoutError as exc:
        print(f"mapping refused: {exc}")
        return 1
    emit(result, lambda: render_add(result), args)
    return 0


def render_add(r: dict[str, Any]) -> str:
    m = r["mapping"]
    head = "dry run, nothing written" if r["dry_run"] else ("stored" if r.get("stored") else "already stored")
    out = [f"layout {r['fingerprint']} read as {m['channel']} {m['base']} ({head})"]
    if not r["days"]:
        out.append("  no day is quarantined with this layout")
    for d in r["days"]:
        if r["dry_run"]:
            found = (
                f"matched {d['matched']}, differences {d['diffs']}" if "matched" in d else d.get("reason", "")
            )
            out.append(f"  {d['pk']}: would be {d['verdict']}: {found}")
        else:
            out.append(
                f"  {d['pk']}: re-run {d['status']} (matched {d.get('matched')}) {d.get('reason', '')}"
            )
    return "\n".join(out)
