"""Issue #36: a booking's journal record rides in the booking's own transaction, chained on the head it read."""

from __future__ import annotations

import json
import threading

import pytest
from tally import bootstrap
from tally.domain import journal as j
from tally.service.journal import DecisionJournal
from tally.store.journal import JournalStore


@pytest.fixture
def merchant(h):
    return h.add_merchant()


SETUP_KINDS = {"merchant.configured", "principal.granted"}


def pay(h, merchant, amount=100):
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=amount)["body"])
    headers, body, resource = h.notification(merchant["mchid"], order["out_trade_no"], amount)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] in (200, 204)
    return order, resource


def entries(h, day=None):
    store = JournalStore(h.ddb, h.env["JOURNAL_TABLE"])
    rows = [r for r in h.scan("JOURNAL_TABLE") if r["sk"] != "head"]
    found = [j.Entry(r["pk"], r["seq"], r["hash"], json.loads(r["record"])) for r in rows]
    # the money decisions: the set-up's merchant configuration and the test backend's grant have records too
    return store, [e for e in found if e.record["kind"] not in SETUP_KINDS]


def test_a_booked_payment_is_journaled_with_its_ledger_entry_and_transition(h, merchant):
    order, resource = pay(h, merchant, 123)
    assert h.drain() == []
    _, found = entries(h)
    (e,) = found
    assert e.record["kind"] == "payment.booked" and e.seq == 1 and e.record["prev"] == j.GENESIS
    assert (
        e.record["facts"]["paid_cent"] == 123
        and e.record["facts"]["transaction_id"] == resource["transaction_id"]
    )
    tables = {r["table"]: r for r in e.record["refs"]}
    (ledger,) = h.scan("LEDGER_TABLE")
    assert tables["ledger"]["key"] == ledger["pk"] and tables["ledger"]["fields"]["amount_cent"] == 123
    assert tables["transitions"]["fields"]["to_status"] == "PAID"
    assert j.verify_chain(found) is None
    heads = [r for r in h.scan("JOURNAL_TABLE") if r["sk"] == "head" and r["pk"] == e.chain]
    assert [(x["seq"], x["hash"]) for x in heads] == [(1, e.hash)]


def test_many_bookings_chain_per_lane_and_every_chain_verifies(h, merchant):
    for amount in range(101, 111):
        pay(h, merchant, amount)
    assert h.drain() == []
    _, found = entries(h)
    assert len(found) == 10 == len(h.scan("LEDGER_TABLE"))
    by_chain: dict[str, list[j.Entry]] = {}
    for e in found:
        by_chain.setdefault(e.chain, []).append(e)
    assert all(j.verify_chain(c) is None for c in by_chain.values())
    assert {j.split_chain(c)[0] for c in by_chain} == {merchant["mchid"]}


def test_two_writers_on_one_chain_head_cannot_fork_it_and_neither_decision_is_lost(h, merchant):
    """Two bookings read the same head; the second's transaction is cancelled by the head condition and the
    apply decides again on fresh reads: both are booked, the chain is 1 → 2, never two records at seq 1."""
    o1, _ = pay(h, merchant, 201)
    o2, _ = pay(h, merchant, 202)
    raws = [r for r in h.scan("NOTIFY_RAW_TABLE") if r["handled"] == 0]
    service = bootstrap.apply_service()
    real = service.journal
    assert isinstance(real, DecisionJournal)
    one_chain = j.chain_id(merchant["mchid"], j.shanghai_day(service.clock()), 0)
    barrier = threading.Barrier(2)
    reads: list[int] = []

    class SameLane(DecisionJournal):
        def chain(self, merchant_id, subject):  # both orders in one lane: the contention under test
            return one_chain

        def read(self, table, key, merchant_id, subject):
            row, head = self.store.read_with_head(table, key, one_chain)
            reads.append(head.seq)
            if len(reads) <= 2:
                barrier.wait(timeout=10)  # both have read the same (empty) head before either writes
            return row, head

    service.journal = SameLane(real.store, real.logical, clock=real.clock)
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda r=r: results.append(service.apply(r["pk"]).value)) for r in raws
    ]
    try:
        [t.start() for t in threads]
        [t.join(timeout=30) for t in threads]
    finally:
        service.journal = real
    assert sorted(results) == ["BOOKED", "BOOKED"]
    assert reads[:2] == [0, 0] and 1 in reads[2:]  # the loser read again and followed the winner's record
    _, found = entries(h)
    chain = sorted((e for e in found if e.chain == one_chain), key=lambda e: e.seq)
    assert [e.seq for e in chain] == [1, 2] and j.verify_chain(chain) is None
    assert len(h.scan("LEDGER_TABLE")) == 2


def test_a_cancelled_booking_appends_nothing(h, merchant):
    """A duplicate (the same notification again) writes no second record: the record is the decision's."""
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=150)["body"])
    headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 150)
    for _ in range(2):
        assert h.notify(merchant["mchid"], headers, body)["statusCode"] in (200, 204)
        h.drain()
    _, found = entries(h)
    assert [e.record["kind"] for e in found] == ["payment.booked"]


def test_money_parked_for_a_person_is_journaled_in_the_park_itself(h, merchant):
    """R12/R17: a payment that is not booked but waits for a person (handled=2) is journaled in the same
    transaction that parks it: an amount mismatch as `payment.parked`, a second payment on a paid order as
    `payment.illegal` pinning its refund task. The worker still makes its two calls (R55, docs/audit.md)."""
    wrong = json.loads(h.create_order(merchant["mchid"], amount_cent=500)["body"])
    headers, body, _ = h.notification(merchant["mchid"], wrong["out_trade_no"], 499)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] in (200, 204)
    order, _ = pay(h, merchant, 150)
    assert h.drain() == []
    headers, body, second = h.notification(merchant["mchid"], order["out_trade_no"], 150)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] in (200, 204)
    assert h.drain() == []
    _, found = entries(h)
    kinds = {e.record["kind"]: e for e in found}
    assert set(kinds) == {"payment.parked", "payment.booked", "payment.illegal"}
    parked, illegal = kinds["payment.parked"], kinds["payment.illegal"]
    assert parked.record["facts"]["paid_cent"] == 499 and "amount" in parked.record["facts"]["reason"]
    assert parked.record["subject"] == f"{merchant['mchid']}#{wrong['out_trade_no']}"
    (task,) = h.scan("REFUND_TASKS_TABLE")
    (ref,) = illegal.record["refs"]
    assert ref["table"] == "refund_tasks" and ref["key"] == task["pk"]
    assert ref["fields"]["amount_cent"] == 150 and ref["fields"]["transaction_id"] == second["transaction_id"]
    raw = {r["pk"]: r for r in h.scan("NOTIFY_RAW_TABLE")}
    assert raw[parked.record["facts"]["raw_key"]]["handled"] == 2
    assert raw[illegal.record["facts"]["raw_key"]]["handled"] == 2
    by_chain: dict[str, list[j.Entry]] = {}
    for e in found:
        by_chain.setdefault(e.chain, []).append(e)
    assert all(j.verify_chain(c) is None for c in by_chain.values())


def test_a_refund_booked_by_its_notification_is_journaled_with_its_refund_ledger_entry(h, merchant):
    """The money a refund gives back: the REFUND entry is pinned by a record in the refund's own transaction,
    in the same merchant's chains as the payment it refunds."""
    from tests.integration.refund_helpers import deliver, paid_order, refund

    out_trade_no, _ = paid_order(h, merchant["mchid"], 300)
    status, answer = refund(h, merchant["mchid"], out_trade_no, 120)
    assert status == 201, answer
    h.sim.settle_refund(answer["refund_no"], "success", notify=False)
    deliver(h, merchant["mchid"], answer["refund_no"])
    _, found = entries(h)
    kinds = sorted(e.record["kind"] for e in found)
    assert "payment.booked" in kinds and "refund.success" in kinds
    (booked,) = [e for e in found if e.record["kind"] == "refund.success"]
    (entry,) = [r for r in h.scan("LEDGER_TABLE") if r["kind"] == "REFUND"]
    (ref,) = [r for r in booked.record["refs"] if r["table"] == "ledger"]
    assert ref["key"] == entry["pk"] and ref["fields"]["amount_cent"] == entry["amount_cent"]
    assert booked.record["facts"]["amount_cent"] == 120 and booked.record["facts"]["effect"] == "BOOK"
    by_chain: dict[str, list[j.Entry]] = {}
    for e in found:
        by_chain.setdefault(e.chain, []).append(e)
    assert all(j.verify_chain(c) is None for c in by_chain.values())


def test_accept_amount_and_the_replay_it_makes_are_journaled_with_who_and_the_lines_they_append(h, merchant):
    """R48/R55: a person accepts the amount the channel took: the order's changed amount (from, to, who, why)
    and the replay of the parked payment are each journaled in their own write, pinning the history line each
    appends; the booking that follows is journaled as a booking. Every chain verifies."""
    order = json.loads(h.create_order(merchant["mchid"], amount_cent=500)["body"])
    headers, body, _ = h.notification(merchant["mchid"], order["out_trade_no"], 499)
    assert h.notify(merchant["mchid"], headers, body)["statusCode"] in (200, 204)
    assert h.drain() == []
    (case,) = bootstrap.work_queue().list("kind=unbooked-payment")
    bootstrap.work_queue().act(
        case["id"], "accept-amount", by="ops-zhao", reason="the price the customer saw"
    )
    assert h.drain() == []
    _, found = entries(h)
    kinds = sorted(e.record["kind"] for e in found)
    assert kinds == ["payment.booked", "payment.parked", "queue.accept-amount", "queue.replay"]
    by_kind = {e.record["kind"]: e for e in found}
    accepted, replayed = by_kind["queue.accept-amount"], by_kind["queue.replay"]
    assert (accepted.record["facts"]["from_cent"], accepted.record["facts"]["to_cent"]) == (500, 499)
    assert accepted.record["facts"]["by"] == replayed.record["facts"]["by"] == "ops-zhao"
    (line,) = accepted.record["refs"]
    assert line["table"] == "orders" and line["fields"]["history[]"]["to_cent"] == 499
    (line,) = replayed.record["refs"]
    assert line["table"] == "notify_raw" and line["key"] == replayed.record["facts"]["raw_key"]
    by_chain: dict[str, list[j.Entry]] = {}
    for e in found:
        by_chain.setdefault(e.chain, []).append(e)
    assert all(j.verify_chain(c) is None for c in by_chain.values())
    booked = by_kind["payment.booked"]
    assert [e.record["kind"] for e in sorted(by_chain[booked.chain], key=lambda e: e.seq)][-2:] == [
        "queue.replay",
        "payment.booked",
    ]  # the replay and its booking, in the order's lane, in that order
