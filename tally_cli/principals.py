"""`tally merchant allow|disallow|principals`: which signed callers (IAM principals) may act for which merchants
on the orders and refunds API (R53, docs/merchants.md "Who may call the API")."""

from __future__ import annotations

import argparse
import os
from typing import Any

from tally_cli.common import add_json, add_target, connect, emit
from tally_cli.speak import _, pad


def register(merchant: argparse._SubParsersAction) -> None:
    allow = merchant.add_parser(
        "allow", help=_("let an IAM role or user act for merchants on the signed API (R53)")
    )
    allow.add_argument("principal", help=_("the backend's role ARN, arn:aws:iam::ACCOUNT:role/NAME"))
    allow.add_argument(
        "merchant_ids", nargs="+", metavar="MERCHANT_ID", help=_("mchid / app_id, or * for all")
    )
    _common(allow)
    allow.set_defaults(run=merchant_allow)

    disallow = merchant.add_parser(
        "disallow", help=_("take merchants (default: all) from a principal's grant")
    )
    disallow.add_argument("principal")
    disallow.add_argument("merchant_ids", nargs="*", metavar="MERCHANT_ID")
    _common(disallow)
    disallow.set_defaults(run=merchant_disallow)

    listing = merchant.add_parser("principals", help=_("who may act for which merchants on the signed API"))
    add_json(listing)
    add_target(listing)
    listing.set_defaults(run=merchant_principals)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--by", default=None, help=_("who (default: $USER)"))
    add_json(parser)
    add_target(parser)


def merchant_allow(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    merchants = bootstrap.callers().allow(args.principal, args.merchant_ids, by=_by(args))
    emit(
        {"principal": args.principal, "merchants": merchants},
        lambda: _granted(args.principal, merchants),
        args,
    )
    return 0


def merchant_disallow(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    merchants = bootstrap.callers().disallow(args.principal, args.merchant_ids, by=_by(args))
    emit(
        {"principal": args.principal, "merchants": merchants},
        lambda: _granted(args.principal, merchants),
        args,
    )
    return 0


def merchant_principals(args: argparse.Namespace) -> int:
    connect(args)
    from tally import bootstrap

    rows = bootstrap.callers().principals()
    emit({"principals": rows}, lambda: render_principals(rows), args)
    return 0


def _by(args: argparse.Namespace) -> str:
    return caller_name(args.by)


def caller_name(by: str | None) -> str:
    """Who acts from this CLI: `--by` where the command has it, else the login name."""
    return by or os.environ.get("USER", "") or "cli"


def _granted(principal: str, merchants: list[str]) -> str:
    if not merchants:
        return _("%(principal)s may act for no merchant now") % {"principal": principal}
    return _("%(principal)s may act for: %(merchants)s") % {
        "principal": principal,
        "merchants": ", ".join(_("every merchant") if m == "*" else m for m in merchants),
    }


def render_principals(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return _("no principal may call the API yet (tally merchant allow ROLE_ARN MCHID)")
    width = max(len(r["principal"]) for r in rows) + 2
    lines = [pad(_("principal"), width) + _("merchants")]
    lines += [
        pad(r["principal"], width) + ", ".join(_("every merchant") if m == "*" else m for m in r["merchants"])
        for r in rows
    ]
    return "\n".join(lines)
