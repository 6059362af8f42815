"""`tally console add-user`: a person for the operations console (docs/console.md), in one of its groups.

Against AWS it reads the pool from the stack's outputs (ConsoleUserPoolId, ConsoleUserPoolClientId);
with --local from the stack `make run` started. The password is printed once (or taken from @FILE).
"""

from __future__ import annotations

import argparse
import json

from tally_cli.common import add_json, add_target, connect, secret_arg
from tally_cli.speak import _


def register(sub: argparse._SubParsersAction) -> None:
    console = sub.add_parser("console", help=_("the operations console: its users"))
    verbs = console.add_subparsers(metavar="VERB")
    add = verbs.add_parser("add-user", help=_("create (or reset) a console user in viewers or operators"))
    add.add_argument("username")
    add.add_argument(
        "--group", choices=["viewers", "operators"], required=True, help=_("viewers read; operators act")
    )
    add.add_argument("--email", help=_("the person's e-mail (kept as a user attribute)"))
    add.add_argument(
        "--password", type=secret_arg, help=_("the password, or @FILE (default: a generated one)")
    )
    add_json(add)
    add_target(add)
    add.set_defaults(run=add_user)


def add_user(args: argparse.Namespace) -> int:
    state = connect(args)
    from tally.store.users import ConsoleUsers

    try:
        pool, client = _pool(args, state)
    except LookupError as exc:
        if not args.json:
            raise
        print(json.dumps({"error": str(exc)}))  # --json: one document on refusal too
        return 1
    import boto3

    users = ConsoleUsers(boto3.client("cognito-idp"), pool, client)
    password = users.add(args.username, args.group, password=args.password, email=args.email)
    url = (state.get("api_url") or "").rstrip("/") + "/console/login"
    if args.json:
        print(json.dumps({"username": args.username, "group": args.group, "password": password, "url": url}))
    else:
        print(
            _("%(user)s is in %(group)s. Sign in at %(url)s")
            % {"user": args.username, "group": args.group, "url": url}
        )
        print(_("password (shown once; hand it over privately): %(password)s") % {"password": password})
    return 0


def _pool(args: argparse.Namespace, state: dict) -> tuple[str, str]:
    env = state.get("env") or {}
    if args.local:
        pool, client = env.get("CONSOLE_USER_POOL_ID", ""), env.get("CONSOLE_CLIENT_ID", "")
    else:
        import boto3

        stack = boto3.client("cloudformation").describe_stacks(StackName=args.stack)["Stacks"][0]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        pool, client = outputs.get("ConsoleUserPoolId", ""), outputs.get("ConsoleUserPoolClientId", "")
    if not pool or not client:
        raise LookupError(
            "this stack has no console user pool (the console is not deployed in the China regions)"
        )
    return pool, client
