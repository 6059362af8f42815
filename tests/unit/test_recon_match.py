"""Matching (R34–R36) and the day cut, pure."""

import datetime as dt

from tally.domain.recon import (
    AMOUNT_DIFFERS,
    CHANNEL_ONLY,
    LOCAL_ONLY,
    PAYMENT,
    REFUND,
    STATUS_DIFFERS,
    BillItem,
    LocalEntry,
    Matcher,
    fee_from_rate,
    fold_ledger,
    scheduled_days,
)


def item(key, amount, kind=PAYMENT, status="SUCCESS", fee=0, expected=None):
    return BillItem(key, kind, amount, status, "2024-05-01 10:00:00", key[-4:], "otn", "", fee, expected)


def entry(key, amount, kind=PAYMENT):
    return LocalEntry(key, kind, amount, "2024-05-01")


def classes(diffs):
    return sorted((d.cls, d.item, d.key) for d in diffs)


def test_each_diff_class_R36():
    local = {k: entry(k, a) for k, a in [("wx#1", 100), ("wx#2", 200), ("wx#3", 300), ("wx#9", 900)]}
    local["wx#R1"] = entry("wx#R1", 50, REFUND)
    bill = [item("wx#1", 100), item("wx#2", 201), item("wx#3", 300, status="REVOKED"), item("wx#4", 400),
            item("wx#R1", 50, REFUND)]
    matcher = Matcher(local)
    found = classes(matcher.match(bill))
    assert found == [(AMOUNT_DIFFERS, PAYMENT, "wx#2"), (CHANNEL_ONLY, PAYMENT, "wx#4"), (LOCAL_ONLY, PAYMENT, "wx#9"),
                     (STATUS_DIFFERS, PAYMENT, "wx#3")]
    assert matcher.stats.matched == 2  # wx#1 and the refund (R35)


def test_a_refund_still_processing_that_we_did_not_book_is_not_a_diff_but_counted_R35():
    matcher = Matcher({})
    assert list(matcher.match([item("wx#R2", 10, REFUND, status="PROCESSING")])) == []
    assert matcher.stats.pending_refunds == 1


def test_fee_differing_from_the_rows_rate_is_an_amount_diff_R35():
    (diff,) = Matcher({"wx#1": entry("wx#1", 100)}).match([item("wx#1", 100, fee=2000, expected=1000)])
    assert (diff.cls, diff.item, diff.channel_amount_cent, diff.local_amount_cent) == (AMOUNT_DIFFERS, "FEE", 2, 1)
    assert fee_from_rate(10000, "0.60%") == 60000 and fee_from_rate(1, "0.60%") == 0
    assert fee_from_rate(2550, "0.60%") == 15000 and fee_from_rate(100, "n/a") is None


def test_a_straggler_booked_on_the_neighbouring_day_is_found_not_reported_R34():
    other_day = {"wx#5": LocalEntry("wx#5", PAYMENT, 500, "2024-04-30")}
    matcher = Matcher({}, other_day.get)
    assert list(matcher.match([item("wx#5", 500)])) == []
    assert matcher.stats.cross_day == 1


def test_reversals_fold_into_their_target_and_a_fully_reversed_entry_is_gone_R36():
    rows = [{"pk": "wx#1", "kind": PAYMENT, "amount_cent": 777}, {"pk": "wx#2", "kind": PAYMENT, "amount_cent": 990},
            {"pk": "wx#1#REVERSAL#d", "kind": "REVERSAL", "reverses": "wx#1", "amount_cent": -777},
            {"pk": "wx#2#REVERSAL#d", "kind": "REVERSAL", "reverses": "wx#2", "amount_cent": 10}]
    local = fold_ledger(rows)
    assert list(local) == ["wx#2"] and local["wx#2"].amount_cent == 1000


def test_the_day_cut_is_shanghai_whatever_the_server_clock_R34():
    # 2024-05-01 17:00 UTC is 2024-05-02 01:00 in Shanghai: yesterday there is the 1st, not the 30th
    now = dt.datetime(2024, 5, 1, 17, 0, tzinfo=dt.UTC).timestamp()
    assert scheduled_days(now) == [("2024-05-01", "T+1"), ("2024-04-30", "T+2"), ("2024-04-29", "T+3")]
    # 02:30 UTC (the schedule) is 10:30 in Shanghai, the same calendar day
    now = dt.datetime(2024, 5, 2, 2, 30, tzinfo=dt.UTC).timestamp()
    assert scheduled_days(now)[0] == ("2024-05-01", "T+1")
