"""`tally order show`: an order with its transitions and every raw notification about it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally.cli.common import add_target, connect
from tally.domain.money import format_cents


def register(sub: argparse._SubParsersAction) -> None:
    order = sub.add_parser("order", help="inspect orders").add_subparsers(metavar="ACTION")
    show = order.add_parser("show", help="an order with its transitions and raw notifications")
    show.add_argument("mchid")
    show.add_argument("out_trade_no")
    show.add_argument("--json", action="store_true")
    add_target(show)
    show.set_defaults(run=order_show)


def order_show(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    view = bootstrap.order_service().show(args.mchid, args.out_trade_no)
    print(json.dumps(view, ensure_ascii=False, indent=2) if args.json else render_order(view))
    return 0


def render_order(view: dict[str, Any]) -> str:
    lines = [
        f"order {view['mchid']}/{view['out_trade_no']}  {view['status']}",
        f"  amount   {format_cents(view['amount_cent'])} {view['currency']}   paid {format_cents(view.get('paid_cent', 0))}"
        f"   refundable {format_cents(view.get('refundable_cent', 0))}",
        f"  transaction_id {view.get('transaction_id') or '-'}   created {view.get('created_at')}   "
        f"expires {view.get('expire_at')}",
        "  transitions:",
    ]
    if view.get("refund_holds"):  # reserved, create answer not stored yet: the poller stores it if abandoned
        holds = ", ".join(f"{no} {format_cents(cents)}" for no, cents in sorted(view["refund_holds"].items()))
        lines.insert(3, f"  refunds reserved, answer not stored yet: {holds}")
    lines += [
        f"    {t['at']}  {t['from_status']} --{t['event']}--> {t['to_status']}  ({t['source']})"
        for t in view["transitions"]
    ] or ["    (none)"]
    lines.append("  raw notifications (handled: 0 pending, 1 booked, 2 with a person):")
    lines += [
        f"    {r['pk']}  handled={r['handled']}  {r.get('outcome') or r.get('manual_reason') or ''}"
        f"  paid {format_cents(r['paid_cent'])} of {format_cents(r['order_total_cent'])}  via {r['source']}"
        for r in view["raw"]
    ] or ["    (none)"]
    return "\n".join(lines)
