"""`tally`: the command for the people who operate Tally. One module per command group."""

from __future__ import annotations

import argparse
import sys

from tally.cli import console, demo, manual, merchant, order, pending, recon, refund, verify
from tally.cli.env import StackNotFound

COMMAND_MODULES = [merchant, order, verify, refund, pending, manual, recon, demo, console]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tally", description="Operate Tally, the payment-callback service.")
    sub = parser.add_subparsers(metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except (StackNotFound, ValueError, LookupError, OSError) as exc:
        print(f"tally: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
