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
- recon_diff `by_open`; recon_runs `by_blocked` (`blocked_pk` on a BLOCKED run);
- orders `by_poll`: `poll_pk = "manual#<shard>"` (the poller gave up).
Certificates come from the merchants table (small configuration; one paged scan, like `configured()`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tally.store.codec import encode, from_item, names_values, to_item
from tally.store.tables import PENDING_SHARDS

SHARDS = 4  # the orders' and refunds' poll index shards (store/polling.py, store/refunds.py)
REFUND_REPORT_MANUAL = "manual"  # refund_raw manual_pk while a report waits for a person
STATE_PREFIX = "queue_state#"  # merchants-table rows holding the state of items with no row of their own


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
    merchants: str
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
        """The latest run of every day that has a BLOCKED run, when that latest run is BLOCKED still."""
        if not self.t.recon_runs:
            return []
        days = {r["pk"] for r in self._index(self.t.recon_runs, "by_blocked", "blocked_pk", "blocked")}
        found = []
        for pk in sorted(days):
            runs = [
                r
                for r in self._key(self.t.recon_runs, pk, newest_first=True)
                if str(r["sk"]).startswith("run#")
            ]
            finished = [r for r in runs if r.get("status") in ("MATCHED", "DIFFS", "QUIET", "BLOCKED")]
            if finished and finished[0].get("status") == "BLOCKED":
                found.append(finished[0])
        return found

    def orders_with_person(self) -> list[dict[str, Any]]:
        return [
            r for s in range(SHARDS) for r in self._index(self.t.orders, "by_poll", "poll_pk", f"manual#{s}")
        ]

    def platform_certificates(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """(stored WeChat platform-certificate sets, queue state rows by item id) from the merchants table."""
        certs, states, kwargs = [], {}, {"TableName": self.t.merchants}
        while True:
            answer = self.ddb.scan(**kwargs)
            for row in map(from_item, answer.get("Items", [])):
                pk = str(row.get("pk", ""))
                if pk.startswith("platform_certs#"):
                    certs.append(row)
                elif pk.startswith(STATE_PREFIX):
                    states[pk[len(STATE_PREFIX) :]] = row
            if "LastEvaluatedKey" not in answer:
                return certs, states
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

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
        condition: str,
        owner: str | None = None,
        remove: tuple[str, ...] = (),
        sets: dict[str, Any] | None = None,
        values: dict[str, Any] | None = None,
        names: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One conditional update: the new state, the audit entry appended, index attributes removed (which is
        what takes the item out of every list at once). Raises StaleItem when the condition fails."""
        assigns = {"q_state": state, "q_at": entry["at"], **(sets or {})}
        if owner is not None:
            assigns["q_owner"] = owner
        names_in_order = list(assigns)  # a name may be a placeholder (#st) for a reserved word
        expression = "SET " + ", ".join(f"{k} = :s{i}" for i, k in enumerate(names_in_order))
        expression += ", history = list_append(if_not_exists(history, :q_empty), :q_entry)"
        if remove:
            expression += " REMOVE " + ", ".join(remove)
        attr_values = names_values(
            **{f"s{i}": assigns[k] for i, k in enumerate(names_in_order)}, **(values or {})
        )
        attr_values[":q_empty"] = encode([])
        attr_values[":q_entry"] = encode([entry])
        request: dict[str, Any] = {
            "TableName": table,
            "Key": to_item(key),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeValues": attr_values,
            "ReturnValues": "ALL_NEW",
        }
        if names:
            request["ExpressionAttributeNames"] = names
        try:
            answer = self.ddb.update_item(**request)
        except self.ddb.exceptions.ConditionalCheckFailedException:
            raise StaleItem(str(key)) from None
        return from_item(answer["Attributes"]) or {}

    def append_history(self, table: str, key: dict[str, Any], entry: dict[str, Any], state: str) -> None:
        """Audit after an action another service performed (its own write already moved the money)."""
        self.ddb.update_item(
            TableName=table,
            Key=to_item(key),
            UpdateExpression="SET q_state = :st, q_at = :at, "
            "history = list_append(if_not_exists(history, :empty), :entry)",
            ExpressionAttributeValues={
                ":st": encode(state),
                ":at": encode(entry["at"]),
                ":empty": encode([]),
                ":entry": encode([entry]),
            },
        )

    def put_state(self, item_id: str, row: dict[str, Any]) -> None:
        """The state of an item that has no row of its own (a certificate): a merchants-table row that
        `MerchantStore.configured()` never lists (no channel/mchid attributes)."""
        self.ddb.put_item(TableName=self.t.merchants, Item=to_item({**row, "pk": STATE_PREFIX + item_id}))

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

    def _key(self, table: str, pk: str, newest_first: bool = False) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": names_values(pk=pk),
            "ScanIndexForward": not newest_first,
        }
        while True:
            page = self.ddb.query(**kwargs)
            rows += [from_item(i) for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
