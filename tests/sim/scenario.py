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
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from tally_local.simulator import RETRY_SCHEDULE_S, ChannelSimulator
from tests.sim import day as d
from tests.sim.env import SimEnv
from tests.sim.faults import FaultInjector, SimulatedCrash

CHINA = timezone(timedelta(hours=8))
QUERY_LAG_S = 30.0  # the closer's last look at the channel is this long before it closes
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
    expected: str  # BOOKED | MANUAL | REFUND | BOOKED_OR_MANUAL | ONE_OF_PAIR
    lost_left: int = 0
    ack_lost_left: int = 0
    acked: bool = False
    arrivals: int = 0
    pair: str | None = None  # the other transaction of a double payment


class Channel(Protocol):
    name: str

    def route(self, mchid: str) -> tuple[str, dict[str, str]]: ...
    def notification(self, payment: Payment, now: float, seq: int) -> tuple[dict[str, str], bytes]: ...
    def acked(self, response: dict[str, Any]) -> bool: ...


class WeChatV3Channel:
    """WeChat Pay v3 callbacks built by the channel simulator (real RSA signature, real AES-GCM)."""

    name = "wechatpay"

    def __init__(self, sim: ChannelSimulator):
        self.sim = sim

    def route(self, mchid: str) -> tuple[str, dict[str, str]]:
        return f"/notify/wechatpay/{mchid}", {"mchid": mchid}

    def notification(self, payment: Payment, now: float, seq: int) -> tuple[dict[str, str], bytes]:
        o = payment.order
        success = datetime.fromtimestamp(payment.paid_s, CHINA).isoformat(timespec="seconds")
        resource = self.sim.transaction_resource(
            o.mchid, o.out_trade_no, payment.reported_total, payer_total=payment.payer_total,
            transaction_id=payment.transaction_id, openid=f"oSIM{payment.transaction_id[-24:]}", success_time=success)
        return self.sim.build_notification(
            o.mchid, resource, timestamp=int(now), nonce=f"N{seq:031d}", resource_nonce=f"R{seq:011d}",
            notification_id=f"00000000-0000-4000-8000-{seq:012d}", create_time=success)

    def acked(self, response: dict[str, Any]) -> bool:
        return response.get("statusCode") in (200, 204)


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
            msgs = env.sqs.receive_message(QueueUrl=env.dlq_url(), MaxNumberOfMessages=10,
                                           VisibilityTimeout=0).get("Messages", [])
            if not msgs:
                return moved
            for m in msgs:
                env.sqs.send_message(QueueUrl=env.env["APPLY_QUEUE_URL"], MessageBody=m["Body"])
                env.sqs.delete_message(QueueUrl=env.dlq_url(), ReceiptHandle=m["ReceiptHandle"])
                moved += 1


# Add the sweeper (R25) and the poller (R21-R23) here when they land: each is a Recovery.
RECOVERIES: list[Recovery] = [DlqRedrive()]


# ---------------------------------------------------------------------------------------------- runner


class Scenario:
    def __init__(self, env: SimEnv, injector: FaultInjector, channel: Channel, day: d.Day,
                 recoveries: list[Recovery] | None = None, *, close_expired: Callable[..., None] | None = None):
        self.env = env
        self.injector = injector
        self.channel = channel
        self.day = day
        self.recoveries = RECOVERIES if recoveries is None else recoveries
        self.close_expired = close_expired or local_close
        self.result = Result(day.seed)
        self.payments: dict[str, Payment] = {}
        self.start = env.clock.now
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._ticks = 0
        self._tick_scheduled = False
        self._arrival_order: list[str] = []

    # ------------------------------------------------------------------ the event loop

    def at(self, offset_s: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.start + offset_s, self._seq, fn, args))

    def after(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.env.clock.now - self.start + delay_s, fn, *args)

    def log(self, text: str) -> None:
        self.result.timeline.append(f"t+{self.env.clock.now - self.start:8.1f}s {text}")

    def run(self) -> Result:
        self.env.clear_business_state()
        self.injector.arm(self.day.aws_faults)
        try:
            for order in self.day.orders:
                self.at(order.created_s, self.create_order, order)
                if order.pay_s is not None:
                    self.at(order.pay_s, self.pay, order, False)
                if order.double_pay_s is not None:
                    self.at(order.double_pay_s, self.pay, order, True)
                self.at(order.created_s + order.expire_s, self.expire, order)
            self._loop()
            self.injector.disarm()
            for _ in range(3):  # recovery, then whatever it set in motion
                moved = sum(hook(self) for hook in self.recoveries)
                self._drain()
                if not moved:
                    break
        finally:
            self.injector.disarm()
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
            if len(self.result.timeline) > 5000:
                self.result.violations.append("the day does not converge (5000 steps): see the timeline")
                self._heap.clear()

    def _drain(self, max_rounds: int = 50) -> None:
        for _ in range(max_rounds):
            self.env.clock.now += 1
            if not self.worker_tick(reschedule=False):
                return

    # ------------------------------------------------------------------ merchant backend

    def create_order(self, order: d.OrderPlan) -> None:
        body = {"mchid": order.mchid, "out_trade_no": order.out_trade_no, "amount_cent": order.amount_cent,
                "description": "sim order", "prepay": False, "expire_minutes": int(order.expire_s // 60)}
        event = self.env.http_event("POST", "/orders", json.dumps(body).encode(), {}, {})
        response, error = self._invoke("OrdersFunction", event)
        status = response.get("statusCode") if response else None
        self.log(f"create order {order.key}: {status or error}")
        if status is None or status >= 500:
            self.after(CREATE_RETRY_S, self.create_order, order)  # the merchant's backend retries
        elif status != 201:
            self.result.violations.append(f"order {order.key} refused with {status}: {response.get('body')}")

    def expire(self, order: d.OrderPlan) -> None:
        """Stand-in for the poller's expiry close (R21): it last looked QUERY_LAG_S before expiry."""
        last_look = self.start + order.created_s + order.expire_s - QUERY_LAG_S
        if any(p.order is order and p.paid_s <= last_look for p in self.payments.values()):
            return  # the poller saw it paid: the callback (or the poller's query) books it
        closed = self.close_expired(self.env, order)
        self.log(f"expiry close {order.key}: {'closed' if closed else 'not waiting'}")

    # ------------------------------------------------------------------ the channel

    def pay(self, order: d.OrderPlan, second: bool) -> None:
        n = len(self.payments) + 1
        tx = f"4200000{self.day.seed % 10**12:012d}{n:09d}"
        reported = order.reported_total if order.reported_total is not None else order.amount_cent
        payer = order.payer_total if order.payer_total is not None else reported
        expected = expected_fate(order, second)
        payment = Payment(tx, order, reported, payer, self.env.clock.now, expected,
                          lost_left=0 if second else order.lost, ack_lost_left=0 if second else order.ack_lost)
        if order.double_pay_s is not None:
            other = [p for p in self.payments.values() if p.order is order]
            if other:
                payment.pair, other[0].pair = other[0].transaction_id, tx
        self.payments[tx] = payment
        self.log(f"channel took {payer} cents for {order.key} as {tx} (reports total {reported})")
        self.after(order.delay_s if not second else 0.0, self.deliver, payment, 1, 0)
        if not second:
            for copy in range(1, order.concurrent + 1):
                self.after(order.delay_s, self.deliver, payment, 1, copy)
            if order.duplicate_after_s is not None:
                self.after(order.delay_s + order.duplicate_after_s, self.deliver, payment, 1, 99)

    def deliver(self, payment: Payment, attempt: int, copy: int) -> None:
        if copy == 0 and payment.lost_left > 0:
            payment.lost_left -= 1
            self.log(f"callback {payment.transaction_id} attempt {attempt} lost on the wire")
            return self._retry(payment, attempt, copy)
        self._seq += 1
        headers, body = self.channel.notification(payment, self.env.clock.now, self._seq)
        path, params = self.channel.route(payment.order.mchid)
        event = self.env.http_event("POST", path, body, headers, params)
        response, error = self._invoke("NotifyFunction", event)
        self._wake_worker()
        payment.arrivals += 1
        if payment.arrivals == 1:
            self._arrival_order.append(payment.transaction_id)
        acked = response is not None and self.channel.acked(response)
        self.log(f"callback {payment.transaction_id} copy {copy} attempt {attempt}: "
                 f"{response.get('statusCode') if response else error}")
        if acked:
            # No success ACK before the raw row is durable (R7): read it back with the checker's client.
            if self.env.get("NOTIFY_RAW_TABLE", f"wechatpay#{payment.transaction_id}") is None:
                self.result.violations.append(f"success ACK for {payment.transaction_id} without a raw row")
            if payment.ack_lost_left > 0:
                payment.ack_lost_left -= 1
                self.log(f"ack for {payment.transaction_id} lost on the way back")
            else:
                payment.acked = True
                return None
        if payment.acked:
            return None  # another copy got through: WeChat stops retrying that notification
        return self._retry(payment, attempt, copy)

    def _retry(self, payment: Payment, attempt: int, copy: int) -> None:
        if attempt > len(RETRY_SCHEDULE_S):
            self.log(f"channel gave up on {payment.transaction_id}")
            return
        self.after(RETRY_SCHEDULE_S[attempt - 1], self.deliver, payment, attempt + 1, copy)

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
        msgs = env.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                                       AttributeNames=["All"]).get("Messages", [])
        if msgs:
            event = {"Records": [_record(m) for m in msgs]}
            response, error = self._invoke("WorkerFunction", event)
            failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
            self.log(f"worker batch of {len(msgs)}: {len(failed)} failed" if response else f"worker {error}")
            if response is not None and self._ticks in self.day.lost_delete_ticks:
                self.result.faults[d.SQS_REDELIVERY] += 1  # the deletes are lost: SQS delivers them again
            elif response is not None:
                done = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)
                        if m["MessageId"] not in failed]
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
                self.result.unhandled.append(f"{function}: ApplyFailed without an injected fault "
                                             f"(log: {self.env.observer.logs.getvalue()[-300:]!r})")
        return response, error


def _record(m: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
            "attributes": m.get("Attributes", {}), "messageAttributes": {}, "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:apply",
            "awsRegion": "us-east-1"}


def local_close(env: SimEnv, order: d.OrderPlan) -> bool:
    """WAIT_PAY -> CLOSED with the same compare-and-set the worker uses. Replace with the poller's close."""
    try:
        env.ddb.update_item(
            TableName=env.env["ORDERS_TABLE"], Key={"pk": {"S": order.key}},
            UpdateExpression="SET #st = :closed, version = version + :one",
            ConditionExpression="#st = :wait", ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={":closed": {"S": "CLOSED"}, ":wait": {"S": "WAIT_PAY"}, ":one": {"N": "1"}})
        return True
    except env.ddb.exceptions.ConditionalCheckFailedException:
        return False


def expected_fate(order: d.OrderPlan, second: bool) -> str:
    if order.double_pay_s is not None:
        return "ONE_OF_PAIR"
    if d.MISMATCH in order.faults:
        return "MANUAL"
    if d.LATE in order.faults:
        return "REFUND"
    if d.ORDER_LATE in order.faults:
        return "BOOKED_OR_MANUAL"
    return "BOOKED"


# ---------------------------------------------------------------------------------------------- invariants


def check(run: Scenario) -> None:
    """The invariants (docs/proof.md). Each violation is one line naming the transaction or row."""
    env, v = run.env, run.result.violations
    raw = {r["transaction_id"]: r for r in env.scan("NOTIFY_RAW_TABLE")}
    ledger = env.scan("LEDGER_TABLE")
    orders = {o["pk"]: o for o in env.scan("ORDERS_TABLE")}
    tasks = env.scan("REFUND_TASKS_TABLE")
    booked = Counter(e["transaction_id"] for e in ledger if e["kind"] == "PAYMENT")
    per_order = Counter(e["order_pk"] for e in ledger if e["kind"] == "PAYMENT")
    task_tx = Counter(t["transaction_id"] for t in tasks)
    channel = run.payments

    # I1 every payment the channel took is booked, with a person, or has a refund task: none missing.
    fate: dict[str, str] = {}
    for tx, p in channel.items():
        row = raw.get(tx)
        if booked[tx]:
            fate[tx] = "BOOKED"
        elif task_tx[tx]:
            fate[tx] = "REFUND"
        elif row is not None and row.get("handled") == 2:
            fate[tx] = "MANUAL"
        else:
            fate[tx] = "MISSING"
            v.append(f"I1 silently missing: channel took {p.payer_total} cents as {tx} for {p.order.key} "
                     f"(raw row: {row and row.get('handled')})")
    # I1b the fate the fault schedule planted.
    for tx, p in channel.items():
        want, got = p.expected, fate[tx]
        if want == "ONE_OF_PAIR":
            pair = {got, fate.get(p.pair or "", "")}
            if p.pair and pair != {"BOOKED", "REFUND"}:
                v.append(f"I1b double payment {tx}/{p.pair}: fates {sorted(pair)}, want one booked one refunded")
        elif want == "BOOKED_OR_MANUAL":
            if got not in ("BOOKED", "MANUAL"):
                v.append(f"I1b {tx} ({', '.join(p.order.faults)}): {got}, want BOOKED or MANUAL")
        elif got != want:
            v.append(f"I1b {tx} ({', '.join(p.order.faults) or 'no fault'}): {got}, want {want}")
    # I2 no transaction booked twice, no order paid twice, nothing booked the channel did not take.
    v += [f"I2 {tx} booked {n} times" for tx, n in booked.items() if n > 1]
    v += [f"I2 order {pk} has {n} payment entries" for pk, n in per_order.items() if n > 1]
    v += [f"I2 ledger entry {tx} the channel never took" for tx in booked if tx not in channel]
    # I3 ledger amounts and totals equal the channel's for what was booked (payer_total, R13).
    for e in ledger:
        p = channel.get(e["transaction_id"])
        if p and (e["amount_cent"], e["order_total_cent"]) != (p.payer_total, p.reported_total):
            v.append(f"I3 {e['transaction_id']} booked {e['amount_cent']}/{e['order_total_cent']}, "
                     f"channel {p.payer_total}/{p.reported_total}")
    ours = sum(e["amount_cent"] for e in ledger if e["kind"] == "PAYMENT")
    theirs = sum(channel[tx].payer_total for tx in booked if tx in channel)
    if ours != theirs:
        v.append(f"I3 ledger total {ours} != channel total {theirs} for the booked payments")
    # I3b a PAID order agrees with its ledger entry; a refund task asks back what was taken.
    by_tx = {e["transaction_id"]: e for e in ledger}
    for pk, o in orders.items():
        if o["status"] == "PAID":
            e = by_tx.get(o.get("transaction_id"))
            if e is None or e["amount_cent"] != o["paid_cent"] or e["order_pk"] != pk:
                v.append(f"I3b order {pk} PAID by {o.get('transaction_id')} without a matching ledger entry")
    for t in tasks:
        p = channel.get(t["transaction_id"])
        if p is None or t["amount_cent"] != p.payer_total:
            v.append(f"I3b refund task {t['pk']} asks {t['amount_cent']}, channel took {p and p.payer_total}")
        elif raw.get(t["transaction_id"], {}).get("handled") != 2:
            v.append(f"I3b refund task {t['pk']} but its raw row is not with a person")
    # I4 every raw row ends at handled 1 or 2; nothing is left in the queue.
    v += [f"I4 raw row {r['pk']} ended at handled={r.get('handled')}" for r in raw.values()
          if r.get("handled") not in (1, 2)]
    for name, url in (("apply queue", env.env["APPLY_QUEUE_URL"]), ("DLQ", env.dlq_url())):
        left = env.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                           "ApproximateNumberOfMessagesNotVisible"])
        n = sum(int(x) for x in left["Attributes"].values())
        if n:
            v.append(f"I4 {n} message(s) left in the {name}")
    # I5 (no success ACK before the raw row was durable) is checked at each ACK, in deliver().


# ---------------------------------------------------------------------------------------------- process set-up


class World:
    """What one process keeps between scenarios: moto, tables, handlers, merchants, hooks."""

    def __init__(self) -> None:
        from tally import bootstrap

        self.env = SimEnv.start()
        self.sim = ChannelSimulator(fixed_keys=True, seed=0)
        m = self.sim.register_test_merchant()
        for mchid in d.MERCHANT_POOL:
            self.sim.register_merchant(mchid, m["apiv3_key"], m["merchant_public_key_pem"], m["merchant_serial"],
                                       appid=m["appid"])
            bootstrap.merchants().add_wechatpay(
                mchid=mchid, apiv3_key=m["apiv3_key"], merchant_key_pem=m["merchant_private_key_pem"],
                merchant_serial=m["merchant_serial"], appid=m["appid"],
                notify_url=f"http://127.0.0.1:9/notify/wechatpay/{mchid}", public_key=self.sim.public_key_pem,
                public_key_id=self.sim.public_key_id)
        self.channel = WeChatV3Channel(self.sim)
        self.injector = FaultInjector(tables={k: v for k, v in self.env.env.items() if k.endswith("_TABLE")})
        self.injector.attach(self.env.product_ddb)
        self.injector.attach(self.env.product_sqs)
        self.day_start = self.env.clock.now

    def run(self, seed: int, shape: d.DayShape = d.SMALL, recoveries: list[Recovery] | None = None) -> Result:
        self.env.clock.now = self.day_start  # every day starts at the same instant: a replay is exact
        day = d.generate(seed, shape)
        return Scenario(self.env, self.injector, self.channel, day, recoveries).run()

    def close(self) -> None:
        self.env.stop()


def timed(world: World, seed: int, shape: d.DayShape = d.SMALL) -> tuple[Result, float]:
    t0 = time.perf_counter()
    result = world.run(seed, shape)
    return result, time.perf_counter() - t0
