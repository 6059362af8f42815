"""`tally manual list|show|resolve|replay`: the morning work of clearing the manual queue."""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import Any

from tally.cli.common import add_target, connect
from tally.domain.money import format_cents


def register(sub: argparse._SubParsersAction) -> None:
    manual = sub.add_parser("manual", help="the manual queue: what a person must look at").add_subparsers(
        metavar="ACTION"
    )
    listing = manual.add_parser("list", help="every open item, oldest first")
    listing.add_argument("--json", action="store_true")
    add_target(listing)
    listing.set_defaults(run=manual_list)

    show = manual.add_parser("show", help="one item in full, with its history")
    show.add_argument("item_id", help="raw:<channel#id> or event:<id>, as `list` prints")
    add_target(show)
    show.set_defaults(run=manual_show)

    for name, helptext in (
        ("resolve", "close an item a person dealt with outside Tally"),
        ("replay", "send an item through the product path again after a fix"),
    ):
        action = manual.add_parser(name, help=helptext)
        action.add_argument("item_id")
        action.add_argument("--by", default=os.environ.get("USER", ""), help="who (default: $USER)")
        action.add_argument("--why", required=True, help="why: recorded on the row")
        if name == "resolve":
            action.add_argument(
                "--action", required=True, help="what was done, e.g. refunded-by-hand, booked-by-hand, junk"
            )
        add_target(action)
        action.set_defaults(run=manual_resolve if name == "resolve" else manual_replay)


def manual_list(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    items = bootstrap.manual_queue().list()
    if args.json:
        print(json.dumps(items, ensure_ascii=False, indent=2))
        return 0
    if not items:
        print("manual queue is empty")
        return 0
    print(f"{len(items)} item(s) waiting for a person, oldest first:")
    for item in items:
        amount = format_cents(item["amount_cent"]) if item["amount_cent"] is not None else "-"
        print(
            f"  {item['id']}\n    {item['kind']}  {item['channel']}/{item['mchid']}  order {item['order'] or '-'}"
            f"  amount {amount}  age {_age(item['since'])}\n    why: {item['why']}"
        )
    return 0


def manual_show(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    print(json.dumps(bootstrap.manual_queue().show(args.item_id), ensure_ascii=False, indent=2))
    return 0


def manual_resolve(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    row = bootstrap.manual_queue().resolve(args.item_id, by=args.by, action=args.action, why=args.why)
    print(f"resolved {args.item_id}: {row['resolution']['action']} by {row['resolution']['by']}")
    return 0


def manual_replay(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    result = bootstrap.manual_queue().replay(args.item_id, by=args.by, why=args.why)
    print(f"replayed {args.item_id}: {result['outcome']}")
    return 0


def _age(since: Any) -> str:
    if not since:
        return "?"
    seconds = (
        datetime.now(UTC).timestamp() - datetime.fromisoformat(str(since).replace("Z", "+00:00")).timestamp()
    )
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m"
