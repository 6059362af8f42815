"""Fuzz strategies for the Alipay (form-encoded, signature in the body) and WeChat Pay v2 (XML, sign
field) notify routes. Each case starts from a genuine notification built by the channel simulator.

`signed=True` only when the bytes still say exactly what the channel signed (a success ACK is then
allowed after a raw row); every trick that changes meaning - conflicting duplicated keys, a DOCTYPE or
entity, a re-encoded charset, a broken escape - is `signed=False`: the failure ACK, nothing written.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from hypothesis import strategies as st

from tests.fuzz.strategies import BODIES, Case, event

ALIPAY_APP = "2021000000000301"  # configured in the fuzz world (tests/sim/channels.py)
V2_MCH = "1900000201"


def _alipay_params(world: Any) -> dict[str, str]:
    ali = world.sim.alipay
    return ali.sign_notification(
        ali.notification_params(
            ALIPAY_APP,
            "FUZZALI0001",
            100,
            trade_no="2026FUZZ0001",
            notify_id="FUZZ",
            buyer_id="2088",
            seller_id="2088",
        )
    )


@st.composite
def alipay_cases(draw: Any, route: Any, world: Any) -> Case:
    params = _alipay_params(world)
    headers = {"content-type": "application/x-www-form-urlencoded; charset=utf-8"}
    what = draw(
        st.sampled_from(
            [
                "duplicate key",
                "plus vs %20",
                "bad escape",
                "charset",
                "gbk bytes",
                "huge value",
                "drop sign",
                "body",
                "content-type",
                "tamper",
                "empty key",
            ]
        )
    )
    signed = False
    body = urlencode(params).encode()
    if what == "duplicate key":
        key = draw(st.sampled_from(sorted(params)))
        other = draw(st.text(max_size=20).filter(lambda v: v != params[key]))
        pairs = list(params.items()) + [(key, other)]
        if draw(st.booleans()):
            pairs = [(key, other)] + list(params.items())
        body = urlencode(pairs).encode()
    elif (
        what == "plus vs %20"
    ):  # the same bytes two ways: what was signed decodes the same (signed stays valid)
        body = "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in params.items()).encode()
        signed = True
    elif what == "bad escape":
        i = draw(st.integers(0, len(body)))
        body = (
            body[:i] + draw(st.sampled_from([b"%", b"%G1", b"%zz", b"%e4%b8", b"%00", b"%ff%fe"])) + body[i:]
        )
    elif what == "charset":
        fields = dict(
            params,
            charset=draw(
                st.sampled_from(["gbk", "GB2312", "latin-1", "utf-16", "x-unknown", "", "utf-8\x00", "中文"])
            ),
        )
        body = urlencode(fields, encoding="utf-8", errors="replace").encode()
    elif what == "gbk bytes":
        fields = dict(params, subject="模拟商品")
        body = urlencode(fields, encoding="gbk").encode()
    elif what == "huge value":
        key = draw(st.sampled_from(["subject", "total_amount", "out_trade_no", "sign", "trade_no"]))
        body = urlencode(dict(params, **{key: "9" * draw(st.integers(1_000, 300_000))})).encode()
    elif what == "drop sign":
        dropped = draw(st.sets(st.sampled_from(["sign", "sign_type"]), min_size=1))
        body = urlencode({k: v for k, v in params.items() if k not in dropped}).encode()
        signed = (
            "sign" not in dropped
        )  # sign_type is not signed and defaults to RSA2: still the channel's bytes
    elif what == "body":
        body = draw(BODIES)
    elif what == "content-type":
        headers = draw(
            st.sampled_from(
                [
                    {},
                    {"content-type": "application/json"},
                    {"content-type": "text/xml"},
                    {"content-type": "application/x-www-form-urlencoded; charset=gbk"},
                ]
            )
        )
        signed = True  # the bytes are the channel's own: the header does not change what was signed
    elif what == "tamper":
        body = urlencode(
            dict(params, total_amount=draw(st.sampled_from(["0.01", "1e2", "-1", "NaN", "１００"])))
        ).encode()
    else:
        body = body + b"&=x&&=&%3D=%3D"
        signed = True  # empty pairs carry nothing the signature covers... but a strict parser may refuse
    return Case(event(route, ALIPAY_APP, headers, body, b64=draw(st.booleans())), signed, f"alipay {what}")


def _v2_body(world: Any, **extra: str) -> tuple[bytes, dict[str, str]]:
    v2 = world.sim.wechatpay_v2
    fields = v2.payment_params(
        V2_MCH,
        "FUZZV20001",
        100,
        transaction_id="4200009999999999999999999999",
        nonce_str="FUZZ",
        openid="oFUZZ",
        **extra,
    )
    return v2.build_notification(fields), fields


BOMB = (
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + b"".join(
        b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
        for i in range(1, 10)
    )
    + b"]><xml><return_code>&lol9;</return_code></xml>"
)
XXE = (
    b'<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    b"<xml><return_code>&xxe;</return_code></xml>"
)
EXTERNAL_DTD = b'<?xml version="1.0"?><!DOCTYPE xml SYSTEM "http://127.0.0.1:9/evil.dtd"><xml></xml>'
PARAM_ENTITY = (
    b'<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY % p SYSTEM "http://127.0.0.1:9/x">%p;]><xml></xml>'
)


@st.composite
def v2_cases(draw: Any, route: Any, world: Any) -> Case:
    body, fields = _v2_body(world)
    headers = {"content-type": "text/xml"}
    what = draw(
        st.sampled_from(
            [
                "bomb",
                "xxe",
                "external dtd",
                "parameter entity",
                "doctype prefix",
                "cdata",
                "deep",
                "non-utf8",
                "tamper",
                "body",
                "huge value",
                "duplicate element",
                "genuine odd values",
            ]
        )
    )
    signed = False
    if what == "bomb":
        body = BOMB
    elif what == "xxe":
        body = XXE
    elif what == "external dtd":
        body = EXTERNAL_DTD
    elif what == "parameter entity":
        body = PARAM_ENTITY
    elif what == "doctype prefix":  # a genuinely signed body behind a DOCTYPE: refused all the same
        body = b'<?xml version="1.0"?><!DOCTYPE xml [<!ENTITY a "1">]>' + body
    elif what == "cdata":
        trick = draw(
            st.sampled_from(
                [
                    b"<total_fee><![CDATA[1]]><![CDATA[",
                    b"<total_fee><![CDATA[]]>]]><![CDATA[",
                    b"<total_fee>&#49;<![CDATA[",
                    b"<total_fee><![CDATA[<![CDATA[",
                    b"<total_fee><!-- c --><![CDATA[",
                ]
            )
        )
        body = body.replace(b"<total_fee><![CDATA[", trick)
        signed = trick.endswith(
            b"<!-- c --><![CDATA["
        )  # a comment changes no value: the signature still holds
    elif what == "deep":
        n = draw(st.integers(100, 100_000))
        body = b"<xml>" + b"<a>" * n + b"</a>" * n + b"</xml>"
    elif what == "non-utf8":
        variant = draw(
            st.sampled_from(
                [
                    body.decode().encode("utf-16"),
                    b"\xff\xfe" + body,
                    body.replace(b"OTHERS", "模拟".encode("gbk")),
                    b'<?xml version="1.0" encoding="GBK"?>' + body,
                    b'<?xml version="1.0" encoding="x-nope"?>' + body,
                ]
            )
        )
        # An XML declaration over ASCII bytes, or the same document re-encoded in UTF-16 (BOM-marked, as XML
        # allows), changes no value: the signature still holds and accepting it is right. A byte that changes
        # a value (GBK bytes read as UTF-8, a stray BOM over UTF-8 bytes) must not verify.
        signed = variant.startswith(b"<?xml") or variant == body.decode().encode("utf-16")
        body = variant
    elif what == "tamper":
        body = body.replace(b"<total_fee><![CDATA[100", b"<total_fee><![CDATA[1")
    elif what == "body":
        body = draw(BODIES)
    elif what == "huge value":
        if draw(st.booleans()):
            body, _ = _v2_body(world, attach="9" * draw(st.integers(1_000, 300_000)))
            signed = True
        else:
            body = body.replace(b"<sign><![CDATA[", b"<sign><![CDATA[" + b"A" * 200_000)
    elif what == "duplicate element":
        body = body.replace(b"</xml>", b"<total_fee><![CDATA[1]]></total_fee></xml>")
    else:  # genuine, re-signed: values with CDATA terminators, markup, unicode (xml_of escapes them)
        body, _ = _v2_body(
            world, attach=draw(st.sampled_from(["]]>", "<a>&amp;</a>", "中文\u2028", "]]]]><![CDATA[>"]))
        )
        signed = True
    return Case(event(route, V2_MCH, headers, body, b64=draw(st.booleans())), signed, f"v2 {what}")
