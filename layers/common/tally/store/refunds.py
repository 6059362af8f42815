"""Refund tables (docs/contracts.md): refunds, refund_raw, and the refund side of orders / refund_tasks.

Every money move here is one conditional write, so it can happen once only:
* create with a number we generate: ONE UpdateItem on the order reserves `refundable_cent` and records
  the refund as an open hold (`hold#<refund_no>`) on the order itself, returning the order (R26, R27);
  after the channel call ONE transaction puts the refund row and closes the hold (R28);
* create with the caller's own number, or from a refund task: reserve on the hold (order
  `refundable_cent`, or the task) + put the refund PENDING, in one transaction;
* outcome: refund status CAS + ledger entry (BOOK) or hold given back (RELEASE) + raw handled=1.

`RefundStore` is the refund row (reads, the status CAS, a reroute claim, refund tasks) composed with
store/refund_holds.py (where the amount is reserved) and store/refund_ledger.py (the booked entry); the keys
and the tables are in store/refund_keys.py. `RefundRawStore` keeps the reports, `RefundQueue` sends them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from tally.store.codec import from_item, names_values, to_item
from tally.store.records import RefundRow, as_refund
from tally.store.refund_holds import HOLD_ORDER as HOLD_ORDER
from tally.store.refund_holds import HOLD_PREFIX as HOLD_PREFIX
from tally.store.refund_holds import HOLD_TASK as HOLD_TASK
from tally.store.refund_holds import HoldRefused as HoldRefused
from tally.store.refund_holds import RefundHolds
from tally.store.refund_holds import open_holds as open_holds
from tally.store.refund_holds import refund_no_held as refund_no_held
from tally.store.refund_keys import POLL_SHARDS, manual_pk
from tally.store.refund_keys import RefundTables as RefundTables
from tally.store.refund_keys import legacy_free as legacy_free
from tally.store.refund_keys import poll_pk as poll_pk
from tally.store.refund_keys import refund_key as refund_key
from tally.store.refund_ledger import SETTLEMENT_UNKNOWN as SETTLEMENT_UNKNOWN
from tally.store.refund_ledger import RefundLedger
from tally.store.shards import updated_shard
from tally.store.tables import PENDING_SHARDS, shard_of
from tally.store.tables import TransactionFailed as TransactionFailed  # the one (store/tables.py)


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


class RefundStore(RefundHolds, RefundLedger):
    """The refund row: reads, the status CAS, a reroute claim, refund tasks; the reservation (`RefundHolds`)
    and the ledger writes (`RefundLedger`) are its mixins."""

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
