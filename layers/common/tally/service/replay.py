"""Safe bulk replay (#21 item 4): `tally manual replay --filter kind=…,merchant=…,since=…,until=…`.

After an outage or a key fix there may be hundreds of items to send through the product path again. This is
the work queue's own bulk replay (WorkQueue.bulk, the same one `--dry-run` and the console's preview call),
made safe for many items:

- **previewed**: `preview(filter)` is `WorkQueue.bulk(filter, "replay", dry_run=True)` with the run's time cap:
  the counts (items, notifications, by kind) and the yuan that would be sent through the product path;
- **a fixed set**: a run replays the items its filter selects that arrived before the run started
  (`until` is capped at the start), so what a dry run said is what the run does;
- **rate-limited**: at most `rate` items a second (TALLY_REPLAY_RATE, default 20; `--rate`);
- **resumable**: the run has an id stored in DynamoDB (store/replay.py); `--limit N` pauses after N items,
  and a second call with `--run ID` continues with what is left. A run cut short by a crash continues too:
  each item's claim is a conditional put, taken again only if it never got an outcome (after a lease);
- **audited**: each item's history records who, when and why, with the run id; the run row has the totals;
- **books nothing twice**: every replay is the item's own conditional transition (a payment row 2 → 0, a kept
  notification leaving its index, the ingest path's conditional raw put, the worker's one transaction), so two
  runs over the same items (or a run and a person) book each payment once; the loser is told "changed
  meanwhile" and counted as failed, nothing else happens.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from typing import Any

from tally.domain.money import format_cents
from tally.observability import logger
from tally.service.queue import QueueError, WorkQueue, parse_filter
from tally.store.replay import ReplayStore, RunExists
from tally.store.tables import iso_now

DEFAULT_RATE = 20.0  # items a second
BATCH = 25  # run-row progress written every BATCH items (and at the end)


class ReplayError(QueueError):
    """The run cannot start or continue as asked: says why."""


def default_rate() -> float:
    try:
        return max(0.1, float(os.environ.get("TALLY_REPLAY_RATE") or DEFAULT_RATE))
    except ValueError:
        return DEFAULT_RATE


class BulkReplay:
    def __init__(
        self,
        queue: WorkQueue,
        store: ReplayStore,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.queue = queue
        self.store = store
        self.clock = clock
        self.sleep = sleep

    def preview(self, filter: str | dict[str, Any] | None, *, until: Any = None) -> dict[str, Any]:
        """What a run with this filter would replay now: counts and yuan (and `as_of`, the time the set was
        taken: a run confirmed from this preview takes nothing that arrived later), nothing changed."""
        as_of = iso_now(self.clock())
        wanted = self._capped(filter, until or as_of)
        return {**self.queue.bulk(wanted, "replay", by="preview", dry_run=True), "as_of": as_of}

    def plan(self, run_id: str) -> dict[str, Any]:
        """A run's dry run (`--run ID --dry-run`): its totals so far and what continuing it would replay now,
        nothing changed (R52)."""
        run = self.show(run_id)
        left = self.queue.bulk(
            self._capped(run["filter"], run["until_cap"]), "replay", by="preview", dry_run=True
        )
        return {**run, "dry_run": True, "would_replay": left}

    def start(
        self,
        filter: str,
        *,
        by: str,
        why: str,
        rate: float | None = None,
        limit: int | None = None,
        run_id: str | None = None,
        expect: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A new run over what `preview(filter)` shows at this moment, then `resume` it.

        `expect` (R52): what the confirmed preview showed (`ids` and/or `count`, `amount_cent`, and its `as_of`):
        the run's set is capped at `as_of` and must be exactly that set, or nothing starts and SetChanged
        carries the new preview."""
        if not (by or "").strip() or not (why or "").strip():
            raise ReplayError("say who you are (--by) and why (--why): every item keeps both")
        now = self.clock()
        parse_filter(filter)  # a bad filter is refused before anything is stored
        cap = iso_now(now)
        if expect and expect.get("as_of"):
            cap = min(cap, str(expect["as_of"]))
        listed = self.queue.list(self._capped(filter, cap))  # the plan's items, and the first call's
        plan = self.queue.bulk(
            self._capped(filter, cap), "replay", by="preview", dry_run=True, items=listed, expect=expect
        )
        run_id = run_id or f"r{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}-{secrets.token_hex(3)}"
        try:
            self.store.create(
                {
                    "run_id": run_id,
                    "filter": filter,
                    "until_cap": cap,
                    "by": by.strip(),
                    "why": why.strip(),
                    "rate": str(float(rate or default_rate())),  # a string: the codec stores no float
                    "planned_items": plan["would_change"],
                    "planned_cent": plan["amount_cent"],
                    "planned_notifications": plan["notifications"],
                    "done_items": 0,
                    "failed_items": 0,
                    "done_cent": 0,
                    "status": "RUNNING",
                    "started_at": cap,
                    "updated_at": cap,
                },
                now,
            )
        except RunExists:
            raise ReplayError(f"run {run_id} exists already: continue it with --run {run_id}") from None
        logger.info(
            "bulk replay started", extra={"run": run_id, "filter": filter, "planned": plan["would_change"]}
        )
        return self._resume(run_id, rate, limit, listed)

    def resume(self, run_id: str, *, rate: float | None = None, limit: int | None = None) -> dict[str, Any]:
        """Continue a run: the items of its set not replayed by it yet, at its rate, up to `limit` this call."""
        return self._resume(run_id, rate, limit, None)

    def _resume(
        self, run_id: str, rate: float | None, limit: int | None, listed: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """`listed`: the start's own listing (the plan's items), so a new run lists the queue once, not twice (at
        10,000 items on moto a listing took ~75 s, holding the table for the other run and the worker)."""
        run = self.store.get(run_id)
        if run is None:
            raise ReplayError(f"no replay run {run_id} (runs are kept 30 days)")
        if run.get("status") == "DONE":
            return {**self._summary(run), "this_call": {"changed": 0, "failed": 0, "passed": 0}}
        per_s = float(rate or run.get("rate") or default_rate())
        state = {
            "taken": 0,
            "next_at": self.clock(),
            "done": 0,
            "failed": 0,
            "cents": 0,
            "since_flush": 0,
            "landed": 0,
            "landed_cent": 0,
        }
        landed: set[str] = set()
        holder = secrets.token_hex(8)  # this call: a retried claim of ours is still ours

        def claim(item: dict[str, Any]) -> str:
            if limit is not None and state["taken"] >= limit:
                return "stop"
            if not self.store.claim(run_id, item["id"], self.clock(), iso_now(self.clock()), holder):
                return "skip"
            wait = state["next_at"] - self.clock()
            if wait > 0:
                self.sleep(wait)
            state["next_at"] = max(state["next_at"], self.clock()) + 1.0 / per_s
            state["taken"] += 1
            return "act"

        reason = f"{run['why']} (bulk replay run {run_id})"

        def after(item: dict[str, Any], result: dict[str, Any] | None, error: str) -> None:
            if result is None and self._landed(item, reason):
                result = {
                    "outcome": "replayed (its answer was lost; a stuck row is re-queued by the sweeper)"
                }
                state["landed"] += 1
                state["landed_cent"] += int(item["amount_cent"] or 0)
                landed.add(item["id"])
            cents = int(item["amount_cent"] or 0) if result is not None else 0
            outcome = str(result["outcome"]) if result is not None else "failed: " + error
            self.store.finish(run_id, item["id"], outcome, cents, iso_now(self.clock()))
            state["done" if result is not None else "failed"] += 1
            state["cents"] += cents
            state["since_flush"] += 1
            if state["since_flush"] >= BATCH:
                self._flush(run_id, state, "RUNNING")

        report = self.queue.bulk(
            self._capped(run["filter"], run["until_cap"]),
            "replay",
            by=str(run["by"]),
            reason=reason,
            dry_run=False,
            claim=claim,
            after=after,
            items=listed,
        )
        status = "PAUSED" if limit is not None and state["taken"] >= limit else "DONE"
        after_run = self._flush(run_id, state, status)
        logger.info(
            "bulk replay call finished",
            extra={
                "run": run_id,
                "status": status,
                "changed": report["changed"],
                "errors": len(report["errors"]),
            },
        )
        changed_cent = report["changed_cent"] + state["landed_cent"]
        return {
            **self._summary(after_run),
            "this_call": {
                "changed": report["changed"] + len(landed),
                "changed_cent": changed_cent,
                "changed_amount": format_cents(changed_cent),
                "failed": len(report["errors"]) - len(landed),
                "landed": len(landed),  # counted in changed: their write landed, its answer was lost
                "passed": report["passed"],
                "errors": {k: v for k, v in report["errors"].items() if k not in landed},
                "by_kind": report["by_kind"],
            },
        }

    def show(self, run_id: str) -> dict[str, Any]:
        run = self.store.get(run_id)
        if run is None:
            raise ReplayError(f"no replay run {run_id} (runs are kept 30 days)")
        return self._summary(run)

    # ------------------------------------------------------------ helpers

    def _flush(self, run_id: str, state: dict[str, Any], status: str) -> dict[str, Any]:
        row = self.store.progress(
            run_id,
            done=state["done"],
            failed=state["failed"],
            cents=state["cents"],
            status=status,
            at=iso_now(self.clock()),
        )
        state.update(done=0, failed=0, cents=0, since_flush=0)
        return row

    def _landed(self, item: dict[str, Any], reason: str) -> bool:
        """Did this run's replay write land although the call failed? (A conditional write applied whose answer
        was lost: the client retried it and the retry's condition failed.) The item's own row says so: its
        history holds this run's entry. The product path is then under way; a payment row left at handled=0
        without its message is re-queued by the sweeper (R9)."""
        store = self.queue.store
        table = {"payment": store.t.notify_raw, "kept": store.t.notify_event, "order": store.t.orders}.get(
            item.get("source_kind") or ""
        )
        if table is None:
            return False
        for key in item.get("source_keys") or [item["source_key"]]:
            row = store.get(table, {"pk": key}) or {}
            if any(h.get("action") == "replay" and h.get("why") == reason for h in row.get("history") or []):
                return True
        return False

    def _capped(self, filter: str | dict[str, Any] | None, until: Any) -> dict[str, Any]:
        wanted = parse_filter(filter) if isinstance(filter, str) or filter is None else dict(filter)
        if until:
            from tally.service.queue import parse_bound

            cap = parse_bound(str(until))
            wanted["until"] = min(wanted.get("until", cap), cap)
        return wanted

    @staticmethod
    def _summary(run: dict[str, Any]) -> dict[str, Any]:
        return {
            "run_id": run["run_id"],
            "status": run.get("status"),
            "filter": run.get("filter"),
            "by": run.get("by"),
            "why": run.get("why"),
            "rate": run.get("rate"),
            "started_at": run.get("started_at"),
            "until_cap": run.get("until_cap"),
            "planned_items": int(run.get("planned_items") or 0),
            "planned_cent": int(run.get("planned_cent") or 0),
            "planned_amount": format_cents(int(run.get("planned_cent") or 0)),
            "done_items": int(run.get("done_items") or 0),
            "failed_items": int(run.get("failed_items") or 0),
            "done_cent": int(run.get("done_cent") or 0),
            "done_amount": format_cents(int(run.get("done_cent") or 0)),
        }
