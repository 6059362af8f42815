"""Money is integer cents (fen) inside Tally (R14). Floats never come near an amount."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_YUAN = re.compile(r"^-?\d+(\.\d{1,2})?$", re.ASCII)  # no full-width or other Unicode digits


class MoneyError(ValueError):
    """An amount that cannot be represented exactly in cents."""


def cents(value: object) -> int:
    """An amount that must already be integer cents (WeChat v3 sends JSON integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoneyError(f"amount must be integer cents, got {type(value).__name__}: {value!r}")
    return value


# The largest amount an order or refund may carry: 1,000,000,000.00 yuan. Far above any real payment
# (WeChat Pay and Alipay cap one payment well below it), far below what DynamoDB numbers, JSON consumers
# (2**53) and int64 columns hold, so no sum of a day's amounts can overflow anything downstream (docs/contracts.md).
MAX_CENT = 10**11


def received_cents(value: object) -> int:
    """An amount a channel reports (JSON integer cents): never negative (R14, issue #15.4)."""
    if type(value) is int and value >= 0:  # the common case answered without the call (a bool is no int here)
        return value
    amount = cents(value)
    if amount < 0:
        raise MoneyError(f"a reported amount is never negative: {value!r}")
    return amount


def yuan_to_cents(text: str) -> int:
    """Exact conversion of a yuan string like "12.30" to 1230; anything inexact is refused."""
    if not isinstance(text, str) or not _YUAN.match(text.strip()):
        raise MoneyError(f"not a yuan amount with at most 2 decimals: {text!r}")
    try:
        return int(Decimal(text.strip()) * 100)
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise MoneyError(f"not a yuan amount: {text!r}") from exc


def yuan_text(amount: int) -> str:
    """1230 -> "12.30 yuan": amounts in messages a person reads (machine fields keep the integer cents)."""
    return f"{format_cents(int(amount))} yuan"


def format_stored(cents: int | str | None, missing: str = "") -> str:
    """A stored amount (integer cents, or None when not known) for a person: "12.30", else `missing`."""
    return missing if cents is None else format_cents(int(cents))


def format_cents(amount: int, *, grouped: bool = False) -> str:
    """1230 -> "12.30" (for people; never parsed back); grouped: 123456 -> "1,234.56" (the console, the CLI's
    human lines)."""
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), 100)
    return f"{sign}{whole:,}.{frac:02d}" if grouped else f"{sign}{whole}.{frac:02d}"
