"""`tally`: the command for the people who operate Tally. One module per command group.

Output conventions (docs/story.md): stdout carries the result only (with --json exactly one JSON document);
every log line goes to stderr, and only warnings unless `-v`.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from tally_cli import (
    alerts,
    audit,
    bill,
    console,
    demo,
    envvars,
    find,
    ledger,
    manual,
    merchant,
    order,
    outbox,
    pending,
    recon,
    refund,
    verify,
    webhooks,
)
from tally_cli.common import UsageError
from tally_cli.env import StackNotFound
from tally_cli.speak import _, argparse_speaks, english, lang

COMMAND_MODULES = [
    merchant,
    order,
    verify,
    refund,
    pending,
    manual,
    recon,
    bill,
    ledger,
    demo,
    outbox,
    envvars,
    console,
    find,
    webhooks,
    alerts,
    audit,
]


@functools.cache  # ~30 ms of CPU to build: once per process and language, however often main() runs in it
def build_parser(language: str = "") -> argparse.ArgumentParser:
    """The parser, its help texts in `language` (the CLI's language, speak.lang(), when main() builds it)."""
    parser = argparse.ArgumentParser(
        prog="tally", description=_("Operate Tally, the payment-callback service.")
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help=_("log lines on stderr (-v info, -vv debug)")
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"tally {version()}",
        help=_("show program's version number and exit"),
    )
    sub = parser.add_subparsers(metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


@contextmanager
def cli_logging(verbose: int) -> Iterator[None]:
    """The product logger (Powertools' Logger, tally.observability) and the root logger to stderr, WARNING
    unless -v; restored afterwards, so a test that calls main() leaves the product's logging as it found it."""
    from tally.observability import logger

    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = cast(logging.StreamHandler, logger.registered_handler)  # Powertools builds a StreamHandler
    old_stream = handler.stream
    old_level = logger.log_level
    root = logging.getLogger()
    old_root = root.level
    handler.stream = sys.stderr  # not setStream(): it flushes the old stream, which may be closed
    logger.setLevel(level)
    root.setLevel(level)
    for name in ("botocore", "boto3", "urllib3"):  # chatty at INFO; -vv shows them
        logging.getLogger(name).setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
    try:
        yield
    finally:
        handler.stream = old_stream
        logger.setLevel(old_level)
        root.setLevel(old_root)


def main(argv: list[str] | None = None) -> int:
    with argparse_speaks():  # usage, help and argparse's errors in the CLI's language (speak.py)
        parser = build_parser(lang())
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
    with cli_logging(args.verbose):
        try:
            code = int(args.run(args) or 0)
            sys.stdout.flush()  # a reader that went away is found here, not in the interpreter's last flush
            return code
        except BrokenPipeError:  # `tally … | head`: the reader has what it wanted; end quietly
            _quiet_stdout()
            return 0
        except UsageError as exc:
            return _failed(args, exc, 2)
        except (StackNotFound, ValueError, LookupError, OSError) as exc:
            return _failed(args, exc, 1)


def version() -> str:
    """The installed package's version (pyproject.toml), "unknown" when run from a tree not installed."""
    from importlib import metadata

    try:
        return metadata.version("tally")
    except metadata.PackageNotFoundError:
        return "unknown"


def _quiet_stdout() -> None:
    """stdout pointed at /dev/null, so the interpreter's own last flush of what is left has nowhere to fail."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # a stdout without a file descriptor (a test's capture): nothing left to flush there


def _failed(args: argparse.Namespace, exc: Exception, code: int) -> int:
    """The reason on stderr; with --json also as the one JSON document on stdout, so a script always parses."""
    print(f"tally: {exc}", file=sys.stderr)
    if getattr(args, "json", False):
        sys.stdout.write(
            json.dumps({"ok": False, "error": english(exc), "exit": code}, ensure_ascii=False) + "\n"
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
