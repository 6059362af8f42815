"""Faults the work-queue tests inject through the real handlers (shared by test modules, R41, R48)."""

from __future__ import annotations

from tally import bootstrap

from tests.integration.refund_helpers import paid_order


def inject_refund_task(h, m, sim) -> None:
    """A second payment of a paid order: ILLEGAL → a refund task with a person (R17)."""
    otn, _ = paid_order(h, m["mchid"], 100)
    headers, body = sim.build_notification(m["mchid"], sim.transaction_resource(m["mchid"], otn, 100))
    h.notify(m["mchid"], headers, body)
    h.drain()
    assert bootstrap.refund_service().work_tasks() == {"MANUAL": 1}


def orphan_payments(h, mchid: str, n: int, prefix: str) -> list[str]:
    """Payments whose order did not exist yet (R15: with a person after 4 attempts); then support creates the
    orders, so a replay books them. Returns the order numbers."""
    numbers = [f"{prefix}{i:04d}" for i in range(n)]
    for i, no in enumerate(numbers):
        headers, body, _ = h.notification(mchid, no, 100 + i)
        h.notify(mchid, headers, body)
    h.drain()
    for i, no in enumerate(numbers):
        h.create_order(mchid, no, amount_cent=100 + i)
    return numbers
