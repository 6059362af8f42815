"""Requests and responses of the console: forms in, HTML (or CSV/static files) out, security headers on all.

Content-Security-Policy allows scripts and styles only from the console's own static files: no inline
script runs, whatever a callback body smuggled into a page (every value is also HTML-escaped by Jinja2's
autoescape). Pages are never cached and never framed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from tally.apigw import BadRequest, HttpRequest

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "worker-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
MAX_FORM_BYTES = 64 * 1024  # a console form is a few fields; anything bigger is refused unread


@dataclass(frozen=True)
class Request:
    method: str
    page: str  # "" for /console, else the path segment after /console/
    query: dict[str, str]
    form: dict[str, str]
    headers: dict[str, str]
    path: str

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Request:
        http = HttpRequest.from_event(event)
        page = str(
            (event.get("pathParameters") or {}).get("page")
            or (event.get("pathParameters") or {}).get("file")
            or ""
        )
        if not page:
            tail = http.path.removeprefix("/console").strip("/")
            page = tail.split("/")[-1] if tail else ""
        form: dict[str, str] = {}
        if http.method == "POST" and http.body:
            if len(http.body) > MAX_FORM_BYTES:
                raise BadRequest("form too large", "too_large")
            try:
                text = http.body.decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest("form is not UTF-8", "not_encoded") from None
            for name, value in parse_qsl(text, keep_blank_values=True):
                form[name] = f"{form[name]},{value}" if name in form else value
        return cls(http.method, page, dict(http.query), form, http.headers, http.path)

    def field(self, name: str, default: str = "") -> str:
        return (self.form.get(name) or self.query.get(name) or default).strip()

    def same_origin(self) -> bool:
        """A browser's POST says where it came from (Origin, Sec-Fetch-Site); a cross-site one is refused."""
        site = self.headers.get("sec-fetch-site")
        if site and site not in ("same-origin", "none"):
            return False
        origin = self.headers.get("origin")
        if origin and origin != "null":
            host = origin.split("://", 1)[-1]
            return host == self.headers.get("host")
        return True


@dataclass
class Response:
    status: int
    body: str | bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    def to_event(self) -> dict[str, Any]:
        import base64

        headers = {"content-type": self.content_type, **SECURITY_HEADERS, **self.headers}
        if isinstance(self.body, bytes):
            return {
                "statusCode": self.status,
                "headers": headers,
                "body": base64.b64encode(self.body).decode("ascii"),
                "isBase64Encoded": True,
            }
        return {"statusCode": self.status, "headers": headers, "body": self.body, "isBase64Encoded": False}


def redirect(location: str) -> Response:
    return Response(303, "", headers={"location": location})


def link(page: str, **params: Any) -> str:
    """/console/<page>?a=b with the empty parameters left out."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    path = "/console" + (f"/{page}" if page else "")
    return path + (f"?{query}" if query else "")
