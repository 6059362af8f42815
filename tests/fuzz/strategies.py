"""Hypothesis strategies for the front door, parametrised by route.

A `Route` says how to reach one notify route and how its channel ACKs. `ROUTES` lists them; the
Alipay and WeChat v2 routes are added here as Route entries with their own `signed` builder and ACK
predicates, and every strategy below then fuzzes them too.

A case is one API Gateway payload-2.0 event plus whether its signature is genuinely valid: unsigned
cases must be refused with no write at all; signed cases (the channel really said it) may only be
answered with the failure ACK, or the success ACK after a notify_event row (R5 quarantine) or a raw
row + enqueue (a resource that is in fact usable).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tally_local.lambda_io import route_of
from tally_local.simulator import _crypto as c
from tally_local.simulator.wechatpay_v3 import TESTKEYS_DIR

MCHID = "1900000101"  # configured in the fuzz world
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=40)
)
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@dataclass(frozen=True)
class Case:
    event: dict[str, Any]
    signed: bool  # the signature is valid: the channel itself sent these bytes
    what: str


@dataclass(frozen=True)
class Route:
    name: str
    function: str  # the λ's logical id in template.yaml
    path: Callable[[str], str]
    params: Callable[[str], dict[str, str]]
    header_names: tuple[str, ...]  # the signature headers, for mutation
    required_headers: tuple[str, ...]  # those without which no signature can verify
    is_failure_ack: Callable[[dict[str, Any]], bool]
    is_success_ack: Callable[[dict[str, Any]], bool]
    sign: Callable[[Any, bytes, int], dict[str, str]]  # (world, body, timestamp) -> signed headers
    envelope: Callable[[Any, bytes, str], bytes] | None  # (world, resource plaintext, variant) -> body
    cases: Callable[[Any, Any], Any] | None = None  # a route-specific case strategy (form / XML channels)


# ---------------------------------------------------------------------------------------------- WeChat Pay v3

_PUBKEY_ID = (TESTKEYS_DIR / "pub_key_id.txt").read_text().strip()
_PUBKEY = c.load_private_key((TESTKEYS_DIR / "pubkey_key.pem").read_text())


def _wx_sign(world: Any, body: bytes, timestamp: int) -> dict[str, str]:
    nonce = "FUZZNONCE0123456789ABCDEFGHIJKLM"
    return {
        "Wechatpay-Timestamp": str(timestamp),
        "Wechatpay-Nonce": nonce,
        "Wechatpay-Serial": _PUBKEY_ID,
        "Wechatpay-Signature": c.rsa_sign(_PUBKEY, c.response_message(str(timestamp), nonce, body)),
        "Wechatpay-Signature-Type": "WECHATPAY2-SHA256-RSA2048",
        "Content-Type": "application/json",
    }


def _wx_envelope(world: Any, plaintext: bytes, variant: str) -> bytes:
    headers, body = world.sim.build_notification(
        MCHID,
        plaintext,
        timestamp=int(world.env.clock()),
        apiv3_key=("K" * 32) if variant == "wrong key" else None,
        associated_data="other" if variant == "wrong aad" else "transaction",
    )
    return body


def _wx_failure(response: dict[str, Any]) -> bool:
    if not 400 <= response.get("statusCode", 0) < 500:
        return False
    try:
        body = json.loads(response.get("body") or "")
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("code") == "FAIL" and set(body) == {"code", "message"}


WECHATPAY_V3 = Route(
    name="wechatpay_v3",
    function="NotifyFunction",
    path=lambda mchid: f"/notify/wechatpay/{mchid}",
    params=lambda mchid: {"mchid": mchid},
    header_names=(
        "wechatpay-signature",
        "wechatpay-timestamp",
        "wechatpay-nonce",
        "wechatpay-serial",
        "wechatpay-signature-type",
    ),
    required_headers=("wechatpay-signature", "wechatpay-timestamp", "wechatpay-nonce", "wechatpay-serial"),
    is_failure_ack=_wx_failure,
    is_success_ack=lambda r: r.get("statusCode") in (200, 204),
    sign=_wx_sign,
    envelope=_wx_envelope,
)


def _text_failure(body: str, ctype: str) -> Callable[[dict[str, Any]], bool]:
    def failure(r: dict[str, Any]) -> bool:
        got = str(r.get("body") or "")
        is_ctype = (r.get("headers") or {}).get("content-type") == ctype
        return (
            is_ctype
            and (got == body if ctype == "text/plain" else got.startswith(body))
            and r.get("statusCode", 0) < 500
        )

    return failure


def _form_xml_cases(name: str) -> Callable[[Any, Any], Any]:
    def strategy(route: Any, world: Any) -> Any:
        from tests.fuzz import form_xml

        return (form_xml.alipay_cases if name == "alipay" else form_xml.v2_cases)(route, world)

    return strategy


ALIPAY = Route(
    name="alipay",
    function="NotifyFunction",
    path=lambda m: f"/notify/alipay/{m}",
    params=lambda m: {"app_id": m},
    header_names=("content-type",),
    required_headers=(),
    is_failure_ack=_text_failure("fail", "text/plain"),
    is_success_ack=lambda r: r.get("statusCode") == 200 and r.get("body") == "success",
    sign=lambda world, body, ts: {},
    envelope=None,
    cases=_form_xml_cases("alipay"),
)
WECHATPAY_V2 = Route(
    name="wechatpay_v2",
    function="NotifyFunction",
    path=lambda m: f"/notify/wechatpay-v2/{m}",
    params=lambda m: {"mchid": m},
    header_names=("content-type",),
    required_headers=(),
    is_failure_ack=_text_failure("<xml><return_code><![CDATA[FAIL]]></return_code>", "text/xml"),
    is_success_ack=lambda r: r.get("statusCode") == 200 and "<![CDATA[SUCCESS]]>" in str(r.get("body")),
    sign=lambda world, body, ts: {},
    envelope=None,
    cases=_form_xml_cases("wechatpay_v2"),
)

ROUTES: dict[str, Route] = {"wechatpay_v3": WECHATPAY_V3, "alipay": ALIPAY, "wechatpay_v2": WECHATPAY_V2}


# ---------------------------------------------------------------------------------------------- events


def event(
    route: Route,
    mchid: str,
    headers: dict[str, str] | None,
    body: Any,
    *,
    b64: bool = True,
    raw_path: str | None = None,
) -> dict[str, Any]:
    if isinstance(body, bytes):
        body = base64.b64encode(body).decode() if b64 else body.decode("utf-8", "surrogateescape")
    return {
        "version": "2.0",
        "routeKey": "POST " + route_of(route.path(mchid), route.params(mchid)),
        "rawPath": raw_path or route.path(mchid),
        "rawQueryString": "",
        "headers": None if headers is None else {k.lower(): v for k, v in headers.items()},
        "requestContext": {"http": {"method": "POST", "path": route.path(mchid)}, "stage": "$default"},
        "pathParameters": route.params(mchid),
        "body": body,
        "isBase64Encoded": b64,
    }


def _laughs(encoding: str) -> bytes:
    entities = '<!ENTITY l0 "lollollollol">' + "".join(
        f'<!ENTITY l{i} "' + f"&l{i - 1};" * 10 + '">' for i in range(1, 6)
    )
    text = f'<?xml version="1.0" encoding="{encoding.upper()}"?><!DOCTYPE xml [{entities}]><xml><a>&l5;</a></xml>'
    return text.encode(encoding)


HOSTILE_BODIES = [
    _laughs("utf-16"),  # passed a byte-level DOCTYPE guard, then expanded (issue #15.3)
    _laughs("utf-8"),
    b"\xff\xfe" * 75_000,  # 150 KB non-UTF-8: decoded, past DynamoDB's 400 KB item limit (issue #15.2)
    b'{"amount":{"total":-0,"payer_total":-1}}',
    b"amount_cent=-0.00&receipt_amount=-0.00",
]


def deep(n: int, kind: str) -> bytes:
    return (b'{"a":' * n + b"1" + b"}" * n) if kind == "object" else (b"[" * n + b"]" * n)


BODIES = st.one_of(
    st.binary(max_size=2048),
    st.builds(lambda n, k: deep(n, k), st.integers(100, 200_000), st.sampled_from(["object", "array"])),
    st.builds(lambda n: b"{" + b" " * n + b"}", st.integers(200_000, 400_000)),
    st.builds(lambda v: json.dumps(v).encode(), ANY_JSON),
    st.sampled_from([b"", b"\xff\xfe\x00", b"\xc3\x28", b"null", b"[]", b'{"resource": "x"}', b"\x00" * 64]),
    st.sampled_from(HOSTILE_BODIES),  # issue #15: shapes that once cost a 500 or megabytes of work
)


@st.composite
def unsigned_cases(draw: Any, route: Route, world: Any) -> Case:
    """Start from a genuinely signed callback, then break it: the signature no longer holds (or never did)."""
    body = route.envelope(world, b'{"fuzz": true}', "ok")
    headers = route.sign(world, body, int(world.env.clock()))
    what = draw(
        st.sampled_from(
            [
                "drop headers",
                "duplicate headers",
                "huge header",
                "odd header",
                "body",
                "truncate",
                "flip byte",
                "timestamp",
                "signature",
                "serial",
                "mchid",
            ]
        )
    )
    if what == "drop headers":  # at least one the signature needs (a missing Signature-Type defaults)
        names = draw(
            st.lists(st.sampled_from(route.header_names), min_size=1, unique=True).filter(
                lambda ns: set(ns) & set(route.required_headers)
            )
        )
        for name in names:
            headers = {k: v for k, v in headers.items() if k.lower() != name}
        if draw(st.booleans()):
            body = draw(BODIES)
    elif what == "duplicate headers":  # API Gateway joins repeated headers with commas
        for name in draw(st.lists(st.sampled_from(route.header_names), min_size=1, unique=True)):
            key = next((k for k in headers if k.lower() == name), name)
            headers[key] = f"{headers.get(key, '')},{draw(st.text(max_size=60))}"
    elif what == "huge header":
        name = draw(st.sampled_from(route.header_names))
        headers[name] = draw(st.sampled_from(["A", "9", "=", "中"])) * draw(st.integers(1_000, 120_000))
    elif what == "odd header":
        name = draw(st.sampled_from(route.header_names))
        headers[name] = draw(st.text(min_size=1, max_size=300).filter(lambda v: v != headers.get(name)))
    elif what == "body":
        body = draw(BODIES)
    elif what == "truncate":
        body = body[: draw(st.integers(0, max(0, len(body) - 1)))]
    elif what == "flip byte":
        i = draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([body[i] ^ draw(st.integers(1, 255))]) + body[i + 1 :]
    elif what == "timestamp":
        stale = int(world.env.clock()) + draw(st.sampled_from([-301, -300, 300, 301, -(10**9), 10**12]))
        headers = route.sign(world, body, stale)  # a real signature, outside the window: a replay
        if draw(st.booleans()):
            headers["Wechatpay-Timestamp"] = draw(st.text(max_size=30))
    elif what == "signature":  # wrong lengths, not base64, another key
        sig = draw(
            st.one_of(
                st.binary(max_size=600).map(lambda b: base64.b64encode(b).decode()),
                st.text(max_size=400),
                st.just("WECHATPAY/SIGNTEST/" + "A" * 340),
            )
        )
        headers["Wechatpay-Signature"] = sig
    elif what == "serial":
        headers["Wechatpay-Serial"] = draw(
            st.one_of(
                st.text(max_size=100),
                st.just("PUB_KEY_ID_" + "0" * 200),
                st.just(_PUBKEY_ID[:-1]),
                st.just(_PUBKEY_ID + "0"),
            )
        )
    elif what == "mchid":
        mchid = draw(st.one_of(st.text(max_size=80), st.just(""), st.just("1900000199"), st.just("9" * 5000)))
        return Case(event(route, mchid, headers, body), False, what)
    encoding = draw(st.sampled_from(["b64", "b64", "text", "bad b64", "surrogate", "none"]))
    if encoding == "bad b64":
        ev = event(route, MCHID, headers, body)
        ev["body"] = draw(st.sampled_from(["***", "=", "YQ", "not base64!", "\x00", "中文"]))
        return Case(ev, False, f"{what}, bad base64")
    if encoding == "surrogate":
        ev = event(route, MCHID, headers, body, b64=False)
        ev["body"] = str(ev["body"]) + "\udcff"
        return Case(ev, False, f"{what}, lone surrogate")
    if encoding == "none":
        ev = event(route, MCHID, headers, body)
        ev["body"] = draw(st.sampled_from([None, 0, 12, [], {}, True]))
        ev["headers"] = draw(st.sampled_from([ev["headers"], None, {}]))
        return Case(ev, False, f"{what}, odd event")
    return Case(event(route, MCHID, headers, body, b64=encoding == "b64"), False, f"{what}, {encoding}")


def _valid_resource() -> dict[str, Any]:
    return {
        "mchid": MCHID,
        "appid": "wxd678efh567hg6787",
        "out_trade_no": "FUZZORDER001",
        "transaction_id": "4200000000000000000000000001",
        "trade_type": "NATIVE",
        "trade_state": "SUCCESS",
        "trade_state_desc": "ok",
        "bank_type": "OTHERS",
        "attach": "",
        "success_time": "2026-01-01T08:00:00+08:00",
        "payer": {"openid": "oFUZZ"},
        "amount": {"total": 100, "payer_total": 100, "currency": "CNY", "payer_currency": "CNY"},
    }


WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
ESSENTIAL = (
    "mchid",
    "out_trade_no",
    "trade_state",
    "amount",
    "amount.total",
    "amount.payer_total",
    "amount.currency",
    "transaction_id",
    "success_time",
    "sp_mchid",
    "sub_mchid",
)


@st.composite
def signed_cases(draw: Any, route: Route, world: Any) -> Case:
    """Genuinely signed by the channel, with a garbage resource or a garbage envelope (R5)."""
    what = draw(
        st.sampled_from(["resource wrong types", "resource bytes", "wrong key", "wrong aad", "envelope"])
    )
    if what == "resource wrong types":
        resource = _valid_resource()
        for path in draw(st.lists(st.sampled_from(ESSENTIAL), min_size=1, max_size=4, unique=True)):
            target, _, leaf = path.rpartition(".")
            holder = resource.get(target) if target else resource
            if isinstance(holder, dict):
                holder[leaf] = draw(WRONG)
        plaintext = json.dumps(resource, allow_nan=True).encode()
        body = route.envelope(world, plaintext, "ok")
    elif what == "resource bytes":
        body = route.envelope(world, draw(BODIES.filter(lambda b: len(b) < 300_000)), "ok")
    elif what in ("wrong key", "wrong aad"):
        body = route.envelope(world, json.dumps(_valid_resource()).encode(), what)
    else:  # the envelope itself, any shape, signed
        envelope = json.loads(route.envelope(world, b"{}", "ok"))
        mutate = draw(
            st.sampled_from(
                [
                    "resource",
                    "resource.nonce",
                    "resource.associated_data",
                    "resource.ciphertext",
                    "resource.algorithm",
                    "id",
                    "whole",
                ]
            )
        )
        if mutate == "whole":
            body = draw(BODIES.filter(lambda b: len(b) < 200_000))
        else:
            target, _, leaf = mutate.rpartition(".")
            holder = envelope.get(target) if target else envelope
            holder[leaf] = draw(WRONG)
            body = json.dumps(envelope, allow_nan=True).encode()
        what = f"envelope {mutate}"
    headers = route.sign(world, body, int(world.env.clock()))
    return Case(event(route, MCHID, headers, body), True, what)


def cases(route: Route, world: Any) -> st.SearchStrategy[Case]:
    if route.cases is not None:
        return route.cases(route, world)
    return st.one_of(unsigned_cases(route, world), signed_cases(route, world))
