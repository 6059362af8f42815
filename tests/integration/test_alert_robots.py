"""Each chat robot's format and signature (docs/alerts.md), over real HTTP to the simulator's chat sink:

- the platform's own documented example message, signed with the platform's documented recipe (written out
  here as the documentation gives it), is accepted by the sink, so the sink checks what the platform checks;
- Tally's signatures are that recipe, byte for byte, and Tally's cards are accepted by the same sink;
- a wrong secret or an hour-old timestamp is refused, and Tally reads the refusal as a failed delivery.
R38: a failure a person must hear about reaches them; a card that does not arrive is never taken as sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
import urllib.request

import pytest
from tally.service.alerts import (
    DeliveryError,
    accepted,
    card,
    dingtalk_sign,
    feishu_sign,
    http_post,
    request_for,
)

SECRET = "SEC000000000000000000000000000000000000000000000000000000000000a"

# The platforms' documented example messages (their robot documentation's request examples).
DOCUMENTED = {
    "wecom": {"msgtype": "text", "text": {"content": "广州今日天气：29度，大部分多云，降雨概率：60%"}},
    "dingtalk": {"msgtype": "text", "text": {"content": "我就是我, 是不一样的烟火"}},
    "feishu": {"msg_type": "text", "content": {"text": "request example"}},
    "slack": {"text": "Hello, world."},
}


def documented_dingtalk_url(url: str, secret: str, timestamp: str | None = None) -> str:
    """DingTalk's documented Python: string_to_sign = '{}\\n{}'.format(timestamp, secret); hmac(secret_enc,
    string_to_sign_enc, sha256); sign = urllib.parse.quote_plus(base64.b64encode(hmac_code))."""
    timestamp = str(round(time.time() * 1000)) if timestamp is None else timestamp
    string_to_sign = f"{timestamp}\n{secret}"
    hmac_code = hmac.new(
        secret.encode("utf-8"), string_to_sign.encode("utf-8"), digestmod=hashlib.sha256
    ).digest()
    sign = urllib.parse.quote_plus(base64.b64encode(hmac_code))
    return f"{url}&timestamp={timestamp}&sign={sign}"


def documented_feishu_body(message: dict, secret: str, timestamp: int | None = None) -> dict:
    """Feishu's documented Python: string_to_sign = '{}\\n{}'.format(timestamp, secret); hmac_code =
    hmac.new(string_to_sign.encode("utf-8"), digestmod=hashlib.sha256).digest(); sign = base64 of it."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    string_to_sign = f"{timestamp}\n{secret}"
    hmac_code = hmac.new(string_to_sign.encode("utf-8"), digestmod=hashlib.sha256).digest()
    return {"timestamp": str(timestamp), "sign": base64.b64encode(hmac_code).decode("utf-8"), **message}


def post(url: str, document: dict) -> tuple[int, bytes]:
    return http_post(url, json.dumps(document, ensure_ascii=False).encode())


INCIDENT = {
    "id": "inc-rejected-1900000109-a1b2c3",
    "kind": "rejected",
    "channel": "wechatpay",
    "merchant": "1900000109",
    "cause": "signature does not verify with the configured platform key",
    "origin": "tenant",
    "count": 200,
    "case_count": 1,
    "amount_cent": 123456,
    "amount_known": True,
    "rate_per_h": 200,
}


@pytest.mark.parametrize("kind", ["wecom", "dingtalk", "feishu", "slack"])
def test_r38_each_robot_takes_its_platforms_documented_example_signed_by_the_documented_recipe(sim, kind):
    signed = kind in ("dingtalk", "feishu")
    robot = sim.chat.robot(kind, secret=SECRET if signed else "")
    url, message = robot["url"], DOCUMENTED[kind]
    if kind == "dingtalk":
        url = documented_dingtalk_url(url, SECRET)
    if kind == "feishu":
        message = documented_feishu_body(message, SECRET)
    status, answer = post(url, message)
    accepted(kind, status, answer)  # raises unless the platform's success answer
    (got,) = sim.chat.cards(robot["name"])
    assert got["message"] == message


def test_r38_tallys_signatures_are_the_documented_recipes():
    stamp_ms, stamp_s = "1796000000123", 1796000000
    documented = documented_dingtalk_url("x?access_token=t", SECRET, stamp_ms).rsplit("&sign=", 1)[1]
    assert dingtalk_sign(SECRET, stamp_ms) == documented
    assert feishu_sign(SECRET, str(stamp_s)) == documented_feishu_body({}, SECRET, stamp_s)["sign"]


@pytest.mark.parametrize("kind", ["wecom", "dingtalk", "feishu", "slack"])
@pytest.mark.parametrize("lang", ["zh-CN", "en"])
def test_r38_tallys_card_is_accepted_and_says_what_happened_merchant_count_yuan_and_link(sim, kind, lang):
    robot = sim.chat.robot(kind, secret=SECRET if kind in ("dingtalk", "feishu") else "")
    the_card = card("opened", INCIDENT, lang, "https://console.example/console")
    url, body = request_for({**robot, "lang": lang}, the_card, time.time())
    accepted(kind, *http_post(url, body))
    (got,) = sim.chat.cards(robot["name"])
    text = json.dumps(got["message"], ensure_ascii=False)
    assert "1900000109" in text and "200" in text and "1234.56" in text
    assert "https://console.example/console/incidents?id=inc-rejected-1900000109-a1b2c3" in text
    assert ("新事件" in text) if lang == "zh-CN" else ("New incident" in text)
    # what happened in the team's language, as the queue words it; the engineers' grouping cause on its own line
    assert ("通知被拒收" if lang == "zh-CN" else "Notifications refused") in the_card["sentence"]
    assert INCIDENT["cause"] not in the_card["sentence"] and INCIDENT["cause"] in the_card["text"]


@pytest.mark.parametrize("kind", ["dingtalk", "feishu"])
def test_r38_a_wrong_secret_or_an_hour_old_timestamp_is_refused_and_read_as_not_delivered(sim, kind):
    robot = sim.chat.robot(kind, secret=SECRET)
    the_card = card("opened", INCIDENT, "en", "")
    for destination, at in (
        ({**robot, "secret": SECRET[:-1] + "b"}, time.time()),
        (robot, time.time() - 3700),
    ):
        url, body = request_for(destination, the_card, at)
        status, answer = http_post(url, body)
        with pytest.raises(DeliveryError):
            accepted(kind, status, answer)
    assert sim.chat.cards(robot["name"]) == []
    refused = sim.chat.cards(robot["name"], accepted=False)
    assert [r["why"] for r in refused] == ["sign not match", "timestamp missing or not within one hour"]


def test_r38_an_unknown_webhook_and_a_malformed_card_are_refused(sim):
    robot = sim.chat.robot("wecom")
    with pytest.raises(DeliveryError):
        accepted("wecom", *post(robot["url"].replace("key=", "key=x"), DOCUMENTED["wecom"]))
    with pytest.raises(DeliveryError):
        accepted("wecom", *post(robot["url"], {"msgtype": "markdown", "markdown": {}}))
    slack = sim.chat.robot("slack")
    with pytest.raises(DeliveryError):
        accepted("slack", *post(slack["url"], {"blocks": []}))


def test_r38_a_robot_is_made_over_http_for_make_run_and_the_sink_lists_what_it_got(sim):
    status, answer = post(
        f"{sim.url}/chat/robots", {"kind": "feishu", "secret": SECRET, "name": "made-over-http"}
    )
    robot = json.loads(answer)
    assert status == 200 and robot["url"].startswith(f"{sim.url}/chat/feishu/open-apis/bot/v2/hook/")
    accepted("feishu", *post(robot["url"], documented_feishu_body(DOCUMENTED["feishu"], SECRET)))
    with urllib.request.urlopen(f"{sim.url}/chat/received", timeout=5) as listing:  # noqa: S310 - loopback
        got = [m for m in json.loads(listing.read()) if m["robot"] == "made-over-http"]
    assert [m["accepted"] for m in got] == [True]
    assert post(f"{sim.url}/chat/robots", {"kind": "telegram"})[0] == 400


def test_r38_a_long_chinese_card_fits_wecoms_4096_bytes_and_is_accepted(sim):
    robot = sim.chat.robot("wecom")
    long = {**INCIDENT, "cause": "签名验证失败" * 30, "context": "事件" * 400}
    url, body = request_for(robot, card("opened", long, "zh-CN", ""), time.time())
    assert len(json.loads(body)["markdown"]["content"].encode()) <= 4096
    accepted("wecom", *http_post(url, body))
