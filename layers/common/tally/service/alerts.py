"""Cards in the team's chat: WeCom (企业微信), DingTalk (钉钉), Feishu (飞书) and Slack group robots (docs/alerts.md).

An incident change (service/incidents.py: opened, escalated, resolved) becomes one card per configured
destination, in that robot's documented message format and signing scheme:

| kind | request | signature | accepted when |
|---|---|---|---|
| wecom | POST the webhook (`…/cgi-bin/webhook/send?key=…`), `{"msgtype": "markdown", "markdown": {"content"}}` | the key in the URL is the secret | 200 and `errcode` 0 |
| dingtalk | POST the webhook (`…/robot/send?access_token=…`) `&timestamp=<ms>&sign=<s>`, `{"msgtype": "markdown", "markdown": {"title", "text"}}` | s = urlencode(base64(HMAC-SHA256(key=secret, "timestamp\\nsecret"))) | 200 and `errcode` 0 |
| feishu | POST the webhook (`…/bot/v2/hook/…`), `{"timestamp": "<s>", "sign", "msg_type": "interactive", "card"}` | sign = base64(HMAC-SHA256(key="timestamp\\nsecret", empty message)) | 200 and `code` 0 |
| slack | POST the incoming webhook, `{"text", "blocks"}` | the URL is the secret | 200 and body `ok` |

Never once per failure: only changes are sent. A destination can be snoozed (`tally alerts snooze`), and sends
at most `hour_cap` cards an hour; what is not sent is recorded as suppressed. A card that fails is retried
(`attempts`, with a doubling pause) and then becomes a case in the work queue (`alert-delivery`, an alarm
watches AlertDeliveryFailed): a silent pager is the worst silent path. Every card, sent, suppressed or failed,
is one row of the alert log (`tally alerts log`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from typing import Any

from tally import httpclient
from tally.domain.money import format_cents
from tally.i18n import normalise, speaker
from tally.i18n.words import Words
from tally.observability import M, count, logger
from tally.store.alerts import AlertLog, Destinations
from tally.store.tables import iso_now

KINDS = ("wecom", "dingtalk", "feishu", "slack")
LANGS = ("zh-CN", "en")
HOUR_CAP = 20
ATTEMPTS = 3
MAX_BODY = 4000  # characters of card text
WECOM_BYTES = 4096  # WeCom's markdown content limit, in UTF-8 bytes (a Chinese character is three)

CHANGE = {
    "en": {
        "opened": "New incident",
        "escalated": "Incident escalating",
        "resolved": "Incident resolved",
        "test": "Test card",
        "alarm": "Alarm",
    },
    "zh-CN": {
        "opened": "新事件",
        "escalated": "事件升级",
        "resolved": "事件已解决",
        "test": "测试消息",
        "alarm": "告警",
    },
}
ORIGIN = {
    "en": {
        "ours": "our systems: on-call acts",
        "tenant": "a merchant's configuration: the merchant fixes it",
        "money": "money waiting for a person",
    },
    "zh-CN": {
        "ours": "我方系统故障:值班处理",
        "tenant": "商户配置问题:请商户修正",
        "money": "资金待人工处理",
    },
}


RESOLVED_WHY = {  # (zh-CN, en) after "resolved"
    "cleared": ("(待办已处理)", " (its cases were cleared)"),
    "quiet": ("(一小时内无新失败)", " (no new failure for an hour)"),
    "ok": ("(告警已恢复)", " (the alarm is OK again)"),
}


class DeliveryError(Exception):
    """The robot did not take the card: why (status and the platform's answer)."""


# ==================================================================== the card


def card(change: str, incident: dict[str, Any], lang: str, console_url: str) -> dict[str, str]:
    """{"title", "sentence", "text" (markdown lines), "link"}: what happened in one sentence, the merchant, the
    count, the yuan at stake, and a link to the incident in the console."""
    zh = lang == "zh-CN"
    words = CHANGE["zh-CN" if zh else "en"]
    merchant = incident.get("merchant") or "-"
    amount = (
        format_cents(int(incident.get("amount_cent") or 0)) + (" 元" if zh else " yuan")
        if incident.get("amount_known")
        else ("金额未知" if zh else "amount unknown")
    )
    cause = str(incident.get("cause") or incident.get("kind") or "")
    # what happened, as the queue words it for a person; the grouping cause (numbers made N) stays for engineers
    what = (
        Words(speaker(normalise(lang))).case(str(incident.get("kind") or "")).title
        if incident.get("kind")
        else cause
    )
    headline = words[change]
    if change == "resolved" and incident.get("resolved_why") in RESOLVED_WHY:
        headline += RESOLVED_WHY[str(incident["resolved_why"])][0 if zh else 1]
    n, rate = int(incident.get("count") or 0), int(incident.get("rate_per_h") or 0)
    if change == "test":
        sentence = (
            "测试消息:Tally 可以向这个群发送告警。"
            if zh
            else "Test card: Tally can post its alerts to this group."
        )
    elif incident.get("kind") == "alarm":
        state = incident.get("alarm_state") or ("OK" if change == "resolved" else "ALARM")
        sentence = (
            f"{headline}:告警 {cause} 状态 {state}。{incident.get('what') or ''}"
            if zh
            else f"{headline}: alarm {cause} is {state}. {incident.get('what') or ''}"
        ).strip()
    elif zh:
        sentence = f"{headline}:商户 {merchant} 的「{what}」共 {n} 次,涉及 {amount},最近一小时 {rate} 次。"
    else:
        sentence = (
            f"{headline}: {n} × {what} for merchant {merchant}, {amount} at stake, {rate} in the last hour."
        )
    link = f"{console_url.rstrip('/')}/incidents?id={incident['id']}" if console_url else ""
    origin = ORIGIN["zh-CN" if zh else "en"].get(str(incident.get("origin")), str(incident.get("origin")))
    labels = (
        ("商户", "次数", "金额", "速率", "归属", "事件", "查看")
        if zh
        else ("merchant", "count", "at stake", "rate", "who acts", "incident", "open")
    )
    lines = [
        sentence,
        f"- {labels[0]}: {merchant} ({incident.get('channel') or '-'})",
        f"- {labels[1]}: {n} ({int(incident.get('case_count') or 0)} case(s))"
        if not zh
        else f"- {labels[1]}: {n}({int(incident.get('case_count') or 0)} 个待办)",
        f"- {labels[2]}: {amount}",
        f"- {labels[3]}: {rate}/h",
        f"- {labels[4]}: {origin}",
        f"- {labels[5]}: {incident['id']}",
    ]
    if incident.get("example") and incident.get("example") != cause:
        lines.append(("- 例如: " if zh else "- e.g.: ") + str(incident["example"]))
    elif what != cause:
        lines.append(("- 原因: " if zh else "- cause: ") + cause)
    context = incident.get("context")
    if context:
        lines.append(("- 相关事件: " if zh else "- live incidents: ") + str(context))
    if link:
        lines.append(f"[{labels[6]}]({link})")
    title = f"[Tally] {words[change]}: {what if incident.get('kind') != 'alarm' else cause}"[:120]
    return {"title": title, "sentence": sentence, "text": "\n".join(lines)[:MAX_BODY], "link": link}


# ==================================================================== each robot's request


def dingtalk_sign(secret: str, timestamp_ms: str) -> str:
    """DingTalk's 加签: base64(HMAC-SHA256(key=secret, "timestamp\\nsecret")), URL-encoded into the query."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode())


def feishu_sign(secret: str, timestamp_s: str) -> str:
    """Feishu's 签名校验: base64(HMAC-SHA256(key="timestamp\\nsecret", empty message)), in the body."""
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def request_for(destination: dict[str, Any], the_card: dict[str, str], now: float) -> tuple[str, bytes]:
    """(url, JSON body) for one destination, signed as its platform wants."""
    kind, url, secret = destination["kind"], str(destination["url"]), str(destination.get("secret") or "")
    body: dict[str, Any]
    if kind == "wecom":
        content = f"**{the_card['title']}**\n{the_card['text']}".encode()[:WECOM_BYTES].decode(
            "utf-8", "ignore"
        )
        body = {"msgtype": "markdown", "markdown": {"content": content}}
    elif kind == "dingtalk":
        body = {"msgtype": "markdown", "markdown": {"title": the_card["title"], "text": the_card["text"]}}
        if secret:
            stamp = str(int(now * 1000))
            url += ("&" if "?" in url else "?") + f"timestamp={stamp}&sign={dingtalk_sign(secret, stamp)}"
    elif kind == "feishu":
        elements: list[dict[str, Any]] = [{"tag": "markdown", "content": the_card["text"]}]
        body = {
            "msg_type": "interactive",
            "card": {
                "config": {"wide_screen_mode": True},
                "header": {"title": {"tag": "plain_text", "content": the_card["title"]}},
                "elements": elements,
            },
        }
        if secret:
            stamp = str(int(now))
            body = {"timestamp": stamp, "sign": feishu_sign(secret, stamp), **body}
    elif kind == "slack":
        body = {
            "text": the_card["sentence"],
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": _slack(the_card)}}],
        }
    else:
        raise ValueError(f"unknown destination kind {kind!r}: one of {', '.join(KINDS)}")
    return url, json.dumps(body, ensure_ascii=False).encode()


def accepted(kind: str, status: int, answer: bytes) -> None:
    """Raise DeliveryError unless the platform's answer says it took the card."""
    text = answer.decode("utf-8", "replace")[:300]
    if status != 200:
        raise DeliveryError(f"HTTP {status}: {text}")
    if kind == "slack":
        if text.strip() != "ok":
            raise DeliveryError(f"slack answered {text!r}")
        return
    try:
        document = json.loads(text or "{}")
    except ValueError:
        raise DeliveryError(f"not JSON: {text!r}") from None
    code = document.get("code", document.get("StatusCode")) if kind == "feishu" else document.get("errcode")
    if code not in (0, "0"):
        raise DeliveryError(f"{kind} answered {text}")


def http_post(url: str, body: bytes, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """POST JSON; (status, body) for any HTTP answer, DeliveryError when there is none."""
    try:  # https robot webhooks set by an operator (or localhost in tests)
        answer = httpclient.request(
            "POST",
            url,
            body=body,
            headers={"Content-Type": "application/json; charset=utf-8"},
            timeout_s=timeout_s,
            limit=65536,
        )
        return answer.status, answer.body
    except httpclient.StatusError as error:
        return error.status, error.body[:65536]
    except OSError as error:
        raise DeliveryError(f"no answer: {error}") from None


def _slack(the_card: dict[str, str]) -> str:
    text = the_card["text"]
    if the_card["link"]:  # Slack's mrkdwn links are <url|text>, not markdown's [text](url)
        text = text.replace(f"]({the_card['link']})", "").rsplit("\n[", 1)[0] + f"\n<{the_card['link']}|open>"
    return f"*{the_card['title']}*\n{text}".replace("**", "*")


# ==================================================================== the notifier


class Notifier:
    def __init__(
        self,
        destinations: Destinations,
        log: AlertLog,
        cases: Any,
        *,
        console_url: str = "",
        clock: Callable[[], float] = time.time,
        hour_cap: int = HOUR_CAP,
        attempts: int = ATTEMPTS,
        pause_s: float = 0.5,
        post: Callable[[str, bytes], tuple[int, bytes]] = http_post,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.destinations = destinations
        self.log = log
        self.cases = cases  # store.tables.EventStore: a failed card becomes a work-queue item
        self.console_url = console_url
        self.clock = clock
        self.hour_cap = hour_cap
        self.attempts = max(1, attempts)
        self.pause_s = pause_s
        self.post = post
        self.sleep = sleep
        self._sent: dict[str, int] = {}

    def deliver(self, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One card per change and destination; returns the log entries written."""
        if not changes:
            return []
        destinations = self.destinations.all()
        if not destinations:  # nobody to tell but the e-mail: said in the log, so it is not a silent path
            now = self.clock()
            return [
                self.log.record(
                    {
                        "at": iso_now(now),
                        "destination": "-",
                        "kind": "-",
                        "incident": c["incident"]["id"],
                        "change": c["change"],
                        "outcome": "suppressed",
                        "reason": "no chat destination configured (`tally alerts add`)",
                    },
                    now,
                )
                for c in changes
            ]
        self._sent = self._sent_last_hour()  # one read of the log per run, counted on as cards go out
        entries = []
        for change in changes:
            for destination in destinations:
                entries.append(self._one(destination, change["change"], change["incident"]))
        return entries

    def test(self, name: str) -> dict[str, Any]:
        """`tally alerts test NAME`: a test card through the same path (snooze and cap do not apply)."""
        destination = next((d for d in self.destinations.all() if d["name"] == name), None)
        if destination is None:
            raise LookupError(f"no destination {name!r} (`tally alerts list`)")
        incident = {
            "id": "test",
            "kind": "test",
            "cause": "Tally alert test",
            "merchant": "-",
            "count": 0,
            "origin": "ours",
            "case_count": 0,
        }
        return self._one(destination, "test", incident, gated=False)

    def _one(
        self, destination: dict[str, Any], change: str, incident: dict[str, Any], *, gated: bool = True
    ) -> dict[str, Any]:
        now = self.clock()
        entry: dict[str, Any] = {
            "at": iso_now(now),
            "destination": destination["name"],
            "kind": destination["kind"],
            "incident": incident["id"],
            "change": change,
            "merchant": incident.get("merchant"),
            "count": incident.get("count"),
        }
        why = self._suppressed(destination, now) if gated else ""
        if why:
            count(M.ALERT_SUPPRESSED)
            return self.log.record({**entry, "outcome": "suppressed", "reason": why}, now)
        the_card = card(change, incident, str(destination.get("lang") or "zh-CN"), self.console_url)
        error = ""
        for attempt in range(1, self.attempts + 1):
            try:
                url, body = request_for(destination, the_card, self.clock())
                status, answer = self.post(url, body)
                accepted(destination["kind"], status, answer)
                count(M.ALERT_SENT)
                self._sent[destination["name"]] = self._sent.get(destination["name"], 0) + 1
                return self.log.record(
                    {**entry, "outcome": "sent", "attempts": attempt, "title": the_card["title"]}, now
                )
            except DeliveryError as failed:
                error = str(failed)
                if attempt < self.attempts:
                    self.sleep(self.pause_s * 2 ** (attempt - 1))
        count(M.ALERT_FAILED)
        logger.error(
            "alert not delivered", extra={"destination": destination["name"], "incident": incident["id"]}
        )
        self.cases.put(
            f"alert-delivery#{destination['name']}#{incident['id']}#{change}#{entry['at']}",
            "alert_delivery",
            now,
            manual_kind="alert_delivery",
            reason=f"cards to {destination['name']} ({destination['kind']}) are not delivered: the {change} card "
            f"of incident {incident['id']} (merchant {incident.get('merchant') or '-'}) failed {self.attempts} "
            f"times: {error[:200]}; fix the robot, `tally alerts test {destination['name']}`, then read the "
            "incident in the console",
        )
        return self.log.record(
            {**entry, "outcome": "failed", "attempts": self.attempts, "reason": error[:300]}, now
        )

    def _suppressed(self, destination: dict[str, Any], now: float) -> str:
        until = str(destination.get("snoozed_until") or "")
        if until and until > iso_now(now):
            return f"snoozed until {until}"
        sent = self._sent.get(destination["name"], 0)
        cap = int(destination.get("hour_cap") or self.hour_cap)
        return f"hourly cap reached ({sent} of {cap} sent in the last hour)" if sent >= cap else ""

    def _sent_last_hour(self) -> dict[str, int]:
        """Cards sent per destination in the last hour, from the alert log (today's and, near midnight UTC,
        yesterday's partition)."""
        now = self.clock()
        hour_ago = iso_now(now - 3600)
        entries = self.log.day(iso_now(now)[:10], since=hour_ago)
        if hour_ago[:10] != iso_now(now)[:10]:
            entries += self.log.day(hour_ago[:10], since=hour_ago)
        return dict(Counter(str(e.get("destination")) for e in entries if e.get("outcome") == "sent"))


# ==================================================================== the destinations (`tally alerts add/list/remove/snooze`)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class DestinationBook:
    """Adds, lists (secrets masked), removes and snoozes the chat destinations (store/alerts.py Destinations)."""

    def __init__(self, store: Destinations, clock: Callable[[], float] = time.time):
        self.store = store
        self.clock = clock

    def add(
        self, name: str, kind: str, url: str, *, secret: str = "", lang: str = "zh-CN", hour_cap: int = 0
    ) -> dict[str, Any]:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
        if lang not in LANGS:
            raise ValueError(f"lang {lang!r}: one of {', '.join(LANGS)}")
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"name {name!r}: letters, digits, - and _")
        parsed = urllib.parse.urlsplit(url)
        loopback = parsed.scheme == "http" and parsed.hostname in _LOOPBACK
        if parsed.scheme != "https" and not loopback:
            raise ValueError(
                f"url {url!r}: the robot's https webhook (http only on this machine, for the sink)"
            )
        destination: dict[str, Any] = {"name": name, "kind": kind, "url": url, "secret": secret, "lang": lang}
        if hour_cap:
            destination["hour_cap"] = int(hour_cap)
        others = [d for d in self.store.all() if d["name"] != name]
        self.store.replace([*others, destination])
        return masked(destination)

    def remove(self, name: str) -> dict[str, Any]:
        every = self.store.all()
        kept = [d for d in every if d["name"] != name]
        if len(kept) == len(every):
            raise LookupError(f"no destination {name!r} (`tally alerts list`)")
        self.store.replace(kept)
        return {"removed": name}

    def snooze(self, name: str, minutes: int) -> list[dict[str, Any]]:
        """Snooze one destination (or `all`) for `minutes`; 0 wakes it. Suppressed cards are still logged."""
        every = self.store.all()
        hit = [d for d in every if name in ("all", d["name"])]
        if not hit:
            raise LookupError(f"no destination {name!r} (`tally alerts list`)")
        until = iso_now(self.clock() + minutes * 60) if minutes > 0 else ""
        for d in hit:
            d["snoozed_until"] = until
        self.store.replace(every)
        return [masked(d) for d in hit]

    def list(self) -> list[dict[str, Any]]:
        return [masked(d) for d in self.store.all()]


def masked(destination: dict[str, Any]) -> dict[str, Any]:
    """What a person may see: the webhook's scheme and host, whether a signing secret is set; never the secrets."""
    parsed = urllib.parse.urlsplit(str(destination.get("url") or ""))
    return {
        "name": destination["name"],
        "kind": destination["kind"],
        "lang": destination.get("lang") or "zh-CN",
        "url": f"{parsed.scheme}://{parsed.netloc}/…",
        "signed": bool(destination.get("secret")),
        "hour_cap": destination.get("hour_cap"),
        "snoozed_until": destination.get("snoozed_until") or None,
    }
