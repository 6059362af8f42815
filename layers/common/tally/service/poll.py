"""The poller and the return-page confirmation (R21–R24): pull is for truth.

- `run()`: the due orders from the sparse poll index (never a scan, bounded batch) → claim (advance
  the poll first) → past expiry: close at the channel, confirm by a query, close locally or book;
  otherwise: query and act on the answer.
- `confirm(order)`: the return page asks once (rate-limited per order) and acts the same way.

A paid answer becomes a raw row (source = "query", key `channel#transaction_id`, the callback's key)
and is applied by calling ApplyService directly: the same transit, the same one transaction and the
same idempotency key as the worker (R23). Directly rather than through the queue so the return page
can answer PAID at once and the poller knows what happened in the same run; if the apply cannot
finish now (RetryLater, an error) the key is enqueued for the worker, and the sweeper re-queues
anything left at handled=0 anyway.

Closing locally is one dedicated transition (order compare-and-set + transition row, no money, no
raw row: an unpaid order has no transaction id to key one by, R8), always after the channel said
the order is closed, never on "does not exist" (R22). Every path that does not end PAID or CLOSED
either keeps the order in the index with a due time or hands it to a person with a metric.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tally.domain.notifications import EVENT_OF_OUTCOME
from tally.domain.orders import Event, Status, Verdict, transit
from tally.domain.poll import Answer, next_due
from tally.observability import M, count, logger
from tally.service.apply import ApplyService, RetryLater
from tally.service.ingest import raw_row
from tally.service.pull import PullChannels, QueryResult
from tally.store.polling import PollStore
from tally.store.tables import ApplyQueue, RawStore, iso_now

CLOSE_RETRY_S = 60  # past expiry: try the close again next run
DEFAULT_EXPIRY_S = 2 * 3600  # an order without expire_at (older data) still ends: 2 h, like a QR order
CAS_ROUNDS = 3


@dataclass
class PollReport:
    read: int = 0
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def note(self, what: str) -> None:
        self.outcomes[what] = self.outcomes.get(what, 0) + 1


class PollService:
    def __init__(
        self,
        polls: PollStore,
        raw: RawStore,
        queue: ApplyQueue,
        apply: ApplyService,
        channels: PullChannels,
        *,
        clock: Callable[[], float] = time.time,
        batch: int = 100,
        max_errors: int = 5,
        confirm_after_s: float = 3.0,
        confirm_every_s: float = 5.0,
        concurrency: int = 1,
        max_per_run: int = 2000,
    ):
        self.polls = polls
        self.raw = raw
        self.queue = queue
        self.apply = apply
        self.channels = channels
        self.clock = clock
        self.batch = batch
        self.max_errors = max_errors
        self.confirm_after_s = confirm_after_s
        self.confirm_every_s = confirm_every_s
        self.concurrency = max(1, concurrency)  # orders polled at once (threads): their waits overlap
        self.max_per_run = max_per_run  # orders one run takes at most, however many are due

    # ---------------------------------------------------------------- the poller

    def run(self, out_of_time: Callable[[], bool] = lambda: False) -> PollReport:
        """Page after page of due orders (`batch` each), `concurrency` orders at a time, until none is due,
        `max_per_run` were read or time runs out; the channel calls are paced per merchant (MerchantPace in
        the pull clients). What is not reached stays due for the next run."""
        report = PollReport()
        read_before = self.polls.items_read
        stopped = False
        pool = ThreadPoolExecutor(self.concurrency, "poll") if self.concurrency > 1 else None
        try:
            while not stopped and report.claimed + report.outcomes.get("SKIPPED", 0) < self.max_per_run:
                due = self.polls.due(iso_now(self.clock()), self.batch + 1)  # one more: is there a next page?
                more, due = len(due) > self.batch, due[: self.batch]
                if not due:
                    break
                page_claimed = report.claimed

                def one(order: dict[str, Any]) -> str:
                    nonlocal stopped
                    if stopped or out_of_time():
                        stopped = True
                        return "LEFT"
                    return self._poll_safely(order)

                whats = list(pool.map(one, due)) if pool is not None else [one(o) for o in due]
                for what in whats:
                    if what == "LEFT":
                        continue
                    report.note(what)
                    if what != "SKIPPED":
                        report.claimed += 1
                if stopped:
                    logger.warning(
                        "poller stopped for time; the rest stays due", extra={"left": whats.count("LEFT")}
                    )
                if not more or report.claimed == page_claimed:
                    break  # the last page, or a page of nothing claimable: never spin on it
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        report.read = self.polls.items_read - read_before
        count(M.POLL_ORDERS_READ, report.read)
        return report

    def _poll_safely(self, order: dict[str, Any]) -> str:
        try:
            return self.poll_one(order)
        except Exception as exc:  # noqa: BLE001 - one order must not stop the others; counted, alarmed, still due
            count(M.POLL_FAILED, channel=order.get("channel"), merchant=order.get("mchid"))
            logger.exception("polling an order failed", extra={"order": order.get("pk")})
            return self._failed_safely(order, exc)

    def _failed_safely(self, order: dict[str, Any], exc: Exception) -> str:
        """An order whose poll raises every time is counted like a failed call: `max_errors` in a row and it
        goes to a person (R38), instead of being polled, and alarmed, forever with no item to work on."""
        try:
            what = self._failed_call(
                order, "EXCEPTION", f"polling raised {type(exc).__name__}: {str(exc)[:200]}", self.clock()
            )
        except Exception:  # noqa: BLE001 - the store failed too: still due, PollFailed already counted
            logger.exception("counting a failed poll failed", extra={"order": order.get("pk")})
            return "FAILED"
        return "PERSON" if what == "PERSON" else "FAILED"

    def poll_one(self, order: dict[str, Any]) -> str:
        now = self.clock()
        expire_s = (
            _epoch(order.get("expire_at")) or (_epoch(order.get("created_at")) or now) + DEFAULT_EXPIRY_S
        )
        expired = now >= expire_s
        queries = int(order.get("poll_count", 0)) + 1
        due_s = now + CLOSE_RETRY_S if expired else next_due(now, queries, expire_s)
        if self.polls.claim(order, iso_now(due_s), iso_now(now)) is None:
            return "SKIPPED"  # paid, closed or claimed by someone else since we read the index
        if expired:
            return self._expire(order, now)
        result = self.channels.query(order)
        count(M.POLL_QUERIED, channel=order.get("channel"), merchant=order.get("mchid"))
        return self._act(order, result, now, expired=False)

    def _expire(self, order: dict[str, Any], now: float) -> str:
        """R21: past its expiry the order is closed at the channel, then locally; or a person looks."""
        closing = self.channels.close(order)
        if closing.answer in (Answer.TRANSIENT, Answer.PERSON):
            count(M.POLL_CLOSE_FAILED, channel=order.get("channel"), merchant=order.get("mchid"))
            if not closing.mapped:
                count(M.POLL_UNMAPPED, channel=order.get("channel"), merchant=order.get("mchid"))
            reason = f"close at the channel failed: {closing.word} {closing.detail}"
            if closing.answer is Answer.PERSON:
                return self._to_person(order, reason, now)
            return self._failed_call(order, closing.word, reason, now)
        # Whatever the close said (closed now, already closed, paid, user paying, not found), the order is
        # changed only on what a verified query then says: direction decides, not one call's word (R24).
        result = self.channels.query(order)
        count(M.POLL_QUERIED, channel=order.get("channel"), merchant=order.get("mchid"))
        return self._act(order, result, now, expired=True)

    # ---------------------------------------------------------------- the return page

    def confirm(self, row: Mapping[str, Any]) -> bool:
        """Ask the channel once about a WAIT_PAY order older than a few seconds, at most once per
        `confirm_every_s` per order; book or close on a definite answer. True if the order changed."""
        order = dict(row)  # an OrderRow (store/records.py); the pull paths below take a plain row
        now = self.clock()
        if order.get("status") != Status.WAIT_PAY.value:
            return False
        if now - (_epoch(order.get("created_at")) or now) < self.confirm_after_s:
            return False
        if not self.polls.touch_confirm(order["pk"], iso_now(now), iso_now(now - self.confirm_every_s)):
            return False
        try:
            result = self.channels.query(order, fast=True)
            count(M.CONFIRM_QUERIED, channel=order.get("channel"), merchant=order.get("mchid"))
            if result.answer in (Answer.PAID, Answer.CLOSED):
                return self._act(order, result, now, expired=False) in ("BOOKED", "CLOSED", "DUPLICATE")
        except Exception:  # noqa: BLE001 - the page still shows our books; counted and alarmed, the poller retries
            count(M.POLL_FAILED, channel=order.get("channel"), merchant=order.get("mchid"))
            logger.exception("return-page confirmation failed", extra={"order": order.get("pk")})
        return False

    # ---------------------------------------------------------------- acting on an answer (one table: R22)

    def _act(self, order: dict[str, Any], result: QueryResult, now: float, *, expired: bool) -> str:
        answer = result.answer
        if not result.mapped:
            count(M.POLL_UNMAPPED, channel=order.get("channel"), merchant=order.get("mchid"))
        if answer is Answer.PAID:
            count(M.POLL_PAID, channel=order.get("channel"), merchant=order.get("mchid"))
            return self._book(order, result, now)
        if answer is Answer.CLOSED:
            return self._close_locally(order, result, now)
        if answer is Answer.WAITING:
            count(M.POLL_WAITING, channel=order.get("channel"), merchant=order.get("mchid"))
            if expired:  # closed a moment ago and still not closed: try again next run, bounded
                return self._failed_call(order, result.word, f"still {result.word} after the close", now)
            self.polls.note_answer(order["pk"], result.word)
            return "WAITING"
        if answer is Answer.NOT_CREATED:
            count(M.POLL_NOT_CREATED, channel=order.get("channel"), merchant=order.get("mchid"))
            if expired:  # "does not exist" is not "closed" (R22): past expiry a person decides
                return self._to_person(
                    order,
                    f"expired and the channel answers {result.word}: never closed on 'does not exist' alone",
                    now,
                )
            self.polls.note_answer(order["pk"], result.word)
            return "NOT_CREATED"
        if answer is Answer.TRANSIENT:
            count(M.POLL_QUERY_FAILED, channel=order.get("channel"), merchant=order.get("mchid"))
            return self._failed_call(order, result.word, f"query failed: {result.word} {result.detail}", now)
        why = "unmapped answer" if not result.mapped else "answer needs a person"
        return self._to_person(order, f"{why}: {result.word} {result.detail}".strip(), now)

    def _book(self, order: dict[str, Any], result: QueryResult, now: float) -> str:
        """R23: the same raw key as the callback, the same transit, the queried amount."""
        assert result.notice is not None
        row = raw_row(result.notice, now, body=result.body, headers=result.headers)
        existing = self.raw.put_new(row)
        if existing is not None and existing.get("handled") == 2:
            # R48: the payment is with a person already (an open case, or one a person closed): the poller
            # stops asking and opens nothing of its own; the order names the payment's case.
            if not self.polls.to_case(
                order["pk"],
                f"paid at the channel as {row['pk']}: the payment's case decides",
                str(existing["pk"]),
                iso_now(now),
            ):
                return "DUPLICATE"
            count(M.POLL_MANUAL, channel=order.get("channel"), merchant=order.get("mchid"))
            return "CASE"
        if existing is not None and existing.get("handled") == 1:
            # The callback (or an earlier query) got there first. If it booked, the order is PAID and this is a
            # duplicate. If the order is still open behind a handled payment (it went to the manual queue), the
            # order leaves the poll for a person: asking again could only ever say "paid" (R25, R37).
            handed = self._to_person(
                order,
                f"paid at the channel as {row['pk']}, a payment already handled "
                f"(handled={existing.get('handled')}): see `tally manual`",
                now,
            )
            return "DUPLICATE" if handed == "STALE" else handed
        try:
            applied = self.apply.apply(row["pk"])
        except RetryLater as exc:
            logger.info(
                "query answer not applicable yet; enqueued", extra={"raw_key": row["pk"], "reason": str(exc)}
            )
            self.queue.send(row["pk"])
            return "ENQUEUED"
        except Exception:  # noqa: BLE001 - counted and alarmed like the worker's; the worker retries the key
            count(M.APPLY_FAILED, channel=order.get("channel"), merchant=order.get("mchid"))
            logger.exception("applying a query answer failed; enqueued", extra={"raw_key": row["pk"]})
            self.queue.send(row["pk"])
            return "ENQUEUED"
        return {"BOOKED": "BOOKED", "DUPLICATE": "DUPLICATE", "ALREADY_HANDLED": "DUPLICATE"}.get(
            applied.value, applied.value
        )

    def _close_locally(self, order: dict[str, Any], result: QueryResult, now: float) -> str:
        from tally.channels import outcome_of

        outcome = outcome_of(str(order.get("channel")), result.word)
        event = EVENT_OF_OUTCOME[outcome] if outcome in EVENT_OF_OUTCOME else Event.CLOSE
        voucher = f"query:{result.word}"
        current = order
        for _ in range(CAS_ROUNDS):
            decision = transit(Status(current["status"]), event, voucher, current.get("transaction_id"))
            if decision.verdict is not Verdict.OK:
                # e.g. PAID meanwhile: an older "unpaid" snapshot never moves a paid order back (R24)
                count(M.POLL_STALE_IGNORED, channel=order.get("channel"), merchant=order.get("mchid"))
                logger.info(
                    "closed answer not applied",
                    extra={"order": current["pk"], "status": current["status"], "reason": decision.reason},
                )
                return "STALE"
            assert decision.new_status is not None
            if self.polls.close_locally(
                current,
                event=event.value,
                to=decision.new_status.value,
                voucher=voucher,
                now_iso=iso_now(now),
                source="query",
                word=result.word,
            ):
                count(M.POLL_CLOSED, channel=order.get("channel"), merchant=order.get("mchid"))
                logger.info(
                    "order closed after the channel said so",
                    extra={"order": current["pk"], "word": result.word},
                )
                return "CLOSED"
            current = self.polls.get(order["pk"]) or current  # lost the compare-and-set: re-read (R19)
        raise RuntimeError(f"order {order['pk']} kept changing while closing it")

    def _failed_call(self, order: dict[str, Any], word: str, reason: str, now: float) -> str:
        errors = self.polls.count_error(order["pk"], word)
        if errors is None:
            return "STALE"
        if errors >= self.max_errors:
            return self._to_person(order, f"{reason} ({errors} times in a row)", now)
        return "RETRY"

    def _to_person(self, order: dict[str, Any], reason: str, now: float) -> str:
        if not self.polls.to_person(order["pk"], reason, iso_now(now)):
            return "STALE"
        count(M.POLL_MANUAL, channel=order.get("channel"), merchant=order.get("mchid"))
        logger.error("order handed to a person", extra={"order": order["pk"], "reason": reason})
        return "PERSON"


def _epoch(iso: Any) -> float | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
