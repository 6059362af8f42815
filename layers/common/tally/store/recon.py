"""Reconciliation storage: recon_runs, recon_diff, the ledger as reconciliation reads it, and the bill archive
in S3. The only module that knows these layouts (docs/recon.md has them)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any

from tally.domain.recon import OPEN, PAYMENT, REFUND, LocalEntry, ledger_pks, local_entry
from tally.store.codec import encode, from_item, names_values, to_item
from tally.store.shards import LEDGER_SHARDS as LEDGER_SHARDS  # re-exported: recon reads shard by shard
from tally.store.shards import bill_shard as bill_shard
from tally.store.shards import ledger_shard as ledger_shard
from tally.store.shards import with_bill_shard as with_bill_shard
from tally.store.tables import transact

CONFIRM_SK = "confirm"
BLOCKED_SK = "blocked"  # the day's work-queue marker while its latest run is BLOCKED
# what the marker also keeps of the blocking run when it has it: the kept bill, its layout (a quarantined day is
# re-run from it once the layout is mapped: service/recon_layout.py) and which leg (trade or fundflow) blocked
DAY_OF_RUN = ("bill_key", "layout_fingerprint", "leg")

SHARD_INDEX = "by_bill_shard"
READ_THREADS = 4  # shards read at once by the readers that need a whole day
# FEE entries are written with attribute_not_exists(pk) (a re-run never overwrites; BatchWriteItem cannot carry
# the condition): up to FEE_BATCH conditional Puts in one TransactWriteItems (its limit), FEE_THREADS calls in
# flight. Measured client CPU (docs/cost.md): ~0.2 ms an entry this way, ~2.4 ms with one PutItem an entry.
FEE_BATCH = 100
FEE_THREADS = 4
FEE_RETRIES = 5  # a batch cancelled for another reason than a taken key (a transaction conflict) is retried


def recon_pk(channel: str, mchid: str, bill_date: str) -> str:
    return f"{channel}#{mchid}#{bill_date}"


class ReconStore:
    """recon_runs (pk channel#mchid#bill_date, sk run#<started_at> | confirm) and recon_diff (same pk,
    sk <item>#<ledger key>; sparse GSI by_open on open_pk/opened_at while handle_status is OPEN)."""

    def __init__(self, ddb: Any, runs_table: str, diff_table: str):
        self.ddb = ddb
        self.runs = runs_table
        self.diffs = diff_table

    # ------------------------------------------------------------ runs
    def put_run(self, row: dict[str, Any]) -> None:
        self.ddb.put_item(TableName=self.runs, Item=to_item(row))

    def run_put(self, row: dict[str, Any]) -> dict[str, Any]:
        """`put_run` as a transaction item (the verdict and its journal record commit together)."""
        return {"Put": {"TableName": self.runs, "Item": to_item(row)}}

    def transact(self, items: list[dict[str, Any]]) -> None:
        transact(self.ddb, items)

    def run(self, pk: str, sk: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.runs, Key=to_item({"pk": pk, "sk": sk}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))

    def note_partition_error(self, pk: str, sk: str, text: str) -> None:
        """A Distributed Map child's failure, kept on its run for the merge to name (one short entry per try)."""
        values = names_values(e=[text[:500]], empty=[])
        self.ddb.update_item(
            TableName=self.runs,
            Key=to_item({"pk": pk, "sk": sk}),
            UpdateExpression="SET partition_errors = list_append(if_not_exists(partition_errors, :empty), :e)",
            ExpressionAttributeValues=values,
        )

    def run_rows(self, pk: str) -> list[dict[str, Any]]:
        """Every run of one day, newest first (a few per day: T+1, T+2, T+3, retries, confirmations)."""
        return [r for r in self._query(self.runs, pk, newest_first=True) if str(r["sk"]).startswith("run#")]

    def mark_day(self, run: dict[str, Any]) -> None:
        """The day's work-queue marker (sk `blocked`, sparse index by_blocked, R41): a BLOCKED run sets it (and
        reopens it), a later run that finished otherwise clears it. Updates, so the item's history stays."""
        fields = {
            k: run.get(k)
            for k in (
                "channel",
                "mchid",
                "bill_date",
                "block_code",
                "guard",
                "reason",
                *DAY_OF_RUN,
            )
        }
        fields = {
            "run_sk": run["sk"],
            "blocked_at": run.get("finished_at"),
            **{k: v for k, v in fields.items() if v},
        }
        key = to_item({"pk": run["pk"], "sk": BLOCKED_SK})
        sets = ", ".join(f"{k} = :{k}" for k in fields)
        if run.get("status") == "BLOCKED":
            self.ddb.update_item(
                TableName=self.runs,
                Key=key,
                # what an earlier block of the day left and this one does not say is removed: the latest block
                UpdateExpression=f"SET {sets}, blocked_pk = :b, q_state = :open REMOVE "
                + ", ".join(["q_owner", *(k for k in DAY_OF_RUN if k not in fields)]),
                ExpressionAttributeValues=names_values(b="blocked", open="OPEN", **fields),
            )
            return
        try:
            self.ddb.update_item(
                TableName=self.runs,
                Key=key,
                UpdateExpression="SET cleared_by_run = :r REMOVE blocked_pk",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues=names_values(r=run["sk"]),
            )
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return  # the day was never blocked: no marker

    # ------------------------------------------------------------ bill layouts (service/recon_layout.py)
    def put_layout(self, channel: str, mapping: dict[str, Any]) -> bool:
        """A person's mapping of a new bill layout (`tally bill layout add`), once per fingerprint: False if
        that fingerprint is mapped already (a mapping is never overwritten; a wrong one is fixed in the repo)."""
        item = {
            "pk": f"layout#{channel}#{mapping['fingerprint']}",
            "sk": "mapping",
            "mapping": json.dumps(mapping),
        }
        try:
            self.ddb.put_item(
                TableName=self.runs, Item=to_item(item), ConditionExpression="attribute_not_exists(pk)"
            )
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def layout(self, channel: str, fingerprint: str) -> dict[str, Any] | None:
        row = self.run(f"layout#{channel}#{fingerprint}", "mapping")
        return json.loads(row["mapping"]) if row else None

    def quarantined(self, channel: str, fingerprint: str) -> list[dict[str, Any]]:
        """The days quarantined for this bill layout: their markers (index by_blocked, bounded by the blocked
        days), blocked LAYOUT_QUARANTINED with that fingerprint."""
        request: dict[str, Any] = {
            "TableName": self.runs,
            "IndexName": "by_blocked",
            "KeyConditionExpression": "blocked_pk = :b AND begins_with(pk, :c)",
            "FilterExpression": "layout_fingerprint = :f AND block_code = :q",
            "ExpressionAttributeValues": names_values(
                b="blocked", c=f"{channel}#", f=fingerprint, q="LAYOUT_QUARANTINED"
            ),
        }
        return self._pages(request)

    def latest_parsed_rows(self, pk: str) -> int | None:
        for row in self.run_rows(pk):
            totals = row.get("totals")
            if isinstance(totals, dict) and "rows" in totals:
                return int(totals["rows"])
        return None

    def put_confirmation(self, pk: str, by: str, note: str, at: str) -> None:
        self.ddb.put_item(**self.confirmation_put(pk, by, note, at)["Put"])

    def confirmation_put(self, pk: str, by: str, note: str, at: str) -> dict[str, Any]:
        """A person's confirmation of a volume drop (R33) as a transaction item (its journal record rides in it)."""
        row = {"pk": pk, "sk": CONFIRM_SK, "confirmed_by": by, "note": note, "confirmed_at": at}
        return {"Put": {"TableName": self.runs, "Item": to_item(row)}}

    def confirmation(self, pk: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.runs, Key=to_item({"pk": pk, "sk": CONFIRM_SK}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))

    # ------------------------------------------------------------ diffs
    def put_new_diff(self, row: dict[str, Any]) -> bool:
        """Insert a diff once (re-running a day is idempotent); False if it was already there."""
        try:
            self.ddb.put_item(
                TableName=self.diffs, Item=to_item(row), ConditionExpression="attribute_not_exists(pk)"
            )
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def seen_again(self, pk: str, sk: str, run_id: str, recovery: str | None) -> None:
        sets = "last_seen_run = :r, seen_count = if_not_exists(seen_count, :zero) + :one"
        values = {"r": run_id, "zero": 0, "one": 1}
        if recovery:
            sets += ", recovery = :rec"
            values["rec"] = recovery
        self.ddb.update_item(
            TableName=self.diffs,
            Key=to_item({"pk": pk, "sk": sk}),
            UpdateExpression="SET " + sets,
            ExpressionAttributeValues=names_values(**values),
        )

    def diffs_of(self, pk: str) -> list[dict[str, Any]]:
        return self._query(self.diffs, pk)

    def diff(self, pk: str, sk: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(
            TableName=self.diffs, Key=to_item({"pk": pk, "sk": sk}), ConsistentRead=True
        )
        return from_item(answer.get("Item"))

    def open_diffs(self, limit: int = 200) -> list[dict[str, Any]]:
        """OPEN diffs across days, oldest first, through the sparse index (never a scan)."""
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.diffs,
            "IndexName": "by_open",
            "KeyConditionExpression": "open_pk = :o",
            "ExpressionAttributeValues": names_values(o=OPEN),
        }
        while len(found) < limit:
            answer = self.ddb.query(**kwargs)
            found += [from_item(i) for i in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                break
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        return found[:limit]

    def close_diff_update(
        self,
        pk: str,
        sk: str,
        status: str,
        by: str,
        note: str,
        at: str,
        extra: dict[str, Any] | None = None,
        expect: tuple[str, ...] = (OPEN,),
    ) -> dict[str, Any]:
        """OPEN (or one of `expect`: an EXPECTED one recon heals) → RESOLVED/IGNORED with a history entry, out of
        the open index (usable in a transaction)."""
        entry = {"at": at, "by": by, "action": status, "note": note, **(extra or {})}
        states = {f"e{i}": state for i, state in enumerate(expect)}
        values = names_values(st=status, by=by, at=at, **states)
        values[":h"] = encode([entry])
        values[":empty"] = encode([])
        return {
            "TableName": self.diffs,
            "Key": to_item({"pk": pk, "sk": sk}),
            "UpdateExpression": "SET handle_status = :st, #handler = :by, handled_at = :at, "
            "history = list_append(if_not_exists(history, :empty), :h) REMOVE open_pk",
            "ConditionExpression": f"handle_status IN ({', '.join(':' + k for k in states)})",
            "ExpressionAttributeNames": {"#handler": "handler"},
            "ExpressionAttributeValues": values,
        }

    def open_expected(
        self, pk: str, sk: str, at: str, note: str, words: dict[str, str] | None = None
    ) -> bool:
        """An EXPECTED diff (in transit, inside the lag) opens for a person: into the open index, once, with its
        `words` (detail, next_step) as they read now."""
        values = names_values(o=OPEN, x="EXPECTED", at=at, **(words or {}))
        values[":h"] = encode([{"at": at, "by": "recon", "action": "OPENED", "note": note}])
        values[":empty"] = encode([])
        sets = "".join(f", {name} = :{name}" for name in words or {})
        try:
            self.ddb.update_item(
                TableName=self.diffs,
                Key=to_item({"pk": pk, "sk": sk}),
                UpdateExpression="SET handle_status = :o, open_pk = :o, opened_at = :at, "
                "history = list_append(if_not_exists(history, :empty), :h)" + sets,
                ConditionExpression="handle_status = :x",
                ExpressionAttributeValues=values,
            )
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def close_diff(
        self, pk: str, sk: str, status: str, by: str, note: str, at: str, expect: tuple[str, ...] = (OPEN,)
    ) -> bool:
        try:
            self.ddb.update_item(**self.close_diff_update(pk, sk, status, by, note, at, expect=expect))
            return True
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return False

    def _query(self, table: str, pk: str, newest_first: bool = False) -> list[dict[str, Any]]:
        return self._pages(
            {
                "TableName": table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": names_values(pk=pk),
                "ScanIndexForward": not newest_first,
                "ConsistentRead": True,
            }
        )

    def _pages(self, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """Every page of one Query."""
        rows: list[dict[str, Any]] = []
        while True:
            answer = self.ddb.query(**kwargs)
            rows += [from_item(i) for i in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                return rows
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


class LedgerView:
    """The ledger as reconciliation reads it: one merchant's entries of one bill_date (GSI by_bill_shard, one
    Query per shard: key condition on the shard and the channel prefix of pk, filter on mchid), point reads,
    reversal entries."""

    def __init__(self, ddb: Any, table: str):
        self.ddb = ddb
        self.table = table

    def day(self, channel: str, mchid: str, bill_date: str) -> Iterator[dict[str, Any]]:
        """Every shard of the day, READ_THREADS shards at a time (a small day: 16 short Queries)."""
        shards = range(LEDGER_SHARDS)
        with ThreadPoolExecutor(READ_THREADS) as pool:
            for rows in pool.map(lambda s: list(self.day_shard(channel, mchid, bill_date, s)), shards):
                yield from rows

    def day_shard(self, channel: str, mchid: str, bill_date: str, shard: int) -> Iterator[dict[str, Any]]:
        """One shard of one merchant's day: the ledger side of one partition of the match."""
        return self._paged(
            {
                "KeyConditionExpression": "bill_shard = :s AND begins_with(pk, :c)",
                "FilterExpression": "mchid = :m",
                "ExpressionAttributeValues": names_values(
                    s=bill_shard(bill_date, shard), c=f"{channel}#", m=mchid
                ),
            }
        )

    def fees(self, channel: str, mchid: str, bill_date: str) -> dict[str, int]:
        """The FEE entries one merchant's day has booked, {pk: amount_cent} (pk `fee#{channel}#…`)."""
        return {str(r["pk"]): int(r["amount_cent"]) for r in self.fee_rows(channel, mchid, bill_date)}

    def fee_rows(self, channel: str, mchid: str, bill_date: str) -> Iterator[dict[str, Any]]:
        """Every FEE entry of one merchant's day: every shard of by_bill_shard (READ_THREADS at a time), pk prefix
        `fee#{channel}#`, filtered on mchid so entries booked before merchant scoping (`fee#{channel}#{id}`,
        sharded by that key) are found too. Not by_bill_date: that index is on its way out (docs/recon.md)."""

        def shard(s: int) -> list[dict[str, Any]]:
            return list(
                self._paged(
                    {
                        "KeyConditionExpression": "bill_shard = :s AND begins_with(pk, :c)",
                        "FilterExpression": "mchid = :m",
                        "ExpressionAttributeValues": names_values(
                            s=bill_shard(bill_date, s), c=f"fee#{channel}#", m=mchid
                        ),
                    }
                )
            )

        with ThreadPoolExecutor(READ_THREADS) as pool:
            for rows in pool.map(shard, range(LEDGER_SHARDS)):
                yield from rows

    def fee_shard(self, channel: str, mchid: str, bill_date: str, shard: int) -> dict[str, int]:
        """The FEE entries of one shard of one merchant's day, {pk: amount_cent}: what partition `shard` of the
        bill booked (a FEE entry sits in its row's shard, `ledger_shard`). One Query (paged), key condition
        only: the pk prefix `fee#{channel}#{mchid}#` is the merchant's."""
        rows = self._paged(
            {
                "KeyConditionExpression": "bill_shard = :s AND begins_with(pk, :f)",
                "ExpressionAttributeValues": names_values(
                    s=bill_shard(bill_date, shard), f=f"fee#{channel}#{mchid}#"
                ),
            }
        )
        return {str(r["pk"]): int(r["amount_cent"]) for r in rows}

    def put_fees(self, rows: Iterable[dict[str, Any]]) -> tuple[int, dict[str, int]]:
        """Book FEE entries once each, from a small bounded pool: batches of FEE_BATCH conditional Puts
        (`attribute_not_exists(pk)`), FEE_THREADS batches in flight, `rows` taken FEE_BATCH × FEE_THREADS at a
        time (a generator is never drained into memory). Returns (how many were written, {pk: amount already
        booked} of the rows whose key was taken): the caller compares, nothing is overwritten. A write that fails
        otherwise raises (the run fails loudly and is retried)."""
        written, taken = 0, {}
        source = iter(rows)
        with ThreadPoolExecutor(FEE_THREADS) as pool:
            while chunk := list(islice(source, FEE_BATCH * FEE_THREADS)):
                batches = [chunk[k : k + FEE_BATCH] for k in range(0, len(chunk), FEE_BATCH)]
                for done, refused in pool.map(self._put_fee_batch, batches):
                    written += done
                    taken.update(refused)
        return written, taken

    def _put_fee_batch(self, rows: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
        """One TransactWriteItems of conditional Puts: all written, or cancelled with a reason per item. A key
        already taken is read back (its booked amount) and the batch is tried again without it; a key twice in
        the batch (the same bill row twice) waits for the next try, where its condition decides."""
        written, taken = 0, {}
        pending, tries = rows, 0
        while pending:
            seen: set[str] = set()
            batch: list[dict[str, Any]] = []
            later: list[dict[str, Any]] = []
            for row in pending:
                (later if row["pk"] in seen else batch).append(row)
                seen.add(row["pk"])
            try:
                self.ddb.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": self.table,
                                "Item": to_item(with_bill_shard(row)),  # every ledger write carries its shard
                                "ConditionExpression": "attribute_not_exists(pk)",
                            }
                        }
                        for row in batch
                    ]
                )
                written += len(batch)
                pending = later
            except self.ddb.exceptions.TransactionCanceledException as exc:
                reasons = exc.response.get("CancellationReasons") or []
                refused = {
                    str(row["pk"])
                    for row, why in zip(batch, reasons, strict=False)
                    if why.get("Code") == "ConditionalCheckFailed"
                }
                if not refused:
                    tries += 1
                    if tries > FEE_RETRIES:
                        raise
                    time.sleep(0.05 * 2**tries)
                    continue
                for pk in refused:
                    booked = self.get(pk)
                    if booked is not None:
                        taken[pk] = int(booked["amount_cent"])
                pending = [row for row in batch if row["pk"] not in refused] + later
        return written, taken

    def entry_and_reversals(self, pk: str, bill_date: str) -> list[dict[str, Any]]:
        """One entry and its REVERSAL entries (`<pk>#REVERSAL#<day>`, same bill_date and shard): one Query."""
        answer = self.ddb.query(
            TableName=self.table,
            IndexName=SHARD_INDEX,
            KeyConditionExpression="bill_shard = :s AND begins_with(pk, :k)",
            ExpressionAttributeValues=names_values(s=bill_shard(bill_date, ledger_shard(pk)), k=pk),
        )
        rows = [from_item(i) for i in answer.get("Items", [])]
        return [r for r in rows if r["pk"] == pk or str(r["pk"]).startswith(pk + "#")]

    def all_of_day(self, bill_date: str, mchid: str | None = None) -> Iterator[dict[str, Any]]:
        """Every entry of one bill_date (the finance view), all merchants or one: every shard, paged."""

        def shard(s: int) -> list[dict[str, Any]]:
            values = {"s": bill_shard(bill_date, s)}
            request: dict[str, Any] = {"KeyConditionExpression": "bill_shard = :s"}
            if mchid is not None:
                request["FilterExpression"] = "mchid = :m"
                values["m"] = mchid
            request["ExpressionAttributeValues"] = names_values(**values)
            return list(self._paged(request))

        with ThreadPoolExecutor(READ_THREADS) as pool:
            for rows in pool.map(shard, range(LEDGER_SHARDS)):
                yield from rows

    def _paged(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"TableName": self.table, "IndexName": SHARD_INDEX, **request}
        while True:
            answer = self.ddb.query(**kwargs)
            for item in answer.get("Items", []):
                yield from_item(item)
            if "LastEvaluatedKey" not in answer:
                return
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def backfill_shards(self) -> int:
        """Migration: give every ledger entry written before sharding its `bill_shard` (docs/recon.md). One
        paged Scan, one conditional UpdateItem per entry that lacks it; re-runnable. Returns how many it set."""
        done = 0
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "FilterExpression": "attribute_exists(bill_date) AND attribute_not_exists(bill_shard)",
        }
        while True:
            answer = self.ddb.scan(**kwargs)
            for item in answer.get("Items", []):
                row = from_item(item)
                try:
                    self.ddb.update_item(
                        TableName=self.table,
                        Key=to_item({"pk": row["pk"]}),
                        UpdateExpression="SET bill_shard = :s",
                        ConditionExpression="attribute_not_exists(bill_shard)",
                        ExpressionAttributeValues=names_values(s=with_bill_shard(row)["bill_shard"]),
                    )
                    done += 1
                except self.ddb.exceptions.ConditionalCheckFailedException:
                    pass
            if "LastEvaluatedKey" not in answer:
                return done
            kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

    def has_entries(self, channel: str, mchid: str, bill_date: str) -> bool:
        return any(
            any(True for _ in self.day_shard(channel, mchid, bill_date, s)) for s in range(LEDGER_SHARDS)
        )

    def get(self, pk: str) -> dict[str, Any] | None:
        answer = self.ddb.get_item(TableName=self.table, Key=to_item({"pk": pk}), ConsistentRead=True)
        return from_item(answer.get("Item"))

    def entry(self, pk: str) -> LocalEntry | None:
        row = self.get(pk)
        if row is None or row.get("kind", PAYMENT) not in (PAYMENT, REFUND):
            return None
        return local_entry(row)

    def booked(self, key: str, mchid: str) -> dict[str, Any] | None:
        """The merchant's entry a bill key `channel#id` names: scoped pk, else a pre-#15 one (`ledger_pks`)."""
        scoped, legacy = ledger_pks(key, mchid)
        row = self.get(scoped)
        if row is None:
            row = self.get(legacy)
            row = row if row is not None and row.get("mchid") == mchid else None
        return row

    def booked_entry(self, key: str, mchid: str) -> LocalEntry | None:
        row = self.booked(key, mchid)
        if row is None or row.get("kind", PAYMENT) not in (PAYMENT, REFUND):
            return None
        return local_entry(row)

    def reversal_put(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "TableName": self.table,
            "Item": to_item(with_bill_shard(row)),
            "ConditionExpression": "attribute_not_exists(pk)",
        }

    def close_with_reversal(self, close_update: dict[str, Any], entry: dict[str, Any]) -> bool:
        """A diff closed and its reversing ledger entry written in one transaction (R36); False if either
        condition failed (the diff changed under us, or the reversal exists)."""
        try:
            self.ddb.transact_write_items(
                TransactItems=[{"Update": close_update}, {"Put": self.reversal_put(entry)}]
            )
            return True
        except self.ddb.exceptions.TransactionCanceledException:
            return False


class BillArchive:
    """Bills in S3 under bills/{channel}/{mchid}/{bill_date}/, the SHA-1 in the name: never overwritten."""

    ORIGIN = "tally-origin"

    def __init__(self, s3: Any, bucket: str):
        self.s3 = s3
        self.bucket = bucket

    @staticmethod
    def prefix(channel: str, mchid: str, bill_date: str) -> str:
        return f"bills/{channel}/{mchid}/{bill_date}/"

    def keep(
        self,
        channel: str,
        mchid: str,
        bill_date: str,
        name: str,
        data: bytes,
        sha1: str,
        metadata: dict[str, str] | None = None,
    ) -> str:
        stem, dot, ext = name.rpartition(".")
        key = f"{self.prefix(channel, mchid, bill_date)}{stem or ext}.{sha1}{dot}{ext if stem else ''}"
        meta = {"sha1": sha1, self.ORIGIN: "download", **(metadata or {})}
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, Metadata=meta, IfNoneMatch="*")
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "412"):
                raise
            # the same name and hash is already there: the same bytes; never overwritten
        return key

    def read(self, key: str) -> tuple[bytes, dict[str, str]]:
        answer = self.s3.get_object(Bucket=self.bucket, Key=key)
        return answer["Body"].read(), answer.get("Metadata", {})

    def size(self, key: str) -> tuple[int, dict[str, str]]:
        answer = self.s3.head_object(Bucket=self.bucket, Key=key)
        return int(answer["ContentLength"]), answer.get("Metadata", {})

    def download(self, key: str, path: Any) -> None:
        """Streamed to a file (a big bill is never held in memory)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.s3.download_file(self.bucket, key, str(path))

    def origin(self, key: str) -> str:
        return self.s3.head_object(Bucket=self.bucket, Key=key).get("Metadata", {}).get(self.ORIGIN, "")

    # ------------------------------------------------------------ a run's partitions (the Distributed Map)
    def put_files(self, prefix: str, directory: Any) -> list[str]:
        """Every file of `directory` under `prefix` (streamed uploads); the keys."""
        keys = []
        for path in sorted(directory.iterdir()):
            self.s3.upload_file(str(path), self.bucket, prefix + path.name)
            keys.append(prefix + path.name)
        return keys

    def put_json(self, key: str, value: Any) -> None:
        self.s3.put_object(
            Bucket=self.bucket, Key=key, Body=json.dumps(value).encode(), ContentType="application/json"
        )

    def get_files(self, prefix: str, names: list[str], directory: Any) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            self.s3.download_file(self.bucket, prefix + name, str(directory / name))

    def delete_prefix(self, prefix: str) -> None:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        while True:
            answer = self.s3.list_objects_v2(**kwargs)
            objects = [{"Key": o["Key"]} for o in answer.get("Contents", [])]
            if objects:
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            if not answer.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = answer["NextContinuationToken"]

    def put_report(self, key: str, body: bytes, content_type: str) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)

    def link(self, key: str, expires_s: int = 3600) -> str:
        return self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
        )


class ReconMachine:
    """The reconciliation state machine (Step Functions Distributed Map over a run's partitions)."""

    def __init__(self, sfn: Any, arn: str):
        self.sfn = sfn
        self.arn = arn

    def start(self, name: str, payload: dict[str, Any]) -> str:
        answer = self.sfn.start_execution(stateMachineArn=self.arn, name=name, input=json.dumps(payload))
        return str(answer["executionArn"])
