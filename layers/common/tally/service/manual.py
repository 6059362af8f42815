"""The manual queue: what a person must look at, and the two ways out — resolve or replay.

Items: raw notifications at handled=2 (mismatch, unknown state, order not found, illegal) and
notifications kept in notify_event (quarantined after a valid signature, or rejected for their
signature). Every action is recorded on the row (who, when, what, why); nothing is deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tally import errors
from tally.apigw import HttpRequest
from tally.channels import registry as channel_registry
from tally.domain.journal import Ref
from tally.observability import M, count, logger
from tally.service.ingest import IngestService, notice_from_raw
from tally.service.journal import SYSTEM_CHAIN, DecisionJournal
from tally.store.manual import ManualStore, NotWaiting
from tally.store.records import RawRow
from tally.store.tables import ApplyQueue, RawStore, iso_now, order_key

RAW_TABLE = "notify_raw"  # the raw row's logical name in journal records (its history is exported)

RAW, EVENT = "raw", "event"
EVENT_KINDS = ("quarantined", "rejected")


class ManualError(errors.Conflict, ValueError):
    """The action does not fit the item (already resolved, unknown id …): the message says why."""


class ManualQueue:
    def __init__(
        self,
        store: ManualStore,
        raw: RawStore,
        queue: ApplyQueue,
        ingest: IngestService,
        *,
        clock: Callable[[], float] = time.time,
        journal: DecisionJournal | None = None,
    ):
        self.store = store
        self.journal = journal  # a replay is a person's action: journaled in the write that requeues the row
        self.raw = raw
        self.queue = queue
        self.ingest = ingest
        self.clock = clock

    # ------------------------------------------------------------ reading

    def list(self) -> list[dict[str, Any]]:
        items = [self._raw_item(row) for row in self.store.raw_waiting()]
        items += [self._event_item(row) for kind in EVENT_KINDS for row in self.store.events_waiting(kind)]
        return sorted(items, key=lambda item: item["since"])

    def show(self, item_id: str) -> dict[str, Any]:
        kind, key = _split(item_id)
        row: Any = self.store.raw(key) if kind == RAW else self.store.event(key)
        if row is None:
            raise ManualError(f"no manual item {item_id}")
        return {"id": item_id, **row}

    # ------------------------------------------------------------ acting

    def resolve(self, item_id: str, *, by: str, action: str, why: str) -> dict[str, Any]:
        """A person dealt with it outside Tally (refunded by hand, booked by hand, confirmed junk)."""
        kind, key = _split(item_id)
        entry = self._history(by, f"resolve: {action}", why)
        try:
            if kind == RAW:
                self.store.resolve_raw(key, entry)
            else:
                self.store.resolve_event(key, entry)
        except NotWaiting:
            raise _not_waiting(key) from None
        count(M.MANUAL_RESOLVED)
        logger.info("manual item resolved", extra={"item": item_id, "by": by, "action": action})
        return self.show(item_id)

    def replay(self, item_id: str, *, by: str, why: str) -> dict[str, Any]:
        """Send it through the product path again, after a fix (order created, key rotated …)."""
        kind, key = _split(item_id)
        entry = self._history(by, "replay", why)
        if kind == RAW:
            return self._replay_raw(item_id, key, entry)
        return self._replay_event(item_id, key, entry)

    def _replay_raw(self, item_id: str, key: str, entry: dict[str, Any]) -> dict[str, Any]:
        now = iso_now(self.clock())
        try:
            row = self._requeue(key, entry, now)
        except NotWaiting:
            raise _not_waiting(key) from None
        self.queue.send(key, _notice_dict(row))
        count(M.MANUAL_REPLAYED)
        return {"id": item_id, "outcome": "requeued", "raw_key": key}

    def _requeue(self, key: str, entry: dict[str, Any], now: str) -> RawRow:
        """The raw row back to the worker; with a journal, `queue.replay` (who, why, which payment) in the same
        transaction, pinning the history line, in the order's lane of its merchant's chain."""
        if self.journal is None:
            return self.store.requeue_raw(key, entry, now)
        row = self.store.get_raw(key)
        if row is None:
            raise NotWaiting(key)
        return self.journal.retrying(
            str(row.get("mchid") or SYSTEM_CHAIN),
            order_key(str(row.get("mchid")), str(row.get("out_trade_no"))),
            kind="queue.replay",
            at=str(entry["at"]),
            facts={**entry, "raw_key": key, "transaction_id": row.get("transaction_id")},
            refs=[Ref(RAW_TABLE, key, {"history[]": entry})],
            write=lambda append: self.store.requeue_raw_journaled(key, entry, now, append),
        )

    def _replay_event(self, item_id: str, key: str, entry: dict[str, Any]) -> dict[str, Any]:
        row = self.show(item_id)
        if not row.get("manual_kind"):
            raise ManualError(f"{item_id} is not in the manual queue (resolved or replayed already)")
        response = self._ingest_again(row)
        if response.outcome == "no_transaction_id":  # read now, but nothing booked: this item stays (L1)
            raise ManualError(
                f"replay of {item_id} now reads as a paid report without a transaction id: nothing was booked "
                "and it is kept as a no-transaction-id item; resolve this one with a reason once that one is done"
            )
        if response.outcome not in ("accepted", "duplicate", "in_between"):
            raise ManualError(
                f"replay of {item_id} was {response.outcome} again: fix the cause first "
                f"(`tally verify` tells why)"
            )
        try:
            self.store.resolve_event(key, entry, recorded={**entry, "outcome": response.outcome})
        except NotWaiting:
            raise _not_waiting(key) from None
        count(M.MANUAL_REPLAYED)
        return {"id": item_id, "outcome": response.outcome}

    def _ingest_again(self, row: dict[str, Any]) -> Any:
        """The kept body through the same ingest code as when it arrived (per channel)."""
        channel, merchant_id = row.get("channel"), row["mchid"]
        if row.get("body") is None:  # R40: only a prefix of a large or non-UTF-8 body was kept
            raise ManualError(
                f"only the first 4 KB of this {row.get('body_len')}-byte body were kept (sha256 "
                f"{row.get('body_sha256')}): it cannot be replayed; a real payment is fetched from the "
                "channel by the poller, so resolve this item once its order shows it"
            )
        body = str(row["body"]).encode("utf-8")
        headers = dict(row.get("headers") or {})
        # the row's channel is the ACK's (channels/registry.py): "wechatpay" (v3), "wechatpay_v2", "alipay"
        found = channel_registry.find(lambda c: (c.api or c.stored) == channel)
        if found is None:
            raise ManualError(f"no replay path for channel {channel!r}")
        created = row.get("created_at")
        received_at = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() if created else None
        request = HttpRequest(
            "POST", f"/notify/{found.route}/{merchant_id}", headers, body, {found.merchant_param: merchant_id}
        )
        return self.ingest.notify(found, request, received_at=received_at)

    # ------------------------------------------------------------ helpers

    def _history(self, by: str, action: str, why: str) -> dict[str, Any]:
        if not by.strip() or not why.strip():
            raise ManualError("say who you are (--by) and why (--why): the row keeps both")
        return {"at": iso_now(self.clock()), "by": by.strip(), "action": action, "why": why.strip()}

    def _raw_item(self, row: RawRow) -> dict[str, Any]:
        return {
            "id": f"{RAW}:{row['pk']}",
            "kind": "unbooked payment",
            "channel": row.get("channel"),
            "mchid": row.get("mchid"),
            "order": row.get("out_trade_no"),
            "since": row.get("pending_at"),
            "amount_cent": row.get("paid_cent"),
            "why": row.get("manual_reason"),
        }

    def _event_item(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"{EVENT}:{row['pk']}",
            "kind": row.get("kind"),
            "channel": row.get("channel"),
            "mchid": row.get("mchid"),
            "order": None,
            "since": row.get("created_at"),
            "amount_cent": None,
            "why": row.get("reason"),
        }


def _split(item_id: str) -> tuple[str, str]:
    kind, _, key = item_id.partition(":")
    if kind not in (RAW, EVENT) or not key:
        raise ManualError(f"manual item ids look like raw:<channel#id> or event:<id>, not {item_id!r}")
    return kind, key


def _not_waiting(key: str) -> ManualError:
    return ManualError(f"{key} is not waiting for a person (already resolved, replayed or booked)")


def _notice_dict(row: RawRow) -> dict[str, Any]:
    return notice_from_raw(row).as_message()
