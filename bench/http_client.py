"""A channel call's client CPU: tally/httpclient.py (one pooled, kept-alive HTTPS connection per host) next to
`urllib.request.urlopen` (a new SSL context and a new TLS handshake every call) and, on a kept-alive
connection as well, urllib3's pool (botocore's HTTP library, the client before this one: the ratio to it is
what speaking HTTP/1.1 directly over `ssl` saves).

The server runs in a process of its own (HTTP/1.1 keep-alive over TLS, a certificate from a throwaway CA), so
`time.process_time` here counts the client only: building the request, TLS, reading the answer. All paths
trust the same bundle (the system's CAs plus the test CA, through SSL_CERT_FILE), so urlopen pays the
real cost of loading the system's CAs for each new context, as it did in Lambda.

`python -m bench.http_client` prints the rows; `--table-rows` prints them as JSON (bench/run.py)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any

import urllib3  # botocore's dependency: the reference of the kept-alive path before

from bench.common import per_call_us

SERVER = r"""
import ssl, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as a channel's server: the body does not wait for the client's ACK
    def log_message(self, *args):
        pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"trade_state":"NOTPAY","out_trade_no":"BENCH-HTTP-0001","mchid":"1900000109"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

BODY = json.dumps(
    {"mchid": "1900000109", "out_trade_no": "BENCH-HTTP-0001", "amount": {"total": 100}}
).encode()
HEADERS = {
    "Authorization": 'WECHATPAY2-SHA256-RSA2048 mchid="1900000109",nonce_str="x",signature="y"',
    "Accept": "application/json",
    "Content-Type": "application/json",
    "User-Agent": "tally/0.1",
}


def _system_cas() -> str:
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.exists(candidate):
            with open(candidate) as handle:
                return handle.read()
    return ""


def measure() -> dict[str, Any]:
    from tally_local.simulator._tls import TestCA, temp_pem

    ca = TestCA("bench http client CA (TEST ONLY)")
    server_pem = temp_pem(*ca.issue("127.0.0.1", server=True))
    bundle = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)  # noqa: SIM115 - removed below
    with bundle:
        bundle.write(_system_cas() + "\n" + ca.pem)
    os.environ["SSL_CERT_FILE"] = bundle.name  # both paths: the system's CAs and the test CA, nothing else
    server = subprocess.Popen([sys.executable, "-c", SERVER, server_pem], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"https://127.0.0.1:{server.stdout.readline().strip()}/v3/pay/transactions/jsapi"

        from tally import httpclient

        def pooled() -> None:
            answer = httpclient.request("POST", url, body=BODY, headers=HEADERS, timeout_s=3.0)
            assert answer.status == 200 and answer.body

        manager = urllib3.PoolManager(
            num_pools=32, maxsize=10, block=False, ssl_context=ssl.create_default_context()
        )
        parts = urllib.parse.urlsplit(url)

        def urllib3_pool() -> None:  # tally/httpclient.py's calls as they were made over urllib3
            pool = manager.connection_from_host(parts.hostname, parts.port, parts.scheme)
            answer = pool.urlopen(
                "POST",
                parts.path,
                body=BODY,
                headers=HEADERS,
                timeout=urllib3.Timeout(connect=3.0, read=3.0),
                retries=False,
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
            )
            assert answer.status == 200 and answer.read(decode_content=False)
            answer.release_conn()

        def urlopen() -> None:  # what every channel call did before either pool
            request = urllib.request.Request(url, data=BODY, headers=HEADERS, method="POST")
            with urllib.request.urlopen(request, timeout=3.0) as answer:  # noqa: S310 - the local server
                assert answer.status == 200 and answer.read()

        old = per_call_us(urlopen, n=40, repeat=5, clock=time.process_time)
        new = per_call_us(pooled, n=1000, repeat=5, clock=time.process_time)
        kept_urllib3 = per_call_us(urllib3_pool, n=1000, repeat=5, clock=time.process_time)
        wall_old = per_call_us(urlopen, n=20, repeat=3)
        wall_new = per_call_us(pooled, n=500, repeat=3)
    finally:
        server.kill()
        server.wait()
        for path in (bundle.name, server_pem):
            os.unlink(path)
    return {
        "pooled_us": new,
        "urlopen_us": old,
        "urllib3_us": kept_urllib3,
        "wall_pooled_us": wall_new,
        "wall_urlopen_us": wall_old,
    }


def rows(found: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            "channel call client CPU (pooled HTTPS, tally/httpclient)",
            f"{found['pooled_us']:.0f} µs",
            f"urlopen, a new TLS connection each call: {found['urlopen_us']:.0f} µs",
            f"ratio {found['pooled_us'] / found['urlopen_us']:.3f}; urllib3's pool, kept-alive as well: "
            f"{found['urllib3_us']:.0f} µs (ratio {found['pooled_us'] / found['urllib3_us']:.2f}); "
            f"wall on loopback {found['wall_pooled_us']:.0f} vs {found['wall_urlopen_us']:.0f} µs",
        )
    ]


def run() -> list[tuple[str, ...]]:
    return rows(measure())


if __name__ == "__main__":
    if "--table-rows" in sys.argv:  # bench/run.py: a process of its own (SSL_CERT_FILE is set for it)
        print(json.dumps([list(r) for r in run()]))
    else:
        from bench.common import print_section

        print_section(run)
