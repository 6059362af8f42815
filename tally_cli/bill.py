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

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.recon import CHANNELS, _progress_bar, stored_channel
from tally_cli.speak import _, money, words


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
        return _("PARSE FAILED: %(why)s") % {"why": r["reason"]}
    if "diff" in r:
        lines = list(r["diff"]["lines"])
        if r.get("sample"):
            lines.append(
                "  " + _("sample row:") + " " + ", ".join(f"{k}={v}" for k, v in r["sample"].items())
            )
        lines.append(_("verdict: LAYOUT_QUARANTINED (recon would quarantine this day; --draft-mapping)"))
        return "\n".join(lines)
    t = r["totals"]
    account = _(", account %(account)s") % {"account": r["account"]} if r.get("account") else ""
    mapped = (
        _(" (a new layout %(fingerprint)s, mapped)") % {"fingerprint": r["fingerprint"]}
        if r.get("mapped_onto")
        else ""
    )
    head = _("%(channel)s bill, kind %(kind)s%(account)s%(mapped)s: %(rows)s rows") % {
        "channel": words().channel(r["channel"]),
        "kind": r["kind"],
        "account": account,
        "mapped": mapped,
        "rows": t["rows"],
    }
    out = [head]
    if not r.get("account"):
        out[0] += " " + _(
            "(%(payments)s payments %(paid)s, %(refunds)s refunds %(refunded)s, fees %(fees)s)"
        ) % {
            "payments": t["payments"],
            "paid": money(t["payment_cent"]),
            "refunds": t["refunds"],
            "refunded": money(t["refund_cent"]),
            "fees": money(_fen(t["fee_e5"])),
        }
    for row in r["rows"]:
        what = row.get("kind") or row.get("business_type")
        status = row.get("status") or row.get("category")
        out.append(f"  {row['time']}  {what:<7} {money(row['amount_cent']):>14}  {status:<10} {row['key']}")
    if t["rows"] > len(r["rows"]):
        out.append("  " + _("… %(n)d more") % {"n": t["rows"] - len(r["rows"])})
    out.append("  " + _("summary:"))
    for c in t["checks"]:
        out.append(
            f"    {'ok ' if c['ok'] else 'BAD'} "
            + _("%(name)s: stated %(stated)s, parsed %(parsed)s (%(unit)s)")
            % {"name": c["name"], "stated": c["stated"], "parsed": c["parsed"], "unit": c["unit"]}
        )
    out.append(_("verdict: %(verdict)s: %(why)s") % {"verdict": r["verdict"], "why": r["reason"]})
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
        print(_("mapping refused: %(why)s") % {"why": exc})
        return 1
    emit(result, lambda: render_add(result), args)
    return 0


def render_add(r: dict[str, Any]) -> str:
    m = r["mapping"]
    if r["dry_run"]:
        head = _("dry run, nothing written")
    else:
        head = _("stored") if r.get("stored") else _("already stored")
    out = [
        _("layout %(fingerprint)s read as %(channel)s %(base)s (%(what)s)")
        % {"fingerprint": r["fingerprint"], "channel": m["channel"], "base": m["base"], "what": head}
    ]
    if not r["days"]:
        out.append("  " + _("no day is quarantined with this layout"))
    for d in r["days"]:
        if r["dry_run"]:
            found = (
                _("matched %(matched)s, differences %(diffs)s")
                % {"matched": d["matched"], "diffs": d["diffs"]}
                if "matched" in d
                else d.get("reason", "")
            )
            out.append(
                f"  {d['pk']}: "
                + _("would be %(verdict)s: %(found)s")
                % {"verdict": words().run(d["verdict"]), "found": found}
            )
        else:
            out.append(
                f"  {d['pk']}: "
                + _("re-run %(status)s (matched %(matched)s) %(why)s")
                % {
                    "status": words().run(d["status"]),
                    "matched": d.get("matched"),
                    "why": d.get("reason", ""),
                }
            )
    return "\n".join(out)
