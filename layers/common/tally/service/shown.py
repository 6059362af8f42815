"""What a person may see of a stored row (the console's pages, `tally manual show --raw`): no attribute whose
name says secret, and a callback body with what is encrypted for the merchant replaced by its length."""

from __future__ import annotations

import json
from typing import Any

from tally.channels import registry as channel_registry

# attribute names never shown (secrets live in Secrets Manager; this is the second fence)
SECRET_WORDS = (
    "secret",
    "private",
    "password",
    "apiv3",
    "api_key",
    "merchant_key",
    "auth_token",
    "ciphertext",
)


def secretish(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def scrub(row: dict[str, Any]) -> dict[str, Any]:
    """No secret-named attribute; a body with its ciphertext replaced by its length (R: never shown)."""
    out = {k: v for k, v in row.items() if not secretish(k)}
    if isinstance(out.get("body"), str):
        out["body"] = redact_body(out["body"])
    return out


def redact_body(text: str) -> str:
    """A callback body as received, minus what is encrypted for the merchant: any JSON `ciphertext` (WeChat v3
    `resource.ciphertext`, any depth) and what a channel's `redact_body` hides in a body that is not JSON
    (WeChat v2 `<req_info>`) become "‹ciphertext, N characters, not shown›"."""
    try:
        document = json.loads(text)
    except ValueError:
        for channel in channel_registry.all_channels():
            text = channel.redact_body(text, _hidden)
        return text
    if not isinstance(document, dict | list):
        return text
    return json.dumps(_redact(document), ensure_ascii=False)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _hidden(str(v)) if k.lower() == "ciphertext" else _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def _hidden(text: str) -> str:
    return f"‹ciphertext, {len(text)} characters, not shown›"
