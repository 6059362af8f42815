"""The chat sink: group robots of WeCom (企业微信), DingTalk (钉钉), Feishu (飞书) and Slack on the simulator's port,
each answering and checking signatures the way its platform documents it (docs/alerts.md, docs/simulator.md).
Written apart from the product's code (`tally.service.alerts`) so each checks the other.

    sink = sim.chat
    robot = sink.robot("dingtalk", secret="SEC…")      # → {"name", "kind", "url", "secret"}
    … the product posts cards to robot["url"] …
    sink.cards(robot["name"])                           # what the robot accepted, parsed
    sink.robot("feishu", refuse=True)                   # a robot that refuses every message

Paths (the platform's own, under /chat/<kind>):
    POST /chat/wecom/cgi-bin/webhook/send?key=K                 {"msgtype": "text"|"markdown", …}
    POST /chat/dingtalk/robot/send?access_token=T[&timestamp=&sign=]   {"msgtype": "text"|"markdown"|…, …}
    POST /chat/feishu/open-apis/bot/v2/hook/H                  {["timestamp", "sign",] "msg_type", …}
    POST /chat/slack/services/T/B/X                            {"text" | "blocks"}
    GET  /chat/received                                        every message accepted or refused (JSON)
    POST /chat/robots  {"kind", ["secret", "refuse", "name"]}  a new robot (its webhook URL), for `make run`
Signatures: DingTalk `sign` = base64(HMAC-SHA256(key=secret, "timestamp\\nsecret")), timestamp in ms within an
hour; Feishu `sign` = base64(HMAC-SHA256(key="timestamp\\nsecret", b"")), timestamp in s within an hour.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from typing import Any

HOUR_S = 3600
_REFUSALS = {  # what each platform answers a message it will not post
    "wecom": (200, {"errcode": 45009, "errmsg": "api freq out of limit"}),
    "dingtalk": (200, {"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"}),
    "feishu": (200, {"code": 9499, "msg": "too many request"}),
    "slack": (403, "action_prohibited"),
}


class ChatSink:
    def __init__(self, url_of: Any = None, clock: Any = time.time):
        self.url_of = url_of or (lambda: "http://127.0.0.1")
        self.clock = clock
        self._robots: dict[str, dict[str, Any]] = {}  # token → robot
        self._lock = threading.Lock()
        self.received: list[dict[str, Any]] = []

    def robot(self, kind: str, *, secret: str = "", refuse: bool = False, name: str = "") -> dict[str, Any]:
        """A new group robot of `kind` (signed when `secret` is given); its webhook URL on this sink."""
        token = secrets.token_hex(16)
        base = self.url_of()
        url = {
            "wecom": f"{base}/chat/wecom/cgi-bin/webhook/send?key={token}",
            "dingtalk": f"{base}/chat/dingtalk/robot/send?access_token={token}",
            "feishu": f"{base}/chat/feishu/open-apis/bot/v2/hook/{token}",
            "slack": f"{base}/chat/slack/services/T0LOCAL/B0LOCAL/{token}",
        }[kind]
        robot = {
            "name": name or f"{kind}-{token[:6]}",
            "kind": kind,
            "url": url,
            "secret": secret,
            "refuse": refuse,
        }
        with self._lock:
            self._robots[token] = robot
        return dict(robot)

    def set_refusing(self, name: str, refuse: bool) -> None:
        with self._lock:
            for robot in self._robots.values():
                if robot["name"] == name:
                    robot["refuse"] = refuse

    def cards(self, name: str | None = None, *, accepted: bool = True) -> list[dict[str, Any]]:
        with self._lock:
            return [
                m for m in self.received if (name is None or m["robot"] == name) and m["accepted"] == accepted
            ]

    # ------------------------------------------------------------------ HTTP (simulator/_server.py routes /chat/)

    def handle(self, method: str, path: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        """(status, body, content type) as the platform would answer."""
        if method == "GET" and path == "/chat/received":
            with self._lock:
                return 200, json.dumps(self.received, ensure_ascii=False).encode(), "application/json"
        if (
            method == "POST" and path == "/chat/robots"
        ):  # a robot for `make run`: curl -d '{"kind": "dingtalk"}'
            try:
                asked = json.loads(body.decode("utf-8") or "{}")
                robot = self.robot(
                    str(asked["kind"]),
                    secret=str(asked.get("secret") or ""),
                    refuse=bool(asked.get("refuse")),
                    name=str(asked.get("name") or ""),
                )
            except (ValueError, KeyError, TypeError) as error:
                return (
                    400,
                    json.dumps({"error": f"kind: wecom, dingtalk, feishu or slack ({error})"}).encode(),
                    "application/json",
                )
            return 200, json.dumps(robot).encode(), "application/json"
        kind, token = _route(path, query)
        with self._lock:
            robot = self._robots.get(token) if kind else None
        if robot is None or robot["kind"] != kind or method != "POST":
            return _answer(
                kind or "slack", 404, {"errcode": 93000, "errmsg": "invalid webhook url"}, "no_service"
            )
        try:
            message = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return self._refused(robot, body, "body is not JSON", *_bad_request(kind))
        problem = _check_signature(kind, robot["secret"], query, message, self.clock()) or _check_shape(
            kind, message
        )
        if problem:
            return self._refused(robot, body, problem, *_bad_request(kind, problem))
        if robot["refuse"]:
            status, answer = _REFUSALS[kind]
            return self._refused(robot, body, "refusing", status, answer)
        self._keep(robot, message, accepted=True, why="")
        if kind == "slack":
            return 200, b"ok", "text/plain"
        if kind == "feishu":
            return _answer(kind, 200, {"code": 0, "msg": "success", "data": {}}, "")
        return _answer(kind, 200, {"errcode": 0, "errmsg": "ok"}, "")

    def _refused(
        self, robot: dict[str, Any], body: bytes, why: str, status: int, answer: Any
    ) -> tuple[int, bytes, str]:
        self._keep(robot, body.decode("utf-8", "replace")[:2000], accepted=False, why=why)
        return _answer(robot["kind"], status, answer, answer)

    def _keep(self, robot: dict[str, Any], message: Any, *, accepted: bool, why: str) -> None:
        with self._lock:
            self.received.append(
                {
                    "robot": robot["name"],
                    "kind": robot["kind"],
                    "message": message,
                    "accepted": accepted,
                    "why": why,
                    "at": self.clock(),
                }
            )


def _route(path: str, query: dict[str, str]) -> tuple[str, str]:
    parts = path.split("/")
    if path.startswith("/chat/wecom/cgi-bin/webhook/send"):
        return "wecom", query.get("key", "")
    if path.startswith("/chat/dingtalk/robot/send"):
        return "dingtalk", query.get("access_token", "")
    if path.startswith("/chat/feishu/open-apis/bot/v2/hook/"):
        return "feishu", parts[-1]
    if path.startswith("/chat/slack/services/") and len(parts) == 7:
        return "slack", parts[-1]
    return "", ""


def _check_signature(kind: str, secret: str, query: dict[str, str], message: Any, now: float) -> str:
    if not secret or kind not in ("dingtalk", "feishu"):
        return ""
    if kind == "dingtalk":
        stamp, sign = query.get("timestamp", ""), query.get("sign", "")  # the query arrives URL-decoded
        if not stamp.isdigit() or abs(now * 1000 - int(stamp)) > HOUR_S * 1000:
            return "timestamp missing or not within one hour"
        expected = hmac.new(secret.encode(), f"{stamp}\n{secret}".encode(), hashlib.sha256).digest()
    else:
        stamp = str(message.get("timestamp", "")) if isinstance(message, dict) else ""
        sign = str(message.get("sign", "")) if isinstance(message, dict) else ""
        if not stamp.isdigit() or abs(now - int(stamp)) > HOUR_S:
            return "timestamp missing or not within one hour"
        expected = hmac.new(f"{stamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    if not hmac.compare_digest(base64.b64encode(expected).decode(), sign):
        return "sign not match"
    return ""


def _check_shape(kind: str, message: Any) -> str:
    if not isinstance(message, dict):
        return "not a JSON object"
    if kind == "slack":
        return "" if message.get("text") or message.get("blocks") else "no_text"
    field = "msg_type" if kind == "feishu" else "msgtype"
    msgtype = message.get(field)
    if kind == "feishu":
        content = message.get("card") if msgtype == "interactive" else message.get("content")
        return (
            ""
            if msgtype in ("text", "post", "image", "share_chat", "interactive") and content
            else "params error"
        )
    part = message.get(str(msgtype))
    if not isinstance(part, dict):
        return f"missing {msgtype}"
    if msgtype == "text":
        return "" if part.get("content") else "missing text.content"
    if msgtype == "markdown":
        if kind == "wecom":
            return "" if 0 < len(str(part.get("content") or "").encode()) <= 4096 else "markdown.content size"
        return "" if part.get("title") and part.get("text") else "missing markdown.title or markdown.text"
    return ""


def _bad_request(kind: str, why: str = "") -> tuple[int, Any]:
    return {
        "wecom": (200, {"errcode": 40008, "errmsg": f"invalid message type: {why}"}),
        "dingtalk": (200, {"errcode": 310000, "errmsg": why or "invalid message"}),
        "feishu": (200, {"code": 19021 if "sign" in why or "timestamp" in why else 9499, "msg": why}),
        "slack": (400, "invalid_payload"),
    }[kind]


def _answer(kind: str, status: int, document: Any, text: Any) -> tuple[int, bytes, str]:
    if kind == "slack":
        return status, str(text).encode(), "text/plain"
    return status, json.dumps(document, ensure_ascii=False).encode(), "application/json"
