"""`tally order show|story`: an order with its transitions and raw rows; the order's whole story in time order.

Both only read (R42). `order show --ask-channel` is the one explicit way to have the CLI ask the channel
about an unpaid order (what the merchant's return page does, R24): that may book or close it.
"""

from __future__ import annotations

import argparse
from typing import Any

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.speak import _, money, money_text, pad, when, words


def register(sub: argparse._SubParsersAction) -> None:
    order = sub.add_parser("order", help=_("inspect orders")).add_subparsers(metavar="ACTION")
    show = order.add_parser("show", help=_("an order with its transitions and raw notifications (read-only)"))
    show.add_argument("mchid")
    show.add_argument("out_trade_no")
    show.add_argument(
        "--ask-channel",
        action="store_true",
        help=_("ask the channel once about an unpaid order (may book or close it, like the return page)"),
    )
    add_json(show)
    add_target(show)
    show.set_defaults(run=order_show)

    story = order.add_parser(
        "story",
        help=_(
            "everything about one order in time order: deliveries, polls, transitions, ledger, refunds, "
            "events, recon, queue actions (read-only)"
        ),
    )
    story.add_argument("mchid")
    story.add_argument("out_trade_no")
    story.add_argument("--raw", action="store_true", help=_("include each delivery's raw body and headers"))
    add_json(story)
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


def _amount(cents: Any, currency: Any) -> str:
    """¥1,234.56; another currency (never seen so far) is named after the amount."""
    return money(cents) if currency in (None, "", "CNY") else f"{money(cents)} {currency}"


def render_order(view: dict[str, Any]) -> str:
    w = words()
    lines = [
        _("order %(merchant)s/%(order)s  %(status)s")
        % {
            "merchant": view["mchid"],
            "order": view["out_trade_no"],
            "status": w.order_status(view["status"]),
        },
        "  "
        + _("amount %(amount)s   paid %(paid)s   refundable %(refundable)s")
        % {
            "amount": _amount(view["amount_cent"], view.get("currency")),
            "paid": money(view.get("paid_cent", 0)),
            "refundable": money(view.get("refundable_cent", 0)),
        },
        "  "
        + _("transaction_id %(txn)s   created %(created)s   expires %(expires)s")
        % {
            "txn": view.get("transaction_id") or "-",
            "created": when(view.get("created_at")),
            "expires": when(view.get("expire_at")),
        },
        "  " + _("transitions:"),
    ]
    if view.get("refund_holds"):  # reserved, create answer not stored yet: the poller stores it if abandoned
        holds = ", ".join(f"{no} {money(cents)}" for no, cents in sorted(view["refund_holds"].items()))
        lines.insert(3, "  " + _("refunds reserved, answer not stored yet: %(holds)s") % {"holds": holds})
    lines += [
        f"    {when(t['at'])}  {t['from_status']} --{t['event']}--> {t['to_status']}  ({t['source']})"
        for t in view["transitions"]
    ] or ["    " + _("(none)")]
    lines.append("  " + _("raw notifications (handled: 0 pending, 1 booked, 2 with a person):"))
    lines += [
        f"    {r['pk']}  handled={r['handled']}  {r.get('outcome') or r.get('manual_reason') or ''}  "
        + _("paid %(paid)s of %(total)s via %(source)s")
        % {"paid": money(r["paid_cent"]), "total": money(r["order_total_cent"]), "source": r["source"]}
        for r in view["raw"]
    ] or ["    " + _("(none)")]
    lines.append(
        "  "
        + _("times Asia/Shanghai; the whole story: %(command)s")
        % {"command": f"tally order story {view['mchid']} {view['out_trade_no']}"}
    )
    return "\n".join(lines)


def render_story(story: dict[str, Any], raw: bool = False) -> str:
    o, s, w = story["order"], story["summary"], words()
    lines = [
        _("order %(merchant)s/%(order)s  %(status)s")
        % {"merchant": o["mchid"], "order": o["out_trade_no"], "status": w.order_status(s["status"])}
        + f"  ({w.channel(o.get('channel'))})",
        "  "
        + _(
            "amount %(amount)s   paid %(paid)s   refunded %(refunded)s   refundable %(refundable)s   "
            "ledger net %(net)s"
        )
        % {
            "amount": money_text(s["amount_yuan"])
            + ("" if s.get("currency") in (None, "", "CNY") else f" {s['currency']}"),
            "paid": money_text(s["paid_yuan"]),
            "refunded": money_text(s["refunded_yuan"]),
            "refundable": money_text(s["refundable_yuan"]),
            "net": money_text(s["ledger_net_yuan"]),
        },
        "  "
        + _("%(deliveries)s deliveries stored; %(open)s item(s) waiting for a person")
        % {"deliveries": s["deliveries"], "open": s["open_items"]},
        "",
    ]
    for e in story["entries"]:
        flag = "!" if e["needs_person"] else " "
        at = (e["at"] or _("(no time)"))[:23].replace("T", " ")
        lines.append(f"{flag} {at}  {pad(w.story_kind(e['kind']), 13)} {w.story_title(e)}")
        if raw and e["detail"].get("body") is not None:
            lines.append("      " + _("headers:") + f" {e['detail'].get('headers')}")
            lines.append("      " + _("body:") + f"    {e['detail']['body']}")
    lines += ["", _("times Asia/Shanghai; ! = waiting for a person. Not stored (docs/story.md):")]
    lines += [f"  - {w.s.gettext(n)}" for n in story["not_stored"]]
    return "\n".join(lines)
