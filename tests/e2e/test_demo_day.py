"""`tally demo` (issue Operations): a scripted day with every fault, and nothing unaccounted for (R37, R38)."""

import io

import pytest

from tally_local.day import SCENARIOS, main

pytestmark = pytest.mark.e2e


def test_demo_day_accounts_for_every_payment_and_reports_the_manual_queue():
    out = io.StringIO()
    assert main(len(SCENARIOS) * 2, out=out) == 0
    report = out.getvalue()
    assert "nothing silent" in report and "UNACCOUNTED" not in report
    assert "ILLEGAL money-in: paid while CLOSED" in report  # the payment after close is with a person
    assert "amount" in report and "ApplyManual" in report  # the mismatch, and the alarm that would fire
    assert "REFUND 2" in report  # refunds booked from the channel's notification
    # R45: a coupon day agrees three ways with zero differences; the planted settlement shortfall is found
    coupon = next(line for line in report.splitlines() if "three-way coupon day" in line)
    assert "settlement ¥41.99" in coupon and "-> AGREES" in coupon and "0 difference(s)" in coupon, coupon
    planted = next(line for line in report.splitlines() if "three-way planted shortfall" in line)
    assert "-> DIFFERS (fund flow)" in planted and "SETTLEMENT channel ¥26.99 vs ledger ¥41.99" in planted, (
        planted
    )
