"""R40: the queue groups rejected notifications by cause, so each refusal's reason must map to its own cause
(a v3 body without its signature headers was filed as "stale_timestamp": the reason names the Timestamp header)."""

from __future__ import annotations

import pytest
from tally.service.ingest import rejection_cause


@pytest.mark.parametrize(
    "reason, cause",
    [
        ("missing Wechatpay-Signature/Timestamp/Nonce/Serial header", "missing_signature"),
        ("timestamp '1700000000' outside the 300s window", "stale_timestamp"),
        ("missing sign", "missing_signature"),
        ("missing or malformed sign", "missing_signature"),
        ("unknown serial ABC", "unknown_serial"),
        ("signature does not verify", "bad_signature"),
    ],
)
def test_r40_each_rejection_reason_has_its_own_cause(reason, cause):
    assert rejection_cause(reason) == cause
