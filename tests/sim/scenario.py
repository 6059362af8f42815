"""Run one simulated day against the real handlers and check the invariants afterwards.

The simulated channel (`WeChatV3Channel`) keeps its own books: every payment it took. The runner
plays the day's events in simulated time (one heap, one injected clock): orders registered through
the orders λ, callbacks delivered to the notify λ (with the channel's retry schedule, losses,
duplicates, delays), the worker λ fed from the real SQS queue, AWS faults fired by botocore hooks.
When nothing is left to happen, the recovery hooks run (RECOVERIES), then `check()` compares the
channel's books with the tables.

Extension points (docs/proof.md): a new channel is a class like WeChatV3Channel; the poller and the
sweeper are recovery hooks (and the poller replaces `close_expired`); refunds add events and
invariants in the same shape.
"""

from __future__ import annotations

import heapq
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol

from tally.domain.booking_day import RECON_PASSES
from tally.domain.clock import CHINA

from tally_local.simulator import RETRY_SCHEDULE_S, ChannelSimulator
from tests.sim import actors
from tests.sim import day as d
from tests.sim.channels import KINDS, ChannelKind, cst, use_clock
from tests.sim.env import SimEnv
from tests.sim.faults import FaultInjector, SimulatedCrash
from tests.sim.refunds import DESKS

CREATE_RETRY_S = 5.0
M_APPLY_FAILED = "ApplyFailed"


# ---------------------------------------------------------------------------------------------- channel


@dataclass
class Payment:
    """One payment the channel took (its books), and how its notification is being delivered."""

    transaction_id: str
    order: d.OrderPlan
    reported_total: int
    payer_total: int
    paid_s: float
    expected: str  # BOOKED | MANUAL | REFUND | PERSON | BOOKED_OR_MANUAL | ONE_OF_PAIR
    channel: str = "wechatpay_v3"
    raw_prefix: str = "wechatpay"
    lost_left: int = 0
    ack_lost_left: int = 0
    acked: bool = False
    arrivals: int = 0
    pair: str | None = None  # the other transaction of a double payment

    @property
    def raw_key(self) -> str:
        """`channel#mchid#transaction_id` (PaymentNotice.raw_key: scoped per merchant, R39)."""
        return f"{self.raw_prefix}#{self.order.mchid}#{self.transaction_id}"


# ---------------------------------------------------------------------------------------------- result


@dataclass
class Result:
    seed: int
    violations: list[str] = field(default_factory=list)
    faults: Counter = field(default_factory=Counter)
    unhandled: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)
    metrics: Counter = field(default_factory=Counter)
    payments: int = 0
    invocations: int = 0
    cells: Counter = field(default_factory=Counter)  # the coverage matrix's cells (tests/sim/coverage.py)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.unhandled


# ---------------------------------------------------------------------------------------------- recovery


class Recovery(Protocol):
    """Runs when the day's events are over; returns how many things it put back in motion."""

    name: str

    def __call__(self, run: Scenario) -> int: ...


class DlqRedrive:
    """An operator answers the DLQ alarm by redriving it (R25's sweeper will do the same unattended)."""

    name = "dlq redrive"

    def __call__(self, run: Scenario) -> int:
        env = run.env
        moved = 0
        while True:
            msgs = env.sqs.receive_message(
                QueueUrl=env.dlq_url(), MaxNumberOfMessages=10, VisibilityTimeout=0
            ).get("Messages", [])
            if not msgs:
                return moved
            for m in msgs:
                env.sqs.send_message(QueueUrl=env.env["APPLY_QUEUE_URL"], MessageBody=m["Body"])
                env.sqs.delete_message(QueueUrl=env.dlq_url(), ReceiptHandle=m["ReceiptHandle"])
                moved += 1


# Add the sweeper (R25) and the poller (R21-R23) here when they land: each is a Recovery.
RECOVERIES: list[Recovery] = [DlqRedrive()]


# ---------------------------------------------------------------------------------------------- runner


POLLER_PERIOD_S = 60.0  # the poller λ's EventBridge schedule
RECON_DELAY_S = 8 * 3600
RECOVERY_STEP_S = (
    1800.0  # after the day: the clock jumps, the poller (and its sweeper) and the DLQ redrive run
)
RETRY_LATER_S = 60.0  # a merchant retries a refund the API could not take yet


class Scenario:
    def __init__(
        self,
        world: World,
        day: d.Day,
        recoveries: list[Recovery] | None = None,
        *,
        poller: bool = True,
        recon: bool = True,
    ):
        self.world = world
        self.poller, self.recon_enabled = poller, recon
        self.env = world.env
        self.injector = world.injector
        self.kinds = world.kinds
        self.desks = world.desks
        self.day = day
        self.recoveries = RECOVERIES if recoveries is None else recoveries
        self.result = Result(day.seed)
        self.payments: dict[str, Payment] = {}
        self.refunds: dict[str, tuple[d.OrderPlan, d.RefundPlan]] = {}
        self.refund_answers: dict[str, int] = {}  # refund_no -> the last HTTP status the merchant saw
        self.recon: dict[str, Any] = {}
        self.start = self.env.clock.now
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._ticks = 0
        self._tick_scheduled = False
        self._arrival_order: list[str] = []
        self._horizon = 0.0
        self._poll_at: float | None = None  # when the next poller tick is scheduled (absolute)
        self._settling: set[str] = set()
        self.forged: list[tuple[str, str]] = []  # (victim mchid, refund_no) of each hostile report sent
        self.preempted: list[tuple[str, str]] = []  # (hostile mchid, transaction id) of each claim sent first
        self.operator_preview: dict[str, Any] | None = None  # the careless operator's, mid-day (actors.py)

    # ------------------------------------------------------------------ the event loop

    def at(self, offset_s: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.start + offset_s, self._seq, fn, args))

    def after(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.env.clock.now - self.start + delay_s, fn, *args)

    def log(self, text: str) -> None:
        self.result.timeline.append(f"t+{self.env.clock.now - self.start:8.1f}s {text}")

    def run(self) -> Result:
        from tests.sim import coverage

        self.env.clear_business_state()
        self.world.reset_channels(self.day.seed)
        self.injector.arm(self.day.aws_faults)
        recorder = coverage.start(self)
        try:
            for order in self.day.orders:
                kind = self.kinds[order.channel]
                if order.registered:
                    self.at(order.created_s, self.create_order, order)
                self.at(
                    min(order.created_s, order.pay_s or order.created_s),
                    kind.record_order,
                    order.mchid,
                    order.out_trade_no,
                    order.amount_cent,
                )
                if order.pay_s is not None:
                    self.at(order.pay_s, self.pay, order, False, 0)
                if order.double_pay_s is not None:
                    self.at(order.double_pay_s, self.pay, order, True, 0)
                for plan in order.refunds:
                    self.at((order.pay_s or 0) + plan.after_pay_s, self.request_refund, order, plan, 1)
                self._horizon = max(self._horizon, order.created_s + order.expire_s + 2 * POLLER_PERIOD_S)
            actors.schedule(self)
            self._loop()
            self.injector.disarm()
            self._recover()
            if self.recon_enabled and any(self.kinds[ch].recon for ch, _ in self.day.merchants):
                # recon runs the next morning (T+1 10:30): by then the refund poll's backoff (up to an hour)
                # has asked about every ACCEPTED refund whose notification was lost
                self.env.clock.now += RECON_DELAY_S
                self._recover()
                self.reconcile()
                self._recover()
            actors.operate(self)
        finally:
            coverage.stop()
            self.injector.disarm()
            for desk in self.desks.values():
                desk.on_create = None
        self.result.cells = recorder.cells
        self.world.cells.update(recorder.cells)
        for fault in self.injector.fired:
            self.result.faults[fault.label] += 1
        self.result.faults.update(self.day.planted())
        if self._arrival_order != sorted(self._arrival_order, key=lambda tx: self.payments[tx].paid_s):
            self.result.faults[d.REORDERED] += 1
        self.result.payments = len(self.payments)
        check(self)
        return self.result

    def _loop(self) -> None:
        while self._heap:
            t, _, fn, args = heapq.heappop(self._heap)
            self.env.clock.now = max(self.env.clock.now, t)
            fn(*args)
            if self.refunds:
                check_refund_bounds(self, f"after {getattr(fn, '__name__', fn)}")
            self._schedule_poller()
            if len(self.result.timeline) > 5000:
                self.result.violations.append("the day does not converge (5000 steps): see the timeline")
                self._heap.clear()

    def _drain(self, max_rounds: int = 50) -> None:
        for _ in range(max_rounds):
            self.env.clock.now += 1
            if not self.worker_tick(reschedule=False):
                return

    def _recover(self, rounds: int = 6) -> None:
        """After the day: the clock jumps, then the poller λ (sweeper, orders, refunds) and the recovery hooks
        run until nothing moves any more."""
        for _ in range(rounds):
            self.env.clock.now += RECOVERY_STEP_S
            moved = sum(hook(self) for hook in self.recoveries)
            moved += self.poller_tick(reschedule=False) if self.poller else 0
            self._drain()
            if self.refunds:
                check_refund_bounds(self, "during recovery")
            if not moved:
                return

    # ------------------------------------------------------------------ merchant backend

    def create_order(self, order: d.OrderPlan) -> None:
        body = {
            "mchid": order.mchid,
            "out_trade_no": order.out_trade_no,
            "amount_cent": order.amount_cent,
            "description": "sim order",
            "prepay": False,
            "expire_minutes": int(order.expire_s // 60),
            "channel": self.kinds[order.channel].order_channel,
        }
        event = self.env.http_event("POST", "/orders", json.dumps(body).encode(), {}, {})
        response, error = self._invoke("OrdersFunction", event)
        status = response.get("statusCode") if response else None
        self.log(f"create order {order.key}: {status or error}")
        if status is None or status >= 500:
            self.after(CREATE_RETRY_S, self.create_order, order)  # the merchant's backend retries
        elif status not in (200, 201):  # 200: a retry found the order it had created (same terms)
            self.result.violations.append(f"order {order.key} refused with {status}: {response.get('body')}")

    def request_refund(self, order: d.OrderPlan, plan: d.RefundPlan, attempt: int) -> None:
        """The merchant asks for a partial refund (POST /refunds); retries with the same refund_no."""
        desk = self.desks[order.channel]
        self.refunds[plan.refund_no] = (order, plan)
        if attempt == 1 or plan.kind == d.REFUND_CRASH:
            desk.on_create = self._on_refund_taken(order, plan)
        body = {
            "mchid": order.mchid,
            "out_trade_no": order.out_trade_no,
            "amount_cent": plan.amount_cent,
            "refund_no": plan.refund_no,
            "reason": "sim refund",
        }
        event = self.env.http_event("POST", "/refunds", json.dumps(body).encode(), {}, {})
        response, error = self._invoke("RefundsFunction", event)
        desk.on_create = None
        status = response.get("statusCode") if response else None
        self.refund_answers[plan.refund_no] = status or 0
        self.log(
            f"refund {plan.refund_no} of {plan.amount_cent} on {order.key} ({plan.kind}) "
            f"attempt {attempt}: {status or error}"
        )
        if status in (200, 201):
            if plan.kind == d.REFUND_OVER:
                self.result.violations.append(f"R27 refund {plan.refund_no} over the paid amount accepted")
            if plan.kind == d.REFUND_RETRY and attempt == 1:
                self.after(1.0, self.request_refund, order, plan, 2)  # the merchant's retry: same answer
            if plan.refund_no not in self._settling:
                self._settling.add(plan.refund_no)
                self.after(plan.settle_after_s, self.settle_refund, order, plan, 1)
            return
        if plan.kind == d.REFUND_OVER and status == 409:
            return  # refused before anything was reserved (R27)
        if attempt >= 40:
            self.result.violations.append(
                f"refund {plan.refund_no} never taken: last answer {status or error}"
            )
            return
        # 5xx / a crash: the same refund_no again soon; 409 (not PAID yet, or the earlier refunds still
        # reserve the amount): again later.
        self.after(
            CREATE_RETRY_S if status is None or status >= 500 else RETRY_LATER_S,
            self.request_refund,
            order,
            plan,
            attempt + 1,
        )

    def _on_refund_taken(self, order: d.OrderPlan, plan: d.RefundPlan) -> Callable[[str], None]:
        def taken(refund_no: str) -> None:  # runs in the simulator's request handler, before it answers
            if plan.kind == d.REFUND_CRASH:
                self.injector.crash_next(
                    "dynamodb", "refund: crash after the channel took it, before ACCEPTED"
                )
            elif plan.kind == d.REFUND_EARLY:
                self.log(f"channel settles {refund_no} before its API answers")
                self.desks[order.channel].settle(refund_no, "success", self.env.clock.now)
                self.deliver_refund(order, plan, 1)

        return taken

    # ------------------------------------------------------------------ the channel

    def pay(self, order: d.OrderPlan, second: bool, waited: int) -> None:
        kind = self.kinds[order.channel]
        late = d.LATE in order.faults and not second
        # LATE means "delivered after we closed the order": the channel closed it (the poller's close call) AND
        # our books did (the poller's local close after the channel's CLOSED answer). An AWS fault can fail the
        # local close after the channel's (seed 103): until the poller's next run closes it here too, a payment
        # would meet an open order, which is booked (R23), not refunded. So the payment waits for both.
        closed = kind.is_closed(order.mchid, order.out_trade_no) and self._closed_here(order)
        if late and not closed and waited < 40:
            self.after(POLLER_PERIOD_S, self.pay, order, second, waited + 1)  # until the poller closed it
            return
        n = len(self.payments) + 1
        tx = kind.tx_id(self.day.seed, n)
        reported = order.reported_total if order.reported_total is not None else order.amount_cent
        payer = order.payer_total if order.payer_total is not None else reported
        expected = expected_fate(order, second, kind, late_closed=late and closed)
        payment = Payment(
            tx,
            order,
            reported,
            payer,
            self.env.clock.now,
            expected,
            order.channel,
            kind.raw_prefix,
            lost_left=0 if second else order.lost,
            ack_lost_left=0 if second else order.ack_lost,
        )
        if order.double_pay_s is not None:
            other = [p for p in self.payments.values() if p.order is order]
            if other:
                payment.pair, other[0].pair = other[0].transaction_id, tx
        self.payments[tx] = payment
        kind.take_payment(payment, double=second)
        if order.query_errors and not second:
            self.world.sim.inject_fault(
                "error",
                count=order.query_errors,
                method="GET",
                status=500,
                path_contains=f"/out-trade-no/{order.out_trade_no}?",
            )
        self.log(f"channel took {payer} cents for {order.key} as {tx} (reports total {reported})")
        if order.preempted_by and not second:
            self.preempt(payment, order.preempted_by)
        self.after(order.delay_s if not second else 0.0, self.deliver, payment, 1, 0)
        if not second:
            for copy in range(1, order.concurrent + 1):
                self.after(order.delay_s, self.deliver, payment, 1, copy)
            if order.duplicate_after_s is not None:
                self.after(order.delay_s + order.duplicate_after_s, self.deliver, payment, 1, 99)

    def _closed_here(self, order: d.OrderPlan) -> bool:
        """Our order row says CLOSED (read with the checker's client: no fault hook touches it)."""
        return (self.env.get("ORDERS_TABLE", order.key) or {}).get("status") == "CLOSED"

    def deliver(self, payment: Payment, attempt: int, copy: int) -> None:
        if copy == 0 and payment.lost_left > 0:
            payment.lost_left -= 1
            self.log(f"callback {payment.transaction_id} attempt {attempt} lost on the wire")
            return self._retry(payment, attempt, copy)
        self._seq += 1
        kind = self.kinds[payment.channel]
        headers, body = kind.notification(payment, self.env.clock.now, self._seq)
        route = kind.route(payment.order.mchid)
        event = self.env.http_event("POST", route.path, body, {**route.headers, **headers}, route.params)
        response, error = self._invoke("NotifyFunction", event)
        self._wake_worker()
        payment.arrivals += 1
        if payment.arrivals == 1:
            self._arrival_order.append(payment.transaction_id)
        acked = response is not None and kind.acked(response)
        self.log(
            f"callback {payment.transaction_id} copy {copy} attempt {attempt}: "
            f"{response.get('statusCode') if response else error}"
        )
        if acked:
            # No success ACK before the raw row is durable (R7): read it back with the checker's client.
            if self.env.get("NOTIFY_RAW_TABLE", payment.raw_key) is None:
                self.result.violations.append(
                    f"I5 success ACK for {payment.transaction_id} without a raw row"
                )
            if payment.ack_lost_left > 0:
                payment.ack_lost_left -= 1
                self.log(f"ack for {payment.transaction_id} lost on the way back")
            else:
                payment.acked = True
                return None
        if payment.acked:
            return None  # another copy got through: the channel stops retrying that notification
        return self._retry(payment, attempt, copy)

    def _retry(self, payment: Payment, attempt: int, copy: int) -> None:
        if attempt > len(RETRY_SCHEDULE_S):
            self.log(f"channel gave up on {payment.transaction_id}")
            return
        if payment.lost_left > 10**5:
            return  # lost on every attempt: no need to play the whole day's schedule
        self.after(RETRY_SCHEDULE_S[attempt - 1], self.deliver, payment, attempt + 1, copy)

    def settle_refund(self, order: d.OrderPlan, plan: d.RefundPlan, attempt: int) -> None:
        """The channel decides the refund (if it has taken it by now) and notifies."""
        desk = self.desks[order.channel]
        outcome = "closed" if plan.kind == d.REFUND_CLOSED else "success"
        status = desk.settle(plan.refund_no, outcome, self.env.clock.now)
        if status is None:
            if attempt < 40:
                self.after(RETRY_LATER_S, self.settle_refund, order, plan, attempt + 1)
            return
        self.log(f"channel settled refund {plan.refund_no}: {status}")
        if plan.forged_by:
            self.forge_refund(order, plan)
        if plan.kind == d.REFUND_LOST:
            self.log(f"refund notification {plan.refund_no} lost")
        elif plan.kind != d.REFUND_EARLY:
            self.deliver_refund(order, plan, 1)

    def preempt(self, payment: Payment, hostile: str) -> None:
        """R39's hostile tenant claims the transaction id first: on its own URL, signed with its own keys, a
        payment of the same amount for an order of its own that Tally never registered. It may cost the hostile
        tenant its own queue item; the victim's genuine callback, arriving after, must book by itself."""
        sim = self.world.sim
        resource = sim.transaction_resource(
            hostile,
            f"H{payment.transaction_id[-20:]}",
            payment.reported_total,
            payer_total=payment.payer_total,
            transaction_id=payment.transaction_id,
            success_time=cst(payment.paid_s).isoformat(timespec="seconds"),
        )
        headers, body = actors.signed(self, hostile, resource, "PQ")
        route = self.kinds["wechatpay_v3"].route(hostile)
        event = self.env.http_event("POST", route.path, body, {**route.headers, **headers}, route.params)
        response, error = self._invoke("NotifyFunction", event)
        self._wake_worker()
        self.preempted.append((hostile, payment.transaction_id))
        self.log(
            f"hostile {hostile} claimed {payment.transaction_id} first: {response and response.get('statusCode')}"
        )

    def forge_refund(self, order: d.OrderPlan, plan: d.RefundPlan) -> None:
        """R39's hostile tenant: `plan.forged_by`, configured with the same platform key as everyone, signs on its
        own URL REFUND.CLOSED naming the victim as its sub-merchant, before the genuine report arrives."""
        sim, hostile = self.world.sim, plan.forged_by
        assert hostile is not None
        with sim._lock:
            resource = sim._refund_resource_of(sim._refunds[plan.refund_no])
        del resource["mchid"]
        resource.update(refund_status="CLOSED", sp_mchid=hostile, sub_mchid=order.mchid)
        resource.pop("success_time", None)
        self._seq += 1
        headers, body = sim.build_notification(
            hostile,
            resource,
            event_type="REFUND.CLOSED",
            associated_data="refund",
            timestamp=int(self.env.clock.now),
            nonce=f"H{self._seq:031d}",
            notification_id=f"00000000-0000-4000-8000-{self._seq:012d}",
        )
        route = self.kinds[order.channel].route(hostile)
        event = self.env.http_event("POST", route.path, body, {**route.headers, **headers}, route.params)
        response, error = self._invoke("NotifyFunction", event)
        self._wake_worker()
        self.forged.append((order.mchid, plan.refund_no))
        self.log(
            f"hostile {hostile} forged CLOSED for {plan.refund_no}: {response and response.get('statusCode')}"
        )

    def deliver_refund(self, order: d.OrderPlan, plan: d.RefundPlan, attempt: int) -> None:
        self._seq += 1
        desk, kind = self.desks[order.channel], self.kinds[order.channel]
        headers, body = desk.notification(plan.refund_no, self.env.clock.now, self._seq)
        route = kind.route(desk.mchid_of(plan.refund_no))
        event = self.env.http_event("POST", route.path, body, {**route.headers, **headers}, route.params)
        response, error = self._invoke("NotifyFunction", event)
        self._wake_worker()
        self.log(
            f"refund notification {plan.refund_no} attempt {attempt}: "
            f"{response.get('statusCode') if response else error}"
        )
        if not (response is not None and kind.acked(response)) and attempt <= 5:
            self.after(RETRY_SCHEDULE_S[attempt - 1], self.deliver_refund, order, plan, attempt + 1)

    # ------------------------------------------------------------------ the poller λ (schedule: every minute)

    def _schedule_poller(self) -> None:
        """The poller λ runs every minute; a run with nothing due does nothing, so the simulation only plays
        the minutes in which something is due (read from the poll indexes, the pending index, the tasks)."""
        due = next_poll_due(self.env) if self.poller else None
        if due is None:
            return
        minutes = max(0.0, due - self.start) / POLLER_PERIOD_S
        at = self.start + POLLER_PERIOD_S * max(1, -int(-minutes // 1))
        at = max(
            at,
            self.start + POLLER_PERIOD_S * (1 + int((self.env.clock.now - self.start) // POLLER_PERIOD_S))
            if at <= self.env.clock.now
            else at,
        )
        if self._poll_at is None or at < self._poll_at:
            self._poll_at = at
            self.at(at - self.start, self._scheduled_poll, at)

    def _scheduled_poll(self, at: float) -> None:
        if self._poll_at != at:
            return  # superseded by an earlier tick
        self._poll_at = None
        self.poll_tick()

    def poll_tick(self) -> None:
        """The poller λ's order and refund work (PollService.run, RefundService.poll_due / work_tasks) on the
        injected clock. The sweeper part of the λ runs in the recovery rounds (poller_tick): its morning
        counts cost more than a whole day in moto and it only acts on rows 5 minutes old."""
        fired_before = len(self.injector.fired)
        self.result.invocations += 1
        summary: dict[str, Any] = {}
        try:
            summary = self.poll_work()
        except SimulatedCrash as crash:
            summary = {"crashed": str(crash)}
        except Exception as exc:  # noqa: BLE001 - what the Lambda runtime does with it: an error
            summary = {"error": f"{type(exc).__name__}: {exc}"}
            if len(self.injector.fired) == fired_before:
                self.result.unhandled.append(f"poller: {summary['error']} without an injected fault")
        metrics = self.env.observer.take_metrics()
        self.result.metrics.update(metrics)
        if metrics.get(M_APPLY_FAILED) and len(self.injector.fired) == fired_before:
            self.result.unhandled.append("poller: ApplyFailed without an injected fault")
        self.log(f"poller: { ({k: v for k, v in summary.items() if v}) }")
        self._wake_worker()

    def poll_work(self) -> dict[str, Any]:
        """One run of the poller λ's order and refund work, in this process (the current release)."""
        from tally import bootstrap
        from tally.observability import metrics as product_metrics

        with self.env.observer.watching():
            try:
                refunds = bootstrap.refund_service()
                return {
                    "outcomes": bootstrap.poll_service().run().outcomes,
                    "refunds": refunds.poll_due(50),
                    "refund_tasks": refunds.work_tasks(50),
                }
            finally:
                product_metrics.flush_metrics()  # what the λ's log_metrics does at the end of a run

    def poller_tick(self, reschedule: bool = True) -> int:
        response, error = self._invoke(
            "PollerFunction", {"source": "aws.events", "detail-type": "Scheduled Event"}
        )
        r = response or {}
        moved = (
            r.get("requeued", 0)
            + r.get("orders_polled", 0)
            + sum((r.get("refunds") or {}).values())
            + sum((r.get("refund_tasks") or {}).values())
        )
        if moved or error:
            self.log(f"poller: {error or {k: v for k, v in r.items() if v}}")
            self._wake_worker()
        return moved

    # ------------------------------------------------------------------ reconciliation (R31-R36)

    def reconcile(self) -> None:
        """The day's trade bill of each reconciled merchant against the ledger; what recon must find is
        what the day planted: every payment the channel took that is not booked (fates before the run)."""
        fates = payment_fates(self)
        bill_date = cst(self.start).date().isoformat()
        for channel, mchid in self.day.merchants:
            kind = self.kinds[channel]
            if not kind.recon:
                continue
            mine = {
                tx: p for tx, p in self.payments.items() if p.channel == channel and p.order.mchid == mchid
            }
            expected = {("CHANNEL_ONLY", "PAYMENT", tx) for tx in mine if fates[tx] != "BOOKED"}
            # R43: a coupon payment's entry keeps its settlement amount (the bill's 应结订单金额), so the
            # simulator's CASH coupons reconcile: no AMOUNT_DIFFERS is expected any more (docs/settlement.md).
            try:
                run = self.recon_run(kind.raw_prefix, mchid, bill_date)
            except Exception as exc:  # noqa: BLE001 - reported as an unhandled error of the day
                self.result.unhandled.append(f"recon {mchid}: {type(exc).__name__}: {exc}")
                continue
            self.env.observer.take_metrics()
            found = {
                (r["cls"], r["item"], r.get("transaction_id") or r.get("refund_no") or r.get("key"))
                for r in self.env.scan("RECON_DIFF_TABLE")
                if r.get("mchid") == mchid
            }
            self.recon[mchid] = {"status": run.get("status"), "expected": expected, "found": found}
            self.log(f"recon {mchid}: {run.get('status')} {run.get('reason', '')} diffs {sorted(found)}")
            self.result.faults["recon runs"] += 1
            if found != expected:
                self.result.violations.append(
                    f"I6 recon of {mchid} found {sorted(found - expected)} not planted, "
                    f"missed {sorted(expected - found)} (run {run.get('status')}: {run.get('reason', '')})"
                )
        # R49: every view of the simulated day (ledger day, its CSV, the statement, the console's Recon page)
        # shows each reconciled merchant's booked, fees and net to the cent, fees positive
        reconciled = [(self.kinds[c].raw_prefix, m) for c, m in self.day.merchants if self.kinds[c].recon]
        if reconciled:
            from tests.integration.money_helpers import views_disagree

            try:
                self.result.violations += views_disagree(bill_date, list(dict.fromkeys(reconciled)))
            except Exception as exc:  # noqa: BLE001 - reported as an unhandled error of the day
                self.result.unhandled.append(f"R49 views of {bill_date}: {type(exc).__name__}: {exc}")

    def recon_run(self, channel: str, mchid: str, bill_date: str) -> dict[str, Any]:
        """One reconciliation run of a merchant's day, in this process (the current release)."""
        from tally import bootstrap

        with self.env.observer.watching():
            return bootstrap.recon_service().run(channel, mchid, bill_date)

    # ------------------------------------------------------------------ the worker (SQS event source)

    def _wake_worker(self) -> None:
        """The SQS event source polls all the time; the simulation only ticks while the queue may hold work."""
        if not self._tick_scheduled:
            self._tick_scheduled = True
            self.after(self.day.worker_period_s, self.worker_tick)

    def worker_tick(self, reschedule: bool = True) -> bool:
        self._tick_scheduled = False
        self._ticks += 1
        env = self.env
        url = env.env["APPLY_QUEUE_URL"]
        msgs = env.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0, AttributeNames=["All"]
        ).get("Messages", [])
        if msgs:
            event = {"Records": [_record(m) for m in msgs]}
            response, error = self._invoke("WorkerFunction", event)
            failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
            self.log(f"worker batch of {len(msgs)}: {len(failed)} failed" if response else f"worker {error}")
            if response is not None and self._ticks in self.day.lost_delete_ticks:
                self.result.faults[d.SQS_REDELIVERY] += 1  # the deletes are lost: SQS delivers them again
            elif response is not None:
                done = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(msgs)
                    if m["MessageId"] not in failed
                ]
                if done:
                    env.sqs.delete_message_batch(QueueUrl=url, Entries=done)
        if reschedule and msgs:
            self._wake_worker()
        return bool(msgs)

    # ------------------------------------------------------------------ invoking a λ

    def _invoke(self, function: str, event: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(response, None), or (None, what the caller saw): a crash is no answer, an exception is
        the 500 API Gateway / the SQS event source see when a Lambda fails."""
        fired_before = len(self.injector.fired)
        self.result.invocations += 1
        response: dict[str, Any] | None = None
        error: str | None = None
        try:
            response = self.env.invoke(function, event)
        except SimulatedCrash as crash:
            error = f"crashed ({crash})"
        except Exception as exc:  # noqa: BLE001 - what the Lambda runtime does with it: an error answer
            error = f"Lambda error {type(exc).__name__}: {str(exc)[:120]}"
        metrics = self.env.observer.take_metrics()
        self.result.metrics.update(metrics)
        injected = len(self.injector.fired) > fired_before
        if not injected:
            status = (response or {}).get("statusCode", 0)
            if error or status >= 500:
                self.result.unhandled.append(f"{function}: {error or status} without an injected fault")
            if metrics.get(M_APPLY_FAILED):
                self.result.unhandled.append(
                    f"{function}: ApplyFailed without an injected fault "
                    f"(log: {self.env.observer.logs.getvalue()[-300:]!r})"
                )
        return response, error


def _record(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "messageId": m["MessageId"],
        "receiptHandle": m["ReceiptHandle"],
        "body": m["Body"],
        "attributes": m.get("Attributes", {}),
        "messageAttributes": {},
        "md5OfBody": m["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:apply",
        "awsRegion": "us-east-1",
    }


def next_poll_due(env: SimEnv) -> float | None:
    """The earliest instant the poller λ has something to do: an order or refund due in its poll index, a
    raw row the sweeper would re-queue (handled=0 for 5 minutes), an open refund task, a refund hold."""
    from datetime import datetime

    def epoch(iso: Any) -> float | None:
        try:
            return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None

    times: list[float] = []
    for env_var in ("ORDERS_TABLE", "REFUNDS_TABLE"):  # (the sweeper's raw rows: in the recovery rounds)
        for row in env.scan(env_var):
            if str(row.get("poll_pk") or "").startswith("poll#") and row.get("poll_due"):
                times.append(epoch(row["poll_due"]) or env.clock.now)
            if row.get("hold_pk") and row.get("hold_due"):  # a refund hold the poller would look at
                times.append(epoch(row["hold_due"]) or env.clock.now)
    if any(t.get("status") == "OPEN" for t in env.scan("REFUND_TASKS_TABLE")):
        times.append(env.clock.now)
    return min(times) if times else None


def expected_fate(order: d.OrderPlan, second: bool, kind: ChannelKind, *, late_closed: bool) -> str:
    if order.double_pay_s is not None:
        return "ONE_OF_PAIR"
    if d.MISMATCH in order.faults:
        return "MANUAL"
    if late_closed:
        return "REFUND"
    if d.ORDER_LATE in order.faults:
        return "BOOKED_OR_MANUAL"
    if d.GHOST in order.faults:
        return "MANUAL"  # recon finds it, its query books a raw row, the worker finds no order: a person
    if order.lost > 10**5 and not kind.pull:
        return "PERSON"  # no callback and nobody can ask the channel: the poller hands the order to a person
    return "BOOKED"


# ---------------------------------------------------------------------------------------------- invariants


def payment_fates(run: Scenario) -> dict[str, str]:
    """Where each payment the channel took ended: BOOKED | REFUND | MANUAL | PERSON | MISSING."""
    env = run.env
    raw = {r["pk"]: r for r in env.scan("NOTIFY_RAW_TABLE")}
    ledger = env.scan("LEDGER_TABLE")
    orders = {o["pk"]: o for o in env.scan("ORDERS_TABLE")}
    booked = Counter(e["transaction_id"] for e in ledger if e["kind"] == "PAYMENT")
    task_tx = Counter(t["transaction_id"] for t in env.scan("REFUND_TASKS_TABLE"))
    fates = {}
    for tx, p in run.payments.items():
        row = raw.get(p.raw_key)
        order = orders.get(p.order.key) or {}
        if booked[tx]:
            fates[tx] = "BOOKED"
        elif task_tx[tx]:
            fates[tx] = "REFUND"
        elif row is not None and row.get("handled") == 2:
            fates[tx] = "MANUAL"
        elif row is None and order.get("status") == "WAIT_PAY" and order.get("manual_reason"):
            fates[tx] = "PERSON"  # the order is with a person (the poller could not ask the channel)
        else:
            fates[tx] = "MISSING"
    return fates


def check(run: Scenario) -> None:
    """The invariants (docs/proof.md). Each violation is one line naming the transaction or row."""
    env, v = run.env, run.result.violations
    raw = {r["pk"]: r for r in env.scan("NOTIFY_RAW_TABLE")}
    synthetic = actors.synthetic_mchid()  # the heartbeat's money (checked by its actor), never the channel's
    ledger = [e for e in env.scan("LEDGER_TABLE") if e.get("mchid") != synthetic]
    orders = {o["pk"]: o for o in env.scan("ORDERS_TABLE") if o.get("mchid") != synthetic}
    tasks = env.scan("REFUND_TASKS_TABLE")
    payments_booked = [e for e in ledger if e["kind"] == "PAYMENT"]
    # R50 nothing is booked onto a future day or one whose last recon pass (T+3) is due: such reports wait for
    # a person (recon's own finding books onto the day it is looking at)
    for e in ledger:
        if e["kind"] not in ("PAYMENT", "REFUND") or not e.get("booked_at") or e.get("source") == "recon":
            continue
        day = datetime.fromisoformat(str(e["booked_at"]).replace("Z", "+00:00")).astimezone(CHINA).date()
        age = (day - date.fromisoformat(str(e["bill_date"]))).days
        if age < 0 or age >= RECON_PASSES:
            v.append(f"R50 {e['pk']} booked on {day} onto bill day {e['bill_date']}")
    booked = Counter(e["transaction_id"] for e in payments_booked)
    per_order = Counter(e["order_pk"] for e in payments_booked)
    channel = run.payments

    # I1 every payment the channel took is booked, with a person, or has a refund task: none missing.
    fate = payment_fates(run)
    for tx, p in channel.items():
        if fate[tx] == "MISSING":
            row = raw.get(p.raw_key)
            v.append(
                f"I1 silently missing: channel took {p.payer_total} cents as {tx} for {p.order.key} "
                f"on {p.channel} (raw row: {row and row.get('handled')})"
            )
    # I1b the fate the fault schedule planted.
    for tx, p in channel.items():
        want, got = p.expected, fate[tx]
        if want == "ONE_OF_PAIR":
            pair = {got, fate.get(p.pair or "", "")}
            if p.pair and pair != {"BOOKED", "REFUND"}:
                v.append(
                    f"I1b double payment {tx}/{p.pair}: fates {sorted(pair)}, want one booked one refunded"
                )
        elif want == "BOOKED_OR_MANUAL":
            if got not in ("BOOKED", "MANUAL"):
                v.append(f"I1b {tx} ({', '.join(p.order.faults)}): {got}, want BOOKED or MANUAL")
        elif got != want:
            v.append(
                f"I1b {tx} on {p.channel} ({', '.join(p.order.faults) or 'no fault'}): {got}, want {want}"
            )
    # I2 no transaction booked twice, no order paid twice, nothing booked the channel did not take.
    v += [f"I2 {tx} booked {n} times" for tx, n in booked.items() if n > 1]
    v += [f"I2 order {pk} has {n} payment entries" for pk, n in per_order.items() if n > 1]
    v += [f"I2 ledger entry {tx} the channel never took" for tx in booked if tx not in channel]
    # I3 ledger amounts and totals equal the channel's for what was booked (payer_total, R13).
    for e in payments_booked:
        p = channel.get(e["transaction_id"])
        if p and (e["amount_cent"], e["order_total_cent"]) != (p.payer_total, p.reported_total):
            v.append(
                f"I3 {e['transaction_id']} booked {e['amount_cent']}/{e['order_total_cent']}, "
                f"channel {p.payer_total}/{p.reported_total}"
            )
    ours = sum(e["amount_cent"] for e in payments_booked)
    theirs = sum(channel[tx].payer_total for tx in booked if tx in channel)
    if ours != theirs:
        v.append(f"I3 ledger total {ours} != channel total {theirs} for the booked payments")
    # I3b a PAID order agrees with its ledger entry; a refund task asks back what was taken.
    by_tx = {e["transaction_id"]: e for e in payments_booked}
    for pk, o in orders.items():
        if o["status"] == "PAID":
            e = by_tx.get(o.get("transaction_id"))
            if e is None or e["amount_cent"] != o["paid_cent"] or e["order_pk"] != pk:
                v.append(f"I3b order {pk} PAID by {o.get('transaction_id')} without a matching ledger entry")
    for t in tasks:
        p = channel.get(t["transaction_id"])
        if p is None or t["amount_cent"] != p.payer_total:
            v.append(f"I3b refund task {t['pk']} asks {t['amount_cent']}, channel took {p and p.payer_total}")
        elif raw.get(p.raw_key, {}).get("handled") != 2:
            v.append(f"I3b refund task {t['pk']} but its raw row is not with a person")
    # R39 every report a hostile tenant forged is parked as a suspected forgery naming the tenant it claims
    # (`claimed_mchid`; filed under the tenant that signed it); that the victim's refund did not change is
    # the R29 checks below: ours agrees with the channel's.
    parked = Counter(
        (r.get("claimed_mchid") or r.get("mchid"), r.get("refund_no"))
        for r in env.scan("NOTIFY_EVENT_TABLE")
        if r.get("manual_kind") == "suspected_forgery"
    )
    for victim, no in run.forged:
        if not parked[(victim, no)]:
            v.append(f"R39 the hostile tenant's report for {victim}'s refund {no} was not parked")
    # R39 a transaction id claimed first by a hostile tenant books nothing of the hostile's; the genuine payment's
    # fate is the one planted for it (I1b above: BOOKED, never parked), and no forgery names the victim for it
    for hostile, tx in run.preempted:
        if any(e["transaction_id"] == tx and e.get("mchid") == hostile for e in payments_booked):
            v.append(f"R39 the hostile tenant {hostile}'s claim on {tx} was booked")
        victim = channel[tx].order
        if any(
            r.get("manual_kind") == "suspected_forgery"
            and r.get("out_trade_no") == victim.out_trade_no
            and not r.get("refund_no")  # a payment parked, not a forged refund report on the same order
            for r in env.scan("NOTIFY_EVENT_TABLE")
            if (r.get("claimed_mchid") or r.get("mchid")) == victim.mchid
        ):
            v.append(f"R39 {victim.key}'s genuine payment {tx} was parked after the hostile claim")
    # I4 every raw row ends at handled 1 or 2; nothing is left in the queue.
    v += [
        f"I4 raw row {r['pk']} ended at handled={r.get('handled')}"
        for r in raw.values()
        if r.get("handled") not in (1, 2)
    ]
    v += [
        f"I4 refund raw row {r['pk']} ended at handled={r.get('handled')}"
        for r in env.scan("REFUND_RAW_TABLE")
        if r.get("handled") not in (1, 2)
    ]
    for name, url in (("apply queue", env.env["APPLY_QUEUE_URL"]), ("DLQ", env.dlq_url())):
        left = env.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
        n = sum(int(x) for x in left["Attributes"].values())
        if n:
            v.append(f"I4 {n} message(s) left in the {name}")
    # issue #38's attacks (tests/sim/actors.py): each ended where it must
    actors.check(run)
    # I5 (no success ACK before the raw row was durable) is checked at each ACK, in deliver().
    # R-invariants: refunds end booked or released, and agree with the channel and the ledger.
    if run.refunds:
        check_refunds_final(run, orders, ledger)
    # I6 (recon finds exactly what was planted) is checked in Scenario.reconcile().


FINAL_REFUND = ("SUCCESS", "FAIL", "MANUAL")


def check_refund_bounds(run: Scenario, when: str) -> None:
    """R27 at every step: refunded + reserved <= paid on every order (our rows), and the channel never
    gave back more than it took."""
    env, v = run.env, run.result.violations
    rows = env.scan("REFUNDS_TABLE")
    by_order: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_order.setdefault(r["order_pk"], []).append(r)
    for pk, refunds in by_order.items():
        order = env.get("ORDERS_TABLE", pk) or {}
        paid = int(order.get("paid_cent") or 0)
        refunded = sum(r["amount_cent"] for r in refunds if r["status"] == "SUCCESS")
        reserved = sum(r["amount_cent"] for r in refunds if r["status"] in ("PENDING", "ACCEPTED", "MANUAL"))
        if refunded + reserved > paid:
            v.append(f"R27 {when}: order {pk} refunded {refunded} + reserved {reserved} > paid {paid}")
        refundable = order.get("refundable_cent")
        if refundable is not None and (
            refundable < 0 or refundable + int(order.get("refunded_cent") or 0) > paid
        ):
            v.append(
                f"R27 {when}: order {pk} refundable {refundable} refunded {order.get('refunded_cent')} "
                f"paid {paid}"
            )
    taken: Counter = Counter()
    for desk in run.desks.values():
        for r in desk.refunds():
            if r.status != "CLOSED":
                taken[r.transaction_id] += r.amount_cent
    for tx, n in taken.items():
        p = run.payments.get(tx)
        if p is not None and n > p.payer_total:
            v.append(f"R27 {when}: the channel gave back {n} of {tx}, which took {p.payer_total}")


def check_refunds_final(
    run: Scenario, orders: dict[str, dict[str, Any]], ledger: list[dict[str, Any]]
) -> None:
    """Every reservation ends booked or released; our refunds agree with the channel's and the ledger."""
    env, v = run.env, run.result.violations
    ours = {r["refund_no"]: r for r in env.scan("REFUNDS_TABLE")}
    theirs = {r.refund_no: r for desk in run.desks.values() for r in desk.refunds()}
    for no, r in ours.items():
        if r["status"] not in FINAL_REFUND:
            v.append(f"R29 refund {no} ended {r['status']}: its reservation is neither booked nor released")
        if r["status"] == "MANUAL":
            v.append(
                f"R29 refund {no} went to a person ({r.get('reason') or r.get('manual_reason')}); "
                f"no fault of the day asks for that"
            )
        c = theirs.get(no)
        channel_status = c.status if c else None
        if r["status"] == "SUCCESS" and channel_status != "SUCCESS":
            v.append(f"R29 refund {no} SUCCESS here, {channel_status} at the channel")
        if r["status"] == "FAIL" and channel_status not in (None, "CLOSED"):
            v.append(f"R29 refund {no} released here, {channel_status} at the channel")
    for no, c in theirs.items():
        if c.status == "SUCCESS" and ours.get(no, {}).get("status") != "SUCCESS":
            v.append(
                f"R29 the channel refunded {no} ({c.amount_cent}), here {ours.get(no, {}).get('status')}"
            )
    refunded_by_order: Counter = Counter()
    for r in ours.values():
        if r["status"] == "SUCCESS":
            refunded_by_order[r["order_pk"]] += r["amount_cent"]
    for pk in {r["order_pk"] for r in ours.values()}:
        o = orders.get(pk, {})
        paid, refunded = int(o.get("paid_cent") or 0), int(o.get("refunded_cent") or 0)
        if refunded != refunded_by_order[pk] or int(o.get("refundable_cent") or 0) != paid - refunded:
            v.append(
                f"R27 order {pk}: paid {paid} refunded {refunded} refundable {o.get('refundable_cent')}, "
                f"its refunds booked {refunded_by_order[pk]}: a reservation was never released"
            )
    ledger_refunds = Counter(e["transaction_id"] for e in ledger if e["kind"] == "REFUND")
    ledger_refunded = Counter()
    for e in ledger:
        if e["kind"] == "REFUND":
            ledger_refunded[e["transaction_id"]] += e["amount_cent"]
    channel_refunded: Counter = Counter()
    for c in theirs.values():
        if c.status == "SUCCESS":
            channel_refunded[c.transaction_id] += c.amount_cent
    if +ledger_refunded != +channel_refunded:
        v.append(f"R29 ledger refunds {dict(ledger_refunded)} != channel refunds {dict(channel_refunded)}")
    del ledger_refunds


# ---------------------------------------------------------------------------------------------- process set-up


class World:
    """What one process keeps between scenarios: the channel simulator (real HTTP on 127.0.0.1), moto,
    tables, handlers, merchants on every channel, hooks."""

    def __init__(self) -> None:
        from tally import bootstrap

        self.sim = ChannelSimulator(fixed_keys=True, seed=0).start()
        self.env = SimEnv.start(
            {
                "WechatPayApiBase": self.sim.url.rstrip("/"),
                "AlipayGateway": self.sim.url.rstrip("/") + "/gateway.do",
            }
        )
        self._real_clock = use_clock(self.env.clock)
        directory = bootstrap.merchants()
        self.kinds: dict[str, ChannelKind] = {name: cls(self.sim) for name, cls in KINDS.items()}
        for kind in self.kinds.values():
            kind.setup(directory, self.sim.url)
        self.desks = {name: cls(self.sim) for name, cls in DESKS.items()}
        self.cells: Counter = Counter()  # every day's coverage cells, for the CI slice's minimum
        self.injector = FaultInjector(tables={k: v for k, v in self.env.env.items() if k.endswith("_TABLE")})
        self.injector.attach(self.env.product_ddb)
        self.injector.attach(self.env.product_sqs)
        self.day_start = self.env.clock.now

    def reset_channels(self, seed: int) -> None:
        import random

        self.sim._rng = random.Random(seed)
        for kind in self.kinds.values():
            kind.reset()
        for desk in self.desks.values():
            desk.reset()

    def run(
        self,
        seed: int,
        shape: d.DayShape = d.SMALL,
        recoveries: list[Recovery] | None = None,
        day: d.Day | None = None,
        **options: bool,
    ) -> Result:
        self.env.clock.now = self.day_start  # every day starts at the same instant: a replay is exact
        day = day or d.generate(seed, shape)
        return Scenario(self, day, recoveries, **options).run()

    def close(self) -> None:
        self._real_clock()  # the simulator modules are shared with the other tests in this process
        self.env.stop()
        self.sim.stop()


def timed(world: World, seed: int, shape: d.DayShape = d.SMALL) -> tuple[Result, float]:
    t0 = time.perf_counter()
    result = world.run(seed, shape)
    return result, time.perf_counter() - t0
