"""A simulated day, generated from a seed: merchants, orders, payments and a fault schedule.

Everything random is drawn here, from one `random.Random(seed)`, before anything runs: the same seed
is the same day, so a failing seed replays exactly (`python -m tests.sim.run --seed N`).

Sizes come from a `DayShape`: CI uses a small day, `make soak` the same shape over 10,000 seeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.sim.actors import Attack
from tests.sim.faults import AwsFault

CHANNELS = (
    "wechatpay_v3",
    "wechatpay_v3",
    "alipay",
    "wechatpay_v2",
)  # drawn per merchant (v3 twice as often)

# Channel-side faults on one payment's notification (what the channel does on the wire).
LOST = "callback lost"  # the first N attempts never arrive; the channel retries on its schedule
ACK_LOST = "ack lost"  # processed, but the channel never sees the answer: it retries (a duplicate)
DUPLICATE = "duplicated"  # another copy, later
CONCURRENT = "duplicated near-simultaneously"  # copies in the same instant, before the worker runs
DELAYED = "delayed"  # the first attempt comes late (within the order's life)
LATE = "delayed past expiry"  # paid just before expiry, delivered after we closed the order
MISMATCH = "amount mismatch"  # the channel reports another amount.total than the order's
DOUBLE = "double payment"  # a second transaction for the same order
ORDER_LATE = "order registered late"  # the callback arrives before the order exists
COUPON = "coupon (payer_total < total)"
SQS_REDELIVERY = "sqs redelivery (delete lost)"
REORDERED = "reordered"  # counted when callbacks arrive in another order than the payments
ALL_LOST = "callback lost on every attempt"  # only the poller (pull channels) or a person finds it
QUERY_ERRORS = "channel query errors"  # the poller's / return page's queries fail (5xx) a few times
RACE = "poller racing the callback"  # the callback arrives right when the poller (or return page) asks
GHOST = (
    "channel-only payment (recon plant)"  # paid at the channel for an order we never registered, no callback
)

# Refund faults (channels with a refund desk, tests/sim/refunds.py).
REFUND = "partial refund"
REFUND_OVER = "refund over the refundable amount (409)"
REFUND_CRASH = "crash between the channel refund call and marking it accepted"
REFUND_EARLY = "refund notification before the API returns"
REFUND_LOST = "refund notification lost (the refund query finds it)"
REFUND_CLOSED = "refund closed by the channel (reservation released)"
REFUND_RETRY = "refund API retried by the merchant (same refund_no)"
# The hostile tenant (R39): another configured merchant signs, on its own URL, REFUND.CLOSED for this refund as
# if it were the victim's service provider. Drawn from its own random stream, so every other draw of a seed
# (and every seed's day) stays what it was.
REFUND_FORGED = "hostile tenant forges the refund's outcome (R39)"
P_REFUND_FORGED = 0.2
# The hostile tenant again (R39, issue #15 "preempted transaction ids"): before the genuine callback, another
# configured merchant signs on its own URL a payment report naming this payment's transaction id. Raw keys are
# scoped per merchant, so the genuine payment must still book by itself. Its own random stream, like the above.
PAYMENT_PREEMPTED = "hostile tenant reports the payment's transaction id first (R39)"
P_PAYMENT_PREEMPTED = 0.15

# The AWS calls a fault may target, with the phases and kinds that make sense for each.
AWS_TARGETS: tuple[tuple[str, str, str | None, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "dynamodb",
        "PutItem",
        "NOTIFY_RAW_TABLE",
        ("before", "after"),
        ("throttle", "timeout", "error500", "crash"),
    ),
    ("sqs", "SendMessage", None, ("before", "after"), ("throttle", "timeout", "error500", "crash")),
    ("dynamodb", "GetItem", "ORDERS_TABLE", ("before",), ("throttle", "timeout")),
    (
        "dynamodb",
        "TransactWriteItems",
        None,
        ("before", "after"),
        ("throttle", "timeout", "error500", "crash"),
    ),
    ("dynamodb", "UpdateItem", "NOTIFY_RAW_TABLE", ("before", "after"), ("throttle", "timeout")),
    ("dynamodb", "PutItem", "ORDERS_TABLE", ("before", "after"), ("throttle", "timeout")),
)


@dataclass(frozen=True)
class DayShape:
    orders: tuple[int, int] = (3, 6)  # min, max orders in the day
    p_paid: float = 0.85  # an order is paid at all
    p_channel_fault: float = 0.45  # a paid order's notification gets a channel fault
    aws_faults: tuple[int, int] = (0, 3)  # AWS faults planned in the day
    p_crash_raw_enqueue: float = 0.1  # the day also crashes between raw write and enqueue
    p_sqs_redelivery: float = 0.2  # a worker batch's delete is lost once
    channels: tuple[str, ...] = CHANNELS
    p_refund: float = 0.35  # a booked v3 payment gets partial refunds
    p_ghost: float = 0.08  # the day has a channel-only payment (recon must find exactly it)


SMALL = DayShape()
TINY = DayShape(orders=(2, 4), aws_faults=(0, 2))
MICRO = DayShape(orders=(1, 2), aws_faults=(0, 1), p_channel_fault=0.6)  # soak on a slow machine
V3_ONLY = DayShape(channels=("wechatpay_v3",))


@dataclass
class RefundPlan:
    refund_no: str
    amount_cent: int
    after_pay_s: float  # the merchant asks this long after the payment
    kind: str = REFUND  # one of the refund faults above
    settle_after_s: float = 90.0  # the channel decides this long after taking it
    forged_by: str | None = None  # REFUND_FORGED: the hostile merchant that forges its outcome


@dataclass
class OrderPlan:
    channel: str  # a key of tests/sim/channels.KINDS
    mchid: str
    out_trade_no: str
    amount_cent: int
    created_s: float  # seconds after the day starts
    expire_s: float = 900.0  # the order's life (the stand-in closer closes it then)
    pay_s: float | None = None  # when the user pays (None: never)
    payer_total: int | None = None  # < amount_cent with a coupon
    reported_total: int | None = None  # amount.total the channel reports (MISMATCH)
    lost: int = 0  # attempts lost before the first that arrives
    ack_lost: int = 0  # answered attempts whose ACK the channel never sees
    concurrent: int = 0  # extra copies in the same instant
    duplicate_after_s: float | None = None  # one more copy later
    delay_s: float = 0.0  # before the first attempt
    double_pay_s: float | None = None  # a second transaction (DOUBLE)
    registered: bool = True  # False: only the channel knows the order (GHOST)
    query_errors: int = 0  # the channel's query answers 5xx this many times (QUERY_ERRORS)
    refunds: list[RefundPlan] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    preempted_by: str | None = None  # PAYMENT_PREEMPTED: the hostile merchant that claims the transaction id

    @property
    def key(self) -> str:
        return f"{self.mchid}#{self.out_trade_no}"


@dataclass
class Day:
    seed: int
    merchants: list[tuple[str, str]]  # (channel, merchant id)
    orders: list[OrderPlan]
    aws_faults: list[AwsFault]
    worker_period_s: float
    lost_delete_ticks: set[int]
    attacks: list[Attack] = field(default_factory=list)  # issue #38's actors (tests/sim/actors.py)

    def planted(self) -> list[str]:
        return (
            [f for o in self.orders for f in o.faults]
            + [r.kind for o in self.orders for r in o.refunds]
            + [a.kind for a in self.attacks]
        )


def generate(seed: int, shape: DayShape = SMALL) -> Day:
    from tests.sim.channels import KINDS
    from tests.sim.refunds import DESKS

    rng = random.Random(seed)
    pool = sorted({(ch, mid) for ch in shape.channels for mid in KINDS[ch].pool})
    n_merchants = rng.randint(1, 3)
    merchants: list[tuple[str, str]] = []
    while len(merchants) < n_merchants:
        ch = rng.choice(shape.channels)
        mid = rng.choice(KINDS[ch].pool)
        if (ch, mid) not in merchants:
            merchants.append((ch, mid))
    del pool
    orders: list[OrderPlan] = []
    for i in range(rng.randint(*shape.orders)):
        channel, mchid = rng.choice(merchants)
        kind = KINDS[channel]
        # Tenant isolation: now and then two merchants use the same out_trade_no (R11).
        otn = f"S{seed % 10**8:08d}N{i:02d}"
        if orders and len(merchants) > 1 and rng.random() < 0.15:
            mine = {o.out_trade_no for o in orders if o.mchid == mchid}
            other = [o.out_trade_no for o in orders if o.mchid != mchid and o.out_trade_no not in mine]
            otn = other[0] if other else otn
        amount = rng.choice((1, 99, 100, 1999, 5000, 12345, rng.randint(1, 10**6)))
        order = OrderPlan(channel, mchid, otn, amount, created_s=rng.uniform(0, 120))
        if rng.random() < shape.p_paid:
            order.pay_s = order.created_s + rng.uniform(2, 200)
            if amount > 1 and rng.random() < 0.25:
                order.payer_total = rng.randint(1, amount - 1)
                order.faults.append(COUPON)
            if rng.random() < shape.p_channel_fault:
                _channel_fault(rng, order, kind)
            if (
                channel in DESKS
                and not (set(order.faults) & {LATE, MISMATCH, DOUBLE, ORDER_LATE, ALL_LOST})
                and rng.random() < shape.p_refund
            ):
                _refunds(rng, order, seed, len(orders))
            _preempt(order, seed)
        orders.append(order)
    v3 = [m for ch, m in merchants if ch == "wechatpay_v3"]
    if v3 and rng.random() < shape.p_ghost:
        ghost = OrderPlan(
            "wechatpay_v3",
            rng.choice(v3),
            f"G{seed % 10**8:08d}N99",
            rng.randint(1, 10**5),
            created_s=rng.uniform(0, 60),
            registered=False,
            lost=10**6,
        )
        ghost.pay_s = ghost.created_s + rng.uniform(2, 100)
        ghost.faults.append(GHOST)
        orders.append(ghost)
    n_aws = rng.randint(*shape.aws_faults)
    aws = []
    for _ in range(n_aws):
        service, op, table, phases, kinds = rng.choice(AWS_TARGETS)
        aws.append(
            AwsFault(
                service, op, table, rng.randint(1, max(2, len(orders))), rng.choice(phases), rng.choice(kinds)
            )
        )
    if rng.random() < shape.p_crash_raw_enqueue:
        aws.append(
            AwsFault("dynamodb", "PutItem", "NOTIFY_RAW_TABLE", rng.randint(1, len(orders)), "after", "crash")
        )
    aws = _unique(aws)
    lost_deletes = {rng.randint(1, 6)} if rng.random() < shape.p_sqs_redelivery else set()
    from tests.sim import actors

    return Day(
        seed,
        merchants,
        orders,
        aws,
        worker_period_s=rng.choice((5.0, 10.0, 20.0)),
        lost_delete_ticks=lost_deletes,
        attacks=actors.draw(seed, merchants, orders),
    )


def _refunds(rng: random.Random, order: OrderPlan, seed: int, i: int) -> None:
    paid = order.payer_total if order.payer_total is not None else order.amount_cent
    left = paid
    t = rng.uniform(5, 400)
    for n in range(rng.randint(1, 3)):
        kind = rng.choice(
            (
                REFUND,
                REFUND,
                REFUND_CRASH,
                REFUND_EARLY,
                REFUND_LOST,
                REFUND_CLOSED,
                REFUND_RETRY,
                REFUND_OVER,
            )
        )
        if kind == REFUND_OVER:
            amount = paid + rng.randint(1, 100)  # more than was ever paid: refused, nothing reserved
        elif left <= 0:
            break
        else:
            amount = rng.randint(1, left)
            left -= amount if kind != REFUND_CLOSED else 0
        order.refunds.append(
            RefundPlan(f"RF{seed % 10**8:08d}{i:02d}{n}", amount, t, kind, settle_after_s=rng.uniform(1, 400))
        )
        _hostile(order, order.refunds[-1], seed)
        t += rng.uniform(0, 200)  # sometimes the same instant: partial refunds race the settling


def _hostile(order: OrderPlan, plan: RefundPlan, seed: int) -> None:
    """Now and then another v3 merchant of the pool forges the refund's outcome (its own random stream)."""
    from tests.sim.channels import KINDS

    others = [m for m in KINDS["wechatpay_v3"].pool if m != order.mchid]
    forge = random.Random(f"forge#{seed}#{plan.refund_no}")
    if (
        order.channel == "wechatpay_v3"
        and plan.kind != REFUND_OVER
        and others
        and forge.random() < P_REFUND_FORGED
    ):
        plan.forged_by = forge.choice(others)
        order.faults.append(REFUND_FORGED)


def _preempt(order: OrderPlan, seed: int) -> None:
    """Now and then another v3 merchant of the pool claims the payment's transaction id first (own stream)."""
    from tests.sim.channels import KINDS

    others = [m for m in KINDS["wechatpay_v3"].pool if m != order.mchid]
    draw = random.Random(f"preempt#{seed}#{order.mchid}#{order.out_trade_no}")
    if order.channel == "wechatpay_v3" and others and draw.random() < P_PAYMENT_PREEMPTED:
        order.preempted_by = draw.choice(others)
        order.faults.append(PAYMENT_PREEMPTED)


def _channel_fault(rng: random.Random, order: OrderPlan, channel: object) -> None:
    assert order.pay_s is not None
    choices = [LOST, ACK_LOST, DUPLICATE, CONCURRENT, DELAYED, MISMATCH, DOUBLE, ORDER_LATE, ALL_LOST, RACE]
    if getattr(channel, "closes", False):
        choices.append(LATE)
    if getattr(channel, "query_faults", False):
        choices.append(QUERY_ERRORS)
    kind = rng.choice(choices)
    order.faults.append(kind)
    if kind == LOST:
        order.lost = rng.randint(1, 3)
    elif kind == ACK_LOST:
        order.ack_lost = rng.randint(1, 2)
    elif kind == DUPLICATE:
        order.duplicate_after_s = rng.uniform(1, 120)
    elif kind == CONCURRENT:
        order.concurrent = rng.randint(1, 4)
    elif kind == DELAYED:
        order.delay_s = rng.uniform(30, 300)
    elif kind == LATE:
        # The user pays after the poller closed the order at the channel and here, and the channel takes it
        # anyway (a payment in flight when the close landed): the runner waits for both closes, then pays.
        order.pay_s = order.created_s + order.expire_s + rng.uniform(1, 90)
        order.delay_s = rng.uniform(0, 300)
    elif kind == MISMATCH:
        order.reported_total = order.amount_cent + rng.choice((-1, 1, 100)) if order.amount_cent > 1 else 2
        order.payer_total = None
        if COUPON in order.faults:
            order.faults.remove(COUPON)
    elif kind == DOUBLE:
        order.double_pay_s = order.pay_s + rng.uniform(0, 60)
    elif kind == ORDER_LATE:
        order.created_s = order.pay_s + rng.uniform(1, 25)  # the callback comes first
    elif kind == ALL_LOST:
        order.lost = 10**6
    elif kind == QUERY_ERRORS:
        order.query_errors = rng.randint(1, 6)
        order.lost = 10**6  # only the poller can book it, through the errors
    elif kind == RACE:
        # The poller queries at created + 30 s (its first look); the callback lands in the same instant.
        order.pay_s = order.created_s + rng.uniform(5, 25)
        order.delay_s = order.created_s + 30.0 - order.pay_s
    # A second, independent fault now and then (a lost callback that is also duplicated, ...).
    if kind not in (LATE, ORDER_LATE, MISMATCH, ALL_LOST, QUERY_ERRORS, RACE) and rng.random() < 0.2:
        order.concurrent = max(order.concurrent, 1)
        if CONCURRENT not in order.faults:
            order.faults.append(CONCURRENT)


def _unique(faults: list[AwsFault]) -> list[AwsFault]:
    seen: dict[tuple[str, str, str | None, int], AwsFault] = {}
    for f in faults:
        seen.setdefault((f.service, f.operation, f.table_env, f.nth), f)
    return list(seen.values())
