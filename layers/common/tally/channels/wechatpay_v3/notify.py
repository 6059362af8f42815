"""WeChat Pay v3's notify step (channel-spec §1): verify the signature over the raw bytes (one key refresh
for an unknown serial, R3), decrypt the resource, parse it into a payment, a combine's sub-orders or a
refund report. service/ingest.py stores what this reads (channels/registry.ReadNotification)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tally.channels.registry import ReadNotification
from tally.channels.wechatpay_v3 import combine as wxc
from tally.channels.wechatpay_v3 import refunds as wxr
from tally.channels.wechatpay_v3 import wire as wx
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

SECURITY_ECHO = "SECURITY_ECHO."  # event_type SECURITY_ECHO.SUCCESS: no money, nothing to store


def read_notification(
    request: Any,
    merchant: Any,
    merchants: Any,
    *,
    clock: Callable[[], float],
    window_s: int,
    received_at: float | None = None,
) -> ReadNotification:
    """`received_at` judges the timestamp window by the original arrival (manual replay)."""
    mchid = request.path_params.get("mchid", "")
    try:
        _verify(merchants, merchant, request, clock() if received_at is None else received_at, window_s)
    except wx.WeChatSignatureError as exc:
        if exc.probe:
            return ReadNotification(probe=True)
        return ReadNotification(reject=(401, exc.reason, exc.cause))
    # Verified: from here on it is WeChat talking. Failures are certain, not retryable (R5).
    text = wx.body_text(request.body)  # decoded once: the envelope parse and the raw row's stored body
    try:
        envelope = wx.parse_envelope(request.body, text)
        resource = wx.open_resource(envelope, merchant.creds.apiv3_key)
        envelope_id = str(envelope.get("id") or "")
        if str(envelope.get("event_type") or "").startswith(SECURITY_ECHO):
            # POST /v3/security/echo's callback (docs/channels.md): signed and decrypted, so keys and route work
            return ReadNotification(echo=True, event_id=envelope_id)
        if wxr.is_refund_event(envelope):  # REFUND.SUCCESS / ABNORMAL / CLOSED share this URL (§1.5)
            refund = wxr.to_refund_notice(resource)
            if refund.mchid != mchid and refund.sp_mchid != mchid:
                return ReadNotification(
                    quarantine=f"refund for merchant {refund.mchid} on URL {mchid}", event_id=envelope_id
                )
            return ReadNotification(refund=refund, refund_headers=True, event_id=envelope_id)
        if wxc.is_combine(resource):  # one notification, several sub-orders: each booked on its own
            combine_mchid, combine_no, notices = wxc.sub_notices(resource)
            if combine_mchid != mchid:
                return ReadNotification(
                    quarantine=f"combine merchant {combine_mchid} != URL merchant {mchid}",
                    event_id=envelope_id,
                )
            return ReadNotification(
                payments=tuple(notices), group=combine_no, event_id=envelope_id, body_text=text
            )
        notice = wx.to_payment_notice(resource)
    except wx.DecryptError as exc:
        return ReadNotification(quarantine=f"undecryptable: {exc}", event_id=_envelope_id(request.body))
    if notice.mchid != mchid and notice.sp_mchid != mchid:
        return ReadNotification(
            quarantine=f"resource merchant {notice.mchid} != URL merchant {mchid}",
            event_id=envelope_id,
            payments=(notice,),
        )
    return ReadNotification(payments=(notice,), event_id=envelope_id, body_text=text)


def _verify(merchants: Any, merchant: Any, request: Any, now: float, window_s: int) -> None:
    try:
        wx.verify_signed(request.headers, request.body, merchant.creds.platform, now, window_s)
    except wx.WeChatSignatureError as exc:
        serial = exc.unknown_serial
        if not serial or serial.startswith(wx.PUBLIC_KEY_ID_PREFIX):
            raise
        # R3: an unknown certificate serial gets one refresh, then one more verify.
        if not wechatpay_v3_desk(merchants).refresh_platform_keys(merchant):
            raise
        wx.verify_signed(request.headers, request.body, merchant.creds.platform, now, window_s)


def _envelope_id(body: bytes) -> str:
    try:
        return str(json.loads(body).get("id") or "")[:64]
    except (ValueError, AttributeError, RecursionError):  # untrusted bytes: any shape, any depth
        return ""
