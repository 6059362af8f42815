"""Webhooks to the merchant's systems (docs/webhooks.md, R20, R38).

Four parts, all behind the outbox, so an event is sent only for a committed change:
- `Endpoints`: register, list, pause/resume, remove an endpoint; each has its own `whsec_` secret in Secrets
  Manager (Standard Webhooks' secret format: base64 of 32 random bytes behind the prefix).
- `WebhookFanout` (the outbox calls it): keeps every event once in the feed and opens one delivery per
  subscribed endpoint on the FIFO queue, grouped per endpoint and order. A refund's event never goes ahead
  of its order's payment: the payment's event is rebuilt from the order row and queued first (same stable
  id and delivery row: a copy the orders stream queues too is deduplicated, a delivered one skipped).
- `Deliverer` (the webhooks function): one POST per message, signed with the Standard Webhooks headers
  (`webhook-id` = the stable event id, `webhook-timestamp`, `webhook-signature` = `v1,` + base64 HMAC-SHA256
  of `id.timestamp.body`); every attempt is logged; a failure keeps the message (and so the rest of that
  order's events) invisible for the backoff; past the 3-day window the delivery is FAILED, the endpoint
  PAUSED, a work-queue case is opened and `WebhookGaveUp` counted (alarm).
- `DeliveryLog` / `Resender` / `EventFeed`: the log per endpoint and per order, resend one or a time range
  (a dry run first; the action does exactly what it showed), and the pull path GET /events with the cursor kept here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tally import errors, httpclient
from tally.domain.events import DownstreamEvent, events_for_change
from tally.domain.webhooks import (
    EVENT_TYPES,
    RETRY_SCHEDULE_S,
    RETRY_WINDOW_S,
    address_refusal,
    message_group,
    next_delay_s,
    order_of,
    thin,
    wants,
)
from tally.observability import M, count, logger
from tally.store.tables import iso_now, order_key
from tally.store.webhooks import ACTIVE, DELIVERED, FAILED, HELD, PAUSED, PENDING, WebhookQueue, WebhookStore

SECRET_PREFIX = "whsec_"
SNIPPET = 200  # characters of a receiver's answer kept per attempt
CASE_KIND = "webhook_failing"  # the work-queue kind (service/queue.py KEPT_KINDS)


class WebhookError(errors.InvalidRequest, ValueError):
    """A request about endpoints or deliveries that cannot be done as asked (says why)."""


class WebhookNotFound(errors.NotFound, LookupError):
    """No such endpoint or event (for this merchant)."""


# ---------------------------------------------------------------- Standard Webhooks signatures


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of "{msg_id}.{timestamp}.{body}">` with the secret's decoded bytes as key."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def signed_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
    }


def body_of(event_row: dict[str, Any]) -> bytes:
    return str(event_row["body"]).encode("utf-8")


# ---------------------------------------------------------------- endpoints


class Endpoints:
    def __init__(
        self,
        store: WebhookStore,
        secret_store: Any,
        secret_prefix: str,
        clock: Callable[[], float],
        merchant_ids: Callable[[], list[str]] = list,
        private_addresses: bool = False,
    ):
        self.store = store
        self.private_addresses = (
            private_addresses  # WebhookPrivateAddresses=allow: the embedded stack's receivers
        )
        self.secret_store = secret_store  # store/secrets.SecretStore
        self.secret_prefix = secret_prefix  # tally/<stack>/merchants/webhooks/
        self.clock = clock
        self.merchant_ids = (
            merchant_ids  # every configured merchant: "all endpoints" is a Query per merchant (R21)
        )
        self._secrets: dict[str, str] = {}

    def address_refusal(self, url: str) -> str | None:
        """Why `url` may not receive webhooks now (it resolves to no address, or to one beside Tally), or None.
        Checked when the endpoint is added and again before every attempt: a name can point elsewhere later."""
        if self.private_addresses:
            return None
        try:
            host, found = httpclient.addresses(url)
        except (OSError, UnicodeError, ValueError) as exc:
            return f"{url[:80]} does not resolve ({exc})"
        for address in found:
            why = address_refusal(address)
            if why is not None:
                return f"{host} resolves to {address}, {why}"
        return None

    def add(
        self, mchid: str, url: str, events: list[str] | None = None, secret: str | None = None
    ) -> dict[str, Any]:
        """Register an endpoint; the answer carries its secret (`tally webhooks secret` reads it again). A
        `secret` given (`whsec_` + base64 of 24 to 64 bytes) is used instead of a new one."""
        if not mchid or not url.startswith(("https://", "http://")):
            raise WebhookError("an endpoint needs a merchant id and an http(s) URL")
        refused = self.address_refusal(url)
        if refused is not None:
            raise WebhookError(f"not a receiver Tally may call: {refused}")
        if secret is not None and not _valid_secret(secret):
            raise WebhookError("a secret is whsec_ followed by the base64 of 24 to 64 random bytes")
        wanted = sorted(set(events or ["*"]))
        unknown = [e for e in wanted if e != "*" and e not in EVENT_TYPES]
        if unknown:
            raise WebhookError(f"unknown event types {unknown}: choose from {list(EVENT_TYPES)} or *")
        endpoint_id = "ep_" + secrets.token_hex(8)
        secret = secret or new_secret()
        name = f"{self.secret_prefix}{endpoint_id}"
        self.secret_store.put(name, {"secret": secret})
        row = {
            "endpoint_id": endpoint_id,
            "mchid": mchid,
            "url": url,
            "events": wanted,
            "status": ACTIVE,
            "secret_name": name,
            "created_at": iso_now(self.clock()),
        }
        self.store.put_endpoint(row)
        logger.info("webhook endpoint added", extra={"endpoint": endpoint_id, "mchid": mchid})
        return {**row, "secret": secret}

    def list(self, mchid: str | None = None) -> list[dict[str, Any]]:
        merchants = [mchid] if mchid else self.merchant_ids()
        rows = [row for m in merchants for row in self.store.endpoints_of(m)]
        return sorted((_public(r) for r in rows), key=lambda r: (r["mchid"], r["created_at"]))

    def get(self, endpoint_id: str) -> dict[str, Any]:
        row = self.store.endpoint(endpoint_id)
        if row is None:
            raise WebhookNotFound(f"no webhook endpoint {endpoint_id}")
        return row

    def remove(self, endpoint_id: str) -> dict[str, Any]:
        row = self.get(endpoint_id)
        self.store.delete_endpoint(endpoint_id)
        return _public(row)

    def pause(self, endpoint_id: str, reason: str) -> bool:
        return self.store.set_endpoint_status(endpoint_id, PAUSED, iso_now(self.clock()), reason)

    def resume(self, endpoint_id: str) -> dict[str, Any]:
        self.get(endpoint_id)
        self.store.set_endpoint_status(endpoint_id, ACTIVE, iso_now(self.clock()), "resumed")
        return _public(self.get(endpoint_id))

    def secret(self, endpoint_id: str, secret_name: str = "") -> str:
        if endpoint_id not in self._secrets:
            name = secret_name or self.get(endpoint_id)["secret_name"]
            self._secrets[endpoint_id] = str(self.secret_store.get(name)["secret"])
        return self._secrets[endpoint_id]


def _valid_secret(secret: str) -> bool:
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError:
        return False
    return secret.startswith(SECRET_PREFIX) and 24 <= len(key) <= 64


def _public(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("endpoint_id", "mchid", "url", "events", "status", "created_at", "status_at", "status_reason")
    return {k: row.get(k) for k in keep}


# ---------------------------------------------------------------- the outbox's side


class WebhookFanout:
    """Every event the outbox publishes: into the feed, and onto the queue for each subscribed endpoint."""

    def __init__(
        self,
        store: WebhookStore,
        queue: WebhookQueue,
        orders: Any,  # store/changes.ChangedRows: the order row when a refund's payment event is missing
        clock: Callable[[], float],
        api_url: str = "",
    ):
        self.store = store
        self.queue = queue
        self.orders = orders
        self.clock = clock
        self.api_url = api_url

    def publish(self, events: list[DownstreamEvent]) -> None:
        for event in events:
            if event.detail_type.startswith("Refund"):
                self._payment_first(event)
            self._one(event)

    def _payment_first(self, refund: DownstreamEvent) -> None:
        """The order's OrderPaid, rebuilt from the order row, goes ahead of its refund every time: the orders
        stream may not have reached the outbox yet, or may be between keeping the event and queueing it. It is
        idempotent: the same id and delivery row, the same FIFO deduplication id, and a delivered one is skipped."""
        mchid, out_trade_no = order_of(refund)
        row = self.orders.order(mchid, out_trade_no) if mchid and out_trade_no else None
        for event in events_for_change(None, row) if row else []:
            if event.detail_type == "OrderPaid":
                self._one(event)

    def _one(self, event: DownstreamEvent) -> None:
        now = self.clock()
        mchid, out_trade_no = order_of(event)
        published_at = iso_now(now)
        body = json.dumps(thin(event, self.api_url, published_at), ensure_ascii=False, separators=(",", ":"))
        row = self.store.put_event(
            event.event_id,
            {
                "type": event.detail_type,
                "mchid": mchid,
                "feed_pk": mchid or "-",
                "order_pk": order_key(mchid, out_trade_no) if out_trade_no else None,
                "seq": f"{published_at}#{event.event_id}",
                "published_at": published_at,
                "body": body,
            },
        )
        for endpoint in self.store.endpoints_of(mchid) if mchid else []:
            if not wants(endpoint.get("events") or ["*"], event.detail_type):
                continue
            self.enqueue(endpoint, row, now)

    def enqueue(
        self, endpoint: dict[str, Any], event_row: dict[str, Any], now: float, again: str = ""
    ) -> bool:
        """Open (or find) the delivery and queue it, unless delivered already; a paused endpoint's is HELD
        (in the log, counted, resent by `tally webhooks resend` once the endpoint is back)."""
        endpoint_id, event_id = endpoint["endpoint_id"], event_row["event_id"]
        delivery = self.store.open_delivery(event_id, endpoint_id, iso_now(now))
        if delivery.get("status") == DELIVERED and not again:
            return False
        if endpoint.get("status") == PAUSED:
            self.store.set_delivery_status(event_id, endpoint_id, HELD, iso_now(now))
            count(M.WEBHOOK_HELD)
            return False
        if again:  # a resend starts a new retry window
            self.store.set_delivery_status(event_id, endpoint_id, PENDING, iso_now(now), restart=True)
        group = message_group(endpoint_id, _as_event(event_row))
        self.queue.send(endpoint_id, event_id, group, again=again)
        return True


def _as_event(event_row: dict[str, Any]) -> DownstreamEvent:
    data = json.loads(event_row["body"])["data"]
    return DownstreamEvent(event_row["event_id"], event_row["type"], data)


# ---------------------------------------------------------------- the webhooks function


class Deliverer:
    def __init__(
        self,
        store: WebhookStore,
        queue: WebhookQueue,
        endpoints: Endpoints,
        cases: Any,  # store/tables.EventStore: the work-queue item of an endpoint that kept failing
        clock: Callable[[], float] = time.time,
        *,
        timeout_s: float = 10.0,
        schedule: tuple[int, ...] = RETRY_SCHEDULE_S,
        window_s: int = RETRY_WINDOW_S,
        post: Callable[[str, bytes, dict[str, str], float], tuple[int, str]] | None = None,
        concurrency: int = 8,
    ):
        self.store = store
        self.queue = queue
        self.endpoints = endpoints
        self.cases = cases
        self.clock = clock
        self.timeout_s = timeout_s
        self.schedule = schedule
        self.window_s = window_s
        self.post = post or http_post
        self.concurrency = concurrency  # message groups (orders) of one batch delivered at once

    def handle_batch(self, records: list[dict[str, Any]]) -> list[str]:
        """SQS FIFO batch → the message ids to keep. The batch's message groups (orders) are delivered side by
        side, each group's messages one after the other; after a failure, the group's later messages are not
        tried (kept, visible again at once, they wait behind the failed one): order per order."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            groups.setdefault(str(record.get("attributes", {}).get("MessageGroupId") or ""), []).append(
                record
            )
        if self.concurrency <= 1 or len(groups) <= 1:
            return [kept for group in groups.values() for kept in self._group(group)]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(groups))) as pool:
            return [kept for found in pool.map(self._group, groups.values()) for kept in found]

    def _group(self, records: list[dict[str, Any]]) -> list[str]:
        for i, record in enumerate(records):
            try:
                delay = self.deliver(json.loads(record["body"]))
            except Exception:  # noqa: BLE001 - kept for a retry, counted, never swallowed
                count(M.WEBHOOK_FAILED)
                logger.exception(
                    "webhook delivery raised; kept for a retry", extra={"message": record["messageId"]}
                )
                delay = self.schedule[0] if self.schedule else 0
            if delay is not None:
                self.queue.retry_after(record["receiptHandle"], delay)
                for later in records[i + 1 :]:
                    self.queue.retry_after(later["receiptHandle"], 0)
                return [r["messageId"] for r in records[i:]]
        return []

    def deliver(self, message: dict[str, Any]) -> int | None:
        """One attempt; None when the message is done with (delivered, held, given up), else the seconds to
        wait before the next attempt."""
        endpoint_id, event_id = str(message["endpoint_id"]), str(message["event_id"])
        now = self.clock()
        delivery = self.store.delivery(event_id, endpoint_id) or {}
        if delivery.get("status") == DELIVERED:
            return None  # a second copy (outbox retry, resend raced): the receiver already has it
        endpoint = self.store.endpoint(endpoint_id)
        event_row = self.store.event(event_id)
        if endpoint is None or event_row is None:
            self.store.set_delivery_status(event_id, endpoint_id, FAILED, iso_now(now))
            count(M.WEBHOOK_GAVE_UP)
            self._case(
                endpoint_id, endpoint, event_id, "the endpoint was removed before the event was delivered"
            )
            return None
        if endpoint.get("status") == PAUSED:
            self.store.set_delivery_status(event_id, endpoint_id, HELD, iso_now(now))
            count(M.WEBHOOK_HELD)
            return None
        body = body_of(event_row)
        headers = signed_headers(
            self.endpoints.secret(endpoint_id, endpoint["secret_name"]), event_id, int(now), body
        )
        started = time.monotonic()
        refused = self.endpoints.address_refusal(str(endpoint["url"]))
        if (
            refused is not None
        ):  # a failed attempt like any other: retried, then the endpoint paused with a case
            status, snippet = 0, f"not sent: {refused}"
        else:
            status, snippet = self.post(str(endpoint["url"]), body, headers, self.timeout_s)
        latency_ms = int((time.monotonic() - started) * 1000)
        ok = 200 <= status < 300
        attempt = {
            "at": iso_now(self.clock()),
            "http_status": status,
            "latency_ms": latency_ms,
            "snippet": snippet[:SNIPPET],
            "type": event_row.get("type"),
            "order_pk": event_row.get("order_pk"),
        }
        n = self.store.record_attempt(event_id, endpoint_id, attempt, DELIVERED if ok else PENDING)
        if ok:
            count(M.WEBHOOK_DELIVERED)
            return None
        count(M.WEBHOOK_ATTEMPT_FAILED)
        first = delivery.get("first_at") or attempt["at"]
        delay = next_delay_s(n, _epoch(str(first)), self.clock(), self.schedule, self.window_s)
        if delay is not None:
            return delay
        self.store.set_delivery_status(event_id, endpoint_id, FAILED, iso_now(self.clock()))
        count(M.WEBHOOK_GAVE_UP)
        reason = f"{n} attempts over the retry window failed (last: HTTP {status} {snippet[:80]!r})"
        if self.endpoints.pause(
            endpoint_id, reason
        ):  # one case per pause: later give-ups of it are in its log
            logger.error("webhook endpoint paused", extra={"endpoint": endpoint_id, "reason": reason})
            self._case(endpoint_id, endpoint, event_id, reason)
        return None

    def _case(self, endpoint_id: str, endpoint: dict[str, Any] | None, event_id: str, reason: str) -> None:
        """One work-queue item per endpoint and pause (R38, R41): what failed, and how to get the rest out. A
        removed endpoint has one item, however many events were still on their way to it."""
        mchid = str((endpoint or {}).get("mchid") or "")
        self.cases.put(
            f"{CASE_KIND}#{endpoint_id}#{iso_now(self.clock()) if endpoint else 'removed'}",
            CASE_KIND,
            self.clock(),
            manual_kind=CASE_KIND,
            mchid=mchid,
            endpoint_id=endpoint_id,
            failed_event_id=event_id,
            reason=f"webhook endpoint {endpoint_id} ({(endpoint or {}).get('url', 'removed')}): {reason}; "
            f"paused, later events held. Fix the receiver, then `tally webhooks resume {endpoint_id}` and "
            f"`tally webhooks resend {endpoint_id} --since ...` (dry run first)",
        )


def http_post(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
    """(HTTP status, the answer's first characters); 0 and the error when there was no answer."""
    try:
        answer = httpclient.request(
            "POST", url, body=body, headers=headers, timeout_s=timeout_s, limit=SNIPPET
        )
        return answer.status, answer.body.decode("utf-8", "replace")
    except httpclient.StatusError as exc:  # a redirect too: the event is delivered to the URL registered only
        return exc.status, exc.body[:SNIPPET].decode("utf-8", "replace")
    except (OSError, ValueError) as exc:  # refused, reset, timed out, bad URL
        return 0, f"{type(exc).__name__}: {exc}"[:SNIPPET]


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


# ---------------------------------------------------------------- reading and resending


class DeliveryLog:
    def __init__(self, store: WebhookStore):
        self.store = store

    def endpoint(self, endpoint_id: str, limit: int = 100) -> list[dict[str, Any]]:
        return [_attempt(r) for r in self.store.attempts_of_endpoint(endpoint_id, limit)]

    def order(self, mchid: str, out_trade_no: str) -> list[dict[str, Any]]:
        """Every event of the order, oldest first, with each endpoint's delivery and attempts."""
        found = []
        for event in sorted(
            self.store.events_of_order(order_key(mchid, out_trade_no)), key=lambda r: r["seq"]
        ):
            rows = self.store.rows_of_event(event["event_id"])
            deliveries = [r for r in rows if r["sk"].count("#") == 1 and r["sk"].startswith("to#")]
            found.append(
                {
                    "event_id": event["event_id"],
                    "type": event["type"],
                    "published_at": event["published_at"],
                    "deliveries": [
                        {
                            "endpoint_id": d["endpoint_id"],
                            "status": d["status"],
                            "attempts": [
                                _attempt(a)
                                for a in sorted(rows, key=lambda r: r["sk"])
                                if a["sk"].startswith(f"to#{d['endpoint_id']}#")
                            ],
                        }
                        for d in deliveries
                    ],
                }
            )
        return found


def _attempt(row: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "at",
        "endpoint_id",
        "event_id",
        "type",
        "attempt",
        "http_status",
        "latency_ms",
        "outcome",
        "snippet",
    )
    return {k: row.get(k) for k in keep}


class Resender:
    """Resend one event, or every event of a time range, to one endpoint. A range resend shows its count
    first (dry run) and acts only on the same set: what it would send is identified by a digest."""

    def __init__(self, store: WebhookStore, fanout: WebhookFanout, clock: Callable[[], float]):
        self.store = store
        self.fanout = fanout
        self.clock = clock

    def one(self, endpoint_id: str, event_id: str) -> dict[str, Any]:
        endpoint = self._endpoint(endpoint_id)
        row = self.store.event(event_id)
        if row is None or row.get("mchid") != endpoint["mchid"]:
            raise WebhookNotFound(f"no event {event_id} for the merchant of {endpoint_id}")
        self.fanout.enqueue(endpoint, row, self.clock(), again=f"resend#{self.clock()}")
        return {"endpoint_id": endpoint_id, "queued": [event_id]}

    def range(
        self,
        endpoint_id: str,
        since: str,
        until: str,
        *,
        include_delivered: bool = False,
        dry_run: bool = True,
        expect: str = "",
    ) -> dict[str, Any]:
        endpoint = self._endpoint(endpoint_id)
        chosen = []
        for row in self._events(endpoint["mchid"], since, until):
            if not wants(endpoint.get("events") or ["*"], row["type"]):
                continue
            delivery = self.store.delivery(row["event_id"], endpoint_id) or {}
            if delivery.get("status") == DELIVERED and not include_delivered:
                continue
            chosen.append(row)
        ids = [r["event_id"] for r in chosen]
        digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
        preview = {
            "endpoint_id": endpoint_id,
            "since": since,
            "until": until,
            "count": len(ids),
            "digest": digest,
        }
        if dry_run:
            return {**preview, "dry_run": True, "events": ids[:20]}
        if expect and expect != digest:
            raise WebhookError(
                f"the range changed since its preview (now {len(ids)} events, digest {digest})"
            )
        token = f"resend#{self.clock()}"
        for row in chosen:  # in feed order: each order's events keep their order on the FIFO queue
            self.fanout.enqueue(endpoint, row, self.clock(), again=token)
        logger.info("webhook events resent", extra={"endpoint": endpoint_id, "count": len(ids)})
        return {**preview, "dry_run": False, "queued": len(ids)}

    def _events(self, mchid: str, since: str, until: str) -> list[dict[str, Any]]:
        rows, after = [], since
        while True:
            page = self.store.feed(mchid, after, until, 500)
            rows += [r for r in page if r["seq"] >= since]
            if len(page) < 500:
                return rows
            after = page[-1]["seq"]

    def _endpoint(self, endpoint_id: str) -> dict[str, Any]:
        row = self.store.endpoint(endpoint_id)
        if row is None:
            raise WebhookNotFound(f"no webhook endpoint {endpoint_id}")
        return row


class EventFeed:
    """GET /events?mchid=M[&after=CURSOR]: a merchant's events oldest first; without `after`, from where this
    caller last left off (the cursor kept here). Events younger than `settle_s` wait for the next call, so a
    slower writer's earlier event is never skipped by a cursor that moved past it."""

    def __init__(self, store: WebhookStore, clock: Callable[[], float], settle_s: float = 5.0):
        self.store = store
        self.clock = clock
        self.settle_s = settle_s

    def read(
        self, principal: str, mchid: str, after: str | None, limit: int | str | None = 100
    ) -> dict[str, Any]:
        if not mchid:
            raise WebhookError("mchid is required")
        try:
            limit = max(1, min(int(limit or 100), 500))
        except ValueError:
            raise WebhookError("limit must be a number from 1 to 500") from None
        if after is not None and len(after) > 256:
            raise WebhookError("after is a cursor this API returned")
        start = self.store.cursor(principal, mchid) if after is None else after
        before = iso_now(self.clock() - self.settle_s)
        rows = self.store.feed(mchid, start, before, limit) if start < before else []
        cursor = rows[-1]["seq"] if rows else start
        if rows:
            self.store.set_cursor(principal, mchid, cursor, iso_now(self.clock()))
        events = [{"event_id": r["event_id"], **json.loads(r["body"])} for r in rows]
        return {"events": events, "cursor": cursor, "has_more": len(rows) == limit}
