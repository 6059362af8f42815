"""Ingest a channel notification: verify, decrypt, store raw, enqueue, ACK (R1–R10).

Only local writes and one enqueue happen here, so the channel's 5 s deadline holds (R10).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from tally.apigw import HttpRequest, HttpResponse
from tally.channels import outcome_of
from tally.channels import registry as channel_registry
from tally.channels.registry import Channel, ReadNotification
from tally.domain.notifications import Outcome, PaymentNotice, is_merchant_id
from tally.observability import M, count, logger
from tally.service.merchants import MerchantDirectory, UnknownMerchant
from tally.service.refund_inbox import body_evidence, park_forgery
from tally.store.tables import ApplyQueue, EventStore, RawStore, event_key, iso_now, order_key, pending_pk

MAX_BODY_BYTES = 256 * 1024  # a WeChat notification is ~1-2 KB
REJECTED_KEPT = 20  # open kept rows per (channel, merchant, cause); the rest only counted (R40)
REJECTED_KEPT_GENUINE = 100  # apart from those, bodies that look like the channel's own (`looks_genuine`)
# causes a v3 callback reaches only with a fresh timestamp (and, but for unknown_serial, a key id we know)
LOOKS_GENUINE = frozenset({"bad_signature", "unknown_serial", "undecryptable"})
KEPT_BODY_BYTES = (
    4096  # a rejected body is kept whole (replayable) up to this; beyond, prefix + length + hash
)
STORED_BODY_BYTES = 64 * 1024  # a verified body is stored whole up to this: decoded it stays far below 400 KB


def stored_body(body: bytes, limit: int = STORED_BODY_BYTES, text: str | None = None) -> dict[str, Any]:
    """`body` as text when it is UTF-8 and at most `limit` bytes (replayable as it came); otherwise the
    bounded evidence only (R40): a decoded non-UTF-8 body can triple and pass DynamoDB's 400 KB item limit.
    `text`: `body.decode("utf-8")` when the channel already decoded it (ReadNotification.body_text)."""
    if len(body) <= limit:
        if text is not None:
            return {"body": text}
        try:
            return {"body": body.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"body": None, "body_truncated": True, **body_evidence(body)}


class Acks:
    """One channel's ACK protocol (R6): success and failure bodies with their content type."""

    def __init__(
        self,
        channel: str,
        success: Callable[[], tuple[int, str]],
        failure: Callable[[int, str], tuple[int, str]],
        content_type: str,
    ):
        self.channel = channel
        self._success = success
        self._failure = failure
        self.content_type = content_type
        self._answered: dict[str, HttpResponse] = {}  # success ACKs by outcome: immutable, built once

    def success(self, outcome: str = "accepted") -> HttpResponse:
        answer = self._answered.get(outcome)
        if answer is None:
            answer = HttpResponse(*self._success(), content_type=self.content_type, outcome=outcome)
            self._answered[outcome] = answer
        return answer

    def failure(self, status: int, message: str, outcome: str = "rejected") -> HttpResponse:
        return HttpResponse(*self._failure(status, message), content_type=self.content_type, outcome=outcome)

    @classmethod
    def of(cls, channel: Channel) -> Acks:
        """The channel's ACKs, named for metrics by its `api` (WeChat v2) or stored channel."""
        return cls(
            channel.api or channel.stored, channel.ack_success, channel.ack_failure, channel.ack_content_type
        )


ACKS = {channel.name: Acks.of(channel) for channel in channel_registry.all_channels()}


def failure_for_path(path: str, status: int, message: str) -> HttpResponse:
    """A failure ACK in the protocol of the channel the path belongs to (unusable events, unknown routes);
    a path of no channel is answered in WeChat v3's JSON."""
    channel = channel_registry.by_path(path)
    return ACKS[(channel or channel_registry.default()).name].failure(status, message)


class IngestService:
    def __init__(
        self,
        merchants: MerchantDirectory,
        raw: RawStore,
        events: EventStore,
        queue: ApplyQueue,
        *,
        clock: Callable[[], float] = time.time,
        window_s: int = 300,
        refund_inbox: Callable[[], Any] | None = None,
    ):
        """`refund_inbox` builds the RefundInbox (bootstrap.refund_inbox, cached): called on the first refund
        notification, so a container that only ever sees payments never imports the refund code (cold start)."""
        self.merchants = merchants
        self.refund_inbox = refund_inbox
        self.raw = raw
        self.events = events
        self.queue = queue
        self.clock = clock
        self.window_s = window_s

    def notify(
        self, channel: Channel, request: HttpRequest, *, received_at: float | None = None
    ) -> HttpResponse:
        """A callback on the channel's notify route (functions/notify finds the channel by its routeKey; a
        manual replay by the kept row). `received_at`: v3's timestamp window judged by the first arrival.
        The channel reads the bytes (channels/<name>/notify.py); this stores what it read."""
        acks = ACKS[channel.name]
        merchant_id = request.path_params.get(channel.merchant_param, "")
        if len(request.body) > MAX_BODY_BYTES:
            return self._reject(400, "body too large", merchant_id, request, acks, cause="too_large")
        try:
            merchant = channel.merchant(self.merchants, merchant_id)
        except UnknownMerchant:
            return self._reject(404, "unknown merchant", merchant_id, request, acks, cause="unknown_merchant")
        read = channel.read_notification(
            request,
            merchant,
            self.merchants,
            clock=self.clock,
            window_s=self.window_s,
            received_at=received_at,
        )
        if read.probe:
            count(M.NOTIFY_PROBE, channel=acks.channel, merchant=merchant_id)
            return acks.failure(401, "signature probe rejected", "probe")
        if read.echo:
            # the channel checking keys and route (v3 SECURITY_ECHO, the heartbeat's echo): verified and decrypted;
            # only its arrival is kept, on the merchant's one echo row (service/heartbeat.py reads it)
            if received_at is None:
                self.events.echo_arrived(channel.route, merchant_id, self.clock())
            count(M.NOTIFY_ECHO, channel=acks.channel, merchant=merchant_id)
            return acks.success("echo")
        if read.reject is not None:
            status, reason, cause = read.reject
            return self._reject(status, reason, merchant_id, request, acks, keep=True, cause=cause)
        if read.quarantine is None and (named := _not_merchant_ids(read)):
            # signed, but it names a merchant no channel could have: never a key, a filter or an item's owner
            read = ReadNotification(
                quarantine=f"names {named[:40]!r}, which is not a merchant id", event_id=read.event_id
            )
        if read.quarantine is not None:
            # no logger.append_keys on the accepted path: it logs nothing, and the lines that do name their keys
            for notice in read.payments:
                logger.append_keys(raw_key=notice.raw_key, order=order_key(notice.mchid, notice.out_trade_no))
            return self._quarantine(request, merchant_id, read.quarantine, read.event_id, acks)
        if read.refund is not None:
            return self._store_refund(read, request, merchant_id, channel, acks)
        if read.group is not None:
            return self._store_combine(read, request, merchant_id, channel, acks)
        (notice,) = read.payments
        if (
            parked := self._unauthorised(channel.merchant_kind, merchant_id, notice, request, acks)
        ) is not None:
            return parked
        return self._store_payment(
            notice, request, read.event_id, acks, api=channel.api, body_text=read.body_text
        )

    def _store_combine(
        self, read: ReadNotification, request: HttpRequest, mchid: str, channel: Channel, acks: Acks
    ) -> HttpResponse:
        """A combine notification split into its sub-orders in one step: each sub-order is an ordinary payment
        (its own raw row keyed by its transaction_id, its own booking), so a duplicate or a redelivery after a
        partial failure stores and books each sub-order once (R7, R9). A sub-order for a merchant the URL
        merchant may not speak for is parked on its own (R39); the genuine ones are still booked. Any enqueue
        failure answers failure, so the channel redelivers the whole notification."""
        combine_no, notices = read.group, read.payments
        outcomes = []
        for notice in notices:
            if (
                parked := self._unauthorised(channel.merchant_kind, mchid, notice, request, acks)
            ) is not None:
                outcomes.append(parked.outcome)
                continue
            # per sub-order: an event row (in-between or no id) of one sub-order must not take another's key
            own = f"{read.event_id or combine_no}#{notice.out_trade_no}"
            answer = self._store_payment(
                notice, request, own, acks, api=channel.api, body_text=read.body_text
            )
            if answer.status >= 500:
                return answer
            outcomes.append(answer.outcome)
        logger.info(
            "combine notification split",
            extra={"combine_out_trade_no": combine_no, "sub_orders": len(notices), "outcomes": outcomes},
        )
        best = next(
            (
                o
                for o in ("no_transaction_id", "accepted", "duplicate", "in_between", "forged")
                if o in outcomes
            ),
            "accepted",
        )
        return acks.success(best)

    def _unauthorised(
        self, merchant_channel: str, url_id: str, notice: Any, request: HttpRequest, acks: Acks
    ) -> HttpResponse | None:
        """R39: a report verified with the URL merchant's keys may speak for that merchant, or for a merchant
        whose configuration names the URL merchant as its service provider / authorised ISV app
        (`tally merchant add … --sp-mchid / --sp-app-id`). Anything else is parked before any raw row is
        written, so it cannot take the key the genuine report needs. None = authorised."""
        if notice.mchid == url_id and not notice.sp_mchid:
            return None
        row = self.merchants.store.get(merchant_channel, notice.mchid) if notice.sp_mchid == url_id else None
        partner = row is not None and row.get("mode") == "partner"
        provider = (row.get("sp_mchid") or row.get("sp_app_id")) if partner and row else None
        if provider == url_id:
            return None
        refund_no = getattr(notice, "refund_no", None)
        park_forgery(
            self.events,
            self.clock(),
            channel=notice.channel,
            mchid=notice.mchid,
            cause="provider_not_authorised",
            reason=f"{url_id} reported for merchant {notice.mchid}, which has not authorised it as its provider",
            body=request.body,
            refund_no=refund_no,
            out_trade_no=notice.out_trade_no,
            amount_cent=_claimed_amount(notice),
            url_merchant=url_id,
        )
        return acks.success("forged")  # signed by the URL merchant's keys: answered, never retried

    def _store_payment(
        self,
        notice: PaymentNotice,
        request: HttpRequest,
        event_id: str,
        acks: Acks,
        api: str | None = None,
        body_text: str | None = None,
    ) -> HttpResponse:
        outcome = outcome_of(notice.channel, notice.trade_state)
        if outcome is Outcome.PAID and not notice.transaction_id:
            # money reported without the id that keys it (R7): no raw row can hold it; a person (R9, R41)
            self.events.put(
                event_key(
                    "no_transaction_id",
                    notice.channel,
                    notice.mchid,
                    event_id or f"{notice.out_trade_no}#{notice.trade_state}",
                ),
                "no_transaction_id",
                self.clock(),
                manual_kind="no_transaction_id",
                channel=notice.channel,
                mchid=notice.mchid,
                out_trade_no=notice.out_trade_no,
                trade_state=notice.trade_state,
                amount_cent=notice.paid_cent,
                reason=f"{notice.trade_state} reported without a transaction id: nothing booked",
                body=request.body.decode("utf-8", "replace")[:20000],
            )
            count(M.NOTIFY_NO_TRANSACTION_ID, channel=acks.channel, merchant=notice.mchid)
            return acks.success("no_transaction_id")  # its own outcome: a replay must not take it for done
        if outcome is Outcome.IN_BETWEEN or not notice.transaction_id:
            # R8: no transaction id, no raw payment row; keep it as an event.
            self.events.put(
                event_key(
                    "in_between",
                    notice.channel,
                    notice.mchid,
                    event_id or f"{notice.out_trade_no}#{notice.trade_state}",
                ),
                "in_between",
                self.clock(),
                channel=notice.channel,
                mchid=notice.mchid,
                out_trade_no=notice.out_trade_no,
                trade_state=notice.trade_state,
            )
            count(M.NOTIFY_IN_BETWEEN, channel=acks.channel, merchant=notice.mchid)
            return acks.success("in_between")
        row = raw_row(
            notice,
            self.clock(),
            body=request.body,
            headers=request.headers,
            envelope_id=event_id,
            body_text=body_text,
        )
        if api:
            row["notify_api"] = api
        existing = self.raw.put_new(row)
        if existing is not None and existing.get("order_pk") != row["order_pk"]:
            # R39: the channel's transaction id is global; a report naming it for another order (another
            # tenant's) must not be taken for a duplicate of the row there: parked for a person, alarmed
            park_forgery(
                self.events,
                self.clock(),
                channel=notice.channel,
                mchid=notice.mchid,
                cause="transaction_of_another_order",
                reason=f"transaction {notice.transaction_id[:64]} is already reported for another order",
                body=request.body,
                out_trade_no=notice.out_trade_no,
                amount_cent=notice.order_total_cent,
            )
            return acks.success("forged")
        if existing is not None and existing.get("handled") in (1, 2):
            count(M.NOTIFY_DUPLICATE, channel=acks.channel, merchant=notice.mchid)
            return acks.success("duplicate")  # R9: already booked or with a person
        try:
            self.queue.send(row["pk"], notice.as_message())
        except Exception as exc:  # noqa: BLE001 - any enqueue failure: the channel must retry
            count(M.ENQUEUE_FAILED, channel=acks.channel, merchant=notice.mchid)
            logger.error(
                "enqueue failed; answering failure so the channel retries",
                extra={"raw_key": row["pk"], "order": row["order_pk"], "error": str(exc)},
            )
            return acks.failure(500, "enqueue failed, retry", "enqueue_failed")
        count(
            M.NOTIFY_DUPLICATE if existing else M.NOTIFY_ACCEPTED, channel=acks.channel, merchant=notice.mchid
        )
        return acks.success("duplicate" if existing else "accepted")

    def _store_refund(
        self, read: ReadNotification, request: HttpRequest, mchid: str, channel: Channel, acks: Acks
    ) -> HttpResponse:
        """R7/R30: raw refund row keyed (channel#refund_no, status), enqueue, ACK (service/refund_inbox.py);
        a v2 refund joins the v3 ones (same channel and refund numbers, R29)."""
        if self.refund_inbox is None:
            return self._quarantine(
                request, mchid, "refund notification but no refund inbox", read.event_id, acks
            )
        refund = read.refund
        if (parked := self._unauthorised(channel.merchant_kind, mchid, refund, request, acks)) is not None:
            return parked
        ok = self.refund_inbox().accept(
            refund,
            body=stored_body(request.body)["body"],
            headers=_verify_headers(request.headers) if read.refund_headers else {},
            envelope_id=read.event_id,
        )
        return acks.success() if ok else acks.failure(500, "enqueue failed, retry", "enqueue_failed")

    def _reject(
        self,
        status: int,
        reason: str,
        mchid: str,
        request: HttpRequest,
        acks: Acks,
        *,
        cause: str,
        keep: bool = False,
    ) -> HttpResponse:
        """R4: no business state; a metric and a log line with the (untrusted) order hint. With `keep`
        (a configured merchant's callback that failed verification) the body is kept for a while, so a
        person can replay it after fixing a key (`tally manual replay`); it is never applied unverified.

        R40, bounded: the kept row holds the body whole only up to 4 KB (a real channel body is 1-3 KB),
        else its first 4 KB, length and SHA-256; each row has a `cause`; per (channel, merchant, cause) every
        rejection is counted on one aggregate row, and at most REJECTED_KEPT rows are open at a time, plus
        REJECTED_KEPT_GENUINE for bodies that look like the channel's own (a fresh timestamp and a key id it
        uses), so junk cannot take the slots the channel's genuine rejected callback needs. A kept row has
        no lifetime until a person closes it (R51); closing it frees its slot."""
        count(M.NOTIFY_REJECTED, channel=acks.channel, merchant=mchid)
        logger.warning(
            "notification rejected",
            extra={
                "channel": acks.channel,
                "mchid": mchid[:32],
                "reason": reason,
                "cause": cause,
                "hint": _order_hint(request.body),
            },
        )
        if keep:
            now = self.clock()
            group: dict[str, Any] = {"channel": acks.channel, "mchid": mchid[:32], "cause": cause}
            aggregate = f"rejected-count#{acks.channel}#{mchid[:32]}#{cause}"
            pool, cap = (
                ("genuine", REJECTED_KEPT_GENUINE)
                if looks_genuine(cause, request)
                else ("other", REJECTED_KEPT)
            )
            _seen, slot = self.events.count_rejection(aggregate, now, pool=pool, cap=cap, **group)
            if slot:
                row: dict[str, Any] = {"aggregate_pk": aggregate, "slot_pool": pool}
                written = self.events.put(
                    f"rejected#{acks.channel}#{mchid[:32]}#{_digest(request.body)}",
                    "rejected",
                    now,
                    manual_kind="rejected",
                    reason=reason[:200],
                    headers=_verify_headers(request.headers),
                    **row,
                    **group,
                    **{**body_evidence(request.body), **stored_body(request.body, KEPT_BODY_BYTES)},
                )
                if written is None:  # the same body is kept already: the slot goes back
                    self.events.release_slot(row)
        return acks.failure(status, "rejected")

    def _quarantine(
        self, request: HttpRequest, mchid: str, reason: str, envelope_id: str, acks: Acks
    ) -> HttpResponse:
        """R5: signed by the channel but unusable: keep it for a person, alarm, answer success."""
        event_id = event_key("quarantined", acks.channel, mchid, envelope_id or str(int(self.clock() * 1000)))
        self.events.put(
            event_id,
            "quarantined",
            self.clock(),
            manual_kind="quarantined",
            channel=acks.channel,
            mchid=mchid,
            reason=reason,
            headers=_verify_headers(request.headers),
            **stored_body(request.body),
        )
        count(M.NOTIFY_QUARANTINED, channel=acks.channel, merchant=mchid)
        logger.error(
            "notification quarantined", extra={"mchid": mchid, "reason": reason, "event_id": event_id}
        )
        return acks.success("quarantined")


def raw_row(
    notice: PaymentNotice,
    now_s: float,
    *,
    body: bytes | None,
    headers: dict[str, str] | None,
    envelope_id: str = "",
    body_text: str | None = None,
) -> dict[str, Any]:
    """The raw payment row (R7, R13, R14): both amounts, the original body, handled = 0. `body_text`: the body
    as the channel decoded it (`stored_body`'s `text`), so it is not decoded twice."""
    now = iso_now(now_s)
    key = notice.raw_key
    return {
        "pk": key,
        "channel": notice.channel,
        "transaction_id": notice.transaction_id,
        "mchid": notice.mchid,
        "sp_mchid": notice.sp_mchid,
        "out_trade_no": notice.out_trade_no,
        "order_pk": order_key(notice.mchid, notice.out_trade_no),
        "trade_state": notice.trade_state,
        "order_total_cent": notice.order_total_cent,
        "paid_cent": notice.paid_cent,
        "currency": notice.currency,
        "success_time": notice.success_time,
        "source": notice.source,
        "settlement": notice.settlement,  # R43: what the apply step books next to paid_cent
        "settlement_error": notice.settlement_error,
        "envelope_id": envelope_id or None,
        **(stored_body(body, text=body_text) if body is not None else {"body": None}),
        "headers": _verify_headers(headers) if headers else None,
        "handled": 0,
        "attempts": 0,
        "notified_at": now,
        "pending_pk": pending_pk(0, key),
        "pending_at": now,
    }


def notice_from_raw(row: Mapping[str, Any]) -> PaymentNotice:
    return PaymentNotice(
        channel=row["channel"],
        transaction_id=row["transaction_id"],
        out_trade_no=row["out_trade_no"],
        mchid=row["mchid"],
        sp_mchid=row.get("sp_mchid"),
        trade_state=row["trade_state"],
        order_total_cent=int(row["order_total_cent"]),
        paid_cent=int(row["paid_cent"]),
        currency=row["currency"],
        success_time=row.get("success_time"),
        source=row.get("source", "notify"),
        settlement={k: int(v) for k, v in row["settlement"].items()} if row.get("settlement") else None,
        settlement_error=row.get("settlement_error"),
    )


def _not_merchant_ids(read: ReadNotification) -> str:
    """The first merchant id a verified report names that is not one (1-32 digits, `is_merchant_id`), or ''."""
    for notice in (*read.payments, *((read.refund,) if read.refund is not None else ())):
        for value in (notice.mchid, notice.sp_mchid):
            if value and not is_merchant_id(value):
                return str(value)
    return ""


def _claimed_amount(notice: Any) -> int | None:
    for name in ("refund_cent", "cumulative_cent", "order_total_cent"):
        value = getattr(notice, name, None)
        if value is not None:
            return int(value)
    return None


def looks_genuine(cause: str, request: HttpRequest) -> bool:
    """A rejected v3 callback that looks like the channel's own: it passed the timestamp window (and the key id
    lookup, but for a rotated serial) and its body is the channel's envelope (event_type, an encrypted
    resource). Its kept rows have slots of their own, so junk cannot crowd out the channel's callback that a
    key fix would book (R40). Only someone who sees the merchant's callbacks can make junk look like this."""
    if cause not in LOOKS_GENUINE or "wechatpay-timestamp" not in request.headers:
        return False
    try:
        envelope = json.loads(request.body[:KEPT_BODY_BYTES])
    except (ValueError, RecursionError):
        return False
    resource = envelope.get("resource") if isinstance(envelope, dict) else None
    return isinstance(resource, dict) and "ciphertext" in resource and "event_type" in envelope


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:32]


_VERIFY_HEADERS = channel_registry.replay_header_names()  # the headers a channel signs (channels/<name>)


def _verify_headers(headers: dict[str, str]) -> dict[str, str]:
    """The headers a replay verifies with, each at most 512 characters (a loop: a comprehension is a frame of
    its own on every callback)."""
    kept = {}
    for name in _VERIFY_HEADERS:
        value = headers.get(name)
        if value is not None:
            kept[name] = value[:512]
    return kept


def _order_hint(body: bytes) -> str:
    """The JSON id of an unverified body (v3's envelope id), for the log only: never trusted for business (R4)."""
    try:
        return str(json.loads(body[:4096]).get("id") or "")[:64]
    except (ValueError, AttributeError, RecursionError):  # untrusted bytes: any shape, any depth
        return ""
