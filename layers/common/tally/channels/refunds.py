"""Channel-neutral entry for refunds: which channel maps a refund status (R22, R29).

WeChat Pay v2 refunds share the stored channel "wechatpay" with v3 (the v2 words are translated to v3's
before they get here: wechatpay_v2/wire.py, wechatpay_v2/refunds.py); Alipay has its own table.
"""

from __future__ import annotations

from tally.channels import registry
from tally.domain.refunds import RefundEvent


def refund_event_of(channel: str, status: str) -> RefundEvent | None:
    """The stored channel's explicit refund-status table; None = no outcome we know (a person)."""
    owner = registry.by_stored(channel)
    return owner.refund_event_of(status) if owner else None
