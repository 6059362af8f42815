"""Which language a page speaks (docs/language.md): the person's own setting, else the browser's
Accept-Language, else the deployment's default (template.yaml ConsoleLanguage).

The setting is the Cognito standard attribute `locale`, changed on the Settings page (store/users.py). A page
reads it from the pool at most every PAGE_RECHECK_S per container (as auth.as_now reads groups), so a change
shows at once in the container that made it and within a minute everywhere, before the token is renewed.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

from tally import bootstrap, i18n
from tally.console.auth import PAGE_RECHECK_S, Identity
from tally.console.web import Request

_now: ContextVar[i18n.Speaker | None] = ContextVar("tally_console_speaker", default=None)
_locales: dict[str, tuple[float, str | None]] = {}  # per container: username -> (read at, locale)


def user_locale(who: Identity | None) -> str | None:
    """The person's `locale`: from the pool (cached briefly), or from the token without a pool (a test's claims)."""
    if who is None:
        return None
    seen = _locales.get(who.username)
    if not bootstrap.settings().console_user_pool_id:
        return seen[1] if seen else who.locale or None
    if seen is None or time.time() - seen[0] > PAGE_RECHECK_S:
        seen = (time.time(), bootstrap.console_users().locale(who.username))
        _locales[who.username] = seen
    return seen[1]


def choose(request: Request, who: Identity | None) -> i18n.Speaker:
    """This request's language, remembered for the page it renders (current())."""
    lang = i18n.console_language(
        user_locale(who), request.headers.get("accept-language"), bootstrap.settings().console_language
    )
    chosen = i18n.speaker(lang)
    _now.set(chosen)
    return chosen


def current() -> i18n.Speaker:
    return _now.get() or i18n.speaker(i18n.EN)


def set_user_language(who: Identity, value: str) -> str:
    """Store the person's language (zh-CN or en; anything else is refused with ValueError); returns its tag."""
    lang = i18n.normalise(value)
    if lang is None:
        raise ValueError(f"not a language Tally speaks: {value!r}")
    locale = i18n.tag(lang)
    if bootstrap.settings().console_user_pool_id:
        bootstrap.console_users().set_locale(who.username, locale)
    _locales[who.username] = (time.time(), locale)
    return locale
