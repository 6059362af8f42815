"""The journal table (issue #36, docs/audit.md): one item per record plus one head item per chain.

* record: pk = chain (`merchant#day#lane`), sk = `r#<seq, 12 digits>`, `seq`, `hash`, `record` (the
  canonical JSON text).
* head:   pk = chain, sk = `head`, `seq`, `hash`, `head_day` (the sparse GSI by_day lists a day's chains).

A record is appended INSIDE the transaction that makes the decision (`append_items`): the head moves from
the (seq, hash) the writer read to the new record's, conditionally, and the record is put where no record
is. Two writers that read the same head cannot both commit: the loser's whole transaction is cancelled
(the decision with it) and it decides again on fresh reads. The head is read in the same BatchGetItem as
the row the decision reads anyway (`read_with_head`), so a journaled decision costs no extra AWS call.
"""

from __future__ import annotations

from typing import Any

from tally.domain.journal import Entry, Head, Ref, canonical
from tally.store.codec import from_item, names_values, to_item

HEAD_SK = "head"
RECORD_PREFIX = "r#"
JOURNAL = 100  # TransactionFailed.failed carries this for a journal item (store/payments.py)


class JournalStore:
    def __init__(self, ddb: Any, table: str):
        self.ddb = ddb
        self.table = table

    # ------------------------------------------------------------------ the decision's side

    def read_with_head(
        self, table: str, key: dict[str, Any], chain: str
    ) -> tuple[dict[str, Any] | None, Head]:
        """The decision's row and the chain's head in ONE consistent BatchGetItem (the call the decision
        makes anyway)."""
        request = {
            table: {"Keys": [to_item(key)], "ConsistentRead": True},
            self.table: {"Keys": [to_item({"pk": chain, "sk": HEAD_SK})], "ConsistentRead": True},
        }
        found: dict[str, list[dict[str, Any]]] = {table: [], self.table: []}
        while request:
            answer = self.ddb.batch_get_item(RequestItems=request)
            for name, items in answer.get("Responses", {}).items():
                found[name] += [from_item(i) for i in items]
            request = answer.get("UnprocessedKeys") or {}
        row = found[table][0] if found[table] else None
        head_rows = found[self.table]
        return row, head_of(chain, head_rows[0] if head_rows else None)

    def head(self, chain: str) -> Head:
        answer = self.ddb.get_item(
            TableName=self.table, Key=to_item({"pk": chain, "sk": HEAD_SK}), ConsistentRead=True
        )
        return head_of(chain, from_item(answer.get("Item")))

    def append_items(self, read: Head, entry: Entry, *, merchant: str, day: str) -> list[dict[str, Any]]:
        """The two transaction items that append `entry` after `read`: head CAS + record put."""
        if read.seq == 0:
            condition = "attribute_not_exists(pk)"
            values = names_values(n=entry.seq, h=entry.hash, d=day, m=merchant)
        else:
            condition = "seq = :was AND #h = :hwas"
            values = names_values(n=entry.seq, h=entry.hash, d=day, m=merchant, was=read.seq, hwas=read.hash)
        return [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": to_item({"pk": entry.chain, "sk": HEAD_SK}),
                    "UpdateExpression": "SET seq = :n, #h = :h, head_day = :d, merchant = :m",
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#h": "hash"},
                    "ExpressionAttributeValues": values,
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": to_item(
                        {
                            "pk": entry.chain,
                            "sk": record_sk(entry.seq),
                            "seq": entry.seq,
                            "hash": entry.hash,
                            "record": canonical(entry.record).decode("utf-8"),
                            "day": day,
                        }
                    ),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]

    # ------------------------------------------------------------------ the auditor's side

    def chains_of_day(self, day: str) -> list[dict[str, Any]]:
        """Every chain head of a day (GSI by_day): chain, merchant, seq, hash."""
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_day",
            "KeyConditionExpression": "head_day = :d",
            "ExpressionAttributeValues": names_values(d=day),
        }
        while True:
            answer = self.ddb.query(**kwargs)
            found += [from_item(i) for i in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                return sorted(found, key=lambda r: r["pk"])
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def records(self, chain: str) -> list[dict[str, Any]]:
        """A chain's stored records in seq order: {"chain", "seq", "hash", "record" (text)}."""
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :c AND begins_with(sk, :r)",
            "ExpressionAttributeValues": names_values(c=chain, r=RECORD_PREFIX),
            "ConsistentRead": True,
        }
        while True:
            answer = self.ddb.query(**kwargs)
            found += [from_item(i) for i in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                break
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        return [{"chain": r["pk"], "seq": r["seq"], "hash": r["hash"], "record": r["record"]} for r in found]


def record_sk(seq: int) -> str:
    return f"{RECORD_PREFIX}{seq:012d}"


def head_of(chain: str, item: dict[str, Any] | None) -> Head:
    if not item:
        return Head(chain)
    return Head(chain, int(item["seq"]), str(item["hash"]))


# what a journal record pins of each row it speaks for: the fields no later step may change (a ledger entry's
# settlement figures are filled in later by the backfill, R43; its money, keys and day never change)
PINNED: dict[str, tuple[str, ...]] = {
    "ledger": (
        "kind",
        "channel",
        "transaction_id",
        "order_pk",
        "mchid",
        "out_trade_no",
        "amount_cent",
        "currency",
        "bill_date",
    ),
    "transitions": ("event", "from_status", "to_status", "raw_key", "source"),
    "refunds": ("mchid", "channel", "order_pk", "amount_cent", "refund_no"),
    # a recon run's verdict: a finished run row is never written again (a re-run is a row of its own)
    "recon_runs": (
        "channel",
        "mchid",
        "bill_date",
        "pass",
        "run_id",
        "status",
        "reason",
        "guard",
        "block_code",
        "open_diffs",
    ),
    # a difference as recon found it: its class, item, key, both amounts and the run that opened it (its
    # handle status, history and last_seen_run move as people and later runs work it)
    "recon_diff": (
        "channel",
        "mchid",
        "bill_date",
        "cls",
        "item",
        "key",
        "channel_amount_cent",
        "local_amount_cent",
        "run_id",
    ),
    # the refund task of money that arrived on an order that cannot take it (R17); its status moves later
    "refund_tasks": ("tenant", "order_pk", "channel", "transaction_id", "mchid", "amount_cent"),
}


def ref_key(row: dict[str, Any]) -> str:
    """A row's key as the journal names it: `pk`, or `pk|sk` in a table with a sort key."""
    return f"{row['pk']}|{row['sk']}" if "sk" in row else str(row["pk"])


SORTED_TABLES = frozenset({"transitions", "refund_raw", "recon_diff", "recon_runs"})  # tables with a sort key


def split_ref_key(table: str, key: str) -> dict[str, Any]:
    """`ref_key` read back: only a table with a sort key splits, at the last `|` (a sort key such as
    `PAY#<transaction id>` holds none; an out_trade_no or refund number in the partition key may)."""
    if table not in SORTED_TABLES:
        return {"pk": key}
    pk, _, sk = key.rpartition("|")
    return {"pk": pk, "sk": sk}


def pinned_ref(table: str, row: dict[str, Any]) -> Ref:
    """A row the decision did not put in its transaction but speaks for (a diff a run opened), as a ref."""
    return Ref(table, ref_key(row), {f: row[f] for f in PINNED.get(table, ()) if f in row})


def refs_from_items(items: list[dict[str, Any]], logical: dict[str, str]) -> list[Ref]:
    """The rows a transaction puts, as journal refs (only PINNED tables, only their PINNED fields)."""
    refs = []
    for item in items:
        put = item.get("Put")
        if not put or put["TableName"] not in logical:
            continue
        name = logical[put["TableName"]]
        if name not in PINNED:  # e.g. a queue item put beside an entry: it closes and expires (R51)
            continue
        row = from_item(put["Item"])
        fields = {f: row[f] for f in PINNED.get(name, ()) if f in row}
        refs.append(Ref(name, ref_key(row), fields))
    return refs


class RowReader:
    """The rows journal records name, read back for an audit: logical table name → physical table."""

    def __init__(self, ddb: Any, physical: dict[str, str]):
        self.ddb = ddb
        self.physical = physical

    def rows(self, refs: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any] | None]:
        """Each (table, key) → the row as it stands now (None: not there). BatchGetItem, 100 keys a call."""
        found: dict[tuple[str, str], dict[str, Any] | None] = dict.fromkeys(refs)
        wanted = [(t, k) for t, k in dict.fromkeys(refs) if t in self.physical]
        logical = {v: k for k, v in self.physical.items()}
        for start in range(0, len(wanted), 100):
            request: dict[str, Any] = {}
            for table, key in wanted[start : start + 100]:
                entry = request.setdefault(self.physical[table], {"Keys": [], "ConsistentRead": True})
                entry["Keys"].append(to_item(split_ref_key(table, key)))
            while request:
                answer = self.ddb.batch_get_item(RequestItems=request)
                for name, items in answer.get("Responses", {}).items():
                    for item in items:
                        row = from_item(item)
                        found[(logical[name], ref_key(row))] = row
                request = answer.get("UnprocessedKeys") or {}
        return found
