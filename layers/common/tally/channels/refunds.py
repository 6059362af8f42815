"""Channel-neutral entry for refunds: which channel module maps a refund status (R22, R29).

The lead plugs the other channels (WeChat v2, Alipay) in here and in bootstrap.refund_channels().
"""

from __future__ import annotations

from tally.domain.refunds import RefundEvent


def refund_event_of(channel: str, status: str) -> RefundEvent | None:
    """The channel's explicit refund-status table; None = no outcome we know (a person)."""
    if channel == "wechatpay":
        from tally.channels.wechatpay_v3_refunds import REFUND_STATUS

        return REFUND_STATUS.get(status)
    return None
