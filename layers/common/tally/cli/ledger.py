"""`tally ledger day`: the finance view of one day (service/ledger_day.py)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    return None
