"""Webhooks to the merchant's systems (docs/webhooks.md): what a receiver gets, in which order, how often retried.

Pure: the thin event built from a downstream event (R20), the message group that keeps one order's events in
order, the retry schedule and the endpoint's event filter. Signing (HMAC, the Standard Webhooks scheme) is in
service/webhooks.py, which may use hashlib.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from tally.domain.events import DownstreamEvent
from tally.domain.money import format_cents

EVENT_TYPES = ("OrderPaid", "OrderClosed", "RefundSucceeded", "RefundFailed", "EventGenerationFailed")
# Standard Webhooks' recommended spacing, stretched to three days: immediately, then after 5 s, 5 min, 30 min,
# 2 h, 5 h, 10 h, 10 h, then every 12 h (SQS's longest visibility timeout) until the window is over
RETRY_SCHEDULE_S = (5, 300, 1800, 7200, 18000, 36000, 36000, 43200)
RETRY_WINDOW_S = 3 * 86400
# the amounts of an event, each also given in yuan for a person reading the payload
_AMOUNTS = ("amount_cent", "paid_cent")


def wants(events: list[str] | tuple[str, ...], detail_type: str) -> bool:
    """An endpoint subscribed to `events` ("*" = all) takes this type."""
    return "*" in events or detail_type in events


def order_of(event: DownstreamEvent) -> tuple[str, str]:
    """(mchid, out_trade_no) the event is about: every event of an order shares it (refunds included)."""
    detail = event.detail
    return str(detail.get("mchid") or ""), str(detail.get("out_trade_no") or "")


def message_group(endpoint_id: str, event: DownstreamEvent) -> str:
    """The SQS FIFO message group: one per endpoint and order, so one order's events reach one endpoint in
    the order they happened while other orders (and other endpoints) flow in parallel. At most 128 chars."""
    mchid, out_trade_no = order_of(event)
    return f"{endpoint_id}#{mchid}#{out_trade_no}"[:128]


def thin(event: DownstreamEvent, api_url: str = "", at: str = "") -> dict[str, Any]:
    """The body a receiver gets (Standard Webhooks' `type`/`timestamp`/`data` envelope): ids, type, amounts
    in integer cents and in yuan, and the link to the full object (a signed GET /orders/{mchid}/{no})."""
    detail = dict(event.detail)
    data: dict[str, Any] = {k: v for k, v in detail.items() if v is not None}
    for name in _AMOUNTS:
        if isinstance(detail.get(name), int):
            data[name.replace("_cent", "_yuan")] = format_cents(detail[name])
    mchid, out_trade_no = order_of(event)
    if mchid and out_trade_no:
        path = f"/orders/{mchid}/{out_trade_no}"  # both are [A-Za-z0-9_|*-] at the channels: no escaping
        data["link"] = api_url.rstrip("/") + path if api_url else path
    when = (
        detail.get("paid_at") or detail.get("closed_at") or detail.get("occurred_at") or at
    )  # at: published
    return {"type": event.detail_type, "timestamp": when, "data": data}


def next_delay_s(
    attempts: int,
    first_at_s: float,
    now_s: float,
    schedule: tuple[int, ...] = RETRY_SCHEDULE_S,
    window_s: int = RETRY_WINDOW_S,
) -> int | None:
    """Seconds until the next attempt after `attempts` failed ones, or None when the window is over (the
    delivery becomes a case and the endpoint is paused)."""
    if attempts < 1:
        return 0
    delay = schedule[min(attempts - 1, len(schedule) - 1)] if schedule else 0
    if now_s + delay > first_at_s + window_s:
        return None
    return int(delay)


def address_refusal(address: str) -> str | None:
    """Why a webhook may not be sent to this IP address, or None: only the public internet is a receiver. A
    merchant's endpoint must not reach what sits beside Tally (SSRF): loopback (the Lambda runtime API), link-local
    (instance metadata), private and reserved ranges, multicast."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if not ip.is_global:
        return "a private or reserved address"
    return None
