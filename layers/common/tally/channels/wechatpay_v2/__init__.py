"""WeChat Pay API v2: XML wire format, signed client, refunds."""
