"""The two languages people read Tally in, zh-CN and en: gettext catalogues and the choice of one.

The catalogues are `tally/locale/<lang>/LC_MESSAGES/tally.po`, compiled to `tally.mo` beside them and committed
(the Lambda layer needs no build step); `make i18n` extracts the messages (Babel), updates and compiles them.
The source language is English: a message not translated reads as its msgid, and the `en` catalogue is empty.

Which language: the console asks `console_language` (the person's Cognito `locale` attribute, else the
browser's Accept-Language, else the deployment's default, template.yaml ConsoleLanguage); the CLI asks
`cli_language` (TALLY_LANG, else LC_ALL / LC_MESSAGES / LANG, else en). Machine output (`--json`, CSV, logs,
metrics) is never translated: codes and numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import gettext

DOMAIN = "tally"
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
ZH, EN = "zh_CN", "en"
LANGUAGES = (ZH, EN)  # catalogue names; `tag` gives the BCP 47 form a page or a Cognito attribute carries
DEFAULT_CONSOLE = ZH  # a merchant in China (template.yaml ConsoleLanguage overrides it per deployment)


def N_(message: str) -> str:
    """Marks a message for extraction where it is defined (a table); it is translated where it is shown."""
    return message


def normalise(value: str | None) -> str | None:
    """A language as people and systems write it (zh-CN, zh_CN.UTF-8, zh-Hans, zh, en-US, C.UTF-8) → one of
    LANGUAGES, or None when it names neither."""
    if not value:
        return None
    tag = value.strip().split(".")[0].split("@")[0].replace("_", "-").lower()
    if tag == "zh" or tag.startswith(("zh-cn", "zh-hans", "zh-sg")):
        return ZH
    if tag == "en" or tag.startswith("en-"):
        return EN
    return None


def tag(lang: str) -> str:
    """zh_CN → zh-CN: the form a page's `lang` and a Cognito `locale` attribute carry."""
    return lang.replace("_", "-")


def from_accept_language(header: str | None) -> str | None:
    """The first language of an Accept-Language header (by q, then order) that Tally speaks."""
    ranked: list[tuple[float, int, str]] = []
    for position, part in enumerate((header or "").split(",")):
        name, _, params = part.strip().partition(";")
        weight = 1.0
        for param in params.split(";"):
            key, _, number = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    weight = float(number)
                except ValueError:
                    weight = 0.0
        if weight > 0:
            ranked.append((-weight, position, name))
    for _, _, name in sorted(ranked):
        found = normalise(name)
        if found:
            return found
    return None


def console_language(user_locale: str | None, accept_language: str | None, default: str | None) -> str:
    """The person's setting, else the browser's, else the deployment's, else zh-CN."""
    return (
        normalise(user_locale)
        or from_accept_language(accept_language)
        or normalise(default)
        or DEFAULT_CONSOLE
    )


def cli_language(env: Mapping[str, str] | None = None) -> str:
    """TALLY_LANG, else the POSIX locale (LC_ALL, LC_MESSAGES, LANG: the first one set), else en."""
    env = os.environ if env is None else env
    if env.get("TALLY_LANG"):
        return normalise(env["TALLY_LANG"]) or EN
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if env.get(name):
            return normalise(env[name]) or EN
    return EN


@cache
def translations(lang: str) -> gettext.NullTranslations:
    """The compiled catalogue of `lang` (stdlib gettext on tally.mo); English reads its msgids. gettext is
    imported here: the channels' `N_` tables load this module on notify's cold start, which translates nothing."""
    import gettext

    if lang not in LANGUAGES:
        lang = EN
    return gettext.translation(DOMAIN, str(LOCALE_DIR), languages=[lang], fallback=True)


@dataclass(frozen=True)
class Speaker:
    """One language's calls: what a page or a CLI line translates with."""

    lang: str

    @property
    def tag(self) -> str:
        return tag(self.lang)

    def gettext(self, message: str) -> str:
        return translations(self.lang).gettext(message)

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        return translations(self.lang).ngettext(singular, plural, n)

    def pgettext(self, context: str, message: str) -> str:
        return translations(self.lang).pgettext(context, message)

    def npgettext(self, context: str, singular: str, plural: str, n: int) -> str:
        return translations(self.lang).npgettext(context, singular, plural, n)


def speaker(lang: str | None) -> Speaker:
    return Speaker(lang if lang in LANGUAGES else EN)
