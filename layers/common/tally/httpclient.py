"""The one HTTP(S) client of a container for every call that is not AWS: the channels (WeChat Pay v2/v3,
Alipay), their bill downloads, merchant webhooks, alert robots and the heartbeat's own API call.

It keeps connections: a call to a host this container already reached reuses the open TLS connection instead
of a new SSL context and a new TLS handshake every time, as `urllib.request.urlopen` does. The HTTP/1.1
exchange itself is written here over the standard library's `ssl` and `socket`: one write of the request, the
answer read into one buffer and parsed by a few regular expressions. urllib3's pools (botocore's library) and
http.client spend most of a kept-alive call's client CPU on their own layers, more than a channel call may
cost (docs/cost.md "Channel calls", docs/design.md §7; `python -m bench.http_client`).

What each caller relied on stays as it was with urlopen:
- TLS is verified against the system's CAs (what urlopen trusted; `TLS.cafile` trusts these CAs instead);
  hostnames are checked, the host is sent as SNI. Nothing here turns verification off.
- Each call gives its own timeout, applied to the connect and to every read (the socket's timeout).
- No retries: a caller that retries does so itself, as before. The one exception is the one every HTTP client
  makes: a kept connection the server closed while it sat idle (the request could not be written, or the
  connection ended before any byte of an answer) sends the request once more, on a new connection. Before a
  kept connection is reused it is polled: one with anything to read was closed by the server and is dropped.
- An answer outside 2xx raises `StatusError` (status, headers, the first ERROR_BODY bytes of the body), as
  urlopen's HTTPError did; no answer at all (refused, reset, timed out, TLS refused, no such host, a bad URL,
  a header refused, an answer that is not HTTP/1.x) raises `Unreachable`, an OSError as urlopen's URLError was.
- Redirects are never followed (a 3xx is a `StatusError`): no signed request or webhook body goes to a
  host the caller did not name.
- The body is returned as sent: `Accept-Encoding: identity` is asked for and nothing is decoded; a POST
  without a Content-Type gets urlopen's `application/x-www-form-urlencoded`.

The answer is read as RFC 9112 frames it: interim 1xx answers skipped, no body after HEAD, 204 or 304,
chunked bodies decoded (extensions and trailers dropped), else Content-Length, else until the server closes.
A connection is kept only when its answer was read to the end and the server did not ask to close it. A header
value or URL with CR, LF or NUL is refused before anything is sent.

Mutual TLS (WeChat Pay v2's /secapi/ refunds and its fund-flow bill): `TLS(cert_pem=…, key_pem=…)` gets a
pool of its own, keyed by the certificate, so one merchant's client certificate is never presented on
another's connection.

Connections idle for more than IDLE_S are closed before the next call instead of being reused (a Lambda
container can sit frozen for minutes; a silently dropped connection would cost a timeout), and `reset()`
closes them all (after a SnapStart restore: tally/snapstart.py).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import select
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

IDLE_S = 30.0  # a connection unused this long is not reused (servers close theirs after 60 s or more)
PER_HOST = 10  # connections kept per host: the webhook deliverer and the poller run 8 calls at once
HOSTS = 32  # host pools kept per TLS setting (merchant webhook hosts included), least recently used dropped
CLIENT_CERTS = 64  # mutual-TLS settings (one per merchant certificate) kept per container
ERROR_BODY = 1 << 16  # bytes of a non-2xx answer kept for the caller
USER_AGENT = "tally/0.1"
HEAD_MAX = 1 << 16  # bytes of an answer's status line and headers (its interim answers' included)

_RECV = 1 << 16
_ONE_WRITE = 1 << 16  # a body up to this size leaves in the same write as the head
_DEFAULT_PORT = {"http": 80, "https": 443}
_BODY_EXPECTED = ("POST", "PUT", "PATCH")  # Content-Length: 0 when they have no body, as http.client sends
_FRAMING = {"content-length", "transfer-encoding", "expect"}  # the client frames the body itself
_PATH_SAFE = "!$&'()*+,;=:@/%"  # what urllib3 left unencoded in a path (RFC 3986 pchar; '%' stays as given)
_QUERY_SAFE = _PATH_SAFE + "?"

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_METHOD_OR_NAME = re.compile(_TOKEN)
_CONTROL_IN_URL = re.compile(r"[\x00-\x1f\x7f]")
_TO_ENCODE = re.compile(r"[^!$&'()*+,;=:@/%?A-Za-z0-9_.~-]")  # outside _QUERY_SAFE and the unreserved
_CR_LF_NUL = re.compile(r"[\r\n\x00]")
_END_OF_HEAD = re.compile(rb"\n\r?\n")
# an answer's head, decoded as latin-1 (as http.client reads it): the status line, then field lines; a line
# that starts with a space or tab (obs-fold) or has a bare CR or NUL matches neither
_STATUS_LINE = re.compile(r"HTTP/1\.([01]) ([1-9][0-9]{2})(?: [^\r\n\x00]*)?\r?\n")
_FIELD = re.compile(r"(" + _TOKEN + r"):[ \t]*((?:[^\r\n\x00]*[^\r\n\x00 \t])?)[ \t]*\r?\n")
_FIELD_LINES = re.compile(r"(?:" + _TOKEN + r":[^\r\n\x00]*\r?\n)*")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")


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


class Headers(Mapping[str, str]):
    """An answer's header fields, looked up in any case; a repeated field's values joined with ", " (as
    http.client and urllib3 did). Iterates the names as the server spelled them first."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Iterable[tuple[str, str]] = ()) -> None:
        self._fields: dict[str, tuple[str, str]] = {}
        for name, value in fields:
            key = name.lower()
            kept = self._fields.get(key)
            self._fields[key] = (name, value) if kept is None else (kept[0], f"{kept[1]}, {value}")

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()][1]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._fields.values())

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Headers({dict(self.items())!r})"


class _Dropped(ConnectionError):
    """The server closed the connection before any byte of an answer: on a kept connection, it had closed it
    while idle and never read the request."""


class _Origin(NamedTuple):
    scheme: str
    host: str
    port: int


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


class _Connection:
    """One open socket (TLS or plain) and the bytes read from it but not yet parsed."""

    __slots__ = ("sock", "buffer", "idle_since", "generation")

    def __init__(self, sock: socket.socket, generation: int) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.idle_since = 0.0
        self.generation = generation

    def close(self) -> None:
        self.sock.close()

    def looks_open(self) -> bool:
        """An idle connection has nothing to read: if it has, the server closed it (or sent what nobody asked
        for), and it is not reused."""
        if self.buffer or (isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
            return False
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return not poller.poll(0)

    def first_bytes(self) -> None:
        """Wait for the answer to begin; a connection ended before that raises _Dropped."""
        try:
            data = self.sock.recv(_RECV)
        except (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
            raise _Dropped(f"the server closed the connection before answering ({exc})") from None
        if not data:
            raise _Dropped("the server closed the connection before answering")
        self.buffer += data

    def fill(self) -> None:
        data = self.sock.recv(_RECV)
        if not data:
            raise Unreachable("the server closed the connection in the middle of its answer")
        self.buffer += data

    def head(self, budget: int) -> str:
        """The next status line and header lines, each with its line end, without the empty line after them."""
        start = 0
        while (end := _END_OF_HEAD.search(self.buffer, start)) is None:
            if len(self.buffer) > budget:
                raise Unreachable(f"the answer's head is longer than {HEAD_MAX} bytes")
            start = max(0, len(self.buffer) - 2)
            self.fill()
        if end.end() > budget:
            raise Unreachable(f"the answer's head is longer than {HEAD_MAX} bytes")
        head = self.buffer[: end.start() + 1].decode("latin-1")
        del self.buffer[: end.end()]
        return head

    def line(self, cap: int) -> bytes:
        """One line of at most `cap` bytes, without its CRLF (or LF)."""
        start = 0
        while (end := self.buffer.find(b"\n", start, cap + 1)) < 0:
            if len(self.buffer) > cap:
                raise Unreachable(f"a line of the answer is longer than {cap} bytes")
            start = len(self.buffer)
            self.fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return line[:-1] if line.endswith(b"\r") else line

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self.fill()
        data = bytes(self.buffer) if size == len(self.buffer) else bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def until_close(self, cap: int | None) -> bytes:
        """Everything up to the server's close, or its first `cap` bytes."""
        while cap is None or len(self.buffer) < cap:
            data = self.sock.recv(_RECV)
            if not data:
                break
            self.buffer += data
        return self.exactly(len(self.buffer) if cap is None else min(cap, len(self.buffer)))


class _Setting:
    """One TLS setting: its SSL context (built at its first https call) and, per origin, its idle connections
    (least recently used origin first; within one, the most recently idle last)."""

    __slots__ = ("tls", "context", "idle")

    def __init__(self, tls: TLS | None) -> None:
        self.tls = tls
        self.context: ssl.SSLContext | None = None
        self.idle: dict[_Origin, list[_Connection]] = {}


class _Pools:
    """Every kept connection, behind one lock; a connection taken out is used by one thread until given back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settings: dict[TLS | None, _Setting] = {}  # least recently used first
        self.generation = 0  # reset() counts up: a connection opened before is not kept after

    def setting(self, tls: TLS | None) -> _Setting:
        with self._lock:
            found = self._settings.pop(tls, None) or _Setting(tls)
            self._settings[tls] = found
            while len(self._settings) > CLIENT_CERTS:
                _close_all(self._settings.pop(next(iter(self._settings))))
            return found

    def context(self, setting: _Setting) -> ssl.SSLContext:
        with self._lock:
            if setting.context is None:
                try:
                    setting.context = _context(setting.tls)
                except (ssl.SSLError, OSError, ValueError) as exc:
                    raise Unreachable(f"TLS setting refused: {exc}") from None
            return setting.context

    def take(self, setting: _Setting, origin: _Origin) -> _Connection | None:
        """The most recently used idle connection to `origin` that still looks open, or None."""
        while True:
            with self._lock:
                found = self._take_idle(setting, origin)
            if found is None or found.looks_open():
                return found
            found.close()

    def _take_idle(self, setting: _Setting, origin: _Origin) -> _Connection | None:
        idle = setting.idle.get(origin)
        stale_before = time.monotonic() - IDLE_S
        while idle and idle[0].idle_since < stale_before:
            idle.pop(0).close()
        return idle.pop() if idle else None

    def give_back(self, setting: _Setting, origin: _Origin, connection: _Connection) -> None:
        with self._lock:
            if connection.generation != self.generation or self._settings.get(setting.tls) is not setting:
                connection.close()  # opened before a reset(), or its TLS setting was dropped meanwhile
                return
            idle = setting.idle.pop(origin, [])
            setting.idle[origin] = idle  # most recently used last
            while len(setting.idle) > HOSTS:
                for dropped in setting.idle.pop(next(iter(setting.idle))):
                    dropped.close()
            if len(idle) >= PER_HOST:
                connection.close()
                return
            connection.idle_since = time.monotonic()
            idle.append(connection)

    def reset(self) -> None:
        with self._lock:
            self.generation += 1
            for setting in self._settings.values():
                _close_all(setting)


def _close_all(setting: _Setting) -> None:
    for idle in setting.idle.values():
        for connection in idle:
            connection.close()
    setting.idle.clear()


_pools = _Pools()


def reset() -> None:
    """Close every kept connection (the SSL contexts stay): after a snapshot restore they are dead."""
    _pools.reset()


atexit.register(reset)  # a process that ends (the CLI, a test run) closes its kept connections itself


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
    try:
        return _request(method, url, body, headers or {}, timeout_s, tls, limit)
    except (Unreachable, StatusError):
        raise
    except (OSError, ValueError) as exc:  # socket, ssl, the resolver; a bad port; a header not latin-1
        raise Unreachable(_reason(exc)) from None


def _request(
    method: str,
    url: str,
    body: bytes | None,
    headers: Mapping[str, str],
    timeout_s: float,
    tls: TLS | None,
    limit: int | None,
) -> Answer:
    origin, target = _split(url)
    head = _head(method, target, origin, body, headers)
    setting = _pools.setting(tls)
    kept = _pools.take(setting, origin)
    if kept is not None:
        try:
            return _exchange(kept, setting, origin, method, head, body, timeout_s, limit)
        except _Dropped:
            pass  # closed by the server while idle: it never read this request, which goes on a new connection
    fresh = _connect(setting, origin, timeout_s)
    return _exchange(fresh, setting, origin, method, head, body, timeout_s, limit)


def _split(url: str) -> tuple[_Origin, str]:
    """The origin to connect to and the request target (path and query, percent-encoded as urllib3 did)."""
    if not url.startswith(("https://", "http://")):
        raise Unreachable(f"not an http(s) URL: {url[:80]!r}")
    if _CONTROL_IN_URL.search(url):
        raise Unreachable(f"a control character in the URL {url[:80]!r}")
    parts = urllib.parse.urlsplit(url)
    origin = _origin(parts.scheme, parts.netloc)
    target = parts.path or "/"
    if _TO_ENCODE.search(target):
        target = urllib.parse.quote(target, safe=_PATH_SAFE)
    if parts.query:
        query = parts.query
        target += "?" + (urllib.parse.quote(query, safe=_QUERY_SAFE) if _TO_ENCODE.search(query) else query)
    return origin, target


@functools.lru_cache(maxsize=256)
def _origin(scheme: str, netloc: str) -> _Origin:
    """(scheme, host, port) of a URL's authority; cached: a container calls the same few hosts."""
    parts = urllib.parse.SplitResult(scheme, netloc, "", "", "")
    if not parts.hostname:
        raise Unreachable(f"no host in {netloc[:80]!r}")
    return _Origin(scheme, parts.hostname, parts.port or _DEFAULT_PORT[scheme])


def _head(method: str, target: str, origin: _Origin, body: bytes | None, headers: Mapping[str, str]) -> bytes:
    """The request line and headers, ready to send; a name or value that could inject a header is refused."""
    if not _METHOD_OR_NAME.fullmatch(method):
        raise Unreachable(f"not an HTTP method: {method[:20]!r}")
    named = {name.lower() for name in headers}
    lines = [f"{method} {target} HTTP/1.1"]
    if "host" not in named:
        lines.append(f"Host: {_authority(origin)}")
    if "accept-encoding" not in named:
        lines.append("Accept-Encoding: identity")  # the body is returned as sent: never a compressed one
    for name, value in headers.items():
        if not _METHOD_OR_NAME.fullmatch(name) or _CR_LF_NUL.search(value):
            raise Unreachable(f"header {name[:40]!r} refused: not a token, or CR, LF or NUL in its value")
        if name.lower() not in _FRAMING:
            lines.append(f"{name}: {value}")
    if "user-agent" not in named:
        lines.append(f"User-Agent: {USER_AGENT}")
    if body is not None and "content-type" not in named:
        lines.append("Content-Type: application/x-www-form-urlencoded")
    if body is not None or method in _BODY_EXPECTED:
        lines.append(f"Content-Length: {len(body or b'')}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def _authority(origin: _Origin) -> str:
    host = origin.host if origin.host.isascii() else origin.host.encode("idna").decode("ascii")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    return host if origin.port == _DEFAULT_PORT[origin.scheme] else f"{host}:{origin.port}"


def _connect(setting: _Setting, origin: _Origin, timeout_s: float) -> _Connection:
    context = _pools.context(setting) if origin.scheme == "https" else None
    generation = _pools.generation
    sock = socket.create_connection((origin.host, origin.port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=origin.host)
    except BaseException:
        sock.close()
        raise
    return _Connection(sock, generation)


def _exchange(
    connection: _Connection,
    setting: _Setting,
    origin: _Origin,
    method: str,
    head: bytes,
    body: bytes | None,
    timeout_s: float,
    limit: int | None,
) -> Answer:
    """Send the request, read its answer; the connection goes back to the pool only if read to its end."""
    try:
        connection.sock.settimeout(timeout_s)
        _send(connection.sock, head, body)
        minor, status, headers = _answer_head(connection)
        ok = 200 <= status < 300
        cap = limit if ok else min(limit or ERROR_BODY, ERROR_BODY)
        data, reusable = _body(connection, minor, method, status, headers, cap)
    except BaseException:
        connection.close()
        raise
    if reusable and not connection.buffer:
        _pools.give_back(setting, origin, connection)
    else:
        connection.close()
    if not ok:
        raise StatusError(status, headers, data)
    return Answer(status, headers, data)


def _send(sock: socket.socket, head: bytes, body: bytes | None) -> None:
    try:
        if body and len(body) > _ONE_WRITE:
            sock.sendall(head)
            sock.sendall(body)
        else:
            sock.sendall(head + body if body else head)
    except (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
        raise _Dropped(f"the server closed the connection ({exc})") from None


def _answer_head(connection: _Connection) -> tuple[int, int, Headers]:
    """(HTTP/1.x minor version, status, headers) of the final answer; interim 1xx answers are skipped."""
    connection.first_bytes()
    budget = HEAD_MAX
    while True:
        head = connection.head(budget)
        budget -= len(head) + 2
        minor, status, headers = _parse_head(head)
        if status == 101:
            raise Unreachable("the server switched protocols (101) instead of answering")
        if status >= 200:
            return minor, status, headers


def _parse_head(head: str) -> tuple[int, int, Headers]:
    """(minor version, status, headers) of one answer's head: its lines, each ended by CRLF (or LF)."""
    status = _STATUS_LINE.match(head)
    if status is None:
        first_line = head.partition("\n")[0]
        raise Unreachable(f"not an HTTP/1.x answer: {first_line[:60]!r}")
    fields = status.end()
    if not _FIELD_LINES.fullmatch(head, fields):
        raise Unreachable(f"a malformed header line in the answer: {_first_malformed(head[fields:])!r}")
    return int(status[1]), int(status[2]), Headers(_FIELD.findall(head, fields))


def _first_malformed(lines: str) -> str:
    for line in lines.splitlines():
        if not _FIELD_LINES.fullmatch(line + "\n"):
            return ("obs-fold: " if line[:1] in " \t" else "") + line[:60]
    return lines[:60]


def _body(
    connection: _Connection, minor: int, method: str, status: int, headers: Headers, cap: int | None
) -> tuple[bytes, bool]:
    """The answer's body (at most `cap` bytes) and whether the connection may carry another request."""
    keep = _keeps_alive(minor, headers)
    if method == "HEAD" or status in (204, 304):
        return b"", keep
    coding = headers.get("transfer-encoding")
    if coding is not None:
        if minor == 1 and coding.rsplit(",", 1)[-1].strip().lower() == "chunked":
            body, whole = _chunked(connection, cap)
            return body, whole and keep and "content-length" not in headers  # both: a smuggling attempt?
        # another final coding, or a Transfer-Encoding in HTTP/1.0: only the server's close ends the body
        return connection.until_close(cap), False
    length = _content_length(headers)
    if length is None:
        return connection.until_close(cap), False
    if cap is not None and length > cap:
        return connection.exactly(cap), False
    return connection.exactly(length), keep


def _keeps_alive(minor: int, headers: Headers) -> bool:
    tokens = {token.strip().lower() for token in headers.get("connection", "").split(",")}
    return "close" not in tokens if minor == 1 else "keep-alive" in tokens


def _content_length(headers: Headers) -> int | None:
    given = headers.get("content-length")
    if given is None:
        return None
    values = {value.strip() for value in given.split(",")}  # a repeated field arrives joined
    if len(values) != 1:
        raise Unreachable(f"conflicting Content-Length values in the answer: {given[:60]!r}")
    value = values.pop()
    if not (value.isascii() and value.isdigit()):
        raise Unreachable(f"a malformed Content-Length in the answer: {value[:30]!r}")
    return int(value)


def _chunked(connection: _Connection, cap: int | None) -> tuple[bytes, bool]:
    """A chunked body (extensions ignored, trailers read and dropped), at most `cap` bytes; (body, whole)."""
    chunks: list[bytes] = []
    size_so_far = 0
    while True:
        size_line = connection.line(HEAD_MAX)
        found = _CHUNK_SIZE.fullmatch(size_line)
        if found is None:
            raise Unreachable(f"a malformed chunk size in the answer: {size_line[:40]!r}")
        size = int(found[1], 16)
        if size == 0:
            break
        if cap is not None and size_so_far + size > cap:
            chunks.append(connection.exactly(cap - size_so_far))
            return b"".join(chunks), False
        chunks.append(connection.exactly(size))
        size_so_far += size
        if connection.line(2) != b"":
            raise Unreachable("a chunk of the answer longer than its size")
    budget = HEAD_MAX
    while trailer := connection.line(budget):
        budget -= len(trailer) + 2
    return b"".join(chunks), True


def _reason(exc: BaseException) -> str:
    """The words of the underlying error ("timed out", "[Errno 111] Connection refused", ssl's reason)."""
    return str(exc)[:300] or type(exc).__name__
