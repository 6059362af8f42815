"""What every command shares: choosing the stack, reading secrets from arguments, and the output conventions
(docs/story.md "CLI conventions"):

* `emit(document, human_text, args)`: with `--json` exactly ONE JSON document on stdout, else the human text;
* `yuan(cents)`: amounts people read, two decimals (machine fields keep integer cents);
* `parse_date(text)`: YYYY-MM-DD, `today` or `yesterday`, resolved in Asia/Shanghai before anything is sent;
  an invalid date raises `UsageError` (exit 2, nothing recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

from tally import errors
from tally.domain.clock import CHINA  # the channels' day (R34)
from tally.domain.money import format_cents
from tally.i18n import N_

from tally_cli.env import use_deployed, use_local
from tally_cli.speak import _, fault

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)


class UsageError(errors.InvalidRequest, ValueError):
    """The command line is wrong (a bad date, a missing argument): exit 2 before anything is sent or stored."""


def add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", action="store_true", help=_("talk to the stack `make run` started"))
    p.add_argument("--stack", default="tally", help=_("deployed CloudFormation stack name (default: tally)"))


def add_json(p: argparse.ArgumentParser) -> None:
    """--json: one JSON document of codes and numbers, the same in every language."""
    p.add_argument(
        "--json", action="store_true", help=_("print one JSON document (codes and numbers, never translated)")
    )


def connect(args: argparse.Namespace) -> dict[str, Any]:
    return use_local() if args.local else use_deployed(args.stack)


def secret_arg(value: str) -> str:
    """A secret given as a value or as @FILE (keeps it out of shell history)."""
    return pathlib.Path(value[1:]).read_text().strip() if value.startswith("@") else value


# ------------------------------------------------------------------ output


def emit(document: Any, human_text: str | Callable[[], str], args: argparse.Namespace) -> None:
    """The one way a command prints its result: one JSON document with --json, the human text otherwise.
    `human_text` may be a callable, so the rendering is skipped for --json. A reader that closed the pipe
    (`| head`) ends the command quietly."""
    try:
        if getattr(args, "json", False):
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2, default=str) + "\n")
        else:
            text = human_text() if callable(human_text) else human_text
            sys.stdout.write(text + ("\n" if not text.endswith("\n") else ""))
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail either


def yuan(cents: Any, unit: str = "") -> str:
    """Integer cents → "12.30" (or "12.30 yuan" with unit="yuan"); None/absent → "-"."""
    if cents is None or cents == "":
        return "-"
    text = format_cents(int(cents))
    return f"{text} {unit}" if unit else text


# ------------------------------------------------------------------ dates


def china_today(clock: Callable[[], float] | None = None) -> date:
    return datetime.fromtimestamp((clock or time.time)(), CHINA).date()


def default_date(clock: Callable[[], float] | None = None) -> str:
    """Yesterday in Asia/Shanghai: the day whose bill the channels publish this morning."""
    return (china_today(clock) - timedelta(days=1)).isoformat()


def parse_date(text: str | None, clock: Callable[[], float] | None = None) -> str:
    """YYYY-MM-DD (a real calendar day, not in the future), `today`, `yesterday`, or None → yesterday;
    all in Asia/Shanghai. Anything else raises UsageError."""
    if text is None or text == "":
        return default_date(clock)
    word = text.strip().lower()
    today = china_today(clock)
    if word == "today":
        return today.isoformat()
    if word == "yesterday":
        return (today - timedelta(days=1)).isoformat()
    if not _DATE.match(word):
        raise fault(
            UsageError,
            N_("date %(date)r: give YYYY-MM-DD, today or yesterday (Asia/Shanghai)"),
            {"date": text},
        )
    try:
        day = date.fromisoformat(word)
    except ValueError:
        raise fault(UsageError, N_("date %(date)r is not a calendar day"), {"date": text}) from None
    if day > today:
        raise fault(
            UsageError,
            N_("date %(date)s is in the future (today in Asia/Shanghai is %(today)s)"),
            {"date": text, "today": today.isoformat()},
        )
    return day.isoformat()


def china_text(stored: Any) -> str:
    """A stored time (ISO UTC) as people read it: Asia/Shanghai, "2026-12-01 17:05:09.123"."""
    from tally.service.story import china_time

    return (china_time(stored) or str(stored or "-"))[:23].replace("T", " ")
