"""Who is asking: the claims API Gateway's JWT authorizer verified, and the CSRF token bound to them.

On AWS the HttpApi's ConsoleJwt authorizer checks the Cognito ID token (issuer, audience, expiry,
signature) before the function runs and passes its claims in `requestContext.authorizer.jwt.claims`;
locally tally_local/frontdoor.py does the same checks. Nothing here reads the Authorization header or any
other header for identity: a header is whatever the client typed.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

VIEWERS, OPERATORS = "viewers", "operators"
GROUPS = (VIEWERS, OPERATORS)
PAGE_RECHECK_S = 60  # a page view trusts a user's groups read this long ago; an action reads them again
_now_groups: dict[
    str, tuple[float, frozenset[str] | None]
] = {}  # per container: username -> (read at, groups)


@dataclass(frozen=True)
class Identity:
    sub: str
    username: str
    groups: frozenset[str]
    token_id: str  # the token's jti: secret to whoever does not hold the token (keys the CSRF token)
    locale: str = ""  # the token's Cognito `locale` (the person's language when it was issued)

    @property
    def can_view(self) -> bool:
        return bool(self.groups & {VIEWERS, OPERATORS})

    @property
    def can_act(self) -> bool:
        return OPERATORS in self.groups

    @property
    def who(self) -> str:
        """What the audit history records: the user name and the immutable Cognito subject."""
        return f"{self.username} ({self.sub})"

    @property
    def role(self) -> str:
        return OPERATORS if self.can_act else VIEWERS if self.can_view else "no group"


def claims_of(event: Mapping[str, Any]) -> dict[str, Any] | None:
    authorizer = (event.get("requestContext") or {}).get("authorizer") or {}
    claims = (authorizer.get("jwt") or {}).get("claims")
    return dict(claims) if isinstance(claims, Mapping) else None


def identity(event: Mapping[str, Any]) -> Identity | None:
    """The verified caller, or None when the authorizer passed no claims (an open route)."""
    claims = claims_of(event)
    if not claims or not claims.get("sub"):
        return None
    if claims.get("token_use") not in (None, "id"):
        return None  # the console signs people in with ID tokens; an access token is not a person's page view
    return Identity(
        sub=str(claims["sub"]),
        username=str(claims.get("cognito:username") or claims.get("username") or claims.get("email") or "?"),
        groups=parse_groups(claims.get("cognito:groups")),
        token_id=str(claims.get("jti") or claims.get("origin_jti") or ""),
        locale=str(claims.get("locale") or ""),
    )


def parse_groups(value: Any) -> frozenset[str]:
    """`cognito:groups` as API Gateway passes it: HTTP API claims are strings, a list becomes "[a b]";
    a list (an event built by hand) is accepted too. Only the two known groups count."""
    if isinstance(value, list | tuple):
        names = [str(v) for v in value]
    elif isinstance(value, str):
        names = value.strip().strip("[]").replace(",", " ").split()
    else:
        names = []
    return frozenset(name for name in names if name in GROUPS)


def csrf_token(who: Identity) -> str:
    """A per-token value only the page the user loaded knows: HMAC keyed by the token's jti."""
    if not who.token_id:
        return ""
    return hmac.new(
        who.token_id.encode(), b"tally-console-csrf:" + who.sub.encode(), hashlib.sha256
    ).hexdigest()


def csrf_ok(who: Identity, presented: str | None) -> bool:
    expected = csrf_token(who)
    return bool(expected) and bool(presented) and hmac.compare_digest(expected, str(presented))


def as_now(
    who: Identity,
    groups_now: Callable[[str], frozenset[str] | None],
    *,
    fresh: bool,
    clock: Callable[[], float] = time.time,
) -> Identity | None:
    """`who` with the groups the user has now, not those its token was issued with: a demoted operator cannot
    act for the rest of its token's hour, and a disabled (or deleted) user's token opens nothing (None). An
    action (`fresh`) reads them from the pool every time; a page view at most PAGE_RECHECK_S old."""
    seen = _now_groups.get(who.username)
    if fresh or seen is None or clock() - seen[0] > PAGE_RECHECK_S:
        seen = (clock(), groups_now(who.username))
        _now_groups[who.username] = seen
    groups = seen[1]
    return None if groups is None else replace(who, groups=groups)
