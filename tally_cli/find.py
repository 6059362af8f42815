"""`tally find ID [--json]`: the order a number names, and its story.

Support is quoted a number from a receipt or a merchant's ticket: the channel's transaction id, a refund
number, the channel's refund id, or the merchant's out_trade_no. `find` looks it up across every configured
merchant (GetItem and index Queries only, R21, R42) and prints the order's story when one order matches,
or the matches to choose from (`tally order story MCHID OUT_TRADE_NO`).
"""

from __future__ import annotations

import argparse
from typing import Any

from tally.i18n import N_

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.speak import _, words


def register(sub: argparse._SubParsersAction) -> None:
    find = sub.add_parser(
        "find",
        help=_("the order a transaction id, refund number, refund id or out_trade_no names, with its story"),
    )
    find.add_argument("number", help=_("a channel transaction id, refund number, refund id or out_trade_no"))
    add_json(find)
    add_target(find)
    find.set_defaults(run=run_find)


def run_find(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap
    from tally.store.tables import MerchantStore

    stories = bootstrap.story_service()
    matches = stories.find(args.number, MerchantStore(bootstrap.tables()).configured())
    story = stories.story(matches[0]["mchid"], matches[0]["out_trade_no"]) if len(matches) == 1 else None
    document: dict[str, Any] = {"number": args.number, "matches": matches, "story": story}
    emit(document, lambda: render(document), args)
    return 0 if matches else 1


FOUND_AS = {  # service/story.py `find`: what the number is of the order
    "transaction id": N_("the transaction id"),
    "refund number": N_("a refund number"),
    "refund id": N_("a channel refund id"),
    "out_trade_no": N_("the merchant's order number (out_trade_no)"),
}


def found_as(code: str) -> str:
    said = FOUND_AS.get(code)
    return _(said) if said else code


def render(document: dict[str, Any]) -> str:
    from tally_cli.order import render_story

    w = words()
    matches = document["matches"]
    if not matches:
        return _(
            "nothing found for %(number)r: not a transaction id, refund number, refund id or out_trade_no of "
            "any configured merchant"
        ) % {"number": document["number"]}
    lines = [
        _("%(number)s is %(found_as)s of order %(order)s at %(channel)s %(merchant)s")
        % {
            "number": document["number"],
            "found_as": found_as(m["found_as"]),
            "order": m["out_trade_no"],
            "channel": w.channel(m["channel"]),
            "merchant": m["mchid"],
        }
        for m in matches
    ]
    if document["story"] is not None:
        return "\n".join([*lines, "", render_story(document["story"])])
    lines += [
        "  "
        + _("its story: %(command)s") % {"command": f"tally order story {m['mchid']} {m['out_trade_no']}"}
        for m in matches
    ]
    return "\n".join(lines)
