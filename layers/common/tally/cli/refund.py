"""`tally refund create|show|list`: make a refund through the same service as POST /refunds, and look at them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally.cli.common import add_target, connect
from tally.domain.money import format_cents


def register(sub: argparse._SubParsersAction) -> None:
    refund = sub.add_parser("refund", help="create and inspect refunds").add_subparsers(metavar="ACTION")
    create = refund.add_parser(
        "create", help="refund (part of) a paid order; safe to repeat with --refund-no"
    )
    create.add_argument("mchid")
    create.add_argument("out_trade_no")
    create.add_argument("amount_cent", type=int, help="integer cents (fen), e.g. 1230 for 12.30")
    create.add_argument("--reason", default="", help="shown to the payer (at most 80 characters)")
    create.add_argument("--refund-no", help="your idempotency key; generated when absent (R26)")
    create.set_defaults(run=refund_create)
    show = refund.add_parser("show", help="one refund with every channel report about it")
    show.add_argument("refund_no")
    show.set_defaults(run=refund_show)
    listing = refund.add_parser("list", help="refunds of an order, or those due for polling / with a person")
    listing.add_argument("mchid", nargs="?")
    listing.add_argument("out_trade_no", nargs="?")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("--manual", action="store_true", help="refunds waiting for a person (status MANUAL)")
    which.add_argument("--due", action="store_true", help="refunds the poller will look at now")
    listing.set_defaults(run=refund_list)
    for p in (create, show, listing):
        p.add_argument("--json", action="store_true")
        add_target(p)


def _service(args: argparse.Namespace) -> Any:
    connect(args)
    from tally import bootstrap

    return bootstrap.refund_service()


def refund_create(args: argparse.Namespace) -> int:
    from tally.domain.refunds import ExceedsRefundable
    from tally.service.refunds import RefundConflict

    request = {
        "mchid": args.mchid,
        "out_trade_no": args.out_trade_no,
        "amount_cent": args.amount_cent,
        "reason": args.reason,
    }
    if args.refund_no:
        request["refund_no"] = args.refund_no
    try:
        view, created = _service(args).create(request)
    except (ExceedsRefundable, RefundConflict) as exc:
        print(f"tally: refused: {exc}")
        return 1
    print(
        json.dumps(view, ensure_ascii=False, indent=2)
        if args.json
        else ("created " if created else "existing ") + render_line(view)
    )
    return 0


def refund_show(args: argparse.Namespace) -> int:
    view = _service(args).show(args.refund_no)
    if args.json:
        print(json.dumps(view, ensure_ascii=False, indent=2))
        return 0
    lines = [
        render_line(view),
        f"  order {view['mchid']}/{view['out_trade_no']}  transaction {view.get('transaction_id') or '-'}"
        f"  channel refund id {view.get('refund_id') or '-'}",
        f"  created {view['created_at']}  updated {view.get('updated_at')}  expires {view['expire_at']}"
        f"  reserved on {view['hold']}",
    ]
    if view.get("manual_reason") and view["status"] == "MANUAL":
        lines.append(f"  WITH A PERSON: {view['manual_reason']}")
    if view.get("fail_reason"):
        lines.append(f"  failed: {view['fail_reason']}")
    lines.append("  channel reports (handled: 0 pending, 1 applied, 2 with a person):")
    lines += [
        f"    {r['sk']:<9} via {r['source']:<6} handled={r['handled']}  {r.get('outcome') or ''}"
        for r in view["reports"]
    ] or ["    (none)"]
    print("\n".join(lines))
    return 0


def refund_list(args: argparse.Namespace) -> int:
    service = _service(args)
    if args.manual:
        rows = service.manual()
    elif args.due:
        rows = service.due()
    elif args.mchid and args.out_trade_no:
        rows = service.for_order(args.mchid, args.out_trade_no)
    else:
        raise ValueError("give MCHID OUT_TRADE_NO, or --manual, or --due")
    print(
        json.dumps(rows, ensure_ascii=False, indent=2)
        if args.json
        else "\n".join(render_line(r) for r in rows) or "(no refunds)"
    )
    return 0


def render_line(view: dict[str, Any]) -> str:
    return (
        f"refund {view['refund_no']}  {view['status']:<8} {format_cents(view['amount_cent'])} "
        f"{view.get('currency', 'CNY')}  order {view['out_trade_no']}  {view.get('reason') or ''}"
    ).rstrip()
