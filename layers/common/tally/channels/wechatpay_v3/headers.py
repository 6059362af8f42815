"""The headers a WeChat Pay v3 callback is verified with (docs/channel-spec.md §1.3), plus WeChat's Request-ID:
what a kept row holds so a person can replay the callback after a key fix (service/ingest.py)."""

REPLAY_HEADERS = (
    "wechatpay-signature",
    "wechatpay-timestamp",
    "wechatpay-nonce",
    "wechatpay-serial",
    "wechatpay-signature-type",
    "request-id",
)
