"""Alipay: form wire format, signed client, refunds, bills."""
