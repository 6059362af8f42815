"""Key rotation off the hot path (docs/channels.md "Key rotation"): the keys function's hourly run.

- What a channel serves for rotation (`Channel.refresh_certificates`: WeChat Pay v3 cert-mode merchants'
  platform certificates, channels/wechatpay_v3/merchant.py) downloaded when the stored set is older than
  `max_age_s` and stored for every container (store/keys.py); several valid at once.
- Every merchant's certificates (WeChat platform, Alipay, Alipay app certificate): PlatformCertExpiring for
  each one expiring within 7 days, even when no callback loaded the merchant lately.
A merchant whose configuration cannot be loaded or whose download fails counts PlatformCertRefreshFailed
(alarmed) and the others go on.
- With `live` (the keys function): every merchant's live credential check (R47, service/merchants.live_check):
  a merchant whose credentials turned failing is marked not ready (MerchantNotReady, alarmed, and a work-queue
  item naming the wrong credential); a channel outage changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tally.channels import registry as channel_registry
from tally.observability import M, count, logger

if TYPE_CHECKING:
    from tally.service.merchants import MerchantDirectory
    from tally.store.tables import EventStore

MAX_AGE_S = 12 * 3600  # download again twice a day (the schedule runs hourly and mostly reads one item)


class KeyRotationService:
    def __init__(
        self,
        directory: MerchantDirectory,
        *,
        max_age_s: float = MAX_AGE_S,
        events: EventStore | None = None,
        clock: Callable[[], float] = time.time,
        live: bool = False,
        not_live: frozenset[str] = frozenset(),
    ):
        self.directory = directory
        self.max_age_s = max_age_s
        self.events = events  # EventStore: an expiring certificate is a work-queue item (R41)
        self.clock = clock
        self.live = live  # R47: the hourly live credential check
        self.not_live = not_live  # merchant ids no channel knows (the heartbeat's synthetic merchant)

    def run(self) -> dict[str, Any]:
        report: dict[str, Any] = {"merchants": 0, "downloaded": [], "failed": [], "expiring": {}, "live": {}}
        for channel, merchant_id in self.directory.store.configured():
            report["merchants"] += 1
            who = f"{channel}/{merchant_id}"
            try:
                found = channel_registry.by_merchant_kind(channel)
                done = (
                    found.refresh_certificates(self.directory, [merchant_id], self.max_age_s) if found else {}
                )
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
                self._to_queue(channel, merchant_id, soon)
            if self.live and merchant_id not in self.not_live:
                self._live(channel, merchant_id, report)
        return report

    def _live(self, channel: str, merchant_id: str, report: dict[str, Any]) -> None:
        """R47 hourly: the live check; a merchant turning not ready also gets a work-queue item."""
        from tally.service.merchants import live_check

        # no second certificate download: the refresh above downloads (and proves the APIv3 key) twice a day
        found = live_check(self.directory, channel, merchant_id, download=False)
        report["live"][f"{channel}/{merchant_id}"] = found["verdict"]
        if found["turned_not_ready"] and self.events is not None:
            failed = next(f for f in found["findings"] if f["verdict"] == "fail")
            self.events.put(
                f"ready#{channel}#{merchant_id}#{int(self.clock())}",
                "merchant_not_ready",
                self.clock(),
                manual_kind="merchant_not_ready",
                channel=channel,
                mchid=merchant_id,
                reason=f"{failed['item']}: {failed['fix']} (orders refused with 409 until "
                f"`tally merchant check --live {found['channel']} {merchant_id}` passes)",
            )

    def _to_queue(self, channel: str, merchant_id: str, names: list[str]) -> None:
        """One item per expiring certificate (a conditional put: the hourly run adds it once)."""
        if self.events is None:
            return
        for name in names:
            self.events.put(
                f"cert#{channel}#{merchant_id}#{name}",
                "certificate",
                self.clock(),
                manual_kind="certificate",
                channel=channel,
                mchid=merchant_id,
                reason=f"certificate {name} expires within 7 days: add its successor, then "
                f"`tally merchant check {channel} {merchant_id}`",
            )
