"""An action's one write on the row behind a work-queue item, one method per source (`_payment`, `_kept`,
`_report`, `_refund`, `_task`, `_diff`, `_day`, `_order`); money moves only through the product's own paths."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tally.domain.money import format_cents
from tally.service.journal import DecisionJournal
from tally.service.queue_journal import ItemJournal
from tally.service.queue_terms import ACKNOWLEDGED, RESOLVED, QueueError, _closed_state
from tally.store.queue import Expect, QueueStore
from tally.store.tables import iso_now


class SourceWrites:
    """`write(item, action, entry, fields)`: the action on the item's source row, with its history entry."""

    def __init__(
        self,
        store: QueueStore,
        *,
        manual: Any = None,
        refunds: Any = None,
        recon: Any = None,
        republish: Any = None,
        clock: Callable[[], float] = time.time,
        journal: DecisionJournal | None = None,
    ):
        self.store = store
        self.manual = manual
        self.refunds = refunds
        self.recon = recon
        self.republish = republish  # an event-generation-failed case's replay (service/outbox.py)
        self.clock = clock
        self.journal = ItemJournal(store, journal)  # issue #36: every person's action is journaled

    def write(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        """The action's write on the item's source (its `source_kind` names the method); says what was done."""
        return getattr(self, "_" + item["source_kind"])(item, action, entry, fields)

    def _payment(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        key, outcome = {"pk": item["source_key"]}, ""
        if action == "replay":
            return self._manual().replay("raw:" + item["source_key"], by=entry["by"], why=entry["why"])[
                "outcome"
            ]
        if action == "accept-amount":
            return self._accept_amount(item, entry)
        if action == "refund-now":
            outcome = self._refund_now(self._payment_task(item))
            action = "resolve"  # the payment's item closes: its money goes back through the refund
        if action == "ack":
            self.journal.record(
                item,
                self.store.t.notify_raw,
                key,
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.PAYMENT_UNBOOKED,
            )
            return "acknowledged"
        self.journal.record(
            item,
            self.store.t.notify_raw,
            key,
            entry,
            state=_closed_state(action),
            expect=Expect.PAYMENT_UNBOOKED,
            sets={"resolution": entry},
            remove=("pending_pk", "pending_at"),
        )
        return outcome or _closed_state(action).lower()

    def _kept(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        outcomes = []
        for pk in item["source_keys"]:
            if action == "replay" and item["kind"] == "event-generation-failed":
                outcomes.append(self._republish(pk, entry))
                continue
            if action == "replay":
                outcomes.append(
                    self._manual().replay("event:" + pk, by=entry["by"], why=entry["why"])["outcome"]
                )
                continue
            ack = action == "ack"
            self.journal.record(
                item,
                self.store.t.notify_event,
                {"pk": pk},
                entry,
                state=ACKNOWLEDGED if ack else _closed_state(action),
                owner=(fields.get("owner") or entry["by"]) if ack else None,
                expect=Expect.KEPT_NOTIFICATION,
                sets=None if ack else {"resolution": entry},
                remove=() if ack else ("manual_kind",),
            )
            outcomes.append("acknowledged" if ack else _closed_state(action).lower())
        return ", ".join(f"{n} {o}" for o, n in Counter(outcomes).items())

    def _republish(self, pk: str, entry: dict[str, Any]) -> str:
        """R20: the case's closing action: its row's events rebuilt and published again by the outbox's own
        function (a request on the OutboxDLQ); the item closes, and a republish that fails opens a new one."""
        if self.republish is None:
            raise QueueError("no outbox wired for republish")
        row = self.store.get(self.store.t.notify_event, {"pk": pk}) or {}
        try:
            outcome = str(self.republish().ask(f"evt-{pk}", row, entry["by"]))
        except LookupError as exc:
            raise QueueError(str(exc)) from None
        self.store.record(
            self.store.t.notify_event,
            {"pk": pk},
            entry,
            state=RESOLVED,
            owner=None,
            expect=Expect.KEPT_NOTIFICATION,
            sets={"resolution": entry},
            remove=("manual_kind",),
        )
        return outcome

    def _report(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        pk, sk = item["source_key"]
        ack = action == "ack"
        self.journal.record(
            item,
            self.store.t.refund_raw,
            {"pk": pk, "sk": sk},
            entry,
            state=ACKNOWLEDGED if ack else _closed_state(action),
            owner=(fields.get("owner") or entry["by"]) if ack else None,
            expect=Expect.REFUND_REPORT,
            sets=None if ack else {"resolution": entry},
            remove=() if ack else ("manual_pk",),
        )
        return "acknowledged" if ack else _closed_state(action).lower()

    def _refund(
        self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]
    ) -> str:
        refund_no = item["source_key"]
        key = {"pk": refund_no}
        if action == "ack":
            self.journal.record(
                item,
                self.store.t.refunds,
                key,
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.MANUAL_REFUND,
            )
            return "acknowledged"
        if action == "abnormal-refund":
            if self.refunds is None:
                raise QueueError("no refund service wired")
            route = str(fields.get("to") or "")
            card = {k: str(fields[k]) for k in ("bank_type", "bank_account", "real_name") if fields.get(k)}
            try:
                _applied, after = _built(self.refunds).apply_abnormal(
                    refund_no, route, card or None, by=entry["by"], reason=entry["why"]
                )
            except (LookupError, ValueError) as exc:
                raise QueueError(str(exc)) from None
            self.journal.append_history(item, self.store.t.refunds, key, entry, RESOLVED)
            if after.get("abnormal_answer") == "unknown":
                return (
                    f"sent to the {route.replace('-', ' ')}, the channel's answer unknown (no answer in time): "
                    "tracked, the amount stays reserved; the refund query tells whether it took"
                )
            return f"sent to the {route.replace('-', ' ')}: tracked to its outcome like any refund"
        outcome = str(fields.get("outcome") or "").upper()
        if outcome not in ("SUCCESS", "FAIL"):
            raise QueueError(
                "a refund is closed by recording its outcome on the merchant platform: --outcome SUCCESS "
                "(money went back: booked) or --outcome FAIL (it did not: the amount is released)"
            )
        if self.refunds is None:
            raise QueueError("no refund service wired")
        applied, after = _built(self.refunds).record_outcome(
            refund_no, outcome == "SUCCESS", by=entry["by"], reason=entry["why"]
        )
        if after.get("status") != outcome:
            raise QueueError(f"refund {refund_no} is {after.get('status')} ({applied}): nothing recorded")
        self.journal.append_history(item, self.store.t.refunds, key, entry, RESOLVED)
        return f"{outcome} recorded ({'booked' if outcome == 'SUCCESS' else 'released'})"

    def _refund_now(self, task_pk: str) -> str:
        if self.refunds is None:
            raise QueueError("no refund service wired")
        try:
            _, refund_no = _built(self.refunds).refund_task_now(task_pk)
        except (LookupError, ValueError) as exc:
            raise QueueError(str(exc)) from None
        return f"refund {refund_no} sent to the channel: tracked to its outcome like any refund"

    def _payment_task(self, item: dict[str, Any]) -> str:
        """The refund task of an unbooked payment: the one it has (R17), or one opened now (same key rule)."""
        row = self.store.get(self.store.t.notify_raw, {"pk": item["source_key"]}) or {}
        if row.get("refund_task"):
            return str(row["refund_task"])
        if not row.get("out_trade_no") or not row.get("transaction_id"):
            raise QueueError(f"{item['id']}: no order or transaction id to refund against")
        order = self.store.get(self.store.t.orders, {"pk": f"{row['mchid']}#{row['out_trade_no']}"})
        if order is None:
            raise QueueError(
                f"{item['id']}: order {row['out_trade_no']} does not exist here: refund it by hand"
            )
        tenant = order.get("tenant") or row["mchid"]
        task = {
            "pk": f"{tenant}#{order['pk']}#{row['transaction_id']}",
            "tenant": tenant,
            "order_pk": order["pk"],
            "channel": row.get("channel"),
            "transaction_id": row["transaction_id"],
            "mchid": row["mchid"],
            "out_trade_no": row["out_trade_no"],
            "amount_cent": int(row["paid_cent"]),
            "total_cent": int(
                row.get("order_total_cent") or row["paid_cent"]
            ),  # what the channel's refund names
            "reason": f"refund-now by a person: {row.get('manual_reason') or 'not booked'}"[:200],
            "status": "OPEN",
            "created_at": iso_now(self.clock()),
        }
        self.store.open_task(item["source_key"], task)  # False: it exists already, and is the one refunded
        return str(task["pk"])

    def _accept_amount(self, item: dict[str, Any], entry: dict[str, Any]) -> str:
        """Book what the channel says was paid (an amount mismatch, R12): the order takes the channel's order
        amount (audited, the old one kept), then the payment goes through the product path again."""
        row = self.store.get(self.store.t.notify_raw, {"pk": item["source_key"]}) or {}
        order = self.store.get(self.store.t.orders, {"pk": f"{row.get('mchid')}#{row.get('out_trade_no')}"})
        if order is None or row.get("order_total_cent") is None:
            raise QueueError(f"{item['id']}: no order amount to accept (only an amount mismatch has one)")
        old, new = int(order["amount_cent"]), int(row["order_total_cent"])
        if old == new:
            raise QueueError(f"{item['id']}: the amounts agree ({format_cents(old)}): replay it instead")
        audit = {**entry, "from_cent": old, "to_cent": new}
        accepted = self.journal.write(  # the order's history line pinned: `queue.accept-amount` on the order
            item,
            self.store.t.orders,
            {"pk": order["pk"]},
            audit,
            lambda append: self.store.accept_amount(order["pk"], old, new, audit, journal=append),
        )
        if not accepted:
            raise QueueError(
                f"order {order.get('out_trade_no')} is {order.get('status')} or changed meanwhile: "
                "its amount is not changed"
            )
        self._manual().replay("raw:" + item["source_key"], by=entry["by"], why=entry["why"])
        return (
            f"order amount {format_cents(old)} → {format_cents(new)} yuan (difference {format_cents(new - old)}); "
            f"the payment of {format_cents(int(row.get('paid_cent') or 0))} yuan is booked through the product path"
        )

    def _task(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        if action == "refund-now":
            outcome = self._refund_now(item["source_key"])
            self.journal.append_history(
                item, self.store.t.refund_tasks, {"pk": item["source_key"]}, entry, RESOLVED
            )
            return outcome
        ack = action == "ack"
        if action == "close-task":
            code = str(fields.get("code") or "")
            if code not in ("refunded-at-channel", "booked-after-all"):
                raise QueueError("close-task needs --code refunded-at-channel or --code booked-after-all")
        self.journal.record(
            item,
            self.store.t.refund_tasks,
            {"pk": item["source_key"]},
            entry,
            state=ACKNOWLEDGED if ack else _closed_state(action),
            owner=(fields.get("owner") or entry["by"]) if ack else None,
            expect=Expect.MANUAL_TASK,
            sets=None if ack else {"status": "CLOSED", "resolution": entry, "closed_at": entry["at"]},
        )
        return "acknowledged" if ack else "task closed"

    def _diff(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        pk, sk = item["source_key"]
        if action == "ack":
            self.journal.record(
                item,
                self.store.t.recon_diff,
                {"pk": pk, "sk": sk},
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.OPEN_DIFF,
            )
            return "acknowledged"
        channel, mchid, bill_date = pk.split("#", 2)
        self._recon().resolve(
            channel,
            mchid,
            bill_date,
            sk,
            by=entry["by"],
            note=entry["why"],
            ignore=action == "ignore",
            reverse=bool(fields.get("reverse")),
        )
        return (
            "diff "
            + _closed_state(action).lower()
            + (" with a reversing entry" if fields.get("reverse") else "")
        )

    def _day(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        pk, sk = item["source_key"]
        if action == "replay":  # a confirmed volume drop: the day is re-run from the bill kept in S3
            channel, mchid, bill_date = pk.split("#", 2)
            run = self._recon().confirm(channel, mchid, bill_date, entry["by"], entry["why"])
            return f"re-run: {run.get('status')}"
        ack = action == "ack"
        self.journal.record(
            item,
            self.store.t.recon_runs,
            {"pk": pk, "sk": sk},
            entry,
            state=ACKNOWLEDGED if ack else _closed_state(action),
            owner=(fields.get("owner") or entry["by"]) if ack else None,
            expect=Expect.BLOCKED_DAY,
            sets=None if ack else {"resolution": entry},
            remove=() if ack else ("blocked_pk",),
        )
        return "acknowledged" if ack else _closed_state(action).lower()

    def _order(self, item: dict[str, Any], action: str, entry: dict[str, Any], fields: dict[str, Any]) -> str:
        pk = item["source_key"]
        if action == "ack":
            self.journal.record(
                item,
                self.store.t.orders,
                {"pk": pk},
                entry,
                state=ACKNOWLEDGED,
                owner=fields.get("owner") or entry["by"],
                expect=Expect.MANUAL_ORDER,
            )
            return "acknowledged"
        if action == "replay":  # back into the poll index, due now: the poller asks the channel again
            from tally.store.polling import poll_pk

            self.journal.record(
                item,
                self.store.t.orders,
                {"pk": pk},
                entry,
                state=RESOLVED,
                sets={"poll_pk": poll_pk(pk), "poll_due": entry["at"], "poll_errors": 0},
                expect=Expect.MANUAL_ORDER,
            )
            return "polled again"
        self.journal.record(
            item,
            self.store.t.orders,
            {"pk": pk},
            entry,
            state=_closed_state(action),
            sets={"resolution": entry},
            remove=("poll_pk", "poll_due"),
            expect=Expect.MANUAL_ORDER,
        )
        return _closed_state(action).lower()

    def _manual(self) -> Any:
        if self.manual is None:
            raise QueueError("no manual queue wired for replay")
        return _built(self.manual)

    def _recon(self) -> Any:
        if self.recon is None:
            raise QueueError("no reconciliation service wired")
        return _built(self.recon)


def _built(dependency: Any) -> Any:
    """A service, or the zero-argument function that builds it (bootstrap's cached builders)."""
    return dependency() if callable(dependency) else dependency
