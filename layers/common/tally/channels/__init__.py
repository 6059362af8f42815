"""One package per channel (wechatpay_v3/, wechatpay_v2/, alipay/: wire format, client, refunds, bills, pull)
behind the `Channel` protocol of channels/registry.py."""

from tally.channels import registry
from tally.domain.notifications import Outcome


def outcome_of(channel: str, state: str) -> Outcome | None:
    """The stored channel's explicit state table (R16); None = unknown, which goes to a person.
    v2 notices share v3's stored channel and table (wechatpay_v2/channel.py)."""
    owner = registry.by_stored(channel)
    return owner.outcome_of(state) if owner else None
