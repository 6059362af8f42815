"""A refund's figures rebuilt from the basis its report kept (R43), by the channel that wrote the basis.

The basis (domain/settlement.py) names its builder with the channel's route word ("wechatpay", "wechatpay-v2",
"alipay"); the channel's package (channels/<name>/settlement.py) rebuilds it with the booked payment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tally.channels import registry
from tally.domain.settlement import Refund, Settlement, SettlementError, notice_fields, refund_without_basis


def build_refund(
    basis: Mapping[str, Any] | None, payment: Settlement | None = None, refund_cent: int | None = None
) -> Refund:
    """The refund's figures from its report's basis and (when known) the payment's Settlement; without a basis,
    from `refund_cent` alone (domain/settlement.refund_without_basis)."""
    if basis is None:
        if refund_cent is None:
            raise SettlementError("the report states no refund figures of its own")
        return refund_without_basis(payment, refund_cent)
    builder = basis.get("builder")
    channel = registry.by_route(builder) if isinstance(builder, str) else None
    if channel is None:
        raise SettlementError(f"unknown refund basis {builder!r}")
    return channel.refund_from_basis(basis, payment)


def refund_fields(
    basis: Mapping[str, Any] | None, payment: Settlement | None = None, refund_cent: int | None = None
) -> dict[str, Any]:
    """`notice_fields` for a refund: {"settlement": Refund.entry_fields() | None, "settlement_error": …}."""
    return notice_fields(build_refund, basis, payment, refund_cent)
