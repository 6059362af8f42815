"""The one HTTP(S) client of a container for every call that is not AWS: the channels (WeChat Pay v2/v3,
Alipay), their bill downloads, merchant webhooks, alert robots and the heartbeat's own API call.

It keeps connections: a call to a host this container already reached reuses the open TLS connection
(urllib3's pools, already in the layer under botocore) instead of a new SSL context and a new TLS handshake
every time, as `urllib.request.urlopen` does (docs/cost.md "Channel calls"; `python -m bench.http_client`).

What each caller relied on stays as it was with urlopen:
- TLS is verified against the system's CAs (what urlopen trusted; `TLS.cafile` trusts these CAs instead);
  hostnames are checked. Nothing here turns verification off.
- Each call gives its own timeout, applied to the connect and to every read (urlopen's socket timeout).
- No retries: a caller that retries does so itself, as before.
- An answer outside 2xx raises `StatusError` (status, headers, the first bytes of the body), as urlopen's
  HTTPError did; no answer at all (refused, reset, timed out, TLS refused, no such host, a bad URL) raises
  `Unreachable`, an OSError as urlopen's URLError was.
- Redirects are never followed (a 3xx is a `StatusError`): no signed request or webhook body goes to a
  host the caller did not name.
- The body is returned as sent (no content decoding); a POST without a Content-Type gets urlopen's
  `application/x-www-form-urlencoded`.

Mutual TLS (WeChat Pay v2's /secapi/ refunds and its fund-flow bill): `TLS(cert_pem=…, key_pem=…)` gets a
pool of its own, keyed by the certificate, so one merchant's client certificate is never presented on
another's connection.

Connections idle for more than IDLE_S are closed before the next call instead of being reused (a Lambda
container can sit frozen for minutes; a silently dropped connection would cost a timeout), and `reset()`
closes them all (after a SnapStart restore: tally/snapstart.py).
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from urllib3.exceptions import HTTPError as _Urllib3Error

IDLE_S = 30.0  # a connection unused this long is not reused (servers close theirs after 60 s or more)
PER_HOST = 10  # connections kept per host: the webhook deliverer and the poller run 8 calls at once
HOSTS = 32  # host pools kept per TLS setting (merchant webhook hosts included), least recently used dropped
CLIENT_CERTS = 64  # mutual-TLS settings (one per merchant certificate) kept per container
ERROR_BODY = 1 << 16  # bytes of a non-2xx answer kept for the caller
USER_AGENT = "tally/0.1"


@dataclass(frozen=True)
class TLS:
    """How to reach an https host: `cafile` trusts these CAs instead of the system's (tests against the
    channel simulator's TLS listener); `cert_pem`/`key_pem` is the client certificate of mutual TLS."""

    cafile: str | None = None
    cert_pem: str = ""
    key_pem: str = ""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes


class Unreachable(OSError):
    """No HTTP answer: refused, reset, timed out, the TLS handshake refused, no such host, a bad URL."""


class StatusError(Exception):
    """An HTTP answer outside 2xx (redirects included): its status, headers and first ERROR_BODY bytes."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.code = status  # the name urllib's HTTPError used
        self.headers = headers
        self.body = body


def _context(tls: TLS | None) -> ssl.SSLContext:
    """A verifying context (CERT_REQUIRED, hostnames checked), built once per TLS setting."""
    context = ssl.create_default_context(cafile=tls.cafile if tls else None)
    if tls and tls.cert_pem:
        # ssl reads a client certificate only from a file: a private one (0600, Lambda's /tmp), removed at once
        fd, path = tempfile.mkstemp(suffix=".pem")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(tls.cert_pem.strip() + "\n" + tls.key_pem.strip() + "\n")
            context.load_cert_chain(path)
        finally:
            os.unlink(path)
    return context


class _Pools:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._managers: dict[TLS | None, urllib3.PoolManager] = {}
        self._busy = 0
        self._last = 0.0

    def take(self, tls: TLS | None) -> urllib3.PoolManager:
        with self._lock:
            now = time.monotonic()
            if self._busy == 0 and now - self._last > IDLE_S:
                for kept in self._managers.values():
                    kept.clear()
            self._busy += 1
            found = self._managers.pop(tls, None)
            if found is None:
                if len(self._managers) >= CLIENT_CERTS:
                    self._managers.pop(next(iter(self._managers))).clear()
                try:
                    found = urllib3.PoolManager(
                        num_pools=HOSTS, maxsize=PER_HOST, block=False, ssl_context=_context(tls)
                    )
                except BaseException:
                    self._busy -= 1
                    raise
            self._managers[tls] = found  # most recently used last
            return found

    def give_back(self) -> None:
        with self._lock:
            self._busy -= 1
            self._last = time.monotonic()

    def reset(self) -> None:
        with self._lock:
            for manager in self._managers.values():
                manager.clear()


_pools = _Pools()


def reset() -> None:
    """Close every kept connection (the SSL contexts stay): after a snapshot restore they are dead."""
    _pools.reset()


def addresses(url: str) -> tuple[str, list[str]]:
    """(host, the IP addresses it resolves to now) of an http(s) URL; OSError when it does not resolve."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if not host:
        raise Unreachable(f"no host in {url[:80]!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return host, sorted({str(info[4][0]) for info in found})


def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float,
    tls: TLS | None = None,
    limit: int | None = None,
) -> Answer:
    """One call; `limit`: at most this many bytes of the body are read (a longer answer is cut there and its
    connection closed, not reused). Raises StatusError outside 2xx, Unreachable without an answer."""
    if not url.startswith(("https://", "http://")):
        raise Unreachable(f"not an http(s) URL: {url[:80]!r}")
    sent = dict(headers or {})
    named = {k.lower() for k in sent}
    if "user-agent" not in named:
        sent["User-Agent"] = USER_AGENT
    if body is not None and "content-type" not in named:
        sent["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        manager = _pools.take(tls)
    except (ssl.SSLError, OSError) as exc:
        raise Unreachable(f"TLS setting refused: {exc}") from None
    try:
        return _exchange(manager, method, url, body, sent, timeout_s, limit)
    finally:
        _pools.give_back()


def _exchange(
    manager: urllib3.PoolManager,
    method: str,
    url: str,
    body: bytes | None,
    headers: dict[str, str],
    timeout_s: float,
    limit: int | None,
) -> Answer:
    try:
        parts = urllib.parse.urlsplit(url)
        pool = manager.connection_from_host(parts.hostname, parts.port, parts.scheme)  # not its URL parser
        answer: Any = pool.urlopen(
            method,
            (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
            body=body,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
            retries=False,
            redirect=False,
            assert_same_host=False,
            preload_content=False,
            decode_content=False,
        )
    except (_Urllib3Error, OSError, ValueError) as exc:
        raise Unreachable(_reason(exc)) from None
    status = int(answer.status)
    ok = 200 <= status < 300
    cap = limit if ok else min(limit or ERROR_BODY, ERROR_BODY)
    try:
        data = (
            answer.read(cap, decode_content=False) if cap is not None else answer.read(decode_content=False)
        )
    except (_Urllib3Error, OSError) as exc:
        answer.close()
        answer.release_conn()
        raise Unreachable(_reason(exc)) from None
    if cap is not None and len(data) >= cap:
        answer.close()  # more may follow: this connection is not reused
    answer.release_conn()
    if not ok:
        raise StatusError(status, answer.headers, data)
    return Answer(status, answer.headers, data)


def _reason(exc: BaseException) -> str:
    """The words of the underlying error (urllib3 wraps them: "…: timed out", "Connection refused")."""
    inner = getattr(exc, "reason", None)
    text = str(inner if isinstance(inner, BaseException) else exc)
    return text[:300] or type(exc).__name__
