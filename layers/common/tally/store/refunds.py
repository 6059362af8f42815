"""Refund tables (docs/contracts.md): refunds, refund_raw, and the refund side of orders / refund_tasks.

Every money move here is one conditional write, so it can happen once only:
* create with a number we generate: ONE UpdateItem on the order reserves `refundable_cent` and records
  the refund as an open hold (`hold#<refund_no>`) on the order itself, returning the order (R26, R27);
  after the channel call ONE transaction puts the refund row and closes the hold (R28);
* create with the caller's own number, or from a refund task: reserve on the hold (order
  `refundable_cent`, or the task) + put the refund PENDING, in one transaction;
* outcome: refund status CAS + ledger entry (BOOK) or hold given back (RELEASE) + raw handled=1.

Keys are scoped per merchant (issue #15, docs/contracts.md "Refund keys"): a refund row is
`pk = mchid#refund_no` (the order's scope: `order_key`), its ledger entry `channel#mchid#refund_no`, so two
merchants may use the same own refund number. Rows written before that (`pk = refund_no`, ledger
`channel#refund_no`) are read by `find` and keep their keys (`refund_ledger_key` derives from the row's pk).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from tally.store.codec import from_item, names_values, to_item
from tally.store.payments import SETTLEMENT_UNKNOWN_KIND
from tally.store.records import RefundRow, as_refund
from tally.store.shards import updated_shard, with_bill_shard
from tally.store.tables import PENDING_SHARDS, Tables, shard_of
from tally.store.tables import TransactionFailed as TransactionFailed  # the one (store/tables.py)

POLL_SHARDS = 4
SETTLEMENT_UNKNOWN = (
    "UNKNOWN"  # a REFUND entry's settlement_state when its settlement refund is unknown (R43)
)
HOLD_PREFIX = "hold#"  # an order attribute per refund reserved but not yet stored as a refund row
HOLD_ORDER = "order"  # reserved on orders.refundable_cent (a booked payment)
HOLD_TASK = "task"  # reserved on a refund task (an ILLEGAL payment that was never booked, R17)


def refund_key(mchid: str, refund_no: str) -> str:
    """The refunds table key: a refund number is unique per merchant, like an out_trade_no (`order_key`)."""
    return f"{mchid}#{refund_no}"


def is_legacy_key(pk: str) -> bool:
    """A row stored before refund keys were scoped (`pk = refund_no`; a refund_no never holds '#')."""
    return "#" not in pk


def refund_ledger_key(refund: Mapping[str, Any]) -> str:
    """`channel#mchid#refund_no` (a legacy row: `channel#refund_no`, where its entry already is)."""
    return f"{refund['channel']}#{refund['pk']}"


def legacy_free(table: str, mchid: str, refund_no: str) -> dict[str, Any]:
    """Transaction item: no pre-upgrade row of THIS merchant holds the number (another merchant's may)."""
    return {
        "ConditionCheck": {
            "TableName": table,
            "Key": to_item({"pk": refund_no}),
            "ConditionExpression": "attribute_not_exists(pk) OR mchid <> :m",
            "ExpressionAttributeValues": names_values(m=mchid),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def poll_pk(refund_no: str) -> str:
    return f"poll#{shard_of(refund_no, POLL_SHARDS)}"


def manual_pk(refund_no: str) -> str:
    return f"manual#{shard_of(refund_no, POLL_SHARDS)}"


def hold_attr(refund_no: str) -> str:
    return HOLD_PREFIX + refund_no


def open_holds(order: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """refund_no → the hold recorded on the order by `reserve_and_hold` and not yet closed."""
    return {k[len(HOLD_PREFIX) :]: v for k, v in order.items() if k.startswith(HOLD_PREFIX)}


def refund_no_held(order: Mapping[str, Any], refund_no: str) -> bool:
    return hold_attr(refund_no) in order


class HoldRefused(Exception):
    """The order refused the reservation; `order` is its image (None: no such order)."""

    def __init__(self, order: dict[str, Any] | None):
        super().__init__("reservation refused by the order's condition")
        self.order = order


@dataclass
class RefundTables:
    base: Tables
    refunds: str
    refund_raw: str

    @property
    def ddb(self) -> Any:
        return self.base.ddb


def status_fields(
    refund_no: str,
    to_status: str,
    now: str,
    *,
    poll_due: str | None,
    manual_reason: str | None,
    **fields: Any,
) -> tuple[dict[str, Any], list[str]]:
    """What a refund entering `to_status` sets and removes: the poll index entry goes with it (due for the
    poll, in the manual partition for a person, or off the index for an end state)."""
    sets: dict[str, Any] = {
        "status": to_status,
        "updated_at": now,
        "upd_shard": updated_shard(refund_no),  # GSI by_updated (`--since`, store/changes.py)
    }
    removes: list[str] = []
    if poll_due is not None:
        sets.update(poll_pk=poll_pk(refund_no), poll_due=poll_due)
    elif manual_reason is not None:
        sets.update(poll_pk=manual_pk(refund_no), poll_due=now, manual_reason=manual_reason[:500])
    else:
        removes += ["poll_pk", "poll_due"]
    if to_status != "MANUAL":
        removes += [
            "reroute_since",
            "reroute_by",
        ]  # a reroute claim lives only while the refund is a person's
    sets.update({k: v for k, v in fields.items() if v is not None})
    return sets, removes


class RefundStore:
    def __init__(self, t: RefundTables):
        self.t = t

    # ------------------------------------------------------------------ a reroute in flight
    def claim_reroute(self, key: str, by: str, now_s: int, stale_before: int) -> bool:
        """Take the refund for one apply-abnormal-refund call: only a MANUAL refund nobody is rerouting (a claim
        older than `stale_before` is a call that died). While the claim lives, a person's outcome is refused."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.refunds,
                Key=to_item({"pk": key}),
                UpdateExpression="SET reroute_since = :now, reroute_by = :by",
                ConditionExpression="#st = :manual AND "
                "(attribute_not_exists(reroute_since) OR reroute_since < :stale)",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(
                    now=now_s, by=by[:64], manual="MANUAL", stale=stale_before
                ),
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def release_reroute(self, key: str) -> None:
        """The channel refused the reroute: the refund is a person's again, nobody is rerouting it."""
        self.t.ddb.update_item(
            TableName=self.t.refunds,
            Key=to_item({"pk": key}),
            UpdateExpression="REMOVE reroute_since, reroute_by",
        )

    # ------------------------------------------------------------------ reads
    def get(self, key: str) -> RefundRow | None:
        """By the row's own key (`refund_key`, or a legacy `refund_no`), as its record (store/records.py)."""
        return as_refund(self.t.base.get(self.t.refunds, key))

    def find(self, mchid: str, refund_no: str) -> RefundRow | None:
        """This merchant's refund `refund_no`: one read; a second only when there is none under the scoped
        key (a row stored before the keys were scoped, or none at all). Another merchant's row is never
        answered: a legacy row counts only when its `mchid` is this one."""
        row = self.get(refund_key(mchid, refund_no))
        if row is not None:
            return row
        legacy = self.get(refund_no)
        return legacy if legacy is not None and legacy.get("mchid") == mchid else None

    def by_number(self, refund_no: str) -> list[RefundRow]:
        """Every merchant's refund with this number (the operator's lookup; GSI `by_refund_no`, KEYS_ONLY)."""
        keys = self._query("by_refund_no", "refund_no = :k", k=refund_no)
        rows = [self.get(k["pk"]) for k in keys[:20]]
        return [r for r in rows if r is not None]

    def by_channel_id(self, refund_id: str) -> list[RefundRow]:
        """The refunds the channel knows by this refund id (support quotes it; GSI `by_refund_id`, KEYS_ONLY)."""
        keys = self._query("by_refund_id", "refund_id = :k", k=refund_id)
        rows = [self.get(k["pk"]) for k in keys[:20]]
        return [r for r in rows if r is not None]

    def for_order(self, order_pk: str) -> list[dict[str, Any]]:
        return self._query("refunds_of_order", "order_pk = :k", k=order_pk)

    def due(self, now: str, limit: int) -> list[RefundRow]:
        rows: list[dict[str, Any]] = []
        for shard in range(POLL_SHARDS):
            rows += self._query(
                "by_poll", "poll_pk = :k AND poll_due <= :now", limit=limit, k=f"poll#{shard}", now=now
            )
        return cast("list[RefundRow]", sorted(rows, key=lambda r: r["poll_due"])[:limit])

    def manual(self, limit: int = 100) -> list[RefundRow]:
        rows: list[dict[str, Any]] = []
        for shard in range(POLL_SHARDS):
            rows += self._query("by_poll", "poll_pk = :k", limit=limit, k=f"manual#{shard}")
        return cast("list[RefundRow]", sorted(rows, key=lambda r: r["poll_due"])[:limit])

    def changed(self, since: str, until: str) -> list[dict[str, Any]]:
        """Every refund, in any state, whose last change is in [since, until) (ISO UTC): GSI by_updated, one
        Query per shard (store/changes.py), never a Scan."""
        from tally.store.changes import changed_rows

        return list(changed_rows(self.t.base, self.t.refunds, since, until))

    def _query(
        self, index: str, condition: str, limit: int | None = None, **values: Any
    ) -> list[dict[str, Any]]:
        request: dict[str, Any] = {
            "TableName": self.t.refunds,
            "IndexName": index,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": names_values(**values),
        }
        if limit:
            request["Limit"] = limit
        return [from_item(i) for i in self.t.ddb.query(**request).get("Items", [])]

    # ------------------------------------------------------------------ transaction items
    def put_new(self, row: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.t.refunds,
                "Item": to_item(dict(row)),
                "ConditionExpression": "attribute_not_exists(pk)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def move(
        self,
        key: str,
        from_status: str,
        to_status: str,
        now: str,
        *,
        poll_due: str | None = None,
        manual_reason: str | None = None,
        unclaimed_since: int | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Status CAS: the guard that makes every effect riding in the same transaction happen once.
        `unclaimed_since`: also only if no reroute claim taken since then is live (a person's own move)."""
        sets, removes = status_fields(
            key, to_status, now, poll_due=poll_due, manual_reason=manual_reason, **fields
        )
        values = {"from": from_status, **{f"v_{k}": v for k, v in sets.items()}}
        condition = "#st = :from"
        if unclaimed_since is not None:
            condition += " AND (attribute_not_exists(reroute_since) OR reroute_since < :claim_live)"
            values["claim_live"] = unclaimed_since
        assignments = ", ".join(("#st" if k == "status" else k) + f" = :v_{k}" for k in sets)
        expression = "SET " + assignments + (" REMOVE " + ", ".join(removes) if removes else "")
        return {
            "Update": {
                "TableName": self.t.refunds,
                "Key": to_item({"pk": key}),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": names_values(**values),
            }
        }

    def landed(
        self,
        row: Mapping[str, Any],
        to_status: str,
        now: str,
        *,
        poll_due: str | None = None,
        manual_reason: str | None = None,
        **fields: Any,
    ) -> RefundRow:
        """The row `move` would leave, for a refund stored for the first time already past PENDING."""
        sets, removes = status_fields(
            row["pk"], to_status, now, poll_due=poll_due, manual_reason=manual_reason, **fields
        )
        return cast("RefundRow", {**{k: v for k, v in row.items() if k not in removes}, **sets})

    def set_fields(self, key: str, expect_status: str, **fields: Any) -> bool:
        """Bookkeeping that moves no money (refund_id, next poll); False if the status changed meanwhile."""
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        try:
            self.t.ddb.update_item(
                TableName=self.t.refunds,
                Key=to_item({"pk": key}),
                UpdateExpression=f"SET {sets}",
                ConditionExpression="#st = :expect",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(expect=expect_status, **fields),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    # --- the hold: where the amount is reserved
    def reserve_on_order(self, order_pk: str, amount: int, now: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.t.base.orders,
                "Key": to_item({"pk": order_pk}),
                "UpdateExpression": "SET refundable_cent = refundable_cent - :x, refund_updated_at = :now",
                "ConditionExpression": "refundable_cent >= :x AND #st = :paid",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": names_values(x=amount, paid="PAID", now=now),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def reserve_and_hold(
        self, order_pk: str, refund_no: str, hold: dict[str, Any], due: str
    ) -> dict[str, Any]:
        """One call that reads and reserves: the order as it stands after the reservation (R27).

        The hold is the durable record that this refund_no took money off the order before the channel
        call; the sparse `by_hold` index (due = when the hold counts as abandoned) lets the poller
        turn an abandoned hold into a PENDING refund (`materialise_hold`)."""
        try:
            answer = self.t.ddb.update_item(
                TableName=self.t.base.orders,
                Key=to_item({"pk": order_pk}),
                UpdateExpression="SET refundable_cent = refundable_cent - :x, refund_updated_at = :now, #h = :hold, "
                "hold_pk = :hpk, hold_due = if_not_exists(hold_due, :due) ADD holds_open :one",
                ConditionExpression="refundable_cent >= :x AND #st = :paid AND attribute_not_exists(#h)",
                ExpressionAttributeNames={"#st": "status", "#h": hold_attr(refund_no)},
                ExpressionAttributeValues=names_values(
                    x=hold["amount_cent"],
                    paid="PAID",
                    now=hold["created_at"],
                    hold=hold,
                    hpk=f"hold#{shard_of(order_pk, POLL_SHARDS)}",
                    due=due,
                    one=1,
                ),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException as exc:
            raise HoldRefused(from_item(exc.response.get("Item")) or None) from None
        return from_item(answer["Attributes"])

    def close_hold(self, order_pk: str, refund_no: str, release_cent: int, now: str) -> dict[str, Any]:
        """Transaction item: the hold becomes a refund row (put in the same transaction). Conditional on
        the hold still being open, so the create call and the poller's `materialise_hold` close it once;
        `release_cent` gives the reservation back (a refund the channel refused outright)."""
        return {
            "Update": {
                "TableName": self.t.base.orders,
                "Key": to_item({"pk": order_pk}),
                "UpdateExpression": "SET refundable_cent = refundable_cent + :x, refund_updated_at = :now REMOVE #h "
                "ADD holds_open :minus",
                "ConditionExpression": "attribute_exists(#h)",
                "ExpressionAttributeNames": {"#h": hold_attr(refund_no)},
                "ExpressionAttributeValues": names_values(x=release_cent, now=now, minus=-1),
            }
        }

    def holds_due(self, now: str, limit: int) -> list[dict[str, Any]]:
        """Orders with a hold index entry due: open holds to check, or an entry to clear."""
        rows: list[dict[str, Any]] = []
        for shard in range(POLL_SHARDS):
            answer = self.t.ddb.query(
                TableName=self.t.base.orders,
                IndexName="by_hold",
                KeyConditionExpression="hold_pk = :k AND hold_due <= :now",
                ExpressionAttributeValues=names_values(k=f"hold#{shard}", now=now),
                Limit=limit,
            )
            rows += [from_item(i) for i in answer.get("Items", [])]
        return sorted(rows, key=lambda r: r["hold_due"])[:limit]

    def hold_due_later(self, order_pk: str, due: str) -> bool:
        """False: a concurrent poller run took the order off the index, so its holds were all closed."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.base.orders,
                Key=to_item({"pk": order_pk}),
                UpdateExpression="SET hold_due = :due",
                ConditionExpression="attribute_exists(hold_pk)",
                ExpressionAttributeValues=names_values(due=due),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def clear_hold_index(self, order_pk: str) -> bool:
        """Off the index once no hold is open; a hold opened meanwhile keeps it (and its due time)."""
        try:
            self.t.ddb.update_item(
                TableName=self.t.base.orders,
                Key=to_item({"pk": order_pk}),
                UpdateExpression="REMOVE hold_pk, hold_due",
                ConditionExpression="holds_open = :zero",
                ExpressionAttributeValues=names_values(zero=0),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def reserve_on_task(self, task_pk: str, refund_no: str, now: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.t.base.refund_tasks,
                "Key": to_item({"pk": task_pk}),
                "UpdateExpression": "SET #st = :refunding, refund_no = :rn, updated_at = :now",
                # OPEN (the task worker), or MANUAL when a person says "refund it now" (R48)
                "ConditionExpression": "#st IN (:open, :manual)",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": names_values(
                    refunding="REFUNDING", open="OPEN", manual="MANUAL", rn=refund_no, now=now
                ),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def book_on_hold(self, refund: Mapping[str, Any], now: str) -> dict[str, Any]:
        if refund["hold"] == HOLD_TASK:
            return self._end_task(refund, "DONE", now, None)
        return {
            "Update": {
                "TableName": self.t.base.orders,
                "Key": to_item({"pk": refund["order_pk"]}),
                "UpdateExpression": "SET refunded_cent = if_not_exists(refunded_cent, :zero) + :x, "
                "refund_updated_at = :now",
                "ExpressionAttributeValues": names_values(x=refund["amount_cent"], zero=0, now=now),
            }
        }

    def release_on_hold(self, refund: Mapping[str, Any], now: str, reason: str) -> dict[str, Any]:
        if refund["hold"] == HOLD_TASK:
            return self._end_task(refund, "MANUAL", now, f"refund {refund['refund_no']} failed: {reason}")
        return {
            "Update": {
                "TableName": self.t.base.orders,
                "Key": to_item({"pk": refund["order_pk"]}),
                "UpdateExpression": "SET refundable_cent = refundable_cent + :x, refund_updated_at = :now",
                "ExpressionAttributeValues": names_values(x=refund["amount_cent"], now=now),
            }
        }

    def _end_task(
        self, refund: Mapping[str, Any], status: str, now: str, reason: str | None
    ) -> dict[str, Any]:
        values = names_values(
            to=status,
            refunding="REFUNDING",
            rn=refund["refund_no"],
            now=now,
            **({"r": reason[:500]} if reason else {}),
        )
        return {
            "Update": {
                "TableName": self.t.base.refund_tasks,
                "Key": to_item({"pk": refund["hold_pk"]}),
                "UpdateExpression": "SET #st = :to, ended_at = :now"
                + (", manual_reason = :r" if reason else ""),
                "ConditionExpression": "#st = :refunding AND refund_no = :rn",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": values,
            }
        }

    def ledger_entry(
        self,
        refund: Mapping[str, Any],
        refund_id: str | None,
        bill_date: str,
        success_time: str | None,
        source: str,
        now: str,
        settlement: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        row = {
            "pk": refund_ledger_key(refund),
            "kind": "REFUND",
            "channel": refund["channel"],
            "refund_no": refund["refund_no"],
            "refund_id": refund_id or refund.get("refund_id"),
            "transaction_id": refund.get("transaction_id"),
            "order_pk": refund["order_pk"],
            "mchid": refund["mchid"],
            "out_trade_no": refund["out_trade_no"],
            "amount_cent": refund["amount_cent"],
            "currency": refund.get("currency", "CNY"),
            "success_time": success_time,
            "bill_date": bill_date,
            "booked_at": now,
            "source": source,
            "hold": refund["hold"],
            # R43: the settlement figures next to amount_cent (which stays the refund's amount, R12 unchanged)
            **(settlement or {}),
            "settlement_state": "KNOWN" if settlement is not None else SETTLEMENT_UNKNOWN,
        }
        return {
            "Put": {
                "TableName": self.t.base.ledger,
                "Item": to_item(with_bill_shard(row)),  # the sharded bill-date index (store/recon.py)
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def settlement_unknown(self, refund: Mapping[str, Any], reason: str, now: str) -> dict[str, Any]:
        """R43, as store/payments.py does for a payment: the refund is booked (the money went back) but what
        the channel settles for it is unknown: one notify_event row of manual_kind `settlement_unknown` (the
        work queue lists it) in the booking transaction, so a booked UNKNOWN entry always has its item."""
        ledger_pk = refund_ledger_key(refund)
        row = {
            "pk": f"settlement#{ledger_pk}",
            "kind": SETTLEMENT_UNKNOWN_KIND,
            "manual_kind": SETTLEMENT_UNKNOWN_KIND,
            "created_at": now,
            "channel": refund["channel"],
            "mchid": refund["mchid"],
            "out_trade_no": refund["out_trade_no"],
            "transaction_id": refund.get("transaction_id"),
            "refund_no": refund["refund_no"],
            "ledger_pk": ledger_pk,
            "order": refund["order_pk"],  # not order_pk: that would put it in notify_event's by_order index
            "amount_cent": refund["amount_cent"],
            "reason": f"settlement refund unknown: {reason or 'no settlement figures'} "
            "(booked on the refund amount; query the refund)"[:500],
        }
        return {
            "Put": {
                "TableName": self.t.base.notify_event,
                "Item": to_item(row),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def payment_entry(self, refund: Mapping[str, Any]) -> dict[str, Any] | None:
        """The PAYMENT ledger entry the refund gives money back from (`channel#mchid#transaction_id`, the
        payment's raw key), for its settlement figures (R43); None when there is none (a refund task's payment
        was never booked) or the refund names no transaction."""
        if not refund.get("transaction_id"):
            return None
        pk = f"{refund['channel']}#{refund['mchid']}#{refund['transaction_id']}"
        return self.t.base.get(self.t.base.ledger, pk)

    def transact(self, items: list[dict[str, Any]]) -> None:
        self.t.base.transact(items)  # raises TransactionFailed

    # --- refund tasks (R17's table)
    def open_tasks(self, limit: int) -> list[dict[str, Any]]:
        answer = self.t.ddb.query(
            TableName=self.t.base.refund_tasks,
            IndexName="by_status",
            KeyConditionExpression="#st = :open",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=names_values(open="OPEN"),
            Limit=limit,
        )
        return [from_item(i) for i in answer.get("Items", [])]

    def task_to_person(self, task_pk: str, reason: str, now: str) -> bool:
        try:
            self.t.ddb.update_item(
                TableName=self.t.base.refund_tasks,
                Key=to_item({"pk": task_pk}),
                UpdateExpression="SET #st = :manual, manual_reason = :r, ended_at = :now",
                ConditionExpression="#st = :open",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(manual="MANUAL", open="OPEN", r=reason, now=now),
            )
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def task(self, task_pk: str) -> dict[str, Any] | None:
        return self.t.base.get(self.t.base.refund_tasks, task_pk)


class RefundRawStore:
    """refund_raw: one row per (channel#refund_no, refund status), written before any apply (R7, R30)."""

    def __init__(self, t: RefundTables):
        self.t = t

    def put_new(self, row: dict[str, Any]) -> dict[str, Any] | None:
        try:
            self.t.ddb.put_item(
                TableName=self.t.refund_raw,
                Item=to_item(row),
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
            return None
        except self.t.ddb.exceptions.ConditionalCheckFailedException as exc:
            return from_item(exc.response.get("Item")) or self.get(row["pk"], row["sk"])

    def get(self, key: str, status: str) -> dict[str, Any] | None:
        return self.t.base.get(self.t.refund_raw, key, sk=status)

    def for_refund(self, key: str) -> list[dict[str, Any]]:
        return self.t.base.query_pk(self.t.refund_raw, key)

    def handled(self, key: str, status: str, handled: int, outcome: str, now: str) -> dict[str, Any]:
        """handled 0 → 1 or 2; at 2 the report enters the sparse `by_manual` index (the work queue, R41)."""
        manual = {"mpk": "manual"} if handled == 2 else {}
        return {
            "Update": {
                "TableName": self.t.refund_raw,
                "Key": to_item({"pk": key, "sk": status}),
                "UpdateExpression": "SET handled = :h, outcome = :o, handled_at = :now"
                + (", manual_pk = :mpk" if manual else "")
                + " REMOVE pending_pk",  # out of the sweeper's index (L2)
                "ConditionExpression": "handled = :zero",
                "ExpressionAttributeValues": names_values(
                    h=handled, o=outcome[:500], zero=0, now=now, **manual
                ),
            }
        }

    def mark(self, key: str, status: str, handled: int, outcome: str, now: str) -> bool:
        try:
            self.t.ddb.update_item(**self.handled(key, status, handled, outcome, now)["Update"])
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def count_attempt(self, key: str, status: str) -> int:
        answer = self.t.ddb.update_item(
            TableName=self.t.refund_raw,
            Key=to_item({"pk": key, "sk": status}),
            UpdateExpression="ADD attempts :one",
            ExpressionAttributeValues=names_values(one=1),
            ReturnValues="UPDATED_NEW",
        )
        return int(answer["Attributes"]["attempts"]["N"])

    # --- the sweeper's sparse index `by_pending` (L2): rows at handled=0 carry pending_pk
    def older_than(self, before_iso: str, limit: int, swept_before_iso: str) -> list[dict[str, Any]]:
        """Reports still at handled=0 that arrived before `before_iso` and were not re-queued since
        `swept_before_iso`, oldest first: one bounded Query per shard, never a Scan."""
        found: list[dict[str, Any]] = []
        for shard in range(PENDING_SHARDS):
            answer = self.t.ddb.query(
                TableName=self.t.refund_raw,
                IndexName="by_pending",
                KeyConditionExpression="pending_pk = :p AND notified_at < :before",
                FilterExpression="attribute_not_exists(swept_at) OR swept_at < :swept",
                ExpressionAttributeValues=names_values(
                    p=f"pending#{shard}", before=before_iso, swept=swept_before_iso
                ),
                Limit=limit,
            )
            found += [from_item(i) for i in answer.get("Items", [])]
        return sorted(found, key=lambda r: r["notified_at"])

    def mark_swept(self, key: str, status: str, now: str) -> int | None:
        """Count one re-queue; None when the report was applied meanwhile."""
        try:
            answer = self.t.ddb.update_item(
                TableName=self.t.refund_raw,
                Key=to_item({"pk": key, "sk": status}),
                UpdateExpression="ADD sweeps :one SET swept_at = :now",
                ConditionExpression="handled = :zero",
                ExpressionAttributeValues=names_values(one=1, zero=0, now=now),
                ReturnValues="UPDATED_NEW",
            )
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return None
        return int(answer["Attributes"]["sweeps"]["N"])


def refund_pending_pk(raw_key: str) -> str:
    """The sweeper's partition of a new refund report (write-sharded, like notify_raw's)."""
    return f"pending#{shard_of(raw_key, PENDING_SHARDS)}"


class RefundQueue:
    """Refund notifications ride the apply queue: body `{"refund_raw_key", "status"}` (docs/contracts.md)."""

    def __init__(self, sqs: Any, url: str):
        self.sqs = sqs
        self.url = url

    def send(self, key: str, status: str) -> None:
        self.sqs.send_message(
            QueueUrl=self.url, MessageBody=json.dumps({"refund_raw_key": key, "status": status})
        )
