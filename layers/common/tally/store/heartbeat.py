"""The synthetic merchant's channel-side key (service/heartbeat.py): the key the heartbeat signs its callbacks
with, playing WeChat, and the APIv3 key it encrypts them with. Kept in Secrets Manager under the stack's
merchant prefix (`{prefix}heartbeat/{mchid}`), never in a table."""

from __future__ import annotations

import json
from typing import Any


class HeartbeatKeys:
    def __init__(self, secrets: Any, prefix: str, mchid: str):
        self.secrets = secrets
        self.name = f"{prefix}heartbeat/{mchid}"

    def get(self) -> dict[str, str] | None:
        try:
            return json.loads(self.secrets.get_secret_value(SecretId=self.name)["SecretString"])
        except self.secrets.exceptions.ResourceNotFoundException:
            return None

    def put(self, keys: dict[str, str]) -> None:
        value = json.dumps(keys)
        try:
            self.secrets.create_secret(Name=self.name, SecretString=value)
        except self.secrets.exceptions.ResourceExistsException:
            self.secrets.put_secret_value(SecretId=self.name, SecretString=value)
