"""The sweeper and the morning number (R25, R37, R38).

- `SweepService.run()`: raw rows still at handled=0 five minutes after they arrived are re-queued
  (at most once per `every_s`); a row re-queued `max_sweeps` times and still not applied goes to
  handled=2 (a person) with a metric. Refund reports (refund_raw, index `by_pending`) get the same
  treatment: their handled=2 is a work-queue item `report-…` (audit L2). Then the two counts are published as metrics every run:
  handled=0 older than 10 minutes, handled=2 older than 24 hours.
- `PendingReport.report()`: the same counts, the oldest age and one line per stuck row, for
  `tally pending`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tally.observability import M, count, logger
from tally.store.polling import PendingStore, PollStore
from tally.store.refunds import RefundQueue, RefundRawStore
from tally.store.tables import ApplyQueue, RawStore, iso_now

REQUEUE_AFTER_S = 5 * 60
STALE_AFTER_S = 10 * 60  # the morning number: handled=0 older than this (R37)
AGED_AFTER_S = 24 * 3600  # the morning number: handled=2 older than this (R37)


@dataclass
class SweepReport:
    requeued: int = 0
    to_person: int = 0
    stale: int = 0  # handled=0 older than 10 min
    aged: int = 0  # handled=2 older than 24 h
    keys: list[str] = field(default_factory=list)


class SweepService:
    def __init__(
        self,
        pending: PendingStore,
        raw: RawStore,
        queue: ApplyQueue,
        *,
        clock: Callable[[], float] = time.time,
        batch: int = 100,
        max_sweeps: int = 3,
        every_s: int = REQUEUE_AFTER_S,
        work: Callable[[], Any] | None = None,
        refund_raw: RefundRawStore | None = None,
        refund_queue: RefundQueue | None = None,
    ):
        self.work = work  # the work queue (R41): the second number is its items past their threshold
        self.refund_raw = refund_raw  # refund reports at handled=0 (L2)
        self.refund_queue = refund_queue
        self.pending = pending
        self.raw = raw
        self.queue = queue
        self.clock = clock
        self.batch = batch
        self.max_sweeps = max_sweeps
        self.every_s = every_s

    def run(self) -> SweepReport:
        now = self.clock()
        report = SweepReport()
        rows = self.pending.older_than(
            0,
            iso_now(now - REQUEUE_AFTER_S),
            max(1, self.batch // 4),
            swept_before_iso=iso_now(now - self.every_s),
        )
        for row in rows[: self.batch]:
            sweeps = self.pending.mark_swept(row["pk"], iso_now(now))
            if sweeps is None:
                continue  # applied meanwhile
            if sweeps > self.max_sweeps:
                reason = f"not applied after {sweeps - 1} re-queues (attempts {row.get('attempts', 0)})"
                if self.raw.send_to_person(row["pk"], reason, iso_now(now)):
                    count(M.SWEEP_GAVE_UP)
                    count(M.APPLY_MANUAL)
                    logger.error(
                        "raw row handed to a person by the sweeper",
                        extra={"raw_key": row["pk"], "reason": reason},
                    )
                    report.to_person += 1
                continue
            self.queue.send(row["pk"])
            count(M.SWEEP_REQUEUED)
            report.requeued += 1
            report.keys.append(row["pk"])
        if self.refund_raw is not None and self.refund_queue is not None:
            self._sweep_refund_reports(now, report, self.refund_raw, self.refund_queue)
        report.stale, _ = self.pending.count_older_than(0, iso_now(now - STALE_AFTER_S))
        count(M.PENDING_STALE, report.stale)  # published every run, zero included: the alarm sees a value
        if self.work is not None:
            report.aged = self.work().publish()["over_threshold"]  # counts ManualOver24h
        else:
            report.aged, _ = self.pending.count_older_than(2, iso_now(now - AGED_AFTER_S))
            count(M.MANUAL_AGED, report.aged)
        return report

    def _sweep_refund_reports(
        self, now: float, report: SweepReport, raw: RefundRawStore, queue: RefundQueue
    ) -> None:
        """A refund report whose worker message died (ApplyDLQ) or whose query-path apply raised stayed at
        handled=0 with no item (L2): re-queued like a payment's raw row, then with a person."""
        rows = raw.older_than(
            iso_now(now - REQUEUE_AFTER_S), max(1, self.batch // 4), iso_now(now - self.every_s)
        )
        for row in rows[: self.batch]:
            sweeps = raw.mark_swept(row["pk"], row["sk"], iso_now(now))
            if sweeps is None:
                continue  # applied meanwhile
            if sweeps > self.max_sweeps:
                reason = f"refund report not applied after {sweeps - 1} re-queues (attempts {row.get('attempts', 0)})"
                if raw.mark(row["pk"], row["sk"], 2, reason, iso_now(now)):
                    count(M.SWEEP_GAVE_UP)
                    count(M.REFUND_REPORT_MANUAL, channel=row.get("channel"), merchant=row.get("mchid"))
                    logger.error(
                        "refund report handed to a person by the sweeper",
                        extra={"refund_raw_key": row["pk"], "status": row["sk"], "reason": reason},
                    )
                    report.to_person += 1
                continue
            queue.send(row["pk"], row["sk"])
            count(M.SWEEP_REQUEUED)
            report.requeued += 1
            report.keys.append(f"{row['pk']}|{row['sk']}")


class PendingReport:
    """What `tally pending` prints: the morning number and the rows behind it."""

    def __init__(
        self,
        pending: PendingStore,
        polls: PollStore,
        *,
        clock: Callable[[], float] = time.time,
        work: Callable[[], Any] | None = None,
    ):
        self.pending = pending
        self.polls = polls
        self.clock = clock
        self.work = work

    def report(self, limit: int = 50, over_s: int | None = None) -> dict[str, Any]:
        """Stuck rows (handled=0 older than 10 minutes) and every open work-queue item: the same items
        `tally manual list` shows and the poller counts, so closing one anywhere closes it here (R41)."""
        if self.work is None:
            return self._report_rows(limit)
        now = self.clock()
        stale, oldest_stale = self.pending.count_older_than(0, iso_now(now - STALE_AFTER_S))
        rows = [
            {
                **_raw_line(r, now, "not applied yet"),
                "kind": "stuck-notification",
                "why": f"stored but not applied yet: tried {r.get('attempts', 0)} time(s), re-queued "
                f"{r.get('sweeps', 0)} time(s) by the sweeper",
            }
            for r in self.pending.older_than(0, iso_now(now - STALE_AFTER_S), limit)
        ]
        numbers = self.work().morning(over_s=over_s)
        rows += [
            {
                "kind": i["kind"],
                "key": i["id"],
                "channel": i["channel"],
                "merchant": i["merchant"],
                "order": i["order"],
                "amount": i["amount"],
                "age_s": i["age_s"],
                "state": i["state"],
                "overdue": i["overdue"],
                "why": i["reason"],
            }
            for i in numbers["items"]
        ]
        rows.sort(key=lambda r: -r["age_s"])
        return {
            "pending_over_10m": stale,
            "manual_over_24h": numbers["over_threshold"],
            "open_items": numbers["open"],
            "orders_with_person": numbers["by_kind"].get("order", 0),
            "by_kind": numbers["by_kind"],
            "oldest_age_s": max([_age(oldest_stale, now)] + [r["age_s"] for r in rows], default=0),
            "rows": rows[:limit],
            "more": max(0, len(rows) - limit),
            "at": iso_now(now),
        }

    def _report_rows(self, limit: int) -> dict[str, Any]:
        now = self.clock()
        stale, oldest_stale = self.pending.count_older_than(0, iso_now(now - STALE_AFTER_S))
        aged, oldest_aged = self.pending.count_older_than(2, iso_now(now - AGED_AFTER_S))
        rows = [
            _raw_line(r, now, "not applied yet")
            for r in self.pending.older_than(0, iso_now(now - STALE_AFTER_S), limit)
        ]
        rows += [_raw_line(r, now, "with a person") for r in self.pending.older_than(2, iso_now(now), limit)]
        orders = self.polls.with_person(limit)
        rows += [_order_line(o, now) for o in orders]
        rows.sort(key=lambda r: -r["age_s"])
        ages = [_age(at, now) for at in (oldest_stale, oldest_aged) if at]
        return {
            "pending_over_10m": stale,
            "manual_over_24h": aged,
            "orders_with_person": len(orders),
            "oldest_age_s": max(ages + [r["age_s"] for r in rows], default=0),
            "rows": rows[:limit],
            "more": max(0, len(rows) - limit),
            "at": iso_now(now),
        }


def _raw_line(row: dict[str, Any], now: float, state: str) -> dict[str, Any]:
    if row.get("handled") == 2:
        why = str(row.get("manual_reason") or "with a person")
    else:
        why = f"{state}: attempts {row.get('attempts', 0)}, re-queued {row.get('sweeps', 0)}"
    return {
        "kind": f"raw handled={row.get('handled')}",
        "key": row["pk"],
        "channel": row.get("channel"),
        "merchant": row.get("mchid"),
        "order": row.get("out_trade_no"),
        "age_s": _age(row.get("pending_at"), now),
        "why": why,
    }


def _order_line(order: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "kind": "order with a person",
        "key": order["pk"],
        "channel": order.get("channel"),
        "merchant": order.get("mchid"),
        "order": order.get("out_trade_no"),
        "age_s": _age(order.get("manual_at") or order.get("poll_due"), now),
        "why": str(order.get("manual_reason") or ""),
    }


def _age(iso: Any, now: float) -> int:
    if not isinstance(iso, str):
        return 0
    try:
        return max(0, int(now - datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()))
    except ValueError:
        return 0
