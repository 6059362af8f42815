"""The pure parts of incidents (service/incidents.py, docs/alerts.md): what makes two failures one incident,
who must act, and the rate that escalates it. R38: repeats land with a person as one thing, with its pace."""

from __future__ import annotations

from tally.service.incidents import fingerprint, incident_id, origin_of, rate_per_h, window


def item(**fields):
    return {
        "kind": "unbooked-payment",
        "channel": "wechatpay",
        "merchant": "1900000109",
        "reason": "",
        **fields,
    }


def test_r38_cases_that_differ_only_in_numbers_share_a_fingerprint_and_another_merchant_does_not():
    a = item(reason="amount 0.05 yuan ≠ order's 5.06 yuan", id="pay-1")
    b = item(reason="amount 1.00 yuan ≠ order's 2.00 yuan", id="pay-2")
    c = item(reason="amount 1.00 yuan ≠ order's 2.00 yuan", merchant="1900000110")
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    assert incident_id(fingerprint(a)) == incident_id(fingerprint(b))
    assert incident_id(fingerprint(a)).startswith("inc-unbooked-payment-1900000109-")


def test_r38_a_rejected_groups_count_is_not_part_of_its_cause():
    first = item(kind="rejected", reason="3 notification(s) refused (3 kept): signature does not verify")
    later = item(kind="rejected", reason="230 notification(s) refused (20 kept): signature does not verify")
    assert fingerprint(first) == fingerprint(later)
    assert fingerprint(first)[3] == "signature does not verify"


def test_r38_undelivered_cards_to_one_destination_are_one_cause_whatever_the_card():
    one = item(
        kind="alert-delivery",
        merchant=None,
        reason="cards to ops (slack) are not delivered: the opened card of inc-a",
    )
    two = item(
        kind="alert-delivery",
        merchant=None,
        reason="cards to ops (slack) are not delivered: the resolved card of inc-b",
    )
    assert fingerprint(one) == fingerprint(two)


def test_r38_ours_a_tenants_or_money():
    assert origin_of("alert-delivery", "") == "ours"
    assert origin_of("rejected", "signature does not verify") == "tenant"
    assert origin_of("merchant-not-ready", "") == "tenant"
    assert origin_of("unbooked-payment", "wechatpay merchant N is not configured") == "tenant"
    assert origin_of("unbooked-payment", "amount N yuan ≠ order's N yuan") == "money"


def test_r38_the_rate_is_what_arrived_in_the_last_hour_over_at_least_an_hour():
    now = 10_000_000
    assert rate_per_h([[now - 30, 0], [now, 200]], now) == 200  # 200 in half a minute: 200 in the hour
    assert rate_per_h([[now - 7200, 0], [now - 5400, 50], [now, 80]], now) == 30  # only the last hour counts
    assert rate_per_h([[now - 2 * 3600, 10], [now, 10]], now) == 0  # quiet
    # samples are written when the count changes: days steady, then 5 in the last hour is 5 an hour
    assert rate_per_h([[now - 5 * 86400, 10], [now, 15]], now) == 5
    assert window([[now - 9000, 1], [now - 5400, 2], [now - 60, 3]], now) == [[now - 5400, 2], [now - 60, 3]]
