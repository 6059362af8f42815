"""The work queue's reads and writes over the source rows (R41): every item a person works is a row that
already exists (a raw notification at handled=2, a kept notification, a refund report, a refund, a refund
task, a recon diff or day, an order) and is found through that table's sparse index, never a scan of a
big table. The item's state lives ON its source row (`q_state`, `q_owner`, `history`), so resolving it
through any door (this queue, `tally recon resolve`, the refund state machine …) closes it everywhere.

Sparse indexes read here (docs/contracts.md):
- notify_raw `by_pending`: `pending_pk = "2#<shard>"` while a payment waits for a person;
- notify_event `manual`: `manual_kind` (quarantined, rejected, suspected_forgery, no_transaction_id …);
- refund_raw `by_manual`: `manual_pk = "manual"` while a refund report waits for a person;
- refunds `by_poll`: `poll_pk = "manual#<shard>"` (status MANUAL);
- refund_tasks `by_status`: `status = MANUAL`;
- recon_diff `by_open`; recon_runs `by_blocked` (a blocked day's marker row, sk `blocked`);
- orders `by_poll`: `poll_pk = "manual#<shard>"` (the poller gave up).
An expiring certificate is a notify_event row of manual_kind `certificate`, put by the keys function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tally.store.codec import encode, from_item, names_values, to_item
from tally.store.tables import PENDING_SHARDS, TransactionFailed, closed_expiry, release_slot, transact

SHARDS = 4  # the orders' and refunds' poll index shards (store/polling.py, store/refunds.py)
REFUND_REPORT_MANUAL = "manual"  # refund_raw manual_pk while a report waits for a person
DAY_ROW = "queue-day#"  # notify_event: per China day, items cleared and closed items opened that day
DAY_ROW_TTL_S = 60 * 86400


@dataclass(frozen=True)
class _Condition:
    expression: str
    names: tuple[tuple[str, str], ...] = ()
    values: tuple[tuple[str, Any], ...] = ()


class Expect(Enum):
    """The state an action expects its source row in, as the row's own table spells it. Each member is the
    condition of QueueStore.record's one conditional update (the store owns every DynamoDB expression, issue
    #19 item 3); a row no longer in that state raises StaleItem."""

    PAYMENT_UNBOOKED = _Condition("handled = :q_two AND attribute_exists(pending_pk)", values=(("q_two", 2),))
    KEPT_NOTIFICATION = _Condition("attribute_exists(manual_kind)")
    REFUND_REPORT = _Condition("handled = :q_two AND attribute_exists(manual_pk)", values=(("q_two", 2),))
    MANUAL_REFUND = _Condition(  # refunds: status MANUAL
        "#q_status = :q_manual", (("#q_status", "status"),), (("q_manual", "MANUAL"),)
    )
    MANUAL_TASK = _Condition(  # refund_tasks: status MANUAL (the same words on another table)
        "#q_status = :q_manual", (("#q_status", "status"),), (("q_manual", "MANUAL"),)
    )
    OPEN_DIFF = _Condition("handle_status = :q_open", values=(("q_open", "OPEN"),))
    BLOCKED_DAY = _Condition("attribute_exists(blocked_pk)")
    MANUAL_ORDER = _Condition("begins_with(poll_pk, :q_m)", values=(("q_m", "manual#"),))

    @property
    def condition(self) -> str:
        return self.value.expression

    @property
    def names(self) -> dict[str, str]:
        return dict(self.value.names)

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.value.values)


RESERVED = {"status"}  # attribute names DynamoDB reserves: set through a #placeholder


class StaleItem(Exception):
    """The item is no longer in the state the action expects (someone else closed it)."""


@dataclass
class QueueTables:
    ddb: Any
    notify_raw: str
    notify_event: str
    orders: str
    refunds: str
    refund_raw: str
    refund_tasks: str
    recon_runs: str = ""
    recon_diff: str = ""


class QueueStore:
    def __init__(self, t: QueueTables):
        self.t = t
        self.ddb = t.ddb

    # ------------------------------------------------------------ reads (each a sparse index)

    def unbooked_payments(self) -> list[dict[str, Any]]:
        return [
            r
            for s in range(PENDING_SHARDS)
            for r in self._index(self.t.notify_raw, "by_pending", "pending_pk", f"2#{s}")
        ]

    def kept_notifications(self, kind: str) -> list[dict[str, Any]]:
        return self._index(self.t.notify_event, "manual", "manual_kind", kind)

    def refund_reports(self) -> list[dict[str, Any]]:
        return self._index(self.t.refund_raw, "by_manual", "manual_pk", REFUND_REPORT_MANUAL)

    def refunds_with_person(self) -> list[dict[str, Any]]:
        return [
            r for s in range(SHARDS) for r in self._index(self.t.refunds, "by_poll", "poll_pk", f"manual#{s}")
        ]

    def refund_tasks(self, status: str = "MANUAL") -> list[dict[str, Any]]:
        return self._index(self.t.refund_tasks, "by_status", "status", status)

    def open_diffs(self) -> list[dict[str, Any]]:
        if not self.t.recon_diff:
            return []
        return self._index(self.t.recon_diff, "by_open", "open_pk", "OPEN")

    def blocked_days(self) -> list[dict[str, Any]]:
        """The markers of days whose latest run is BLOCKED (store/recon.py mark_day)."""
        if not self.t.recon_runs:
            return []
        return self._index(self.t.recon_runs, "by_blocked", "blocked_pk", "blocked")

    def orders_with_person(self) -> list[dict[str, Any]]:
        return [
            r for s in range(SHARDS) for r in self._index(self.t.orders, "by_poll", "poll_pk", f"manual#{s}")
        ]

    def rejection_counts(self, pks: list[str]) -> dict[str, int]:
        """The aggregate `rejections` of rejected-count rows (one per channel, merchant, cause and hour, R40),
        by pk: one GetItem each (a group's kept rows name a handful of hours; a week is at most 168)."""
        rows = {pk: self.get(self.t.notify_event, {"pk": pk}) for pk in dict.fromkeys(pks)}
        return {pk: int(row.get("rejections") or 0) for pk, row in rows.items() if row}

    def last_callback(self, mchid: str) -> dict[str, Any] | None:
        """The newest raw payment row of a merchant (notify_raw `by_merchant`, newest first, Limit 1): pk
        (`channel#transaction_id`), notified_at, source. One Query, no Scan; the notify path writes nothing more."""
        answer = self.ddb.query(
            TableName=self.t.notify_raw,
            IndexName="by_merchant",
            KeyConditionExpression="mchid = :m",
            ExpressionAttributeValues=names_values(m=mchid),
            ScanIndexForward=False,
            Limit=1,
        )
        items = answer.get("Items") or []
        return from_item(items[0]) if items else None

    # ------------------------------------------------------------ items opened and cleared per day

    def count_day(self, day: str, *, cleared: int = 0, born_closed: int = 0) -> None:
        """One ADD on the day's counter row (notify_event `queue-day#YYYY-MM-DD`, China dates, kept 60 days):
        `cleared` items closed that day, `born_closed` closed items that had been opened that day."""
        adds = {k: v for k, v in (("cleared", cleared), ("born_closed", born_closed)) if v}
        if not adds:
            return
        self.ddb.update_item(
            TableName=self.t.notify_event,
            Key=to_item({"pk": DAY_ROW + day}),
            UpdateExpression="ADD "
            + ", ".join(f"{k} :{k}" for k in adds)
            + " SET kind = if_not_exists(kind, :kind), expires_at = if_not_exists(expires_at, :exp)",
            ExpressionAttributeValues=names_values(kind="queue_day", exp=_day_expiry(day), **adds),
        )

    def day_counts(self, days: list[str]) -> dict[str, dict[str, int]]:
        """{day: {cleared, born_closed}} for the days asked (one GetItem each; a missing row is zeros)."""
        out = {}
        for day in days:
            row = self.get(self.t.notify_event, {"pk": DAY_ROW + day}) or {}
            out[day] = {k: int(row.get(k) or 0) for k in ("cleared", "born_closed")}
        return out

    def get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        answer = self.ddb.get_item(TableName=table, Key=to_item(key), ConsistentRead=True)
        return from_item(answer.get("Item"))

    # ------------------------------------------------------------ writes (every one conditional)

    def record(
        self,
        table: str,
        key: dict[str, Any],
        entry: dict[str, Any],
        *,
        state: str,
        expect: Expect,
        owner: str | None = None,
        remove: tuple[str, ...] = (),
        sets: dict[str, Any] | None = None,
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    ) -> dict[str, Any]:
        """One conditional update: the new state, the audit entry appended, index attributes removed (which is
        what takes the item out of every list at once). Raises StaleItem when the row is not in the state
        `expect` names. `sets` are plain attribute names; a reserved word (status) gets its placeholder here."""
        assigns = {"q_state": state, "q_at": entry["at"], **(sets or {})}
        closing = table == self.t.notify_event and "manual_kind" in remove
        if closing:  # R51: a kept item's lifetime starts when it is closed
            assigns["expires_at"] = closed_expiry(entry["at"])
        if owner is not None:
            assigns["q_owner"] = owner
        names = expect.names
        names_in_order = list(assigns)
        for k in names_in_order:
            if k in RESERVED:
                names[f"#q_{k}"] = k
        expression = "SET " + ", ".join(
            f"{'#q_' + k if k in RESERVED else k} = :s{i}" for i, k in enumerate(names_in_order)
        )
        expression += ", history = list_append(if_not_exists(history, :q_empty), :q_entry)"
        if remove:
            expression += " REMOVE " + ", ".join(remove)
        attr_values = names_values(
            **{f"s{i}": assigns[k] for i, k in enumerate(names_in_order)}, **expect.values
        )
        attr_values[":q_empty"] = encode([])
        attr_values[":q_entry"] = encode([entry])
        request: dict[str, Any] = {
            "TableName": table,
            "Key": to_item(key),
            "UpdateExpression": expression,
            "ConditionExpression": expect.condition,
            "ExpressionAttributeValues": attr_values,
            "ReturnValues": "ALL_NEW",
        }
        if names:
            request["ExpressionAttributeNames"] = names
        if journal is not None:  # issue #36: the person's action and its journal record in one transaction
            row = self._with_journal(request, journal, key)
        else:
            try:
                answer = self.ddb.update_item(**request)
            except self.ddb.exceptions.ConditionalCheckFailedException:
                raise StaleItem(str(key)) from None
            row = from_item(answer["Attributes"]) or {}
        if closing:
            release_slot(self.ddb, table, row)
        return row

    def open_task(self, raw_pk: str, task: dict[str, Any]) -> bool:
        """A refund task for an unbooked payment a person wants refunded (R17's table, its key unique on
        tenant, order and transaction): put once, and named on the payment's row, in one transaction while the
        payment waits for a person. False when the task exists already (it is then the one to refund)."""
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.t.refund_tasks,
                            "Item": to_item(task),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Update": {
                            "TableName": self.t.notify_raw,
                            "Key": to_item({"pk": raw_pk}),
                            "UpdateExpression": "SET refund_task = :t",
                            "ConditionExpression": "handled = :two",
                            "ExpressionAttributeValues": names_values(t=task["pk"], two=2),
                        }
                    },
                ]
            )
            return True
        except self.ddb.exceptions.TransactionCanceledException:
            return False

    def accept_amount(
        self,
        order_pk: str,
        old_cent: int,
        new_cent: int,
        entry: dict[str, Any],
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    ) -> bool:
        """A person accepts the amount the channel says was paid: the order's amount becomes it (the old one kept
        as `amount_before_cent`, the entry in its history), only while the order waits for payment at the
        amount the person saw. False otherwise (paid, closed or changed meanwhile). With `journal`, its record
        in the same transaction (TransactionFailed: the chain head moved, read it again)."""
        request = {
            "TableName": self.t.orders,
            "Key": to_item({"pk": order_pk}),
            "UpdateExpression": "SET amount_cent = :new, amount_before_cent = :old, amount_accepted = :e, "
            "history = list_append(if_not_exists(history, :empty), :entries)",
            "ConditionExpression": "#st = :wait AND amount_cent = :old",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {
                **names_values(new=new_cent, old=old_cent, wait="WAIT_PAY"),
                ":e": encode(entry),
                ":empty": encode([]),
                ":entries": encode([entry]),
            },
        }
        if journal is not None:
            try:
                self._with_journal(request, journal, {"pk": order_pk})
                return True
            except StaleItem:
                return False
        try:
            self.ddb.update_item(**request)
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def append_history(
        self,
        table: str,
        key: dict[str, Any],
        entry: dict[str, Any],
        state: str,
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    ) -> None:
        """Audit after an action another service performed (its own write already moved the money)."""
        request = {
            "TableName": table,
            "Key": to_item(key),
            "UpdateExpression": "SET q_state = :st, q_at = :at, "
            "history = list_append(if_not_exists(history, :empty), :entry)",
            "ExpressionAttributeValues": {
                ":st": encode(state),
                ":at": encode(entry["at"]),
                ":empty": encode([]),
                ":entry": encode([entry]),
            },
        }
        if journal is None:
            self.ddb.update_item(**request)
            return
        items = [{"Update": request}]
        transact(self.ddb, items + journal(items))

    def _with_journal(
        self,
        request: dict[str, Any],
        journal: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        key: dict[str, Any],
    ) -> dict[str, Any]:
        """The action's update in one transaction with its journal items; the row read back after (a person's
        action: no call budget). StaleItem when the row was not in the expected state; TransactionFailed (a
        journal position) when the chain head moved: the caller reads it again."""
        update = {k: v for k, v in request.items() if k != "ReturnValues"}
        items = [{"Update": update}]
        try:
            transact(self.ddb, items + journal(items))
        except TransactionFailed as exc:
            if 0 in exc.failed:
                raise StaleItem(str(key)) from None
            raise
        return self.get(request["TableName"], from_item(request["Key"])) or {}

    # ------------------------------------------------------------ helpers

    def _index(self, table: str, index: str, name: str, value: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": table,
            "IndexName": index,
            "KeyConditionExpression": "#k = :v",
            "ExpressionAttributeNames": {"#k": name},
            "ExpressionAttributeValues": names_values(v=value),
        }
        while True:
            page = self.ddb.query(**kwargs)
            rows += [from_item(i) for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _day_expiry(day: str) -> int:
    from datetime import UTC, datetime

    return int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()) + DAY_ROW_TTL_S
