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
    bill = [
        item("wx#1", 100),
        item("wx#2", 201),
        item("wx#3", 300, status="REVOKED"),
        item("wx#4", 400),
        item("wx#R1", 50, REFUND),
    ]
    matcher = Matcher(local)
    found = classes(matcher.match(bill))
    assert found == [
        (AMOUNT_DIFFERS, PAYMENT, "wx#2"),
        (CHANNEL_ONLY, PAYMENT, "wx#4"),
        (LOCAL_ONLY, PAYMENT, "wx#9"),
        (STATUS_DIFFERS, PAYMENT, "wx#3"),
    ]
    assert matcher.stats.matched == 2  # wx#1 and the refund (R35)


def test_a_refund_still_processing_that_we_did_not_book_is_not_a_diff_but_counted_R35():
    matcher = Matcher({})
    assert list(matcher.match([item("wx#R2", 10, REFUND, status="PROCESSING")])) == []
    assert matcher.stats.pending_refunds == 1


def test_fee_differing_from_the_rows_rate_is_an_amount_diff_R35():
    (diff,) = Matcher({"wx#1": entry("wx#1", 100)}).match([item("wx#1", 100, fee=2000, expected=1000)])
    assert (diff.cls, diff.item, diff.channel_amount_cent, diff.local_amount_cent) == (
        AMOUNT_DIFFERS,
        "FEE",
        2,
        1,
    )
    assert fee_from_rate(10000, "0.60%") == 60000 and fee_from_rate(1, "0.60%") == 0
    assert fee_from_rate(2550, "0.60%") == 15000 and fee_from_rate(100, "n/a") is None


def test_a_straggler_booked_on_the_neighbouring_day_is_found_not_reported_R34():
    other_day = {"wx#5": LocalEntry("wx#5", PAYMENT, 500, "2024-04-30")}
    matcher = Matcher({}, other_day.get)
    assert list(matcher.match([item("wx#5", 500)])) == []
    assert matcher.stats.cross_day == 1


def test_reversals_fold_into_their_target_and_a_fully_reversed_entry_is_gone_R36():
    rows = [
        {"pk": "wx#1", "kind": PAYMENT, "amount_cent": 777},
        {"pk": "wx#2", "kind": PAYMENT, "amount_cent": 990},
        {"pk": "wx#1#REVERSAL#d", "kind": "REVERSAL", "reverses": "wx#1", "amount_cent": -777},
        {"pk": "wx#2#REVERSAL#d", "kind": "REVERSAL", "reverses": "wx#2", "amount_cent": 10},
    ]
    local = fold_ledger(rows)
    assert list(local) == ["wx#2"] and local["wx#2"].amount_cent == 1000


def test_the_day_cut_is_shanghai_whatever_the_server_clock_R34():
    # 2024-05-01 17:00 UTC is 2024-05-02 01:00 in Shanghai: yesterday there is the 1st, not the 30th
    now = dt.datetime(2024, 5, 1, 17, 0, tzinfo=dt.UTC).timestamp()
    assert scheduled_days(now) == [("2024-05-01", "T+1"), ("2024-04-30", "T+2"), ("2024-04-29", "T+3")]
    # 02:30 UTC (the schedule) is 10:30 in Shanghai, the same calendar day
    now = dt.datetime(2024, 5, 2, 2, 30, tzinfo=dt.UTC).timestamp()
    assert scheduled_days(now)[0] == ("2024-05-01", "T+1")


def _ledger_variants(items):
    """The bill's own rows as a ledger, then the same with rows missing, amounts off and extra entries."""
    import random

    rng = random.Random(6)
    exact = {i.key: entry(i.key, i.amount_cent, i.kind) for i in items}
    yield exact, None
    for _ in range(5):
        local = {}
        for i in items:
            roll = rng.random()
            if roll < 0.25:
                continue  # channel-only (or pending / not booked)
            local[i.key] = entry(i.key, i.amount_cent + (1 if roll < 0.45 else 0), i.kind)
        local["wechatpay#extra"] = entry("wechatpay#extra", 5)  # local-only
        elsewhere = {i.key: LocalEntry(i.key, i.kind, i.amount_cent, "2024-04-30") for i in items[:1]}
        yield local, elsewhere.get


def test_matching_from_the_one_pass_index_gives_the_verdicts_of_matching_the_items_R34_R35_R36():
    """The run parses once (totals + compact index) and matches the index; every verdict, stat and diff must
    be exactly what streaming full BillItems through the matcher gives — duplicates, fees, statuses included."""
    import dataclasses
    import pathlib

    from tally.service.recon_sources import OpenedBill

    bills = pathlib.Path(__file__).parents[1] / "fixtures" / "bills"
    cases = [
        ("wechatpay", bills / n)
        for n in (
            "wechat_all_bom_crlf.csv",
            "wechat_all_lf.csv",
            "wechat_refund.csv",
            "wechat_success.csv",
            "wechat_legacy_success.csv",
        )
    ]
    cases.append(("alipay", bills / "alipay_20880211096256330156_20240501.csv.zip"))
    for channel, path in cases:
        data = path.read_bytes()
        if channel == "wechatpay":  # a row twice (the channel's own duplicate): both are compared
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[:2] + lines[1:])
            if (
                path.name == "wechat_all_bom_crlf.csv"
            ):  # a fee off its rate, a revoked payment, a pending refund
                data = (
                    data.replace(b"`0.07000", b"`0.09000")
                    .replace(b"`JSAPI,`SUCCESS", b"`JSAPI,`REVOKED")
                    .replace(b"`ORIGINAL,`SUCCESS", b"`ORIGINAL,`PROCESSING")
                )
        items = list(OpenedBill(channel, data).parser().items())
        assert items, path
        for local, lookup in _ledger_variants(items):
            want = Matcher(dict(local), lookup)
            want_diffs = [dataclasses.asdict(d) for d in want.match(items)]
            opened = OpenedBill(channel, data)
            _, index = opened.index()
            got = Matcher(dict(local), lookup)
            got_diffs = [dataclasses.asdict(d) for d in got.match_index(index, opened.item_at)]
            assert sorted(got_diffs, key=repr) == sorted(want_diffs, key=repr), path
            assert got.stats == want.stats, path
