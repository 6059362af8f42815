"""Secrets Manager: the merchants' keys (service/merchants.py) and the heartbeat's channel-side key
(store/heartbeat.py), one JSON document per secret. The only code that calls Secrets Manager."""

from __future__ import annotations

import json
from typing import Any


class SecretStore:
    def __init__(self, client: Any):
        self.client = client  # boto3 secretsmanager client (bootstrap builds it)

    def get(self, name: str) -> dict[str, Any]:
        """The secret's JSON document; a missing secret raises (the client's ResourceNotFoundException)."""
        return json.loads(self.client.get_secret_value(SecretId=name)["SecretString"])

    def find(self, name: str) -> dict[str, Any] | None:
        """The secret's JSON document, or None when there is no such secret."""
        try:
            return self.get(name)
        except self.client.exceptions.ResourceNotFoundException:
            return None

    def put(self, name: str, value: dict[str, Any]) -> None:
        """Create the secret, or store a new version of it when it exists."""
        text = json.dumps(value)
        try:
            self.client.create_secret(Name=name, SecretString=text)
        except self.client.exceptions.ResourceExistsException:
            self.client.put_secret_value(SecretId=name, SecretString=text)
