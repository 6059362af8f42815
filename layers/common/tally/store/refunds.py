"""Refund tables (docs/contracts.md): refunds, refund_raw, and the refund side of orders / refund_tasks.

Every money move here is one TransactWriteItems whose first item is a condition on a status, so
it can happen once only:
* create: reserve on the hold (order `refundable_cent`, or a refund task) + put the refund (R26, R27);
* outcome: refund status CAS + ledger entry (BOOK) or hold given back (RELEASE) + raw handled=1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.tables import Tables, shard_of

POLL_SHARDS = 4
HOLD_ORDER = "order"  # reserved on orders.refundable_cent (a booked payment)
HOLD_TASK = "task"  # reserved on a refund task (an ILLEGAL payment that was never booked, R17)


def poll_pk(refund_no: str) -> str:
    return f"poll#{shard_of(refund_no, POLL_SHARDS)}"


def manual_pk(refund_no: str) -> str:
    return f"manual#{shard_of(refund_no, POLL_SHARDS)}"


@dataclass
class RefundTables:
    base: Tables
    refunds: str
    refund_raw: str

    @property
    def ddb(self) -> Any:
        return self.base.ddb


class TransactionFailed(Exception):
    """A transaction was cancelled: `failed` lists the items whose condition failed; `conflict` = contention."""

    def __init__(self, failed: list[int], conflict: bool, items: list[dict[str, Any]]):
        super().__init__(f"transaction cancelled (failed conditions {failed}, conflict={conflict})")
        self.failed = failed
        self.conflict = conflict
        self.items = items  # ALL_OLD images where DynamoDB returned them


class RefundStore:
    def __init__(self, t: RefundTables):
        self.t = t

    # ------------------------------------------------------------------ reads
    def get(self, refund_no: str) -> dict[str, Any] | None:
        return self.t.base.get(self.t.refunds, refund_no)

    def for_order(self, order_pk: str) -> list[dict[str, Any]]:
        return self._query("refunds_of_order", "order_pk = :k", k=order_pk)

    def due(self, now: str, limit: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for shard in range(POLL_SHARDS):
            rows += self._query("by_poll", "poll_pk = :k AND poll_due <= :now", limit=limit, k=f"poll#{shard}",
                                now=now)
        return sorted(rows, key=lambda r: r["poll_due"])[:limit]

    def manual(self, limit: int = 100) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for shard in range(POLL_SHARDS):
            rows += self._query("by_poll", "poll_pk = :k", limit=limit, k=f"manual#{shard}")
        return sorted(rows, key=lambda r: r["poll_due"])[:limit]

    def _query(self, index: str, condition: str, limit: int | None = None, **values: Any) -> list[dict[str, Any]]:
        request: dict[str, Any] = {"TableName": self.t.refunds, "IndexName": index,
                                   "KeyConditionExpression": condition,
                                   "ExpressionAttributeValues": names_values(**values)}
        if limit:
            request["Limit"] = limit
        return [from_item(i) for i in self.t.ddb.query(**request).get("Items", [])]

    # ------------------------------------------------------------------ transaction items
    def put_new(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"Put": {"TableName": self.t.refunds, "Item": to_item(row),
                        "ConditionExpression": "attribute_not_exists(pk)",
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}

    def move(self, refund_no: str, from_status: str, to_status: str, now: str, *, poll_due: str | None = None,
             manual_reason: str | None = None, **fields: Any) -> dict[str, Any]:
        """Status CAS: the guard that makes every effect riding in the same transaction happen once."""
        values: dict[str, Any] = {"from": from_status, "to": to_status, "now": now}
        sets = ["#st = :to", "updated_at = :now"]
        removes: list[str] = []
        if poll_due is not None:
            sets += ["poll_pk = :ppk", "poll_due = :due"]
            values.update(ppk=poll_pk(refund_no), due=poll_due)
        elif manual_reason is not None:
            sets += ["poll_pk = :ppk", "poll_due = :now", "manual_reason = :mr"]
            values.update(ppk=manual_pk(refund_no), mr=manual_reason[:500])
        else:
            removes += ["poll_pk", "poll_due"]
        for name, value in fields.items():
            if value is not None:
                sets.append(f"{name} = :{name}")
                values[name] = value
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return {"Update": {"TableName": self.t.refunds, "Key": to_item({"pk": refund_no}),
                           "UpdateExpression": expression, "ConditionExpression": "#st = :from",
                           "ExpressionAttributeNames": {"#st": "status"},
                           "ExpressionAttributeValues": names_values(**values)}}

    def set_fields(self, refund_no: str, expect_status: str, **fields: Any) -> bool:
        """Bookkeeping that moves no money (refund_id, next poll); False if the status changed meanwhile."""
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        try:
            self.t.ddb.update_item(
                TableName=self.t.refunds, Key=to_item({"pk": refund_no}), UpdateExpression=f"SET {sets}",
                ConditionExpression="#st = :expect", ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(expect=expect_status, **fields))
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    # --- the hold: where the amount is reserved
    def reserve_on_order(self, order_pk: str, amount: int, now: str) -> dict[str, Any]:
        return {"Update": {
            "TableName": self.t.base.orders, "Key": to_item({"pk": order_pk}),
            "UpdateExpression": "SET refundable_cent = refundable_cent - :x, refund_updated_at = :now",
            "ConditionExpression": "refundable_cent >= :x AND #st = :paid",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": names_values(x=amount, paid="PAID", now=now),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}

    def reserve_on_task(self, task_pk: str, refund_no: str, now: str) -> dict[str, Any]:
        return {"Update": {
            "TableName": self.t.base.refund_tasks, "Key": to_item({"pk": task_pk}),
            "UpdateExpression": "SET #st = :refunding, refund_no = :rn, updated_at = :now",
            "ConditionExpression": "#st = :open",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": names_values(refunding="REFUNDING", open="OPEN", rn=refund_no, now=now),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}

    def book_on_hold(self, refund: dict[str, Any], now: str) -> dict[str, Any]:
        if refund["hold"] == HOLD_TASK:
            return self._end_task(refund, "DONE", now, None)
        return {"Update": {
            "TableName": self.t.base.orders, "Key": to_item({"pk": refund["order_pk"]}),
            "UpdateExpression": "SET refunded_cent = if_not_exists(refunded_cent, :zero) + :x, "
                                "refund_updated_at = :now",
            "ExpressionAttributeValues": names_values(x=refund["amount_cent"], zero=0, now=now)}}

    def release_on_hold(self, refund: dict[str, Any], now: str, reason: str) -> dict[str, Any]:
        if refund["hold"] == HOLD_TASK:
            return self._end_task(refund, "MANUAL", now, f"refund {refund['pk']} failed: {reason}")
        return {"Update": {
            "TableName": self.t.base.orders, "Key": to_item({"pk": refund["order_pk"]}),
            "UpdateExpression": "SET refundable_cent = refundable_cent + :x, refund_updated_at = :now",
            "ExpressionAttributeValues": names_values(x=refund["amount_cent"], now=now)}}

    def _end_task(self, refund: dict[str, Any], status: str, now: str, reason: str | None) -> dict[str, Any]:
        values = names_values(to=status, refunding="REFUNDING", rn=refund["pk"], now=now,
                              **({"r": reason[:500]} if reason else {}))
        return {"Update": {
            "TableName": self.t.base.refund_tasks, "Key": to_item({"pk": refund["hold_pk"]}),
            "UpdateExpression": "SET #st = :to, ended_at = :now" + (", manual_reason = :r" if reason else ""),
            "ConditionExpression": "#st = :refunding AND refund_no = :rn",
            "ExpressionAttributeNames": {"#st": "status"}, "ExpressionAttributeValues": values}}

    def ledger_entry(self, refund: dict[str, Any], refund_id: str | None, bill_date: str, success_time: str | None,
                     source: str, now: str) -> dict[str, Any]:
        row = {"pk": f"{refund['channel']}#{refund['pk']}", "kind": "REFUND", "channel": refund["channel"],
               "refund_no": refund["pk"], "refund_id": refund_id or refund.get("refund_id"),
               "transaction_id": refund.get("transaction_id"), "order_pk": refund["order_pk"],
               "mchid": refund["mchid"], "out_trade_no": refund["out_trade_no"], "amount_cent": refund["amount_cent"],
               "currency": refund.get("currency", "CNY"), "success_time": success_time, "bill_date": bill_date,
               "booked_at": now, "source": source, "hold": refund["hold"]}
        return {"Put": {"TableName": self.t.base.ledger, "Item": to_item(row),
                        "ConditionExpression": "attribute_not_exists(pk)"}}

    def transact(self, items: list[dict[str, Any]]) -> None:
        try:
            self.t.ddb.transact_write_items(TransactItems=items)
        except self.t.ddb.exceptions.TransactionCanceledException as exc:
            reasons = exc.response.get("CancellationReasons", [])
            failed = [i for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
            conflict = any(r.get("Code") == "TransactionConflict" for r in reasons)
            images = [from_item(r.get("Item")) or {} for r in reasons]
            raise TransactionFailed(failed, conflict, images) from None

    # --- refund tasks (R17's table)
    def open_tasks(self, limit: int) -> list[dict[str, Any]]:
        answer = self.t.ddb.query(TableName=self.t.base.refund_tasks, IndexName="by_status",
                                  KeyConditionExpression="#st = :open", ExpressionAttributeNames={"#st": "status"},
                                  ExpressionAttributeValues=names_values(open="OPEN"), Limit=limit)
        return [from_item(i) for i in answer.get("Items", [])]

    def task_to_person(self, task_pk: str, reason: str, now: str) -> bool:
        try:
            self.t.ddb.update_item(
                TableName=self.t.base.refund_tasks, Key=to_item({"pk": task_pk}),
                UpdateExpression="SET #st = :manual, manual_reason = :r, ended_at = :now",
                ConditionExpression="#st = :open", ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(manual="MANUAL", open="OPEN", r=reason, now=now))
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
            self.t.ddb.put_item(TableName=self.t.refund_raw, Item=to_item(row),
                                ConditionExpression="attribute_not_exists(pk)",
                                ReturnValuesOnConditionCheckFailure="ALL_OLD")
            return None
        except self.t.ddb.exceptions.ConditionalCheckFailedException as exc:
            return from_item(exc.response.get("Item")) or self.get(row["pk"], row["sk"])

    def get(self, key: str, status: str) -> dict[str, Any] | None:
        return self.t.base.get(self.t.refund_raw, key, sk=status)

    def for_refund(self, key: str) -> list[dict[str, Any]]:
        return self.t.base.query_pk(self.t.refund_raw, key)

    def handled(self, key: str, status: str, handled: int, outcome: str, now: str) -> dict[str, Any]:
        return {"Update": {"TableName": self.t.refund_raw, "Key": to_item({"pk": key, "sk": status}),
                           "UpdateExpression": "SET handled = :h, outcome = :o, handled_at = :now",
                           "ConditionExpression": "handled = :zero",
                           "ExpressionAttributeValues": names_values(h=handled, o=outcome[:500], zero=0, now=now)}}

    def mark(self, key: str, status: str, handled: int, outcome: str, now: str) -> bool:
        try:
            self.t.ddb.update_item(**self.handled(key, status, handled, outcome, now)["Update"])
            return True
        except self.t.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def count_attempt(self, key: str, status: str) -> int:
        answer = self.t.ddb.update_item(TableName=self.t.refund_raw, Key=to_item({"pk": key, "sk": status}),
                                        UpdateExpression="ADD attempts :one",
                                        ExpressionAttributeValues=names_values(one=1), ReturnValues="UPDATED_NEW")
        return int(answer["Attributes"]["attempts"]["N"])


class RefundQueue:
    """Refund notifications ride the apply queue: body `{"refund_raw_key", "status"}` (docs/contracts.md)."""

    def __init__(self, sqs: Any, url: str):
        self.sqs = sqs
        self.url = url

    def send(self, key: str, status: str) -> None:
        self.sqs.send_message(QueueUrl=self.url, MessageBody=json.dumps({"refund_raw_key": key, "status": status}))
