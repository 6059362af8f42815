"""`tally demo`: a scripted day of payments and faults through the embedded stack, then the morning report.

It starts its own embedded stack (moto, the real handlers, the simulator) and never touches a
deployed one: a demo that creates fake payments has no business near real money.
"""

from __future__ import annotations

import argparse

from tally_cli.speak import _


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo",
        help=_("run a scripted day through the embedded stack; exit 1 if any payment is unaccounted for"),
    )
    demo.add_argument("--orders", type=int, default=200, help=_("payments in the day (default 200)"))
    demo.add_argument(
        "--local", action="store_true", help=_("accepted for symmetry: the demo is always local")
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help=_(
            "keep the stack running with the day in it (like `TALLY_DEMO=1 make run`): work its queue with "
            "`tally manual list --local`; Ctrl-C stops it"
        ),
    )
    demo.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    if args.orders < 8:
        raise ValueError("--orders must be at least 8 (one of each scenario)")
    try:
        from tally_local.day import main
    except ImportError:
        raise ValueError(
            "tally demo needs the project checkout (tally_local): run it from the repository"
        ) from None
    return main(args.orders, keep=args.keep)
