"""One module per channel: verify, decrypt, parse, ACK bodies, signed API clients."""

from tally.domain.notifications import Outcome


def outcome_of(channel: str, state: str) -> Outcome | None:
    """The channel's explicit state table (R16); None = unknown, which goes to a person."""
    if channel == "wechatpay":
        from tally.channels.wechatpay_v3.wire import TRADE_STATE

        return TRADE_STATE.get(state)  # v2 notices share v3's channel and table (wechatpay_v2 docstring)
    if channel == "alipay":
        from tally.channels.alipay.wire import TRADE_STATUS

        return TRADE_STATUS.get(state)
    return None
