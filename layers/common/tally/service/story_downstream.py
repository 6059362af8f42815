"""What Tally sent on about an order, as lines of its story: the outbox's events (derived with the outbox's own
function, stable ids, R20) and each attempt to deliver them to a merchant's webhook endpoint."""

from __future__ import annotations

from typing import Any

from tally.domain.events import events_for_change
from tally.i18n import N_
from tally.service.story_entries import entry


def outbox_entries(order: dict[str, Any], refunds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for event in events_for_change(None, order):
        at = order.get("paid_at") if event.detail_type == "OrderPaid" else order.get("updated_at")
        out.append(
            entry(
                at or order.get("updated_at"),
                "outbox",
                N_("event %(event_type)s (id %(event_id)s)"),
                event.event_id,
                params={"event_type": event.detail_type, "event_id": event.event_id},
                state=event.detail_type,
                detail={"derived": True, "detail_type": event.detail_type},
            )
        )
    for f in refunds:
        for event in events_for_change(None, f):
            out.append(
                entry(
                    f.get("updated_at"),
                    "outbox",
                    N_("event %(event_type)s (id %(event_id)s)"),
                    event.event_id,
                    params={"event_type": event.detail_type, "event_id": event.event_id},
                    state=event.detail_type,
                    detail={"derived": True, "detail_type": event.detail_type},
                )
            )
    return out


def webhook_entries(webhooks: Any, mchid: str, out_trade_no: str) -> list[dict[str, Any]]:
    out = []
    for event in webhooks.order(mchid, out_trade_no) if webhooks is not None else []:
        for d in event["deliveries"]:
            stuck = d["status"] in (
                "FAILED",
                "HELD",
            )  # a paused endpoint: a person resends (a case is open)
            sent = {"event_type": event["type"], "endpoint_id": d["endpoint_id"]}
            if not d["attempts"]:
                out.append(
                    entry(
                        event["published_at"],
                        "webhook",
                        N_("webhook %(event_type)s to %(endpoint_id)s: %(webhook_status)s"),
                        event["event_id"],
                        params={**sent, "webhook_status": d["status"]},
                        state=d["status"],
                        needs_person=stuck,
                        detail={"endpoint_id": d["endpoint_id"]},
                    )
                )
            for a in d["attempts"]:
                out.append(
                    entry(
                        a["at"],
                        "webhook",
                        N_(
                            "webhook %(event_type)s to %(endpoint_id)s, attempt %(attempt)s: HTTP %(http_status)s "
                            "in %(latency_ms)s ms"
                        )
                        if a["http_status"]
                        else N_(
                            "webhook %(event_type)s to %(endpoint_id)s, attempt %(attempt)s: no answer in "
                            "%(latency_ms)s ms"
                        ),
                        event["event_id"],
                        params={
                            **sent,
                            "attempt": a["attempt"],
                            "http_status": a["http_status"],
                            "latency_ms": a["latency_ms"],
                        },
                        state=a["outcome"],
                        needs_person=stuck and a is d["attempts"][-1],
                        detail={"endpoint_id": d["endpoint_id"], "snippet": a["snippet"]},
                    )
                )
    return out
