"""The alerts table (template.yaml `AlertsTable`) and the chat destinations' secret (docs/alerts.md).

One table, two kinds of row, both found by their partition key (no index, no scan):
- incidents: `pk = "incident"`, `sk = <incident id>`; a resolved incident carries `expires_at` (30 days after it
  resolved; a live one never expires), so the partition stays small;
- the alert log: `pk = "log#<UTC day>"`, `sk = "<ISO time>#<nonce>"`, one row per card sent, suppressed or
  failed, kept 30 days.
Destinations and their secrets (webhook URLs, signing secrets) are one Secrets Manager document,
`tally/<stack>/alerts/destinations`, next to the merchants' secrets of the same stack.
"""

from __future__ import annotations

import uuid
from typing import Any

from tally.store.codec import from_item, names_values, to_item
from tally.store.secrets import SecretStore

INCIDENT_PK = "incident"
LOG_PREFIX = "log#"
KEEP_S = 30 * 86400


class StaleIncident(Exception):
    """Another invocation changed the incident since it was read: the next run decides again."""


class IncidentStore:
    def __init__(self, ddb: Any, table: str):
        self.ddb = ddb
        self.table = table

    def all(self) -> list[dict[str, Any]]:
        """Every incident (live ones and those resolved within 30 days): one Query of one partition."""
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": names_values(pk=INCIDENT_PK),
            "ConsistentRead": True,
        }
        while True:
            page = self.ddb.query(**kwargs)
            rows += [from_item(i) or {} for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, incident_id: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.table, Key=to_item({"pk": INCIDENT_PK, "sk": incident_id}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))

    def save(self, row: dict[str, Any]) -> dict[str, Any]:
        """Write the incident if nobody changed it since it was read (`rev`); raises StaleIncident otherwise."""
        previous = int(row.get("rev") or 0)
        item = {**row, "pk": INCIDENT_PK, "sk": row["id"], "rev": previous + 1}
        try:
            self.ddb.put_item(
                TableName=self.table,
                Item=to_item(item),
                ConditionExpression="attribute_not_exists(pk) OR rev = :rev",
                ExpressionAttributeValues=names_values(rev=previous),
            )
        except self.ddb.exceptions.ConditionalCheckFailedException:
            raise StaleIncident(row["id"]) from None
        return item


class AlertLog:
    """Every card: sent, suppressed (snoozed, over the hourly cap) or failed after its retries."""

    def __init__(self, ddb: Any, table: str):
        self.ddb = ddb
        self.table = table

    def record(self, entry: dict[str, Any], now_s: float) -> dict[str, Any]:
        at = str(entry["at"])
        row = {
            **entry,
            "pk": LOG_PREFIX + at[:10],
            "sk": f"{at}#{uuid.uuid4().hex[:8]}",
            "expires_at": int(now_s) + KEEP_S,
        }
        self.ddb.put_item(TableName=self.table, Item=to_item(row))
        return row

    def day(self, day: str, *, since: str = "", limit: int = 0) -> list[dict[str, Any]]:
        """One UTC day's entries, newest first (`since`: only entries at or after that ISO time)."""
        condition = "pk = :pk" + (" AND sk >= :since" if since else "")
        values = {"pk": LOG_PREFIX + day, **({"since": since} if since else {})}
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": names_values(**values),
            "ScanIndexForward": False,
        }
        rows: list[dict[str, Any]] = []
        while True:
            page = self.ddb.query(**kwargs)
            rows += [from_item(i) or {} for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page or (limit and len(rows) >= limit):
                return rows[:limit] if limit else rows
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


class Destinations:
    """The chat destinations: one JSON document `{"destinations": [...]}` in Secrets Manager."""

    def __init__(self, secrets: SecretStore, name: str):
        self.secrets = secrets
        self.name = name

    def all(self) -> list[dict[str, Any]]:
        document = self.secrets.find(self.name) or {}
        return list(document.get("destinations") or [])

    def replace(self, destinations: list[dict[str, Any]]) -> None:
        self.secrets.put(self.name, {"destinations": destinations})


def secret_name(merchant_secret_prefix: str) -> str:
    """`tally/<stack>/merchants/` → `tally/<stack>/alerts/destinations` (the same stack's prefix)."""
    stack_prefix = merchant_secret_prefix.rstrip("/").rsplit("/", 1)[0]
    return f"{stack_prefix}/alerts/destinations"
