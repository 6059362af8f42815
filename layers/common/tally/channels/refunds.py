"""Channel-neutral entry for refunds: which channel module maps a refund status (R22, R29).

WeChat Pay v2 refunds share channel "wechatpay" with v3 (the v2 words are translated to v3's before they get
here: channels/wechatpay_v2.py, wechatpay_v2_refunds.py); Alipay has its own table.
"""

from __future__ import annotations

from tally.domain.refunds import RefundEvent


def refund_event_of(channel: str, status: str) -> RefundEvent | None:
    """The channel's explicit refund-status table; None = no outcome we know (a person)."""
    if channel == "wechatpay":
        from tally.channels.wechatpay_v3.refunds import REFUND_STATUS

        return REFUND_STATUS.get(status)
    if channel == "alipay":
        from tally.channels.alipay.refunds import REFUND_STATUS as ALIPAY_REFUND_STATUS

        return ALIPAY_REFUND_STATUS.get(status)
    return None
