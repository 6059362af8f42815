"""tally/httpclient.py: one pooled client for the channels, webhooks, alert robots and the heartbeat. It keeps
connections, verifies TLS, keeps a client certificate on connections of its own, follows no redirect, and
answers the callers as urlopen did (StatusError for non-2xx, Unreachable, an OSError, for no answer)."""

from __future__ import annotations

import http.client
import io
import itertools
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tally import httpclient

from tally_local.simulator import _tls
from tally_local.simulator._tls import temp_pem


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the channels and the simulator answer

    def log_message(self, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.lock:  # type: ignore[attr-defined]
            self.server.connections += 1  # type: ignore[attr-defined]

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        sent = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, dict(self.headers), sent))  # type: ignore[attr-defined]
        status, body, extra = {
            "/ok": (200, b"fine", {}),
            "/missing": (404, b'{"code":"NOT_FOUND"}', {}),
            "/moved": (302, b"", {"Location": "http://127.0.0.1:9/elsewhere"}),
            "/big": (200, b"x" * 100_000, {}),
            "/slow": (200, b"late", {}),
        }.get(self.path, (200, self.path.encode(), {}))  # any other path: itself, to match answers to calls
        if self.path == "/slow":
            self.server.release.wait(5)  # type: ignore[attr-defined]
        self.send_response(status)
        for key, value in extra.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # /slow: the client timed out and hung up first, as the test means it to

    do_GET = do_POST = _answer


def _serve(context: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer((host, 0), _Handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.lock, server.connections, server.seen = threading.Lock(), 0, []  # type: ignore[attr-defined]
    server.release = threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    httpclient.reset()
    try:
        yield server
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        httpclient.reset()


def _url(server: ThreadingHTTPServer, path: str, scheme: str = "http") -> str:
    host, port = server.server_address[:2]
    return f"{scheme}://{host}:{port}{path}"


@pytest.fixture
def plain() -> Iterator[ThreadingHTTPServer]:
    yield from _serve()


@pytest.fixture(scope="module")
def ca() -> _tls.TestCA:
    return _tls.TestCA("httpclient test CA (TEST ONLY)")


@pytest.fixture
def tls_server(ca: _tls.TestCA) -> Iterator[ThreadingHTTPServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(temp_pem(*ca.issue("127.0.0.1", server=True)))
    yield from _serve(context)


def test_calls_to_one_host_share_one_connection(plain):
    for _ in range(5):
        answer = httpclient.request("POST", _url(plain, "/ok"), body=b"a=1", timeout_s=3)
        assert (answer.status, answer.body) == (200, b"fine")
    assert plain.connections == 1
    method, path, headers, sent = plain.seen[-1]
    assert (method, path, sent) == ("POST", "/ok", b"a=1")
    assert headers["User-Agent"] == "tally/0.1"
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"  # urlopen's default for a body


def test_a_non_2xx_answer_is_a_status_error_with_its_body(plain):
    with pytest.raises(httpclient.StatusError) as raised:
        httpclient.request("GET", _url(plain, "/missing"), timeout_s=3)
    assert (raised.value.status, raised.value.code, raised.value.body) == (404, 404, b'{"code":"NOT_FOUND"}')


def test_a_redirect_is_not_followed(plain):
    with pytest.raises(httpclient.StatusError) as raised:
        httpclient.request("POST", _url(plain, "/moved"), body=b"{}", timeout_s=3)
    assert raised.value.status == 302
    assert [p for _, p, _, _ in plain.seen] == ["/moved"]


def test_no_answer_is_unreachable_an_oserror():
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]  # nobody listens once it is closed
    with pytest.raises(httpclient.Unreachable) as raised:
        httpclient.request("GET", f"http://127.0.0.1:{port}/", timeout_s=1)
    assert isinstance(raised.value, OSError)
    with pytest.raises(OSError):
        httpclient.request("POST", "", body=b"", timeout_s=1)  # no URL configured: no answer either
    with pytest.raises(httpclient.Unreachable, match="not an http"):
        httpclient.request("GET", "file:///etc/passwd", timeout_s=1)


def test_the_timeout_is_the_caller_s(plain):
    with pytest.raises(httpclient.Unreachable, match="timed out"):
        httpclient.request("GET", _url(plain, "/slow"), timeout_s=0.3)


def test_a_long_answer_is_cut_at_the_limit_and_its_connection_not_reused(plain):
    answer = httpclient.request("GET", _url(plain, "/big"), timeout_s=3, limit=1001)
    assert len(answer.body) == 1001
    assert httpclient.request("GET", _url(plain, "/ok"), timeout_s=3).body == b"fine"
    assert plain.connections == 2


def test_reset_closes_the_kept_connections(plain):
    httpclient.request("GET", _url(plain, "/ok"), timeout_s=3)
    httpclient.reset()
    httpclient.request("GET", _url(plain, "/ok"), timeout_s=3)
    assert plain.connections == 2


def test_tls_is_verified(tls_server, ca):
    with pytest.raises(httpclient.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        httpclient.request("GET", _url(tls_server, "/ok", "https"), timeout_s=3)  # a CA nobody trusts
    trusted = httpclient.TLS(cafile=temp_pem(ca.pem))
    for _ in range(3):
        assert (
            httpclient.request("GET", _url(tls_server, "/ok", "https"), timeout_s=3, tls=trusted).body
            == b"fine"
        )
    assert tls_server.connections == 1  # after the refused handshake: one kept connection


def test_a_client_certificate_is_presented_on_connections_of_its_own(ca):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(temp_pem(*ca.issue("127.0.0.1", server=True)))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=ca.pem)
    served = _serve(context)
    server = next(served)
    try:
        cafile = temp_pem(ca.pem)
        url = _url(server, "/ok", "https")
        with pytest.raises(httpclient.Unreachable):
            httpclient.request("GET", url, timeout_s=3, tls=httpclient.TLS(cafile=cafile))  # no certificate
        cert_a, key_a = ca.issue("merchant A", server=False)
        cert_b, key_b = ca.issue("merchant B", server=False)
        a = httpclient.TLS(cafile=cafile, cert_pem=cert_a, key_pem=key_a)
        b = httpclient.TLS(cafile=cafile, cert_pem=cert_b, key_pem=key_b)
        before = server.connections
        for tls in (a, b, a, b):
            assert httpclient.request("GET", url, timeout_s=3, tls=tls).body == b"fine"
        assert server.connections - before == 2  # one kept connection per certificate, never shared
        assert httpclient.TLS(cafile=cafile, cert_pem=cert_a, key_pem=key_a) == a  # keyed by value
    finally:
        next(served, None)


# ---------------------------------------------------------------- the HTTP/1.1 exchange, byte by byte (RFC 9112)
# A raw server sends exact bytes: each accepted connection runs a script with a _Peer (read one request, send,
# close, reset). `requests` holds every request read, `connections` every connection accepted.


class _Peer:
    def __init__(self, server: _Raw, conn: socket.socket):
        self.server, self.conn, self.reader = server, conn, conn.makefile("rb")

    def request(self) -> bytes | None:
        """One request (head and body) as it arrived, or None when the client closed the connection."""
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = self.reader.readline()
            if not line:
                return None
            head += line
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        sent = head + (self.reader.read(int(length[1])) if length else b"")
        with self.server.lock:
            self.server.requests.append(sent)
        return sent

    def send(self, data: bytes) -> None:
        self.conn.sendall(data)

    def reset(self) -> None:
        """Close with a TCP RST instead of a FIN."""
        self.conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.conn.close()


class _Raw:
    def __init__(self, script: Callable[[_Peer], None], host: str = "127.0.0.1"):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind((host, 0))
        self.listener.listen(16)
        self.host, self.port = host, self.listener.getsockname()[1]
        self.script, self.lock = script, threading.Lock()
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed = threading.Event()  # set when a script closed its connection
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed by the test
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.script(_Peer(self, conn))
        except OSError:
            pass  # the client went away first
        finally:
            conn.close()
            self.closed.set()

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def raw() -> Iterator[Callable[..., _Raw]]:
    servers: list[_Raw] = []

    def start(script: Callable[[_Peer], None], host: str = "127.0.0.1") -> _Raw:
        servers.append(_Raw(script, host))
        return servers[-1]

    httpclient.reset()
    yield start
    httpclient.reset()
    for server in servers:
        server.listener.close()


def _answering(*answers: bytes) -> Callable[[_Peer], None]:
    """A script: each request on the connection gets the next answer, then the last one again."""

    def script(peer: _Peer) -> None:
        for number in itertools.count():
            if peer.request() is None:
                return
            peer.send(answers[min(number, len(answers) - 1)])

    return script


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _as_http_client_reads_it(answer: bytes, method: str = "GET") -> tuple[int, bytes]:
    """The oracle: the standard library's own parser on the same bytes."""

    class Bytes:
        def makefile(self, mode: str) -> io.BytesIO:
            return io.BytesIO(answer)

    parsed = http.client.HTTPResponse(Bytes(), method=method)  # type: ignore[arg-type]
    parsed.begin()
    return parsed.status, parsed.read()


def test_the_request_is_http_1_1_with_host_length_and_the_query_as_given(raw):
    server = raw(_answering(OK))
    httpclient.request("POST", server.url("/pay?a=1&b=two%20words&c=%E4"), body=b'{"x":1}', timeout_s=3)
    httpclient.request("POST", server.url("/empty"), timeout_s=3)
    httpclient.request("GET", server.url("/read"), headers={"Accept": "application/json"}, timeout_s=3)
    posted, empty, got = server.requests
    assert posted.startswith(b"POST /pay?a=1&b=two%20words&c=%E4 HTTP/1.1\r\n")
    assert f"\r\nHost: 127.0.0.1:{server.port}\r\n".encode() in posted
    assert b"\r\nContent-Length: 7\r\n" in posted and posted.endswith(b'\r\n\r\n{"x":1}')
    assert b"\r\nAccept-Encoding: identity\r\n" in posted  # the body comes back as sent: never compressed
    assert b"expect" not in posted.lower()
    assert b"\r\nContent-Length: 0\r\n" in empty  # a POST without a body still says so
    assert b"content-length" not in got.lower() and b"\r\nAccept: application/json\r\n" in got
    assert server.connections == 1


def test_a_chunked_answer_is_decoded_with_extensions_ignored_and_trailers_dropped(raw):
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n"
        b'7 ; quoted="a;b"\r\n, world\r\n'
        b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
    )
    server = raw(_answering(chunked, OK))
    answer = httpclient.request("GET", server.url("/chunks"), timeout_s=3)
    assert (answer.status, answer.body) == _as_http_client_reads_it(chunked) == (200, b"hello, world")
    assert "X-Checksum" not in answer.headers  # trailers are read and dropped
    assert httpclient.request("GET", server.url("/next"), timeout_s=3).body == b"ok"
    assert server.connections == 1  # the chunked body was read to its end: the connection is kept


def test_a_chunked_answer_longer_than_the_limit_is_cut_and_its_connection_not_reused(raw):
    server = raw(
        _answering(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n4\r\nefgh\r\n0\r\n\r\n", OK
        )
    )
    assert httpclient.request("GET", server.url("/"), timeout_s=3, limit=6).body == b"abcdef"
    httpclient.request("GET", server.url("/"), timeout_s=3)
    assert server.connections == 2


def test_an_answer_without_a_length_ends_at_the_close_and_its_connection_is_not_reused(raw):
    until_close = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it, until the close"

    def script(peer: _Peer) -> None:
        peer.request()
        peer.send(until_close)

    server = raw(script)
    for _ in range(2):
        answer = httpclient.request("GET", server.url("/"), timeout_s=3)
        assert (answer.status, answer.body) == _as_http_client_reads_it(until_close)
    assert server.connections == 2


def test_head_204_and_304_answers_have_no_body_and_the_connection_carries_the_next_request(raw):
    def script(peer: _Peer) -> None:
        while (sent := peer.request()) is not None:
            peer.send(
                {
                    b"HEAD /file": b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
                    b"POST /done": b"HTTP/1.1 204 No Content\r\n\r\n",
                    b"GET /same": b'HTTP/1.1 304 Not Modified\r\nContent-Length: 500\r\nETag: "1"\r\n\r\n',
                }.get(sent.split(b" HTTP/1.1")[0], OK)
            )

    server = raw(script)
    head = httpclient.request("HEAD", server.url("/file"), timeout_s=3)
    assert (head.status, head.body, head.headers["content-length"]) == (200, b"", "1000")
    assert httpclient.request("POST", server.url("/done"), body=b"{}", timeout_s=3).status == 204
    with pytest.raises(httpclient.StatusError) as raised:
        httpclient.request("GET", server.url("/same"), timeout_s=3)
    assert (raised.value.status, raised.value.body) == (304, b"")
    assert httpclient.request("GET", server.url("/after"), timeout_s=3).body == b"ok"
    assert server.connections == 1 and len(server.requests) == 4


def test_an_interim_100_continue_is_skipped_and_a_101_is_unreachable(raw):
    server = raw(
        _answering(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX-A: 1\r\n\r\n" + OK,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        )
    )
    answer = httpclient.request("POST", server.url("/"), body=b"a=1", timeout_s=3)
    assert (answer.status, answer.body) == (200, b"ok")
    with pytest.raises(httpclient.Unreachable, match="101"):
        httpclient.request("POST", server.url("/"), body=b"a=1", timeout_s=3)


def test_a_kept_connection_the_server_closed_while_idle_is_replaced_and_the_request_arrives_once(raw):
    def answer_one_then_close(peer: _Peer) -> None:
        peer.request()
        peer.send(OK)

    server = raw(answer_one_then_close)
    httpclient.request("POST", server.url("/first"), body=b"1", timeout_s=3)
    assert server.closed.wait(3)
    time.sleep(0.05)  # the FIN reaches the client's socket
    assert httpclient.request("POST", server.url("/second"), body=b"2", timeout_s=3).body == b"ok"
    assert server.connections == 2
    assert [r.split(b" ")[1] for r in server.requests] == [b"/first", b"/second"]


def test_a_kept_connection_found_closed_only_when_the_answer_should_begin_is_retried_once_on_a_new_one(
    raw, monkeypatch
):
    """The server closes the kept connection just after the client's check (a race the check cannot see):
    the request was never read on it, so it goes once more on a new connection, and arrives once."""

    def answer_one_then_close(peer: _Peer) -> None:
        peer.request()
        peer.send(OK)

    server = raw(answer_one_then_close)
    httpclient.request("POST", server.url("/first"), body=b"1", timeout_s=3)
    assert server.closed.wait(3)
    time.sleep(0.05)
    monkeypatch.setattr(httpclient._Connection, "looks_open", lambda self: True)
    assert httpclient.request("POST", server.url("/second"), body=b"2", timeout_s=3).body == b"ok"
    assert server.connections == 2
    assert [r.split(b" ")[1] for r in server.requests] == [b"/first", b"/second"]


def test_a_kept_connection_with_bytes_nobody_asked_for_is_not_reused(raw):
    """Some servers send a 408 on a connection they time out: read as the next call's answer, it would be a
    wrong answer. The check before reuse finds the bytes waiting and drops the connection."""
    answered, sent_408, done = threading.Event(), threading.Event(), threading.Event()

    def answer_then_408(peer: _Peer) -> None:
        while (sent := peer.request()) is not None:
            peer.send(OK)
            if b"/first" in sent:
                answered.wait(3)  # the client has read its answer: the 408 comes on its own
                peer.send(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                sent_408.set()
                done.wait(3)  # and keeps the connection open

    server = raw(answer_then_408)
    try:
        httpclient.request("GET", server.url("/first"), timeout_s=3)
        answered.set()
        assert sent_408.wait(3)
        time.sleep(0.02)  # on loopback the bytes are already there; a margin all the same
        assert httpclient.request("GET", server.url("/second"), timeout_s=3).body == b"ok"
        assert server.connections == 2
    finally:
        done.set()


def test_a_new_connection_closed_before_any_answer_is_unreachable_and_not_sent_again(raw):
    server = raw(lambda peer: peer.request() and None)
    with pytest.raises(httpclient.Unreachable, match="closed the connection before answering"):
        httpclient.request("POST", server.url("/"), body=b"once", timeout_s=3)
    assert server.connections == 1 and len(server.requests) == 1


def test_a_request_the_server_read_and_answered_nothing_to_is_not_retried_on_a_kept_connection(raw):
    """A timeout on a kept connection is not the server closing it: the request may be processed, no retry."""
    server = raw(_answering(OK, b""))  # the second request gets no answer at all
    httpclient.request("POST", server.url("/"), body=b"1", timeout_s=3)
    with pytest.raises(httpclient.Unreachable, match="timed out"):
        httpclient.request("POST", server.url("/"), body=b"2", timeout_s=0.3)
    assert server.connections == 1 and len(server.requests) == 2


def test_a_reset_in_the_middle_of_the_body_is_unreachable_and_nothing_is_kept(raw):
    def reset_mid_body(peer: _Peer) -> None:
        peer.request()
        if peer.server.connections > 1:
            peer.send(OK)
            return
        peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
        time.sleep(0.05)
        peer.reset()

    server = raw(reset_mid_body)
    with pytest.raises(httpclient.Unreachable):
        httpclient.request("GET", server.url("/"), timeout_s=3)
    assert httpclient.request("GET", server.url("/"), timeout_s=3).body == b"ok"
    assert server.connections == 2


def test_an_answer_cut_short_by_the_close_is_unreachable(raw):
    server = raw(
        lambda peer: peer.request() and peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
    )
    with pytest.raises(httpclient.Unreachable, match="in the middle of its answer"):
        httpclient.request("GET", server.url("/"), timeout_s=3)


@pytest.mark.parametrize(
    "url, headers",
    [
        ("/", {"X-Note": "a\r\nX-Injected: 1"}),
        ("/", {"X-Note": "a\nb"}),
        ("/", {"X-Note": "a\rb"}),
        ("/", {"X-Note": "a\x00b"}),
        ("/", {"X-Note\r\nX-Injected": "1"}),
        ("/", {"X Note": "1"}),
        ("/", {"X-Note:": "1"}),
        ("/p\r\nX-Injected: 1", {}),
        ("/p?q=1\n", {}),
        ("/p\x00", {}),
    ],
)
def test_a_header_or_target_that_could_inject_a_header_is_refused_and_nothing_is_sent(raw, url, headers):
    server = raw(_answering(OK))
    httpclient.request("GET", server.url("/before"), timeout_s=3)  # a kept connection it could have used
    with pytest.raises(httpclient.Unreachable):
        httpclient.request("GET", server.url(url), headers=headers, timeout_s=3)
    httpclient.request("GET", server.url("/after"), timeout_s=3)
    assert [r.split(b" ")[1] for r in server.requests] == [b"/before", b"/after"]
    assert server.connections == 1  # the refused call wrote nothing on the kept connection


def test_an_answer_head_over_64_kib_is_unreachable(raw):
    server = raw(
        _answering(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 << 10) + b"\r\nContent-Length: 2\r\n\r\nok")
    )
    with pytest.raises(httpclient.Unreachable, match="longer than 65536 bytes"):
        httpclient.request("GET", server.url("/"), timeout_s=3)


@pytest.mark.parametrize(
    "answer, why",
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk",
            "conflicting Content-Length",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nokk", "conflicting Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\nok", "obs-fold"),
        (b"HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n", "malformed header line"),
        (b"HTTP/2 200 OK\r\n\r\n", "not an HTTP/1.x answer"),
        (b"ICY 200 OK\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
    ],
)
def test_a_malformed_answer_is_unreachable(raw, answer, why):
    server = raw(_answering(answer))
    with pytest.raises(httpclient.Unreachable, match=why):
        httpclient.request("GET", server.url("/"), timeout_s=3)


def test_the_same_content_length_twice_is_one_length(raw):
    server = raw(_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"))
    assert httpclient.request("GET", server.url("/"), timeout_s=3).body == b"ok"


def test_a_repeated_header_is_joined_and_any_case_finds_it(raw):
    answer = (
        b"HTTP/1.1 200 OK\r\nX-Tag: a\r\nContent-Length: 2\r\nx-tag:  b \r\nWechatpay-Serial: 5157\r\n\r\nok"
    )
    server = raw(_answering(answer))
    headers = httpclient.request("GET", server.url("/"), timeout_s=3).headers
    assert headers["X-TAG"] == headers.get("x-tag") == "a, b"
    assert headers.get("wechatpay-serial") == "5157" and "WECHATPAY-SERIAL" in headers
    assert dict(headers) == {"X-Tag": "a, b", "Content-Length": "2", "Wechatpay-Serial": "5157"}
    assert headers.get("missing") is None


def test_transfer_encoding_wins_over_content_length_and_the_connection_is_not_reused(raw):
    both = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    server = raw(_answering(both, OK))
    assert httpclient.request("GET", server.url("/"), timeout_s=3).body == b"ok"
    httpclient.request("GET", server.url("/"), timeout_s=3)
    assert server.connections == 2


def test_a_final_coding_other_than_chunked_is_read_until_the_close(raw):
    gzip_then_close = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b not decoded"
    server = raw(lambda peer: peer.request() and peer.send(gzip_then_close))
    assert httpclient.request("GET", server.url("/"), timeout_s=3).body == b"\x1f\x8b not decoded"


@pytest.mark.parametrize(
    "answer, kept",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", False),
        (b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok", True),
    ],
)
def test_a_connection_is_kept_when_http_1_1_does_not_close_it_or_http_1_0_asks_to_keep_it(raw, answer, kept):
    server = raw(_answering(answer))
    for _ in range(2):
        assert httpclient.request("GET", server.url("/"), timeout_s=3).body == b"ok"
    assert server.connections == (1 if kept else 2)


def test_a_connection_idle_longer_than_idle_s_is_not_reused(raw, monkeypatch):
    server = raw(_answering(OK))
    httpclient.request("GET", server.url("/"), timeout_s=3)
    monkeypatch.setattr(httpclient, "IDLE_S", 0.0)
    httpclient.request("GET", server.url("/"), timeout_s=3)
    assert server.connections == 2


def test_the_least_recently_used_host_s_connections_are_dropped_past_hosts(raw, monkeypatch):
    monkeypatch.setattr(httpclient, "HOSTS", 1)
    first, second = raw(_answering(OK)), raw(_answering(OK))
    for server in (first, second, first):
        httpclient.request("GET", server.url("/"), timeout_s=3)
    assert (first.connections, second.connections) == (2, 1)


def test_the_least_recently_used_tls_setting_s_connections_are_dropped_past_client_certs(raw, monkeypatch):
    monkeypatch.setattr(httpclient, "CLIENT_CERTS", 1)
    server = raw(_answering(OK))
    merchant_a, merchant_b = httpclient.TLS(cert_pem="a"), httpclient.TLS(cert_pem="b")  # plain http: unused
    for tls in (merchant_a, merchant_b, merchant_a):
        httpclient.request("GET", server.url("/"), timeout_s=3, tls=tls)
    assert server.connections == 3  # merchant A's kept connection went with its setting


def test_an_ipv6_literal_is_reached_and_named_in_brackets(raw):
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        server = raw(_answering(OK), host="::1")
    except OSError:
        pytest.skip("::1 cannot be bound on this machine")
    assert httpclient.request("GET", server.url("/six"), timeout_s=3).body == b"ok"
    assert f"\r\nHost: [::1]:{server.port}\r\n".encode() in server.requests[0]


def test_threads_share_the_pool_and_each_answer_matches_its_request(plain):
    def calls(worker: int) -> list[bytes]:
        return [
            httpclient.request("GET", _url(plain, f"/w{worker}/c{call}"), timeout_s=5).body
            for call in range(40)
        ]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(calls, range(8)))
    assert answers == [[f"/w{w}/c{c}".encode() for c in range(40)] for w in range(8)]
    assert plain.connections <= 8  # each thread took a kept connection back out, or opened one of its own


def test_tls_sends_the_host_as_sni_and_checks_the_certificate_names_it(ca):
    seen: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(
        temp_pem(*ca.issue("localhost", server=True))
    )  # valid for localhost and 127.0.0.1
    context.sni_callback = lambda sock, name, ctx: seen.append(name)  # type: ignore[assignment]
    trusted = httpclient.TLS(cafile=temp_pem(ca.pem))
    for server in _serve(context):
        url = f"https://localhost:{server.server_address[1]}/ok"
        assert httpclient.request("GET", url, timeout_s=3, tls=trusted).body == b"fine"
    assert seen == ["localhost"]
    try:
        served = _serve(context, host="127.0.0.2")  # the same certificate, at an address it does not name
        elsewhere = next(served)
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound on this machine")
    try:
        with pytest.raises(httpclient.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
            httpclient.request("GET", _url(elsewhere, "/ok", "https"), timeout_s=3, tls=trusted)
    finally:
        next(served, None)
