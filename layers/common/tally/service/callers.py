"""R53: a signed caller acts only for the merchants its principal is registered with, reads included.

API Gateway's IAM authorizer proves who signed (SigV4); this says for which merchants that principal may act.
Grants live in the merchants table (`tally merchant allow`), cached per container for `ttl_s`: a grant or a
revocation takes effect within that time (docs/merchants.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from tally import errors
from tally.domain.callers import EVERY_MERCHANT, may_act, principal_of, valid_principal
from tally.domain.journal import OWN_LANE
from tally.errors import Forbidden  # callers import it from here too
from tally.observability import M, count, logger
from tally.service.journal import SYSTEM_CHAIN, DecisionJournal
from tally.store.tables import MerchantStore, iso_now


class InvalidGrant(errors.InvalidRequest, ValueError):
    pass


def caller_of(event: dict[str, Any]) -> str:
    """The principal that signed the request (`requestContext.authorizer.iam.userArn`, normalised). A request
    without one never reached us through the IAM authorizer: refused, never taken as an operator's."""
    iam = (((event.get("requestContext") or {}).get("authorizer") or {}).get("iam")) or {}
    arn = iam.get("userArn")
    if not isinstance(arn, str) or not arn:
        count(M.API_FORBIDDEN)
        raise Forbidden("the request is not signed by an IAM principal (SigV4, service execute-api)")
    return principal_of(arn)


def merchants_named(body: Any) -> list[str]:
    """The merchant ids an order or refund request acts for: `mchid`, and each combine sub-order's `mchid`.
    Whatever is not a string is left to the request's own validation (a 400 before anything is written)."""
    if not isinstance(body, dict):
        return []
    named = [body.get("mchid")]
    subs = body.get("sub_orders")
    if isinstance(subs, list):
        named += [sub.get("mchid") for sub in subs if isinstance(sub, dict)]
    return [m for m in named if isinstance(m, str)]


class CallerDirectory:
    def __init__(
        self,
        store: MerchantStore,
        *,
        clock: Callable[[], float] = time.time,
        ttl_s: float = 60,
        journal: DecisionJournal | None = None,
    ):
        self.store = store
        self.journal = journal  # every grant change, who made it and what it gave or took (docs/audit.md)
        self.clock = clock
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def require(self, caller: str, merchant_ids: Iterable[str]) -> None:
        """Forbidden (403) unless `caller` is registered for every one of `merchant_ids`."""
        refused = may_act(self.granted(caller), merchant_ids)
        if refused:
            count(M.API_FORBIDDEN)
            logger.warning("caller refused", extra={"caller": caller, "merchants": refused})
            raise Forbidden(f"the caller may not act for merchant {', '.join(refused)}")

    def granted(self, caller: str) -> frozenset[str]:
        now = self.clock()
        with self._lock:
            cached = self._cache.get(caller)
        if cached is not None and cached[0] > now:
            return cached[1]
        row = self.store.principal(caller) or {}
        merchants = frozenset(str(m) for m in row.get("merchants") or ())
        with self._lock:
            self._cache[caller] = (now + self.ttl_s, merchants)
        return merchants

    # ---- the operator's side (tally merchant allow / disallow / principals)
    def allow(self, principal: str, merchant_ids: Iterable[str], *, by: str) -> list[str]:
        wanted = _checked(principal, merchant_ids)
        current = set((self.store.principal(principal) or {}).get("merchants") or ())
        merchants = sorted(current | wanted)
        self._write(principal, current, merchants, by)
        return merchants

    def disallow(self, principal: str, merchant_ids: Iterable[str] = (), *, by: str) -> list[str]:
        """Takes the given merchants from the principal's grant; none given: the whole grant."""
        wanted = _checked(principal, merchant_ids) if merchant_ids else None
        current = set((self.store.principal(principal) or {}).get("merchants") or ())
        merchants = sorted(current - wanted) if wanted is not None else []
        self._write(principal, current, merchants, by)
        return merchants

    def _write(self, principal: str, before: set[str], merchants: list[str], by: str) -> None:
        """The principal's grant (none left: its row deleted); with a journal, its `principal.granted` record
        (who, the principal, what it gained and lost) in the same transaction, on the deployment's own chain
        (a grant may name every merchant, `*`)."""
        at = iso_now(self.clock())
        write = (
            self.store.principal_put(principal, merchants, by=by, at=at)
            if merchants
            else self.store.principal_delete(principal)
        )
        if self.journal is None:
            self.store.transact([write])
        else:
            self.journal.commit(
                SYSTEM_CHAIN,
                f"principal#{principal}",
                kind="principal.granted",
                at=at,
                facts={
                    "principal": principal,
                    "by": by,
                    "merchants": merchants,
                    "added": sorted(set(merchants) - before),
                    "removed": sorted(before - set(merchants)),
                },
                items=[write],
                transact=self.store.transact,
                lane=OWN_LANE,
            )
        self._forget(principal)

    def principals(self) -> list[dict[str, Any]]:
        return [
            {
                "principal": r["principal"],
                "merchants": list(r.get("merchants") or []),
                "by": r.get("by"),
                "at": r.get("at"),
            }
            for r in self.store.principals()
        ]

    def _forget(self, principal: str) -> None:
        with self._lock:
            self._cache.pop(principal, None)


def _checked(principal: str, merchant_ids: Iterable[str]) -> set[str]:
    if not valid_principal(principal):
        raise InvalidGrant(
            f"{principal!r} is not an IAM user or role ARN (arn:aws:iam::123456789012:role/NAME)"
        )
    wanted = {str(m) for m in merchant_ids}
    if not wanted:
        raise InvalidGrant("name at least one merchant id, or * for every merchant")
    bad = sorted(m for m in wanted if m != EVERY_MERCHANT and not (m.isalnum() and len(m) <= 32))
    if bad:
        raise InvalidGrant(f"not a merchant id: {', '.join(bad)}")
    return wanted
