"""The coverage matrix (issue #15 item 6): which (state machine, state, event, verdict) cells the simulated days
drove, and under which planted fault kinds.

Collected from the tests/sim side only: `install()` wraps the pure decision functions the services call
(`transit` in tally.service.apply / poll / refunds) and notes, for the scenario running now, each decision
with the faults planted on the order (or refund) it concerns. Nothing in the product changes; the wrapper
returns what the real function returns. `make soak` and the CI slice print the matrix; docs/proof.md lists the
cells no day can reach, with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

NO_FAULT = "no fault"
SEP = "|"

_active: Any = None  # the Recorder of the scenario that runs now (one at a time per process)
SESSION: Counter[str] = Counter()  # every day of this process (the CI slice's terminal summary)
_refund_key: list[str] = []  # the refund row key being decided (stack: _transition / _land)


class Recorder:
    """One day's cells. `faults_of_tx` / `faults_of_refund` attribute a decision to the planted faults."""

    def __init__(self, scenario: Any) -> None:
        self.scenario = scenario
        self.cells: Counter[str] = Counter()

    def _order_faults(self, order: Any) -> list[str]:
        return [f for f in order.faults if f != "hostile tenant forges the refund's outcome (R39)"] or [
            NO_FAULT
        ]

    def faults_of_tx(self, voucher: str | None) -> list[str]:
        payment = self.scenario.payments.get(voucher or "")
        return self._order_faults(payment.order) if payment is not None else ["(no payment of the day)"]

    def faults_of_refund(self, key: str | None) -> list[str]:
        refund_no = (key or "").rpartition("#")[2]
        for order in self.scenario.day.orders:
            for plan in order.refunds:
                if plan.refund_no == refund_no:
                    kinds = [plan.kind]
                    if plan.forged_by:
                        kinds.append("hostile tenant forges the refund's outcome (R39)")
                    return kinds
        return ["(refund of a refund task)"]

    def note(self, machine: str, state: Any, event: Any, verdict: Any, faults: Iterable[str]) -> None:
        for fault in faults:
            self.cells[SEP.join((machine, _v(state), _v(event), _v(verdict), fault))] += 1


def _v(x: Any) -> str:
    return str(getattr(x, "value", x))


def install() -> None:
    """Wrap the decision points once per process (idempotent)."""
    from tally.service import apply, poll, refund_moves, refund_requests, refunds

    machines = ((apply, "order"), (poll, "order"), (refund_moves, "refund"), (refund_requests, "refund"))
    for module, machine in machines:
        real = module.transit
        if getattr(real, "_coverage", False):
            continue

        def transit(status: Any, event: Any, *args: Any, _real: Any = real, _machine: str = machine) -> Any:
            decision = _real(status, event, *args)
            rec = _active
            if rec is not None:
                if _machine == "order":
                    faults = rec.faults_of_tx(args[0] if args else None)
                else:
                    faults = rec.faults_of_refund(_refund_key[-1] if _refund_key else None)
                rec.note(_machine, status, event, decision.verdict, faults)
            return decision

        transit._coverage = True  # type: ignore[attr-defined]
        module.transit = transit

    service = refunds.RefundService
    if not getattr(service._transition, "_coverage", False):
        real_transition, real_land = service._transition, service._land

        def _transition(self: Any, key: str, *args: Any, **kwargs: Any) -> Any:
            _refund_key.append(key)
            try:
                return real_transition(self, key, *args, **kwargs)
            finally:
                _refund_key.pop()

        def _land(self: Any, row: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            _refund_key.append(str(row.get("pk", "")))
            try:
                return real_land(self, row, *args, **kwargs)
            finally:
                _refund_key.pop()

        _transition._coverage = True  # type: ignore[attr-defined]
        service._transition = _transition  # type: ignore[method-assign]
        service._land = _land  # type: ignore[method-assign]


def start(scenario: Any) -> Recorder:
    global _active
    install()
    _active = Recorder(scenario)
    return _active


def stop() -> None:
    global _active
    if _active is not None:
        SESSION.update(_active.cells)
    _active = None


def decision_cells(cells: Counter[str] | dict[str, int]) -> set[tuple[str, str, str, str]]:
    """(machine, state, event, verdict) reached, whatever the fault."""
    return {tuple(k.split(SEP)[:4]) for k, n in cells.items() if n}  # type: ignore[misc]


def render(cells: Counter[str] | dict[str, int]) -> str:
    """One line per (machine, state, event → verdict): how often, and under which fault kinds."""
    rows: dict[tuple[str, ...], Counter[str]] = {}
    for key, n in cells.items():
        machine, state, event, verdict, fault = key.split(SEP)
        rows.setdefault((machine, state, event, verdict), Counter())[fault] += n
    lines = [
        f"coverage matrix: {len(rows)} (machine, state, event → verdict) cells, {len(cells)} with faults"
    ]
    for (machine, state, event, verdict), faults in sorted(rows.items()):
        total = sum(faults.values())
        kinds = ", ".join(f"{f} ×{n}" for f, n in sorted(faults.items(), key=lambda x: (-x[1], x[0])))
        lines.append(f"  {machine:<6} {state:<8} × {event:<9} → {verdict:<9} {total:>6}  [{kinds}]")
    return "\n".join(lines)


def all_pairs() -> set[tuple[str, str, str]]:
    """Every (machine, state, event) the two state machines define."""
    from tally.domain.orders import Event, Status
    from tally.domain.refunds import RefundEvent, RefundStatus

    return {("order", s.value, e.value) for s in Status for e in Event} | {
        ("refund", s.value, e.value) for s in RefundStatus for e in RefundEvent
    }


def render_gaps(cells: Counter[str] | dict[str, int]) -> str:
    """The (machine, state, event) pairs not reached: those docs/proof.md names unreachable, and the rest."""
    reached = {c[:3] for c in decision_cells(cells)}
    missing = sorted(all_pairs() - reached)
    known = [p for p in missing if p in UNREACHABLE]
    unknown = [p for p in missing if p not in UNREACHABLE]
    lines = [
        f"state × event pairs: {len(all_pairs())}, reached {len(reached)}, unreachable by design {len(known)}"
    ]
    lines += [f"  NOT REACHED (reachable): {' × '.join(p)}" for p in unknown]
    lines += [
        f"  reached though listed unreachable: {' × '.join(p)}" for p in sorted(reached & set(UNREACHABLE))
    ]
    return "\n".join(lines)


MICROPAY = "MICROPAY only (付款码): Tally creates NATIVE/precreate orders, no channel of the sim reports REVOKED/PAYERROR"
SOLO_POLLER = "the poller asks only WAIT_PAY orders on its due index, and its close takes the order off it"
ONE_THREAD = (
    "needs a write between the poller's (or create call's) read and its conditional write: the sim runs one "
    "thing at a time; tests/concurrency/test_server_mode.py races it for real"
)
DESK = (
    "the simulated refund desks settle only SUCCESS/CLOSED, for the amount asked, within the day: never "
    "ABNORMAL, an unmapped status, another amount, or no outcome before expiry (tests/integration/test_refunds.py)"
)
MANUAL_ONLY_BY = "a refund is MANUAL only through ABNORMAL / EXPIRE / MISMATCH / UNKNOWN (see DESK)"
FINAL = (
    "an ended refund leaves the poll index, a repeated report dedupes on its raw key before the state machine "
    "(R7), and no simulated channel reports two outcomes for one refund (the hostile tenant's forged outcome is "
    "parked before it, R39)"
)
EARLY_ANSWER = (
    "the create call's answer always lands before the worker applies an early notification (ONE_THREAD)"
)
REFUSED_FIRST = (
    "the desks never refuse a create they receive; an over-refund is refused by Tally before (409)"
)

# (machine, state, event) no simulated day can reach, and why (docs/proof.md "Coverage matrix").
UNREACHABLE: dict[tuple[str, str, str], str] = {
    **{
        ("order", s, e): MICROPAY
        for s in ("WAIT_PAY", "PAID", "CLOSED", "PAY_FAILED")
        for e in ("REVOKE", "PAY_ERROR")
    },
    ("order", "PAY_FAILED", "PAY"): MICROPAY + " (PAY_FAILED is entered only by PAY_ERROR)",
    ("order", "PAY_FAILED", "CLOSE"): MICROPAY + " (PAY_FAILED is entered only by PAY_ERROR)",
    ("order", "CLOSED", "CLOSE"): SOLO_POLLER,
    ("order", "PAID", "CLOSE"): ONE_THREAD,
    **{
        ("refund", s, e): DESK
        for s in ("PENDING", "ACCEPTED", "SUCCESS", "FAIL", "MANUAL")
        for e in ("ABNORMAL", "UNKNOWN", "MISMATCH", "EXPIRE")
    },
    **{("refund", "MANUAL", e): MANUAL_ONLY_BY for e in ("ACCEPT", "SUCCEED", "FAIL")},
    ("refund", "ACCEPTED", "ACCEPT"): ONE_THREAD,
    ("refund", "PENDING", "FAIL"): REFUSED_FIRST,
    ("refund", "SUCCESS", "ACCEPT"): EARLY_ANSWER,
    ("refund", "FAIL", "ACCEPT"): EARLY_ANSWER,
    **{("refund", s, e): FINAL for s in ("SUCCESS", "FAIL") for e in ("SUCCEED", "FAIL")},
}
