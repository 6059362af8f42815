"""`tally outbox republish` and `tally events replay`: downstream events are never lost for good (docs/events.md).

republish rebuilds events from the current order/refund rows with their stable ids (the stream's own
builder); replay sends a window of the bus's archive back through the bus.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from tally_cli.common import add_target, connect
from tally_cli.speak import _


def _when(value: str) -> datetime:
    """ISO 8601; a bare date or a time without zone is UTC."""
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def register(sub: argparse._SubParsersAction) -> None:
    outbox = sub.add_parser("outbox", help=_("republish downstream events")).add_subparsers(metavar="ACTION")
    rep = outbox.add_parser(
        "republish", help=_("rebuild and publish the events of orders/refunds from their current rows")
    )
    which = rep.add_mutually_exclusive_group(required=True)
    which.add_argument("--order", nargs=2, metavar=("MCHID", "OUT_TRADE_NO"))
    which.add_argument(
        "--refund", metavar="REFUND_NO", help=_("a refund_no, or MCHID#REFUND_NO if several merchants use it")
    )
    which.add_argument("--since", type=_when, help=_("every order and refund changed since (ISO 8601, UTC)"))
    rep.add_argument("--until", type=_when, help=_("with --since: changed before this"))
    add_target(rep)
    rep.set_defaults(run=republish)

    events = sub.add_parser("events", help=_("the event bus's archive")).add_subparsers(metavar="ACTION")
    replay = events.add_parser("replay", help=_("send archived events of a window back through the bus"))
    replay.add_argument("--since", type=_when, required=True)
    replay.add_argument("--until", type=_when, required=True)
    replay.add_argument("--name", help=_("replay name (default: tally-<since>-<until>)"))
    add_target(replay)
    replay.set_defaults(run=events_replay)
    status = events.add_parser("replay-status", help=_("state of a replay"))
    status.add_argument("name")
    add_target(status)
    status.set_defaults(run=events_replay_status)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def republish(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    service = bootstrap.republisher()
    if args.order:
        result = {"events": service.order(*args.order)}
    elif args.refund:
        result = {"events": service.refund(args.refund)}
    else:
        result = service.since(_iso(args.since), _iso(args.until) if args.until else None)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def events_replay(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    name = args.name or f"tally-{args.since:%Y%m%dT%H%M}-{args.until:%Y%m%dT%H%M}"
    print(json.dumps(bootstrap.event_replay().start(name, args.since, args.until), indent=2))
    return 0


def events_replay_status(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    print(json.dumps(bootstrap.event_replay().status(args.name), default=str, indent=2))
    return 0
