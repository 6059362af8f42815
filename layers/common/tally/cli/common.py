"""What every command shares: choosing the stack, reading secrets from arguments."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from tally.cli.env import use_deployed, use_local


def add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", action="store_true", help="talk to the stack `make run` started")
    p.add_argument("--stack", default="tally", help="deployed CloudFormation stack name (default: tally)")


def connect(args: argparse.Namespace) -> dict[str, Any]:
    return use_local() if args.local else use_deployed(args.stack)


def secret_arg(value: str) -> str:
    """A secret given as a value or as @FILE (keeps it out of shell history)."""
    return pathlib.Path(value[1:]).read_text().strip() if value.startswith("@") else value
