"""API Gateway HTTP API (payload 2.0) requests and responses, as plain data."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any


class BadRequest(ValueError):
    """The event itself is unusable (e.g. a body that claims base64 but is not)."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str  # rawPath: informational only (a custom domain's path mapping prefixes it)
    headers: dict[str, str]  # lower-cased names
    body: bytes  # exactly the bytes the client sent (R2)
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    route: str = ""  # the routeKey, "POST /notify/wechatpay/{mchid}": what routing reads (never the raw path)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"body is not JSON: {exc}") from None

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> HttpRequest:
        raw = event.get("body") or ""
        if not isinstance(raw, str):
            raise BadRequest("body is not a string")
        if event.get("isBase64Encoded"):
            try:
                body = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("isBase64Encoded body is not base64") from None
        else:
            try:
                body = raw.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no byte string was ever sent like that
                raise BadRequest("body is not encodable as UTF-8") from None
        http = (event.get("requestContext") or {}).get("http") or {}
        return cls(
            method=(http.get("method") or event.get("httpMethod") or "").upper(),
            path=event.get("rawPath") or event.get("path") or "",
            headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            body=body,
            path_params=dict(event.get("pathParameters") or {}),
            query=dict(event.get("queryStringParameters") or {}),
            route=route_key(event),
        )


def route_key(event: dict[str, Any]) -> str:
    """The route API Gateway matched ("POST /notify/wechatpay/{mchid}"), the same behind a custom domain's
    path mapping (where rawPath carries the mapping's prefix). "" when the event has none."""
    key = event.get("routeKey") or ((event.get("requestContext") or {}).get("routeKey")) or ""
    return key if isinstance(key, str) else ""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: str = ""
    content_type: str = "application/json"
    outcome: str = ""  # what the service did (accepted, duplicate, quarantined …): never sent on the wire

    def to_event(self) -> dict[str, Any]:
        headers = {"content-type": self.content_type} if self.body else {}
        return {"statusCode": self.status, "headers": headers, "body": self.body, "isBase64Encoded": False}


def json_response(status: int, payload: Any) -> HttpResponse:
    return HttpResponse(status, json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
