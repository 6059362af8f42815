"""API Gateway HTTP API (payload 2.0) requests and responses, as plain data."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tally import errors
from tally.observability import M, count, logger


class BadRequest(errors.InvalidRequest, ValueError):
    """The event itself is unusable (e.g. a body that claims base64 but is not): a 400 whose one field error
    is the body's (`body`, with `why`: too_large, too_deep, not_json, not_encoded)."""

    def __init__(self, message: str, why: str = "not_json"):
        super().__init__(message, fields=[errors.field_error("body", why, message)])


MAX_JSON_BYTES = 16 * 1024  # an order or refund request is a few hundred bytes
MAX_JSON_DEPTH = 8  # a request is one flat object


def _nesting(body: bytes) -> int:
    """The deepest bracket nesting, counted on the bytes before any parse (strings skipped): linear, no
    recursion, so the check costs what reading the body costs."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


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
        """The body as JSON, bounded (R40): at most MAX_JSON_BYTES and MAX_JSON_DEPTH levels of nesting; a
        deeper body answered 500 (RecursionError) on /orders and /refunds. Anything else is a 400."""
        if len(self.body) > MAX_JSON_BYTES:
            raise BadRequest(
                f"body of {len(self.body)} bytes is over the {MAX_JSON_BYTES}-byte limit", "too_large"
            )
        if _nesting(self.body) > MAX_JSON_DEPTH:
            raise BadRequest(f"body nests deeper than {MAX_JSON_DEPTH} levels", "too_deep")
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise BadRequest(f"body is not JSON: {str(exc)[:200]}") from None

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> HttpRequest:
        raw = event.get("body") or ""
        if not isinstance(raw, str):
            raise BadRequest("body is not a string", "not_encoded")
        if event.get("isBase64Encoded"):
            try:
                body = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise BadRequest("isBase64Encoded body is not base64", "not_encoded") from None
        else:
            try:
                body = raw.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: no byte string was ever sent like that
                raise BadRequest("body is not encodable as UTF-8", "not_encoded") from None
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


def answer(
    call: Callable[[], HttpResponse],
    *,
    what: str,
    retry_hint: str = "internal error, retry",
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The one place an API handler's exceptions become HTTP (tally/errors.py): a TallyError with an
    `http_status` is answered with it and its `payload` (`shape`, when given, makes that payload public: the
    API edge's models, tally/api); anything else is a 500 that counts ApiFailed and is logged (R40: no input
    answers 500 without a metric and an alarm). Handlers call this, never `except`."""
    try:
        return call().to_event()
    except errors.TallyError as exc:
        if exc.http_status is None:
            return _failed(exc, what, retry_hint)
        payload = exc.payload()
        return json_response(exc.http_status, shape(payload) if shape else payload).to_event()
    except Exception as exc:  # noqa: BLE001 - R40: counted and logged, never swallowed
        return _failed(exc, what, retry_hint)


def _failed(exc: Exception, what: str, retry_hint: str) -> dict[str, Any]:
    count(M.API_FAILED)
    logger.exception(f"{what} request failed", extra={"error": type(exc).__name__})
    return json_response(500, errors.error_body("internal_error", retry_hint)).to_event()
