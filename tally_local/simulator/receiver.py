"""A merchant's webhook receiver, hosted by the simulator (docs/webhooks.md, docs/simulator.md).

`POST /merchant/hooks/<name>` takes a delivery and answers as told: fail a share of attempts (500), be down
(503 for everything), stall some answers past the sender's timeout, or answer after a random delay so answers
come back out of order. Every request is recorded with its headers and raw body, so a test (or a person on
`make run`) can verify the signatures, deduplicate by id and check each order's events arrived in order.

Control: `POST /merchant/_control` with any of {"fail_rate", "down", "stall_rate", "stall_s", "jitter_s",
"seed"}; `GET /merchant/_deliveries` lists what arrived; `DELETE /merchant/_deliveries` forgets it.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

BEHAVIOUR = {"fail_rate": 0.0, "down": False, "stall_rate": 0.0, "stall_s": 0.0, "jitter_s": 0.0}


class MerchantReceiver:
    def __init__(self, seed: int = 35):
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.behaviour: dict[str, Any] = dict(BEHAVIOUR)
        self.deliveries: list[dict[str, Any]] = []

    def configure(self, **changes: Any) -> dict[str, Any]:
        with self._lock:
            if "seed" in changes:
                self._rng.seed(changes.pop("seed"))
            unknown = set(changes) - set(BEHAVIOUR)
            if unknown:
                raise ValueError(f"unknown receiver settings {sorted(unknown)}")
            self.behaviour.update(changes)
            return dict(self.behaviour)

    def reset(self) -> None:
        with self._lock:
            self.behaviour = dict(BEHAVIOUR)
            self.deliveries = []

    def accepted(self) -> list[dict[str, Any]]:
        """The deliveries answered 2xx, in the order their answers were decided."""
        with self._lock:
            return [d for d in self.deliveries if 200 <= d["status"] < 300]

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        if path == "/merchant/_control" and method == "POST":
            return 200, json.dumps(self.configure(**json.loads(body or b"{}"))).encode()
        if path == "/merchant/_deliveries":
            if method == "DELETE":
                self.reset()
                return 200, b"{}"
            with self._lock:
                listed = [
                    {k: v for k, v in d.items() if k != "body"} | {"body": d["body"].decode()}
                    for d in self.deliveries
                ]
            return 200, json.dumps(listed, ensure_ascii=False).encode()
        if not (path.startswith("/merchant/hooks/") and method == "POST"):
            return 404, b'{"error": "no such receiver path"}'
        with self._lock:
            b = dict(self.behaviour)
            roll, stall_roll, wait = (
                self._rng.random(),
                self._rng.random(),
                self._rng.random() * b["jitter_s"],
            )
            if b["down"]:
                status = 503
            elif roll < b["fail_rate"]:
                status = 500
            else:
                status = 200
            stall = b["stall_s"] if stall_roll < b["stall_rate"] else 0.0
        time.sleep(wait + stall)
        record = {
            "at": time.time(),
            "path": path,
            "headers": {k.lower(): v for k, v in headers.items()},
            "body": bytes(body),
            "status": status,
            "stalled_s": stall,
        }
        with self._lock:
            self.deliveries.append(record)
        answer = {"ok": status == 200} if status != 503 else {"error": "receiver down"}
        return status, json.dumps(answer).encode()
