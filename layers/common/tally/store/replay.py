"""Bulk replay runs (`tally manual replay --filter …`, service/replay.py): one run row and one claim row per
item, in the notify_event table (pk only, TTL `expires_at`: kept 30 days, like the events they replay).

- `replay-run#<run_id>`: the filter, who and why, the time cap that fixes the run's set, the rate, the plan
  (count, cents) and the progress (done, failed, cents sent), the status (RUNNING, PAUSED, DONE);
- `replay-item#<run_id>#<item_id>`: the claim on one item, then its outcome. A claim is taken with a
  conditional put, so two processes continuing one run never act on the same item, and a run continued
  after a crash acts again only on items whose claim never got an outcome (after a lease).
Neither row has a `manual_kind` or `order_pk`: no index sees them.
"""

from __future__ import annotations

import secrets
from typing import Any

from tally.store.codec import from_item, names_values, to_item

RUN = "replay-run#"
ITEM = "replay-item#"
TTL_S = 30 * 86400
LEASE_S = 120  # a claim without an outcome this old is taken again (its process died mid-item)


class RunExists(Exception):
    """A run with this id exists already."""


class ReplayStore:
    def __init__(self, ddb: Any, table: str):
        self.ddb = ddb
        self.table = table

    def create(self, run: dict[str, Any], now_s: float) -> None:
        row = {**run, "pk": RUN + run["run_id"], "kind": "replay_run", "expires_at": int(now_s) + TTL_S}
        try:
            self.ddb.put_item(
                TableName=self.table, Item=to_item(row), ConditionExpression="attribute_not_exists(pk)"
            )
        except self.ddb.exceptions.ConditionalCheckFailedException:
            raise RunExists(run["run_id"]) from None

    def get(self, run_id: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.table, Key=to_item({"pk": RUN + run_id}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))

    def progress(
        self,
        run_id: str,
        *,
        done: int = 0,
        failed: int = 0,
        cents: int = 0,
        status: str,
        at: str,
        token: str = "",
    ) -> dict[str, Any]:
        """ADD the batch's counts to the run row, SET its status: one UpdateItem per batch of items.

        `token` names this batch (once per flush): the row keeps the tokens it added (a list: 16 characters a batch), and the write is conditional
        on not holding this one, so a retry of a write whose answer was lost (the client's timeout and retry) adds
        nothing twice: seen in the 200-item simulation on a loaded machine, one run counted a batch of 25 twice
        (202 + 23 done of 200). The retry's refusal means the first write landed: the row is read and returned."""
        token = token or secrets.token_hex(8)
        try:
            answer = self.ddb.update_item(
                TableName=self.table,
                Key=to_item({"pk": RUN + run_id}),
                UpdateExpression="ADD done_items :d, failed_items :f, done_cent :c "
                "SET #st = :st, updated_at = :at, flushes = list_append(if_not_exists(flushes, :none), :tok)",
                ConditionExpression="attribute_exists(pk) AND NOT contains(flushes, :one)",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=names_values(
                    d=done, f=failed, c=cents, st=status, at=at, one=token, none=[], tok=[token]
                ),
                ReturnValues="ALL_NEW",
            )
        except self.ddb.exceptions.ConditionalCheckFailedException:
            row = self.get(run_id)
            if row is None or token not in (row.get("flushes") or ()):
                raise
            return row  # our own batch, added by the first try: its answer was lost
        return from_item(answer["Attributes"]) or {}

    def claim(self, run_id: str, item_id: str, now_s: float, at: str, holder: str = "") -> bool:
        """Take one item for this run: False when it is done already, or another process holds it. `holder`
        names the taking process: a retry of our own put whose answer was lost finds our claim and takes it."""
        try:
            self.ddb.put_item(
                TableName=self.table,
                Item=to_item(
                    {
                        "pk": f"{ITEM}{run_id}#{item_id}",
                        "kind": "replay_item",
                        "claimed_s": int(now_s),
                        "claimed_at": at,
                        "expires_at": int(now_s) + TTL_S,
                        "holder": holder or "-",
                    }
                ),
                ConditionExpression="attribute_not_exists(pk) OR "
                "(attribute_not_exists(outcome) AND (claimed_s < :stale OR holder = :me))",
                ExpressionAttributeValues=names_values(stale=int(now_s) - LEASE_S, me=holder or "-"),
            )
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def finish(self, run_id: str, item_id: str, outcome: str, cents: int, at: str) -> None:
        self.ddb.update_item(
            TableName=self.table,
            Key=to_item({"pk": f"{ITEM}{run_id}#{item_id}"}),
            UpdateExpression="SET outcome = :o, amount_cent = :c, finished_at = :at",
            ExpressionAttributeValues=names_values(o=outcome[:300], c=cents, at=at),
        )

    def item(self, run_id: str, item_id: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.table, Key=to_item({"pk": f"{ITEM}{run_id}#{item_id}"}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))
