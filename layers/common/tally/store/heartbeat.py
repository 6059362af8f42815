"""The synthetic merchant's channel-side key (service/heartbeat.py): the key the heartbeat signs its callbacks
with, playing WeChat, and the APIv3 key it encrypts them with. Kept in Secrets Manager under the stack's
merchant prefix (`{prefix}heartbeat/{mchid}`), never in a table."""

from __future__ import annotations

from tally.store.secrets import SecretStore


class HeartbeatKeys:
    def __init__(self, secrets: SecretStore, prefix: str, mchid: str):
        self.secrets = secrets
        self.name = f"{prefix}heartbeat/{mchid}"

    def get(self) -> dict[str, str] | None:
        return self.secrets.find(self.name)

    def put(self, keys: dict[str, str]) -> None:
        self.secrets.put(self.name, dict(keys))
