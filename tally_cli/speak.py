"""The language of the CLI's human lines, zh-CN or en (tally/i18n `cli_language`: TALLY_LANG, else LC_ALL /
LC_MESSAGES / LANG, else en), read when a line is written.

The CLI's own sentences are gettext domain `tally_cli` (tally/locale/<lang>/LC_MESSAGES/tally_cli.po, compiled
and committed beside the console's `tally` domain; `make i18n` extracts both). What a case, a state, a channel
or a run means comes from the `tally` domain through `words()` (tally/i18n/words.py), so the CLI and the console
say the same thing. `--json` is never translated: codes and numbers.

argparse's own words ("usage:", "options", "error: …") are read from this catalogue too while `argparse_speaks`
is in force (main.py): argparse looks them up through its module-level `_` and `ngettext`.
"""

from __future__ import annotations

import argparse
import gettext as _gettext
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from tally.i18n import EN, LANGUAGES, LOCALE_DIR, N_, cli_language, speaker
from tally.i18n.words import Words, cst

DOMAIN = "tally_cli"


def lang() -> str:
    return cli_language()


@cache
def catalogue(language: str) -> _gettext.NullTranslations:
    """The compiled `tally_cli` catalogue of one language; English reads its msgids."""
    if language not in LANGUAGES:
        language = EN
    return _gettext.translation(DOMAIN, str(LOCALE_DIR), languages=[language], fallback=True)


def _(message: str) -> str:
    return catalogue(lang()).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return catalogue(lang()).ngettext(singular, plural, n)


def words() -> Words:
    """The `tally` domain's reasons, states, channels and formats in the CLI's language."""
    return Words(speaker(lang()))


def money(cents: Any) -> str:
    """¥1,234.56 (the one format of an amount in a human line); "-" when there is none."""
    if cents is None or cents == "":
        return "-"
    amount = int(cents)
    return ("-" if amount < 0 else "") + words().money(abs(amount))  # -¥0.02, not ¥-0.02


def money_text(yuan: Any) -> str:
    """An amount a service already wrote as yuan text ("1234.56") → ¥1,234.56; "-" when there is none."""
    from tally.domain.money import MoneyError, yuan_to_cents

    if yuan is None or yuan == "":
        return "-"
    try:
        return money(yuan_to_cents(str(yuan).lstrip("-")) * (-1 if str(yuan).startswith("-") else 1))
    except MoneyError:
        return str(yuan)


def when(stored: Any) -> str:
    """A stored time as people in China read it (Asia/Shanghai, 2026-12-01 17:05:09); "-" when there is none."""
    return cst(stored) or "-"


def age(seconds: Any) -> str:
    """An age in the one unit style of the console (Words.age)."""
    return words().age(seconds)


# argparse's own sentences (CPython argparse.py), so `make i18n` puts them in this catalogue
ARGPARSE = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    N_("show program's version number and exit"),
    N_("%(prog)s: error: %(message)s\n"),
    N_("the following arguments are required: %s"),
    N_("unrecognized arguments: %s"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("invalid %(type)s value: %(value)r"),
    N_("expected one argument"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("not allowed with argument %s"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
)


@contextmanager
def argparse_speaks() -> Iterator[None]:
    """argparse's usage, headings and errors in the CLI's language while the command line is parsed and help
    is printed; put back afterwards."""
    names = ("_", "ngettext")
    before = {name: getattr(argparse, name) for name in names}
    setattr(argparse, "_", _)  # noqa: B010 - argparse's module-level gettext alias
    setattr(argparse, "ngettext", ngettext)  # noqa: B010
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(argparse, name, value)


def width(text: str) -> int:
    """Columns a text takes on a terminal: a Chinese character takes two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, columns: int) -> str:
    """`text` filled with spaces to `columns` terminal columns (f"{x:<n}" counts a Chinese character as one)."""
    return text + " " * max(0, columns - width(text))


def rpad(text: str, columns: int) -> str:
    """`text` right-aligned in `columns` terminal columns."""
    return " " * max(0, columns - width(text)) + text


def aligned(pairs: list[tuple[str, Any]], indent: str = "", minimum: int = 0) -> list[str]:
    """label / value lines with the values in one column (labels measured in terminal columns)."""
    column = max([minimum, *(width(label) for label, _value in pairs)])
    return [f"{indent}{pad(label, column)} {value}" for label, value in pairs]


def fault(kind: type[Exception], message: str, values: dict[str, Any] | None = None) -> Exception:
    """An exception whose text is `message` in the CLI's language, keeping the English sentence as `english`:
    a person reads the first on stderr, a `--json` document carries the second (the same in every language)."""
    values = values or {}
    error = kind(_(message) % values if values else _(message))
    error.english = message % values if values else message  # type: ignore[attr-defined]
    return error


def english(error: BaseException) -> str:
    """What a `--json` document says of an error: the English sentence of a `fault`, else its text."""
    return str(getattr(error, "english", None) or error)
