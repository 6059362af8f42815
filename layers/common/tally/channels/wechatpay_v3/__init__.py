"""WeChat Pay API v3: wire format, signed client, refunds, bills."""
