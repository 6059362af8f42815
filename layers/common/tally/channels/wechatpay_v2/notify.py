"""WeChat Pay v2's notify step (channel-spec §4): parse the XML, verify its sign with the API key (a refund's
req_info is unsigned: decrypting it with the API key authenticates it), parse a payment or a refund report.
service/ingest.py stores what this reads (channels/registry.ReadNotification)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.channels.registry import ReadNotification
from tally.channels.wechatpay_v2 import wire as wx2


def read_notification(
    request: Any,
    merchant: Any,
    merchants: Any,
    *,
    clock: Callable[[], float],
    window_s: int,
    received_at: float | None = None,
) -> ReadNotification:
    mchid = request.path_params.get("mchid", "")
    try:
        params = wx2.parse_xml(request.body)
        if "req_info" in params:  # refund: unsigned, the encryption with the API key authenticates it
            refund = wx2.decrypt_req_info(params["req_info"], merchant.api_key)
        else:
            wx2.verify(params, merchant.api_key)
    except wx2.XmlError as exc:
        return ReadNotification(reject=(400, str(exc), "unparseable"))
    except wx2.SignatureError as exc:
        return ReadNotification(reject=(401, exc.reason, exc.cause))
    if params.get("mch_id") != mchid:
        return ReadNotification(quarantine=f"mch_id {params.get('mch_id')!r} != URL merchant {mchid}")
    if "req_info" in params:
        return _refund(refund, mchid)
    if params.get("return_code") != "SUCCESS":
        return ReadNotification(quarantine=f"return_code {params.get('return_code')!r}")
    try:
        notice = wx2.to_payment_notice(params)
    except wx2.ParseError as exc:
        return ReadNotification(quarantine=f"unusable: {exc}")
    return ReadNotification(payments=(notice,))


def _refund(refund: dict[str, str], mchid: str) -> ReadNotification:
    """A v2 refund notification joins the v3 ones in refund_raw (same channel and refund numbers, R29)."""
    try:
        notice = wx2.to_refund_notice(refund, mchid)
    except wx2.ParseError as exc:
        return ReadNotification(quarantine=f"unusable refund: {exc}")
    return ReadNotification(refund=notice)
