"""WeChat Pay v2 XML (issue #15.3, R40): DTDs and entities are refused in any encoding, after a cheap size and
encoding check, before any signature work."""

from __future__ import annotations

import time

import pytest
from tally.channels.wechatpay_v2 import wire as wx2

from tests.integration.channel_kit import WeChatV2, ack_kind


def laughs(levels: int = 6, width: int = 10) -> str:
    entities = ['<!ENTITY l0 "' + "lol" * 10 + '">']
    for i in range(1, levels):
        entities.append(f'<!ENTITY l{i} "' + f"&l{i - 1};" * width + '">')
    return "<!DOCTYPE xml [" + "".join(entities) + f"]><xml><return_code>&l{levels - 1};</return_code></xml>"


def test_r40_utf16_billion_laughs_is_refused_before_expansion(h, sim):
    """Issue #15.3: declared and encoded UTF-16, the body passed the byte-level DOCTYPE guard and its entities
    were expanded (~8 MB of work per 2.6 KB request) before the signature was checked."""
    v2 = WeChatV2(h)
    mch = v2.setup()
    body = ('<?xml version="1.0" encoding="UTF-16"?>' + laughs()).encode("utf-16")
    assert len(body) < 4096
    started = time.perf_counter()
    response = v2.notify(mch, body, {})
    assert ack_kind("wechatpay_v2", response) == "failure" and response["statusCode"] == 400
    assert time.perf_counter() - started < 1.0
    (row,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r["kind"] == "rejected"]
    assert row["cause"] == "unparseable" and h.scan("NOTIFY_RAW_TABLE") == []


@pytest.mark.parametrize(
    "body",
    [
        ('<?xml version="1.0" encoding="UTF-16"?>' + laughs()).encode("utf-16"),
        ('<?xml version="1.0" encoding="UTF-16BE"?>' + laughs()).encode("utf-16-be"),
        laughs().encode("utf-16-le"),
        ('<?xml version="1.0" encoding="UTF-32"?>' + laughs()).encode("utf-32"),
        laughs().encode(),
        b'<?xml version="1.0" encoding="GBK"?><xml><a>1</a></xml>',
        b"<xml><a>\xff</a></xml>",
        b"<xml>" + b"<a>1</a>" * 10_000 + b"</xml>",  # 80 KB: over the size check
        b'<!--x--><!DOCTYPE xml SYSTEM "file:///etc/passwd"><xml><a>1</a></xml>',
    ],
)
def test_r40_parse_xml_refuses_dtds_entities_and_other_encodings(body):
    with pytest.raises(wx2.XmlError):
        wx2.parse_xml(body)


def test_r40_a_plain_utf8_v2_body_still_parses():
    assert wx2.parse_xml(
        '<?xml version="1.0" encoding="UTF-8"?><xml><a><![CDATA[支付]]></a></xml>'.encode()
    ) == {"a": "支付"}
    assert wx2.parse_xml(b"\xef\xbb\xbf<xml><a>1</a></xml>") == {"a": "1"}
