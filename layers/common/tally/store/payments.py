"""The payment booking (R18) and the illegal-money park (R17): the worker's two DynamoDB transactions.

service/apply.py decides (state machine, entry checks); this module knows what the decision writes:

* `book`: ONE TransactWriteItems — order compare-and-set (status + version) + transition row + the raw row
  handled 0 → 1 + (money in) the ledger entry. Items in that order: ORDER, TRANSITION, RAW, LEDGER.
* `park_illegal`: the raw row handled 0 → 2 with the reason and the refund task's key + the refund task put,
  once (items: PARKED_RAW, REFUND_TASK).

A cancelled transaction raises `TransactionFailed` (store/tables.py) whose `failed` holds those positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tally.domain.notifications import PaymentNotice
from tally.domain.orders import Event, Status
from tally.store.codec import names_values, to_item
from tally.store.journal import JOURNAL
from tally.store.records import OrderRow
from tally.store.shards import updated_shard, with_bill_shard
from tally.store.tables import RawStore, Tables, TransactionFailed, pending_pk

ORDER, TRANSITION, RAW, LEDGER = 0, 1, 2, 3  # positions in `book`'s transaction (+ SETTLEMENT_ITEM)
SETTLEMENT_ITEM = 4  # the work-queue item of a payment booked with its settlement amount UNKNOWN (R43)
UNKNOWN = "UNKNOWN"
SETTLEMENT_UNKNOWN_KIND = "settlement_unknown"  # notify_event manual_kind, listed by service/queue.py
PARKED_RAW, REFUND_TASK = 0, 1  # positions in `park_illegal`'s transaction


class PaymentStore:
    def __init__(self, tables: Tables, raw: RawStore | None = None):
        self.t = tables
        self.raw = raw or RawStore(tables)

    def book(
        self,
        notice: PaymentNotice,
        order: OrderRow,
        event: Event,
        to: Status,
        now: str,
        *,
        bill_date: str,
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    ) -> None:
        """The one transaction of an applied notification (R18). Raises TransactionFailed.

        `journal` (issue #36): given the decision's items, the journal items that ride in the same transaction
        (store/journal.py); a failed journal condition is reported as `JOURNAL` in `failed`."""
        money_in = event is Event.PAY
        items = [
            {"Update": self._order_cas(order, to, notice, now, money_in)},
            {"Put": self._transition(order, event, to, notice, now)},
            {
                "Update": self.raw.handled_update(
                    notice.raw_key, "BOOKED" if money_in else f"{event.value}D", now
                )
            },
        ]
        if money_in:
            items.append({"Put": self._ledger(order, notice, now, bill_date)})
            if notice.settlement is None:
                items.append({"Put": self._settlement_unknown(order, notice, now)})
        self.transact(items, journal)

    def park_illegal(
        self,
        notice: PaymentNotice,
        order: OrderRow,
        reason: str,
        now: str,
        *,
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    ) -> str:
        """R17: handled=2 plus a refund task, inserted once, in one transaction. Returns the task's key;
        raises TransactionFailed (PARKED_RAW failed: the row was handled already; REFUND_TASK: it exists;
        JOURNAL: the chain head `journal` was built on moved)."""
        tenant = order.get("tenant") or notice.mchid
        task = {
            "pk": f"{tenant}#{order['pk']}#{notice.transaction_id}",
            "tenant": tenant,
            "order_pk": order["pk"],
            "channel": notice.channel,
            "transaction_id": notice.transaction_id,
            "mchid": notice.mchid,
            "out_trade_no": notice.out_trade_no,
            "amount_cent": notice.paid_cent,
            "reason": reason,
            "status": "OPEN",
            "created_at": now,
        }
        person = {
            "TableName": self.t.notify_raw,
            "Key": to_item({"pk": notice.raw_key}),
            "UpdateExpression": "SET handled = :two, manual_reason = :r, handled_at = :now, "
            "pending_pk = :ppk, pending_at = :now, refund_task = :task",
            "ConditionExpression": "handled = :zero",
            "ExpressionAttributeValues": names_values(
                two=2,
                zero=0,
                r=f"ILLEGAL {reason}",
                now=now,
                ppk=pending_pk(2, notice.raw_key),
                task=task["pk"],
            ),
        }
        items: list[dict[str, Any]] = [
            {"Update": person},
            {
                "Put": {
                    "TableName": self.t.refund_tasks,
                    "Item": to_item(task),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
        self.transact(items, journal)
        return str(task["pk"])

    def park(
        self,
        raw_key: str,
        reason: str,
        now: str,
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    ) -> None:
        """handled 0 → 2 (a person must look) with its journal record, in one transaction (the one call the
        plain UpdateItem was). Raises TransactionFailed: PARKED_RAW (handled already) or JOURNAL."""
        self.transact([{"Update": self.raw.person_update(raw_key, reason, now)}], journal)

    def transact(
        self,
        items: list[dict[str, Any]],
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None,
    ) -> None:
        if journal is None:
            self.t.transact(items)
            return
        decision = len(items)
        try:
            self.t.transact([*items, *journal(items)])
        except TransactionFailed as exc:
            exc.failed = [i if i < decision else JOURNAL for i in exc.failed]
            raise

    # ---------------------------------------------------------------- the items

    def _order_cas(
        self, order: OrderRow, to: Status, notice: PaymentNotice, now: str, money_in: bool
    ) -> dict[str, Any]:
        sets = ["#st = :to", "version = :next", "updated_at = :now", "upd_shard = :us"]
        values: dict[str, Any] = {
            "to": to.value,
            "from": order["status"],
            "v": order.get("version", 0),
            "next": order.get("version", 0) + 1,
            "now": now,
            "us": updated_shard(order["pk"]),  # GSI by_updated (`--since`, store/changes.py)
        }
        if money_in:
            sets += ["transaction_id = :tx", "paid_cent = :paid", "refundable_cent = :paid", "paid_at = :now"]
            values.update(tx=notice.transaction_id, paid=notice.paid_cent)
        return {
            "TableName": self.t.orders,
            "Key": to_item({"pk": order["pk"]}),
            "UpdateExpression": "SET " + ", ".join(sets) + " REMOVE poll_pk, poll_due",
            "ConditionExpression": "#st = :from AND version = :v",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": names_values(**values),
        }

    def _transition(
        self, order: OrderRow, event: Event, to: Status, notice: PaymentNotice, now: str
    ) -> dict[str, Any]:
        row = {
            "pk": order["pk"],
            "sk": f"{event.value}#{notice.transaction_id}",
            "event": event.value,
            "from_status": order["status"],
            "to_status": to.value,
            "at": now,
            "raw_key": notice.raw_key,
            "source": notice.source,
        }
        return {
            "TableName": self.t.transitions,
            "Item": to_item(row),
            "ConditionExpression": "attribute_not_exists(pk)",
        }

    def _ledger(self, order: OrderRow, notice: PaymentNotice, now: str, bill_date: str) -> dict[str, Any]:
        row = {
            "pk": notice.raw_key,
            "kind": "PAYMENT",
            "channel": notice.channel,
            "transaction_id": notice.transaction_id,
            "order_pk": order["pk"],
            "mchid": notice.mchid,
            "out_trade_no": notice.out_trade_no,
            "amount_cent": notice.paid_cent,
            "order_total_cent": notice.order_total_cent,
            "currency": notice.currency,
            "success_time": notice.success_time,
            "bill_date": bill_date,
            "booked_at": now,
            "source": notice.source,
            # R43: the settlement figures next to amount_cent (which stays the payer amount, R12/R13)
            **(notice.settlement or {}),
            "settlement_state": "KNOWN" if notice.settlement is not None else UNKNOWN,
        }
        return {
            "TableName": self.t.ledger,
            "Item": to_item(with_bill_shard(row)),  # the sharded bill-date index (store/recon.py)
            "ConditionExpression": "attribute_not_exists(pk)",
        }

    def _settlement_unknown(self, order: OrderRow, notice: PaymentNotice, now: str) -> dict[str, Any]:
        """R43: the money is booked (it arrived) but what the channel settles for it is unknown: one
        notify_event row of manual_kind `settlement_unknown` (the work queue lists it), in the same
        transaction as the entry, so a booked UNKNOWN entry always has its item. No TTL: it waits for a person."""
        row = {
            "pk": f"settlement#{notice.raw_key}",
            "kind": SETTLEMENT_UNKNOWN_KIND,
            "manual_kind": SETTLEMENT_UNKNOWN_KIND,
            "created_at": now,
            "channel": notice.channel,
            "mchid": notice.mchid,
            "out_trade_no": notice.out_trade_no,
            "transaction_id": notice.transaction_id,
            "order": order["pk"],  # not order_pk: that would put it in notify_event's by_order (R8) index
            "amount_cent": notice.paid_cent,
            "reason": f"settlement amount unknown: {notice.settlement_error or 'no settlement figures'} "
            "(booked on the payer amount; query the order)",
        }
        return {
            "TableName": self.t.notify_event,
            "Item": to_item(row),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
