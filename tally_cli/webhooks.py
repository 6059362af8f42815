"""`tally webhooks`: the merchants' webhook endpoints, their delivery log, and resending (docs/webhooks.md).
Every verb prints one JSON document (no --json needed).

tally webhooks add MCHID URL [--events OrderPaid RefundSucceeded ...]   (prints the whsec_ secret once)
tally webhooks list [MCHID] | remove EP | resume EP | secret EP
tally webhooks log --endpoint EP | --order MCHID OUT_TRADE_NO
tally webhooks resend EP --event EVENT_ID
tally webhooks resend EP --since T --until T [--all]          (a dry run: counts, shows a digest)
tally webhooks resend EP --since T --until T --yes --expect DIGEST   (sends exactly what the dry run showed)
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tally_cli.common import add_target, connect
from tally_cli.speak import _


def register(sub: argparse._SubParsersAction) -> None:
    hooks = sub.add_parser(
        "webhooks", help=_("merchant webhook endpoints, delivery log, resend")
    ).add_subparsers(metavar="ACTION")
    add = hooks.add_parser("add", help=_("register an endpoint (its signing secret is printed once)"))
    add.add_argument("mchid")
    add.add_argument("url")
    add.add_argument("--events", nargs="+", default=["*"], help=_("event types (default: all)"))
    add_target(add)
    add.set_defaults(run=lambda a: _out(_svc(a).add(a.mchid, a.url, a.events)))
    listing = hooks.add_parser("list", help=_("endpoints (of one merchant)"))
    listing.add_argument("mchid", nargs="?")
    add_target(listing)
    listing.set_defaults(run=lambda a: _out(_svc(a).list(a.mchid)))
    for name, doc in (("remove", "forget an endpoint"), ("resume", "deliver to a paused endpoint again")):
        action = hooks.add_parser(name, help=doc)
        action.add_argument("endpoint")
        add_target(action)
        action.set_defaults(run=lambda a, name=name: _out(getattr(_svc(a), name)(a.endpoint)))
    secret = hooks.add_parser("secret", help=_("print an endpoint's signing secret"))
    secret.add_argument("endpoint")
    add_target(secret)
    secret.set_defaults(run=lambda a: _out({"endpoint_id": a.endpoint, "secret": _svc(a).secret(a.endpoint)}))
    log = hooks.add_parser("log", help=_("delivery attempts of an endpoint, or every event of an order"))
    which = log.add_mutually_exclusive_group(required=True)
    which.add_argument("--endpoint")
    which.add_argument("--order", nargs=2, metavar=("MCHID", "OUT_TRADE_NO"))
    log.add_argument("--limit", type=int, default=100)
    add_target(log)
    log.set_defaults(run=show_log)
    resend = hooks.add_parser("resend", help=_("send one event, or a time range, to an endpoint again"))
    resend.add_argument("endpoint")
    what = resend.add_mutually_exclusive_group(required=True)
    what.add_argument("--event", help=_("one event id"))
    what.add_argument("--since", help=_("published at or after (ISO 8601 UTC)"))
    resend.add_argument("--until", help=_("with --since: published before (ISO 8601 UTC)"))
    resend.add_argument("--all", action="store_true", help=_("also events already delivered"))
    resend.add_argument("--yes", action="store_true", help=_("send (without it: a dry run that counts)"))
    resend.add_argument("--expect", default="", help=_("the dry run's digest: refuse if the set changed"))
    add_target(resend)
    resend.set_defaults(run=resend_events)


def _svc(args: argparse.Namespace) -> Any:
    connect(args)
    from tally import bootstrap

    return bootstrap.webhook_endpoints()


def _out(value: Any) -> int:
    print(json.dumps(value, ensure_ascii=False, indent=2))
    return 0


def show_log(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    log = bootstrap.webhook_log()
    return _out(log.endpoint(args.endpoint, args.limit) if args.endpoint else log.order(*args.order))


def resend_events(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    resender = bootstrap.webhook_resender()
    if args.event:
        return _out(resender.one(args.endpoint, args.event))
    until = args.until or "9999-12-31T23:59:59Z"
    return _out(
        resender.range(
            args.endpoint,
            args.since,
            until,
            include_delivered=args.all,
            dry_run=not args.yes,
            expect=args.expect,
        )
    )
