"""What every refund use case shares: the collaborators `RefundService` is built with, the channel client's
shape and its lookup, the refund's provider, the errors refund requests are answered with, and the public view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tally import errors
from tally.domain.refunds import IN_FLIGHT, ChannelAnswer
from tally.errors import Busy as Busy  # the shared meanings: the refund modules import them from here
from tally.errors import NotFound as NotFound
from tally.service.journal import DecisionJournal
from tally.service.refund_inbox import RefundInbox
from tally.store.records import RefundRow
from tally.store.refunds import RefundRawStore, RefundStore
from tally.store.tables import OrderStore


class RefundChannel(Protocol):
    def create(self, refund: dict[str, Any]) -> ChannelAnswer: ...

    def query(self, refund: dict[str, Any]) -> ChannelAnswer: ...


class InvalidRefund(errors.InvalidRequest, ValueError):
    """The request is wrong (HTTP 400)."""


class RefundConflict(errors.Conflict, ValueError):
    """409: the refund cannot be made as asked (refund_no reused for other terms, spent, order not paid)."""


class RefundServiceBase:
    """The collaborators each refund use case (a mixin of `RefundService`) works with; `RefundService` sets them."""

    store: RefundStore
    raw: RefundRawStore
    orders: OrderStore
    inbox: RefundInbox
    channels: Mapping[str, Callable[[str], RefundChannel]]
    clock: Callable[[], float]
    task_policy: str
    expiry_s: int
    not_found_attempts: int
    journal: DecisionJournal | None

    def _channel(self, channel: str, mchid: str) -> RefundChannel:
        factory = self.channels.get(channel)
        if factory is None:
            raise RefundConflict(f"refunds on channel {channel!r} are not wired yet")
        try:
            return factory(mchid)
        except LookupError as exc:
            raise NotFound(f"merchant {mchid} on {channel}: {exc}", code="merchant_not_found") from None

    def _refund_sp(self, refund: RefundRow) -> str | None:
        """The refund's service provider / ISV app: on the row since issue #15, else on its order."""
        if "sp_mchid" in refund:
            return refund.get("sp_mchid") or None
        order = self.orders.get(refund["mchid"], refund["out_trade_no"]) or {}
        return order.get("sp_mchid") or None


def public_refund(row: Mapping[str, Any]) -> dict[str, Any]:
    hidden = {"pk", "poll_pk"}
    view = {k: v for k, v in row.items() if k not in hidden}
    view["in_flight"] = row.get("status") in {s.value for s in IN_FLIGHT}
    return view
