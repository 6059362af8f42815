"""The local API Gateway: HTTP requests in, HTTP API payload 2.0 events to the handlers, responses out.

`FrontDoor({routeKey: handler})` serves the routes given; `routes_from_template` builds that map from
the HttpApi events in template.yaml. Like API Gateway: unknown route → 404, handler exception → 500
(traceback to stderr, never to the client), body over 10 MB → 413. JWT authorizers (the console's
Cognito tokens) are checked as API Gateway checks them (`JwtAuthorizer`, `authorizers_from_template`).
IAM authorisation (SigV4) is checked with the keys the stack knows (`IamAuthorizer`, tally_local/sigv4.py).
Not emulated: the 30 s integration timeout, custom domains and stages other
than `$default`.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tally_local.ackfirst import AckFirst
from tally_local.containers import ContainerCrashed, ContainerPool, ContainerSpec
from tally_local.resources import LambdaContext, function_specs, load_handler
from tally_local.sigv4 import IamAuthorizer

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
TEXT_CONTENT_TYPES = ("json", "xml", "text/", "x-www-form-urlencoded")
LOCAL_API_ID = "tallylocal"

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class Target:
    """A function behind a route: its handler plus what its LambdaContext reports.

    `lock` serialises invocations: one warm container per function, as module-level caches in a
    handler expect (Lambda scales out with more containers, never with threads in one). With a `pool`
    (tally_local/containers.py) the function scales out as on Lambda: up to the pool's limit of
    containers, each a process of its own serving one invocation at a time.
    """

    handler: Handler
    function_name: str = "local-function"
    timeout_s: int = 30
    memory_mb: int = 128
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    pool: ContainerPool | None = field(default=None, repr=False)

    def invoke(self, event: dict[str, Any]) -> Any:
        if self.pool is not None:
            return self.pool.invoke(event)
        with self.lock:
            context = LambdaContext(self.function_name, self.timeout_s, self.memory_mb)
            return self.handler(event, context)

    def stop(self) -> None:
        """Stop the function's containers (a no-op for the in-thread handler)."""
        if self.pool is not None:
            self.pool.stop()

    def warm(self) -> None:
        """Start one container ahead of the first invocation (a no-op for the in-thread handler)."""
        if self.pool is not None:
            self.pool.warm()


@dataclass(frozen=True)
class Route:
    key: str  # "GET /orders/{mchid}/{out_trade_no}"
    method: str
    pattern: re.Pattern[str]
    names: tuple[str, ...]  # path parameter names, in order
    target: Target

    @classmethod
    def parse(cls, key: str, target: Target) -> Route:
        method, _, path = ("ANY", "", "$default") if key == "$default" else key.partition(" ")
        pattern, names = _path_pattern(path)
        return cls(key, method.upper(), pattern, names, target)

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method not in ("ANY", method):
            return None
        found = self.pattern.fullmatch(path)
        if found is None:
            return None
        return {name: unquote(value) for name, value in zip(self.names, found.groups(), strict=True)}


def _path_pattern(path: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """`/orders/{mchid}/{id}` → a regex and the parameter names; `{proxy+}` is greedy; `$default` matches all."""
    if path == "$default":
        return re.compile(r".*"), ()
    parts, names = [], []
    for piece in re.split(r"(\{[^}]+\})", path):
        if piece.startswith("{"):
            greedy = piece.endswith("+}")
            names.append(piece[1:-2] if greedy else piece[1:-1])
            parts.append("(.+)" if greedy else "([^/]+)")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts)), tuple(names)


def routes_from_template(
    template: Mapping[str, Any],
    root: str | Path,
    *,
    containers: int = 0,
    resolve: Callable[[Any], Any] = lambda value: value,
) -> dict[str, Target]:
    """{routeKey: Target} for every HttpApi event in the template, handlers imported from their code.

    `containers` 0: each function's handler imported here, one invocation at a time (one warm container in
    this process: tests). N > 0: each function gets a ContainerPool of up to N processes (or its
    ReservedConcurrentExecutions, resolved by `resolve`, if smaller), started on demand."""
    routes = {}
    reserved = reserved_concurrency(template, resolve)
    for spec in function_specs(template, root).values():
        if not spec.http_routes:
            continue
        if containers > 0:
            limit = min(containers, reserved.get(spec.logical_id, containers))
            pool = ContainerPool(ContainerSpec.of(spec), limit)
            target = Target(pool.handler, spec.logical_id, spec.timeout_s, spec.memory_mb, pool=pool)
        else:
            target = Target(load_handler(spec), spec.logical_id, spec.timeout_s, spec.memory_mb)
        routes.update(dict.fromkeys(spec.http_routes, target))
    return routes


def reserved_concurrency(template: Mapping[str, Any], resolve: Callable[[Any], Any]) -> dict[str, int]:
    """{logical id: n} for the functions whose ReservedConcurrentExecutions resolves to a number: Lambda never
    runs more containers of them at once (template.yaml: NotifyReservedConcurrency, 0 = none)."""
    reserved = {}
    for lid, resource in template.get("Resources", {}).items():
        value = (resource.get("Properties") or {}).get("ReservedConcurrentExecutions")
        if value is None or resource.get("Type") != "AWS::Serverless::Function":
            continue
        resolved = resolve({"value": value}).get("value")  # AWS::NoValue: the key is gone
        if isinstance(resolved, int | str) and str(resolved).isdigit() and int(resolved) > 0:
            reserved[lid] = int(resolved)
    return reserved


# ---------------------------------------------------------------------------------------------
# Request → event


def build_event(request: _Request, route: Route, path_parameters: dict[str, str]) -> dict[str, Any]:
    """An API Gateway HTTP API payload format 2.0 event."""
    now = time.time()
    request_id = base64.b32encode(uuid.uuid4().bytes[:10]).decode().rstrip("=")
    headers = {name: value for name, value in request.headers.items() if name != "cookie"}
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route.key,
        "rawPath": request.path,
        "rawQueryString": request.query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": LOCAL_API_ID,
            "domainName": request.headers.get("host", "127.0.0.1"),
            "domainPrefix": request.headers.get("host", "127.0.0.1").split(".")[0],
            "http": {
                "method": request.method,
                "path": request.path,
                "protocol": request.protocol,
                "sourceIp": request.source_ip,
                "userAgent": request.headers.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": route.key,
            "stage": "$default",
            "time": datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now * 1000),
        },
        "isBase64Encoded": False,
    }
    if "cookie" in request.headers:
        event["cookies"] = [c.strip() for c in request.headers["cookie"].split(";") if c.strip()]
    if request.query:
        event["queryStringParameters"] = _query_parameters(request.query)
    if path_parameters:
        event["pathParameters"] = path_parameters
    if request.body:
        event["body"], event["isBase64Encoded"] = encode_body(request.body, headers.get("content-type", ""))
    return event


def _query_parameters(query: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        params[name] = f"{params[name]},{value}" if name in params else value
    return params


def encode_body(body: bytes, content_type: str) -> tuple[str, bool]:
    """Text content types that are valid UTF-8 pass as text; everything else is base64."""
    if any(marker in content_type.lower() for marker in TEXT_CONTENT_TYPES):
        try:
            return body.decode("utf-8"), False
        except UnicodeDecodeError:
            log.debug("body declared %s is not UTF-8: sending it base64-encoded", content_type)
    return base64.b64encode(body).decode("ascii"), True


# ---------------------------------------------------------------------------------------------
# Result → response


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    cookies: list[str] = field(default_factory=list)


API_REFERENCE_ROUTE = "GET /openapi.json"


def api_reference(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """GET /openapi.json on the local API: the merchant API's OpenAPI 3.1 document, built from the models the
    orders and refunds functions use (the same text as the committed docs/openapi.json; unsigned, as a
    reference is). Not a route of the deployed API."""
    from tally.api.openapi import document_text

    return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": document_text()}


def json_reply(status: int, message: str) -> Reply:
    return Reply(status, {"content-type": "application/json"}, json.dumps({"message": message}).encode())


def reply_from_result(result: Any) -> Reply:
    """Payload 2.0 response rules: a dict with statusCode is used as is; anything else is JSON 200."""
    if not (isinstance(result, dict) and "statusCode" in result):
        body = result if isinstance(result, str) else json.dumps(result)
        return Reply(200, {"content-type": "application/json"}, body.encode("utf-8"))
    body = result.get("body") or ""
    if result.get("isBase64Encoded"):
        raw = base64.b64decode(body, validate=True)
    else:
        raw = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
    headers = {str(k).lower(): str(v) for k, v in (result.get("headers") or {}).items()}
    return Reply(int(result["statusCode"]), headers, raw, list(result.get("cookies") or []))


# ---------------------------------------------------------------------------------------------
# The server


@dataclass
class _Request:
    method: str
    path: str
    query: str
    protocol: str
    source_ip: str
    headers: dict[str, str]
    body: bytes = b""


class BodyTooLarge(Exception):
    pass


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = (
        True  # kept-alive clients get the body at once (tally_local/simulator/_server.py)
    )
    server: _Server

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _serve(self) -> None:
        started = time.monotonic()
        try:
            request = self._read_request()
        except BodyTooLarge:
            self.close_connection = True  # the unread body must not be parsed as the next request
            self._send(json_reply(413, "Request Entity Too Large"))
            return
        except ValueError:  # a malformed Content-Length or chunk size
            self.close_connection = True
            self._send(json_reply(400, "Bad Request"))
            return
        with self.server.front_door.ack_first.request():
            reply = self.server.front_door.dispatch(request)
            self._send(reply)
        log.info(
            "%s %s → %d (%.0f ms)",
            request.method,
            self.path,
            reply.status,
            (time.monotonic() - started) * 1000,
        )

    def _read_request(self) -> _Request:
        url = urlsplit(self.path)
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]},{value}" if key in headers else value
        return _Request(
            method=self.command,
            path=url.path,
            query=url.query,
            protocol=self.request_version,
            source_ip=self.client_address[0],
            headers=headers,
            body=self._read_body(headers),
        )

    def _read_body(self, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return self._read_chunked()
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            raise BodyTooLarge
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    continue  # trailers
                return bytes(body)
            if len(body) + size > MAX_BODY_BYTES:
                raise BodyTooLarge
            body += self.rfile.read(size)
            self.rfile.readline()

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            if name not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        for cookie in reply.cookies:
            self.send_header("set-cookie", cookie)
        self.send_header("apigw-requestid", uuid.uuid4().hex[:16])
        self.send_header("content-length", str(len(reply.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.debug("frontdoor: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: a burst of senders got connection resets (issue #20)
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], front_door: FrontDoor):
        self.front_door = front_door
        super().__init__(address, _RequestHandler)


class FrontDoor:
    """`FrontDoor({"POST /orders": handler_or_target, ...}, port=0)`; `.start()`, `.url`, `.stop()`.

    `authorizers` ({routeKey: JwtAuthorizer}) puts API Gateway's JWT check in front of those routes."""

    def __init__(
        self,
        routes: Mapping[str, Handler | Target],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        authorizers: Mapping[str, JwtAuthorizer | IamAuthorizer] | None = None,
        ack_first: AckFirst | None = None,
    ):
        self.routes = [Route.parse(key, _as_target(key, value)) for key, value in routes.items()]
        # counts the requests in flight; pumps that share it give way to them (tally_local/ackfirst.py)
        self.ack_first = ack_first if ack_first is not None else AckFirst()
        self.authorizers = dict(authorizers or {})
        self._host, self._port = host, port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("FrontDoor is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self, *, serve: bool = True) -> FrontDoor:
        """Bind (OSError if the port is taken) and, unless `serve` is False, serve in a background thread. Bound
        and not yet serving, the port takes connections into its backlog and answers them once `serve()` runs:
        a client that polls the port while the stack is still being set up waits instead of being answered by a
        stack without its merchants."""
        self._server = _Server((self._host, self._port), self)
        if serve:
            self.serve()
        return self

    def serve(self) -> None:
        if self._server is None:
            raise RuntimeError("FrontDoor is not started")
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, name="frontdoor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            if self._thread is not None:  # shutdown() waits for a serve_forever that never ran otherwise
                self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None
        for target in self._targets():
            target.stop()  # no container outlives the front door

    def container_pids(self, function_name: str | None = None) -> list[int]:
        """The process ids of the functions' (or one function's) warm containers; none when the handlers
        run in this process."""
        return sorted(
            pid
            for target in self._targets()
            if target.pool is not None and function_name in (None, target.function_name)
            for pid in target.pool.pids
        )

    def warm(self) -> None:
        """One container per function started in the background (the stack calls it once its environment is
        complete: a container gets the environment of the moment it starts)."""
        for target in self._targets():
            target.warm()

    def _targets(self) -> list[Target]:
        return list({id(route.target): route.target for route in self.routes}.values())

    def dispatch(self, request: _Request) -> Reply:
        found = self._find(request.method, request.path)
        if found is None:
            return json_reply(404, "Not Found")
        route, path_parameters = found
        event = build_event(request, route, path_parameters)
        denied = _authorize(self.authorizers.get(route.key), request, event)
        if denied is not None:
            return denied
        try:
            return reply_from_result(route.target.invoke(event))
        except (
            ContainerCrashed
        ) as crash:  # the function's process died: API Gateway's 502, a new one next time
            log.error("%s: container crashed: %s", route.target.function_name, crash)
            return json_reply(502, "Bad Gateway")
        except Exception:  # noqa: BLE001 - a handler failure or a malformed result is a 500, as on API Gateway
            log.error("%s raised:\n%s", route.target.function_name, traceback.format_exc())
            return json_reply(500, "Internal Server Error")

    def _find(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The most specific matching route: $default last, exact method over ANY, fewer parameters first."""
        candidates = []
        for route in self.routes:
            params = route.match(method, path)
            if params is not None:
                rank = (route.key == "$default", route.method == "ANY", len(params))
                candidates.append((rank, route, params))
        if not candidates:
            return None
        _, route, params = min(candidates, key=lambda candidate: candidate[0])
        return route, params


# ---------------------------------------------------------------------------------------------
# The JWT authorizer (the console's Cognito ID tokens), checked as API Gateway checks it


@dataclass
class JwtAuthorizer:
    """What an HttpApi JWT authorizer does before the function runs: the token from the identity source
    (`Authorization`, an optional `Bearer ` prefix), RS256 signature by a key of the issuer's JWKS (by kid),
    `iss` equal to the issuer, `aud` (or an access token's `client_id`) among the audiences, `exp` in the
    future, `nbf`/`iat` not in the future. A pass puts the claims, as strings, in
    requestContext.authorizer.jwt.claims; a failure is 401 `{"message":"Unauthorized"}`, no function call.
    Locally the JWKS comes from moto (`{endpoint}/{pool id}/.well-known/jwks.json`, the issuer's path)."""

    name: str
    issuer: str
    audience: tuple[str, ...]
    jwks_url: str
    header: str = "authorization"
    clock: Callable[[], float] = time.time
    _keys: dict[str, Any] = field(default_factory=dict, repr=False)

    def claims(self, headers: Mapping[str, str]) -> dict[str, Any] | None:
        raw = (headers.get(self.header) or "").strip()
        token = raw[7:].strip() if raw[:7].lower() == "bearer " else raw
        try:
            head_b64, body_b64, sig_b64 = token.split(".")
            head = json.loads(_b64url(head_b64))
            claims = json.loads(_b64url(body_b64))
            signature = _b64url(sig_b64)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(head, dict) or not isinstance(claims, dict) or head.get("alg") != "RS256":
            return None
        key = self._key(str(head.get("kid", "")))
        if key is None or not _rs256_ok(key, f"{head_b64}.{body_b64}".encode("ascii"), signature):
            return None
        now = self.clock()
        audience = claims.get("aud") if "aud" in claims else claims.get("client_id")
        audiences = audience if isinstance(audience, list) else [audience]
        checks = (
            claims.get("iss") == self.issuer,
            any(a in self.audience for a in audiences),
            _number(claims.get("exp"), 0) > now,
            _number(claims.get("nbf"), 0) <= now + 1,
            _number(claims.get("iat"), 0) <= now + 1,
        )
        return claims if all(checks) else None

    def _key(self, kid: str) -> Any:
        if kid not in self._keys:
            self._keys.update(_fetch_jwks(self.jwks_url))
        return self._keys.get(kid)


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _rs256_ok(key: Any, signed: bytes, signature: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    try:
        key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def _fetch_jwks(url: str) -> dict[str, Any]:
    import urllib.request

    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 only
    with opener.open(url, timeout=10) as answer:
        document = json.loads(answer.read())
    keys = {}
    for jwk in document.get("keys", []):
        if jwk.get("kty") == "RSA":
            numbers = RSAPublicNumbers(
                int.from_bytes(_b64url(jwk["e"]), "big"), int.from_bytes(_b64url(jwk["n"]), "big")
            )
            keys[str(jwk.get("kid", ""))] = numbers.public_key()
    return keys


def gateway_claims(claims: Mapping[str, Any]) -> dict[str, str]:
    """Claims as an HTTP API hands them to the function: every value a string, a list as "[a b]"."""
    out = {}
    for name, value in claims.items():
        if isinstance(value, list):
            out[name] = "[" + " ".join(str(item) for item in value) + "]"
        else:
            out[name] = str(value)
    return out


def _authorize(
    authorizer: JwtAuthorizer | IamAuthorizer | None, request: _Request, event: dict[str, Any]
) -> Reply | None:
    if authorizer is None:
        return None
    if isinstance(
        authorizer, IamAuthorizer
    ):  # AWS_IAM: SigV4 by a known key, else 403 (tally_local/sigv4.py)
        verified = authorizer.authorize(
            request.method, request.path, request.query, request.headers, request.body
        )
        if verified is None:
            return json_reply(403, "Forbidden")
        event["requestContext"]["authorizer"] = verified
        return None
    claims = authorizer.claims(request.headers)
    if claims is None:
        return json_reply(401, "Unauthorized")
    event["requestContext"]["authorizer"] = {"jwt": {"claims": gateway_claims(claims), "scopes": None}}
    return None


def authorizers_from_template(
    template: Mapping[str, Any],
    resolve: Callable[[Any], Any],
    endpoint_url: str,
    iam: IamAuthorizer | None = None,
) -> dict[str, JwtAuthorizer | IamAuthorizer]:
    """{routeKey: authorizer} for every HttpApi route whose Auth.Authorizer names a JWT authorizer of
    HttpApi (resolved against what the embedded stack created: the pool id, the client id), and, given `iam`,
    every route whose Authorizer is AWS_IAM (SigV4, checked by `iam`)."""
    resources = template.get("Resources", {})
    configured: dict[str, JwtAuthorizer | IamAuthorizer] = {}
    if iam is not None:
        configured["AWS_IAM"] = iam
    for resource in resources.values():
        if resource.get("Type") != "AWS::Serverless::HttpApi":
            continue
        for name, spec in (
            ((resource.get("Properties") or {}).get("Auth") or {}).get("Authorizers", {}).items()
        ):
            jwt = spec.get("JwtConfiguration")
            if not jwt:
                continue
            issuer = str(resolve(jwt["issuer"]))
            configured[name] = JwtAuthorizer(
                name=name,
                issuer=issuer,
                audience=tuple(str(a) for a in resolve(jwt.get("audience", []))),
                jwks_url=endpoint_url.rstrip("/") + urlsplit(issuer).path + "/.well-known/jwks.json",
                header=str(spec.get("IdentitySource", "$request.header.Authorization"))
                .removeprefix("$request.header.")
                .lower(),
            )
    default = next(
        (
            ((r.get("Properties") or {}).get("Auth") or {}).get("DefaultAuthorizer")
            for r in resources.values()
            if r.get("Type") == "AWS::Serverless::HttpApi"
        ),
        None,
    )
    routes = {}
    for resource in resources.values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in ((resource.get("Properties") or {}).get("Events") or {}).values():
            if event.get("Type") != "HttpApi":
                continue
            props = event.get("Properties") or {}
            chosen = (props.get("Auth") or {}).get("Authorizer", default)
            if chosen in configured:
                routes[f"{str(props.get('Method', 'ANY')).upper()} {props.get('Path')}"] = configured[chosen]
    return routes


def _as_target(key: str, value: Handler | Target) -> Target:
    if isinstance(value, Target):
        return value
    return Target(value, function_name=f"local-{re.sub(r'[^A-Za-z0-9]+', '-', key).strip('-')}")


__all__ = [
    "MAX_BODY_BYTES",
    "FrontDoor",
    "IamAuthorizer",
    "JwtAuthorizer",
    "authorizers_from_template",
    "Target",
    "build_event",
    "encode_body",
    "reply_from_result",
    "routes_from_template",
]
