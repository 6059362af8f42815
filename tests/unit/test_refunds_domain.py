"""The refund state machine and guard, pure (R26, R27, R29, R30), with a Hypothesis property test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tally.domain.refunds import (
    IN_FLIGHT,
    TERMINAL,
    TRANSIT,
    Effect,
    ExceedsRefundable,
    RefundBook,
    RefundEvent,
    RefundStatus,
    Verdict,
    check_reserve,
    transit,
)

S, E = RefundStatus, RefundEvent


def test_R27_guard_in_integer_cents():
    assert check_reserve(100, 100) == 0
    with pytest.raises(ExceedsRefundable, match="exceeds refundable 0.99 yuan"):
        check_reserve(99, 100)
    for bad in (0, -1, 1.0, True, "1"):
        with pytest.raises(ValueError):
            check_reserve(100, bad)


def test_R29_accepted_is_not_success_only_reports_book_or_release():
    assert transit(S.PENDING, E.ACCEPT) == transit(S.PENDING, E.ACCEPT)
    assert (
        transit(S.PENDING, E.ACCEPT).new_status is S.ACCEPTED
        and transit(S.PENDING, E.ACCEPT).effect is Effect.NONE
    )
    booking = {(s, e) for (s, e), (_, eff) in TRANSIT.items() if eff is Effect.BOOK}
    releasing = {(s, e) for (s, e), (_, eff) in TRANSIT.items() if eff is Effect.RELEASE}
    assert {e for _, e in booking} == {E.SUCCEED} and {e for _, e in releasing} == {E.FAIL}
    assert all(s in IN_FLIGHT for s, _ in booking | releasing)  # only a reserved amount is booked or released


def test_R29_a_report_arriving_before_acceptance_applies_and_the_late_acceptance_changes_nothing():
    assert transit(S.PENDING, E.SUCCEED).new_status is S.SUCCESS
    assert transit(S.SUCCESS, E.ACCEPT).verdict is Verdict.DUPLICATE


def test_R29_terminal_states_never_move_and_a_contradiction_goes_to_a_person():
    for status in TERMINAL:
        for event in RefundEvent:
            decision = transit(status, event)
            assert decision.verdict is not Verdict.OK
    assert transit(S.FAIL, E.SUCCEED).verdict is Verdict.ILLEGAL
    assert transit(S.SUCCESS, E.FAIL).verdict is Verdict.ILLEGAL
    assert transit(S.FAIL, E.FAIL).verdict is Verdict.DUPLICATE  # three FAIL reports: one release


def test_R29_abnormal_expired_unknown_go_to_a_person_holding_the_reservation():
    for event in (E.ABNORMAL, E.EXPIRE, E.MISMATCH, E.UNKNOWN):
        decision = transit(S.ACCEPTED, event)
        assert decision.new_status is S.MANUAL and decision.effect is Effect.NONE
    assert transit(S.MANUAL, E.SUCCEED).effect is Effect.BOOK
    assert transit(S.MANUAL, E.FAIL).effect is Effect.RELEASE


def test_R26_R30_same_refund_no_never_reserves_twice():
    book = RefundBook(paid_cent=100)
    book.request("A", 60)
    book.request("A", 60)
    assert book.refundable_cent == 40 and len(book.refunds) == 1


ops = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.sampled_from("ABCDEFGH"), st.integers(1, 60)),
        st.tuples(st.just("report"), st.sampled_from("ABCDEFGH"), st.sampled_from(list(RefundEvent))),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    paid=st.integers(1, 200),
    steps=ops,
    settle=st.lists(st.sampled_from([E.SUCCEED, E.FAIL]), min_size=8, max_size=8),
)
def test_R27_R29_property_refunded_plus_reserved_never_exceeds_paid(paid, steps, settle):
    """Random refunds, duplicate / out-of-order / contradictory reports, failures: the books always add up,
    and once every refund has an outcome each reservation was booked or released, exactly once."""
    book = RefundBook(paid_cent=paid)
    for op, no, arg in steps:
        if op == "request":
            try:
                book.request(no, arg)
            except ExceedsRefundable:
                pass
        elif no in book.refunds:
            book.apply(no, arg)
        assert book.booked_cent + book.reserved_cent <= paid
        assert book.refundable_cent + book.booked_cent + book.reserved_cent == paid
        assert book.refundable_cent >= 0
    for (no, (_, status)), outcome in zip(sorted(book.refunds.items()), settle, strict=False):
        if status in IN_FLIGHT:
            book.apply(no, outcome)
    assert book.reserved_cent == 0
    assert book.booked_cent == sum(a for a, s in book.refunds.values() if s is S.SUCCESS)
    assert book.refundable_cent == paid - book.booked_cent
