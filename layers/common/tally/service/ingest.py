"""Ingest a channel notification: verify, decrypt, store raw, enqueue, ACK (R1–R10).

Only local writes and one enqueue happen here, so the channel's 5 s deadline holds (R10).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from tally.apigw import HttpRequest, HttpResponse
from tally.channels import wechatpay_v3 as wx
from tally.domain.notifications import Outcome, PaymentNotice
from tally.observability import M, count, logger
from tally.service.merchants import MerchantDirectory, UnknownMerchant
from tally.store.tables import ApplyQueue, EventStore, RawStore, iso_now, order_key, pending_pk

MAX_BODY_BYTES = 256 * 1024  # a WeChat notification is ~1-2 KB


class IngestService:
    def __init__(self, merchants: MerchantDirectory, raw: RawStore, events: EventStore, queue: ApplyQueue,
                 *, clock: Callable[[], float] = time.time, window_s: int = 300):
        self.merchants = merchants
        self.raw = raw
        self.events = events
        self.queue = queue
        self.clock = clock
        self.window_s = window_s

    # ------------------------------------------------------------ WeChat Pay v3

    def wechatpay_v3(self, request: HttpRequest) -> HttpResponse:
        mchid = request.path_params.get("mchid", "")
        if len(request.body) > MAX_BODY_BYTES:
            return self._reject(400, "body too large", mchid, request)
        try:
            merchant = self.merchants.wechatpay(mchid)
        except UnknownMerchant:
            return self._reject(404, "unknown merchant", mchid, request)
        try:
            self._verify(merchant, request)
        except wx.SignatureError as exc:
            if exc.probe:
                count(M.NOTIFY_PROBE)
                return _wx_ack(*wx.ack_failure(401, "signature probe rejected"))
            return self._reject(401, exc.reason, mchid, request)
        # Verified: from here on it is WeChat talking. Failures are certain, not retryable (R5).
        try:
            envelope = wx.parse_envelope(request.body)
            resource = wx.open_resource(envelope, merchant.creds.apiv3_key)
            notice = wx.to_payment_notice(resource)
        except wx.DecryptError as exc:
            return self._quarantine(request, mchid, f"undecryptable: {exc}", envelope_id=_envelope_id(request.body))
        if notice.mchid != mchid and notice.sp_mchid != mchid:
            return self._quarantine(request, mchid, f"resource merchant {notice.mchid} != URL merchant {mchid}",
                                    envelope_id=str(envelope.get("id") or ""))
        return self._store_payment(notice, request, envelope)

    def _verify(self, merchant: Any, request: HttpRequest) -> None:
        now = self.clock()
        try:
            wx.verify_signed(request.headers, request.body, merchant.creds.platform, now, self.window_s)
        except wx.SignatureError as exc:
            serial = exc.unknown_serial
            if not serial or serial.startswith(wx.PUBLIC_KEY_ID_PREFIX):
                raise
            # R3: an unknown certificate serial gets one refresh, then one more verify.
            if not self.merchants.refresh_platform_keys(merchant):
                raise
            wx.verify_signed(request.headers, request.body, merchant.creds.platform, now, self.window_s)

    def _store_payment(self, notice: PaymentNotice, request: HttpRequest, envelope: dict[str, Any]) -> HttpResponse:
        outcome = wx.outcome_of(notice.trade_state)
        if outcome is Outcome.IN_BETWEEN or not notice.transaction_id:
            # R8: no transaction id, no raw payment row; keep it as an event.
            self.events.put(str(envelope.get("id") or f"{notice.out_trade_no}#{notice.trade_state}"),
                            "in_between", self.clock(), channel=notice.channel, mchid=notice.mchid,
                            out_trade_no=notice.out_trade_no, trade_state=notice.trade_state)
            count(M.NOTIFY_IN_BETWEEN)
            return _wx_ack(*wx.ack_success())
        row = raw_row(notice, self.clock(), body=request.body, headers=request.headers,
                      envelope_id=str(envelope.get("id") or ""))
        existing = self.raw.put_new(row)
        if existing is not None and existing.get("handled") in (1, 2):
            count(M.NOTIFY_DUPLICATE)
            return _wx_ack(*wx.ack_success())  # R9: already booked or with a person
        try:
            self.queue.send(row["pk"], asdict(notice))
        except Exception as exc:  # noqa: BLE001 - any enqueue failure: the channel must retry
            count(M.ENQUEUE_FAILED)
            logger.error("enqueue failed; answering failure so the channel retries",
                         extra={"raw_key": row["pk"], "error": str(exc)})
            return _wx_ack(*wx.ack_failure(500, "enqueue failed, retry"))
        count(M.NOTIFY_DUPLICATE if existing else M.NOTIFY_ACCEPTED)
        return _wx_ack(*wx.ack_success())

    def _reject(self, status: int, reason: str, mchid: str, request: HttpRequest) -> HttpResponse:
        """R4: nothing written; a metric and a log line with the (untrusted) order hint."""
        count(M.NOTIFY_REJECTED)
        logger.warning("notification rejected", extra={"channel": wx.CHANNEL, "mchid": mchid[:32], "reason": reason,
                                                       "hint": _order_hint(request.body)})
        return _wx_ack(*wx.ack_failure(status, "rejected"))

    def _quarantine(self, request: HttpRequest, mchid: str, reason: str, envelope_id: str) -> HttpResponse:
        """R5: signed by the channel but unusable: keep it for a person, alarm, answer success."""
        event_id = envelope_id or f"quarantine#{wx.CHANNEL}#{mchid}#{int(self.clock() * 1000)}"
        self.events.put(event_id, "quarantined", self.clock(), channel=wx.CHANNEL, mchid=mchid, reason=reason,
                        body=request.body.decode("utf-8", "replace"), headers=_verify_headers(request.headers))
        count(M.NOTIFY_QUARANTINED)
        logger.error("notification quarantined", extra={"mchid": mchid, "reason": reason, "event_id": event_id})
        return _wx_ack(*wx.ack_success())


def raw_row(notice: PaymentNotice, now_s: float, *, body: bytes | None, headers: dict[str, str] | None,
            envelope_id: str = "") -> dict[str, Any]:
    """The raw payment row (R7, R13, R14): both amounts, the original body, handled = 0."""
    now = iso_now(now_s)
    key = notice.raw_key
    return {
        "pk": key, "channel": notice.channel, "transaction_id": notice.transaction_id,
        "mchid": notice.mchid, "sp_mchid": notice.sp_mchid, "out_trade_no": notice.out_trade_no,
        "order_pk": order_key(notice.mchid, notice.out_trade_no), "trade_state": notice.trade_state,
        "order_total_cent": notice.order_total_cent, "paid_cent": notice.paid_cent, "currency": notice.currency,
        "success_time": notice.success_time, "source": notice.source, "envelope_id": envelope_id or None,
        "body": body.decode("utf-8", "replace") if body is not None else None,
        "headers": _verify_headers(headers) if headers else None,
        "handled": 0, "attempts": 0, "notified_at": now, "pending_pk": pending_pk(0, key), "pending_at": now,
    }


def notice_from_raw(row: dict[str, Any]) -> PaymentNotice:
    return PaymentNotice(
        channel=row["channel"], transaction_id=row["transaction_id"], out_trade_no=row["out_trade_no"],
        mchid=row["mchid"], sp_mchid=row.get("sp_mchid"), trade_state=row["trade_state"],
        order_total_cent=int(row["order_total_cent"]), paid_cent=int(row["paid_cent"]), currency=row["currency"],
        success_time=row.get("success_time"), source=row.get("source", "notify"),
    )


def _wx_ack(status: int, body: str) -> HttpResponse:
    return HttpResponse(status, body)


def _verify_headers(headers: dict[str, str]) -> dict[str, str]:
    keep = ("wechatpay-signature", "wechatpay-timestamp", "wechatpay-nonce", "wechatpay-serial",
            "wechatpay-signature-type", "request-id")
    return {k: headers[k][:512] for k in keep if k in headers}


def _envelope_id(body: bytes) -> str:
    try:
        return str(json.loads(body).get("id") or "")[:64]
    except (ValueError, AttributeError, RecursionError):  # untrusted bytes: any shape, any depth
        return ""


def _order_hint(body: bytes) -> str:
    """The envelope id of an unverified body, for the log only: never trusted for business (R4)."""
    return _envelope_id(body[:4096])
