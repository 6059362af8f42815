"""Key rotation off the hot path (docs/channels.md "Key rotation"): the keys function's hourly run.

- WeChat Pay cert-mode merchants: platform certificates downloaded when the stored set is older than
  `max_age_s` and stored for every container (store/keys.py); several valid at once.
- Every merchant's certificates (WeChat platform, Alipay, Alipay app certificate): PlatformCertExpiring for
  each one expiring within 7 days, even when no callback loaded the merchant lately.
A merchant whose configuration cannot be loaded or whose download fails counts PlatformCertRefreshFailed
(alarmed) and the others go on.
"""

from __future__ import annotations

from typing import Any

from tally.channels import wechatpay_v3 as wx
from tally.observability import M, count, logger

MAX_AGE_S = 12 * 3600  # download again twice a day (the schedule runs hourly and mostly reads one item)


class KeyRotationService:
    def __init__(self, directory: Any, *, max_age_s: float = MAX_AGE_S):
        self.directory = directory
        self.max_age_s = max_age_s

    def run(self) -> dict[str, Any]:
        report: dict[str, Any] = {"merchants": 0, "downloaded": [], "failed": [], "expiring": {}}
        for channel, merchant_id in self.directory.store.configured():
            report["merchants"] += 1
            who = f"{channel}/{merchant_id}"
            try:
                if channel == wx.CHANNEL:
                    done = self.directory.refresh_platform_certificates([merchant_id], self.max_age_s)
                    if done.get(merchant_id) is False:
                        report["failed"].append(who)  # counted by the directory
                    elif done:
                        report["downloaded"].append(who)
                soon = self.directory.check_expiry(channel, merchant_id)
            except Exception as exc:  # noqa: BLE001 - one merchant must not stop the others; counted, alarmed
                count(M.CERT_REFRESH_FAILED)
                logger.error(
                    "key check failed for a merchant", extra={"merchant": who, "error": str(exc)[:300]}
                )
                report["failed"].append(who)
                continue
            if soon:
                report["expiring"][who] = soon
        return report
