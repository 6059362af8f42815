"""Where a refund's amount is reserved (R27): the open holds on the order (`reserve_and_hold`, closed by
`close_hold`, swept off the `by_hold` index), the order's `refundable_cent`, or the refund task; and what a
booking or a release does to that reservation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.refund_keys import POLL_SHARDS, RefundTables
from tally.store.tables import shard_of

HOLD_PREFIX = "hold#"  # an order attribute per refund reserved but not yet stored as a refund row
HOLD_ORDER = "order"  # reserved on orders.refundable_cent (a booked payment)
HOLD_TASK = "task"  # reserved on a refund task (an ILLEGAL payment that was never booked, R17)


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


class RefundHolds:
    """RefundStore's reservation writes (a mixin: `t` is the store's tables)."""

    t: RefundTables

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
