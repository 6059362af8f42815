"""Alipay's notify step (channel-spec §5): decode the form, verify RSA2 over it, parse a payment or a refund
report (§5.3, R29). service/ingest.py stores what this reads (channels/registry.ReadNotification)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.channels.alipay import wire as ali
from tally.channels.registry import ReadNotification


def read_notification(
    request: Any,
    merchant: Any,
    merchants: Any,
    *,
    clock: Callable[[], float],
    window_s: int,
    received_at: float | None = None,
) -> ReadNotification:
    app_id = request.path_params.get("app_id", "")
    try:
        params = ali.parse_form(request.body)
        ali.verify_notification(params, merchant.creds.keys)
    except ali.FormError as exc:
        return ReadNotification(reject=(400, str(exc), "unparseable"))
    except ali.SignatureError as exc:
        return ReadNotification(reject=(401, exc.reason, exc.cause))
    # Verified: Alipay is talking. Anything unusable from here is kept for a person (R5).
    notify_id = str(params.get("notify_id") or "")[:64]
    event_id = f"alipay#{notify_id}" if notify_id else ""
    if params.get("app_id") != app_id:
        return ReadNotification(
            quarantine=f"notification app_id {params.get('app_id')!r} != URL {app_id}", event_id=event_id
        )
    if ali.is_refund(params):  # a refund report, never a payment (§5.3, R29)
        return _refund(params, event_id)
    try:
        notice = ali.to_payment_notice(params)
    except ali.ParseError as exc:
        return ReadNotification(quarantine=f"unusable: {exc}", event_id=event_id)
    return ReadNotification(payments=(notice,), event_id=event_id)


def _refund(params: dict[str, str], event_id: str) -> ReadNotification:
    """An Alipay refund notification joins refund_raw keyed (alipay#out_biz_no, REFUND_SUCCESS): out_biz_no is
    our out_request_no = refund_no (R30); its cumulative refund_fee is checked when applied."""
    from tally.channels.alipay import refunds as alr

    try:
        notice = alr.refund_notice(params)
    except ali.ParseError as exc:
        return ReadNotification(quarantine=f"unusable refund: {exc}", event_id=event_id)
    return ReadNotification(refund=notice, event_id=event_id)
