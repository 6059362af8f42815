"""tally/httpclient.py: one pooled client for the channels, webhooks, alert robots and the heartbeat. It keeps
connections, verifies TLS, keeps a client certificate on connections of its own, follows no redirect, and
answers the callers as urlopen did (StatusError for non-2xx, Unreachable, an OSError, for no answer)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
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
        }.get(self.path, (200, b"?", {}))
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


def _serve(context: ssl.SSLContext | None = None) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
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
    return f"{scheme}://127.0.0.1:{server.server_address[1]}{path}"


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
