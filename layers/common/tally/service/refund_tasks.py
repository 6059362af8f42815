"""Refund tasks (R17): the payment that could not be booked is refunded from its task, by the task worker
(REFUND_TASK_POLICY=auto) or when a person says "refund it now", with a number derived from the task."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from tally.domain.refunds import RefundStatus
from tally.observability import M, count
from tally.service.refund_base import Busy, NotFound, RefundConflict
from tally.service.refund_requests import RefundRequests
from tally.store.refunds import HOLD_TASK, TransactionFailed
from tally.store.tables import iso_now


def task_refund_no(task_pk: str) -> str:
    """Derived from the task, so working a task again can never start a second refund (R26)."""
    return "RT" + hashlib.sha256(task_pk.encode()).hexdigest()[:30].upper()


class RefundTasks(RefundRequests):
    """`work_tasks` and `refund_task_now`: refunds of payments that could not be booked."""

    def work_tasks(self, limit: int = 20) -> dict[str, int]:
        """Refund tasks from ILLEGAL payments (R17): auto → refunded here; manual → a person. Each task
        ends DONE or MANUAL once: every step is conditional on the task's own status."""
        done: Counter[str] = Counter()
        now = iso_now(self.clock())
        for task in self.store.open_tasks(limit):
            if self.task_policy == "manual":
                if self.store.task_to_person(
                    task["pk"], "REFUND_TASK_POLICY=manual: a person refunds it", now
                ):
                    count(M.REFUND_TASK_MANUAL, channel=task.get("channel"), merchant=task.get("mchid"))
                    done["MANUAL"] += 1
                continue
            done[self._refund_task(task)] += 1
        return dict(done)

    def refund_task_now(self, task_pk: str) -> tuple[str, str]:
        """A person's "refund this payment now" on a refund task (OPEN or with a person): the same refund the
        task worker starts (the task's own refund number, reserved on the task once, R26-R30), now.
        Returns (outcome, refund_no); a task that has left OPEN/MANUAL (refunding, closed) is refused."""
        task = self.store.task(task_pk)
        if task is None:
            raise NotFound(f"no refund task {task_pk}")
        if task.get("status") not in ("OPEN", "MANUAL"):
            raise RefundConflict(
                f"refund task {task_pk} is {task.get('status')}"
                + (f" (refund {task['refund_no']})" if task.get("refund_no") else "")
                + ": its money is not refunded a second time"
            )
        outcome = self._refund_task(task)
        if outcome not in ("REFUNDING",):
            raise RefundConflict(f"refund task {task_pk}: {outcome.lower().replace('_', ' ')}, nothing sent")
        refund_no = task_refund_no(task_pk)
        after = self.store.find(task["mchid"], refund_no) or {}
        if after.get("status") == RefundStatus.FAIL.value:  # refused at once: the task is with a person again
            raise RefundConflict(f"the channel refused refund {refund_no}: {after.get('fail_reason') or '-'}")
        return outcome, refund_no

    def _refund_task(self, task: dict[str, Any]) -> str:
        """The ILLEGAL payment was never booked, so it is not in the order's refundable_cent: this refund
        reserves on the task itself (OPEN → REFUNDING, the whole task amount, once) instead."""
        now = iso_now(self.clock())
        order = self.orders.get(task["mchid"], task["out_trade_no"])
        if order is None:
            self.store.task_to_person(task["pk"], "order not found", now)
            count(M.REFUND_TASK_MANUAL, channel=task.get("channel"), merchant=task.get("mchid"))
            return "MANUAL"
        try:
            channel = self._channel(task.get("channel") or order["channel"], task["mchid"])
        except (NotFound, RefundConflict) as exc:
            self.store.task_to_person(task["pk"], f"cannot refund automatically: {exc}", now)
            count(M.REFUND_TASK_MANUAL, channel=task.get("channel"), merchant=task.get("mchid"))
            return "MANUAL"
        refund_no = task_refund_no(task["pk"])
        row = self._new_row(
            refund_no,
            order,
            int(task["amount_cent"]),
            f"refund of a payment that could not be booked ({task.get('reason', '')})"[:80],
            HOLD_TASK,
            task["pk"],
            "task",
            transaction_id=task["transaction_id"],
        )
        if (
            task.get("total_cent") is not None
        ):  # the channel's order amount of that payment (an amount mismatch)
            row["total_cent"] = int(task["total_cent"])
        try:
            self.store.transact(
                [self.store.reserve_on_task(task["pk"], refund_no, now), self.store.put_new(row)]
            )
        except TransactionFailed as exc:
            if exc.failed:
                return "ALREADY_STARTED"  # the task left OPEN or its refund exists: nothing to do twice
            raise Busy(f"task {task['pk']}: contention") from None
        count(M.REFUND_CREATED, channel=row.get("channel"), merchant=row.get("mchid"))
        self._submit(row, channel)
        return "REFUNDING"
