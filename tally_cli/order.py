"""`tally order show|story`: an order with its transitions and raw rows; the order's whole story in time order.

Both only read (R42). `order show --ask-channel` is the one explicit way to have the CLI ask the channel
about an unpaid order (what the merchant's return page does, R24): that may book or close it.
"""

from __future__ import annotations

import argparse
from typing import Any

from tally_cli.common import add_target, china_text, connect, emit, yuan


def register(sub: argparse._SubParsersAction) -> None:
    order = sub.add_parser("order", help="inspect orders").add_subparsers(metavar="ACTION")
    show = order.add_parser("show", help="an order with its transitions and raw notifications (read-only)")
    show.add_argument("mchid")
    show.add_argument("out_trade_no")
    show.add_argument(
        "--ask-channel",
        action="store_true",
        help="ask the channel once about an unpaid order (may book or close it, like the return page)",
    )
    show.add_argument("--json", action="store_true")
    add_target(show)
    show.set_defaults(run=order_show)

    story = order.add_parser(
        "story",
        help="everything about one order in time order: deliveries, polls, transitions, ledger, refunds, "
        "events, recon, queue actions (read-only)",
    )
    story.add_argument("mchid")
    story.add_argument("out_trade_no")
    story.add_argument("--raw", action="store_true", help="include each delivery's raw body and headers")
    story.add_argument("--json", action="store_true")
    add_target(story)
    story.set_defaults(run=order_story)


def order_show(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    view = bootstrap.order_service().show(args.mchid, args.out_trade_no, ask_channel=args.ask_channel)
    emit(view, lambda: render_order(view), args)
    return 0


def order_story(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    story = bootstrap.story_service().story(args.mchid, args.out_trade_no, raw=args.raw)
    emit(story, lambda: render_story(story, raw=args.raw), args)
    return 0


def render_order(view: dict[str, Any]) -> str:
    lines = [
        f"order {view['mchid']}/{view['out_trade_no']}  {view['status']}",
        f"  amount   {yuan(view['amount_cent'])} {view['currency']}   paid {yuan(view.get('paid_cent', 0))}"
        f"   refundable {yuan(view.get('refundable_cent', 0))}",
        f"  transaction_id {view.get('transaction_id') or '-'}   created {china_text(view.get('created_at'))}   "
        f"expires {china_text(view.get('expire_at'))}",
        "  transitions:",
    ]
    if view.get("refund_holds"):  # reserved, create answer not stored yet: the poller stores it if abandoned
        holds = ", ".join(f"{no} {yuan(cents)}" for no, cents in sorted(view["refund_holds"].items()))
        lines.insert(3, f"  refunds reserved, answer not stored yet: {holds}")
    lines += [
        f"    {china_text(t['at'])}  {t['from_status']} --{t['event']}--> {t['to_status']}  ({t['source']})"
        for t in view["transitions"]
    ] or ["    (none)"]
    lines.append("  raw notifications (handled: 0 pending, 1 booked, 2 with a person):")
    lines += [
        f"    {r['pk']}  handled={r['handled']}  {r.get('outcome') or r.get('manual_reason') or ''}"
        f"  paid {yuan(r['paid_cent'])} of {yuan(r['order_total_cent'])}  via {r['source']}"
        for r in view["raw"]
    ] or ["    (none)"]
    lines.append(
        f"  times Asia/Shanghai; the whole story: tally order story {view['mchid']} {view['out_trade_no']}"
    )
    return "\n".join(lines)


def render_story(story: dict[str, Any], raw: bool = False) -> str:
    o, s = story["order"], story["summary"]
    lines = [
        f"order {o['mchid']}/{o['out_trade_no']}  {s['status']}  ({o.get('channel')})",
        f"  amount {s['amount_yuan']} {s['currency']}   paid {s['paid_yuan']}   refunded {s['refunded_yuan']}"
        f"   refundable {s['refundable_yuan']}   ledger net {s['ledger_net_yuan']}",
        f"  {s['deliveries']} deliveries stored; {s['open_items']} item(s) waiting for a person",
        "",
    ]
    for e in story["entries"]:
        flag = "!" if e["needs_person"] else " "
        at = (e["at"] or "(no time)")[:23].replace("T", " ")
        lines.append(f"{flag} {at}  {e['kind']:<13} {e['title']}")
        if raw and e["detail"].get("body") is not None:
            lines.append(f"      headers: {e['detail'].get('headers')}")
            lines.append(f"      body:    {e['detail']['body']}")
    lines += ["", "times Asia/Shanghai; ! = waiting for a person. Not stored (docs/story.md):"]
    lines += [f"  - {n}" for n in story["not_stored"]]
    return "\n".join(lines)
