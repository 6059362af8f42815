"""Items kept for a person on the open route (issue #38 findings 6-9): they never expire while open (R51),
junk is aggregated per reporting merchant and cause with bounds on what a listing reads, and junk cannot
crowd out the channel's own rejected callback (R40); forgeries are filed under the merchant that signed them."""

from __future__ import annotations

import json
import time

import pytest
from tally import bootstrap
from tally.service import ingest, refund_inbox
from tally.service.refund_inbox import FORGERIES_KEPT
from tally.store.tables import CLOSED_KEPT_DAYS

ITEM_KINDS = ("quarantined", "rejected", "no_transaction_id", "suspected_forgery")


def kept(h, kind=None):
    rows = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r.get("manual_kind") or r.get("resolution")]
    return [r for r in rows if kind is None or r.get("kind") == kind]


def stale_key(h, sim):
    """A merchant whose stored WeChat Pay public key is not the channel's: the channel's callbacks are
    rejected (bad_signature) until the key is fixed (`h.add_merchant()` again)."""
    m = sim.register_test_merchant()
    return h.add_merchant(public_key=m["merchant_public_key_pem"])


def partner_report(h, sim, reporter, named, otn):
    """A payment report `reporter` signs with its own keys in the partner form, naming `named` as sub-merchant."""
    resource = sim.transaction_resource(reporter, otn, 100)
    resource["sp_mchid"] = resource.pop("mchid")
    resource["sub_mchid"] = named
    return sim.build_notification(reporter, resource)


def test_R51_open_items_carry_no_ttl_and_closing_one_starts_its_lifetime(h, sim):
    """R51 (finding 9): quarantined, rejected, no-transaction-id and suspected-forgery rows have no
    `expires_at` while they wait; resolving one gives it CLOSED_KEPT_DAYS from the moment it was closed."""
    m = h.add_merchant()
    order = json.loads(h.create_order(m["mchid"])["body"])
    otn = order["out_trade_no"]
    headers, body, _ = h.notification(m["mchid"], otn, 100, apiv3_key="X" * 32)  # quarantined
    h.notify(m["mchid"], headers, body)
    resource = sim.transaction_resource(m["mchid"], otn, 100)
    resource["transaction_id"] = ""  # paid, without the id that keys it
    headers, body = sim.build_notification(m["mchid"], resource)
    h.notify(m["mchid"], headers, body)
    headers, body = partner_report(h, sim, m["mchid"], "1900000555", "FORGED-1")  # a forgery
    h.notify(m["mchid"], headers, body)
    headers, body, _ = h.notification(m["mchid"], otn, 100)
    h.notify(m["mchid"], headers, body[:-1] + b',"x":1}')  # signature fails: rejected
    rows = kept(h)
    assert {r["kind"] for r in rows} >= {"quarantined", "no_transaction_id", "rejected"}
    assert all("expires_at" not in r for r in rows), [r["pk"] for r in rows if "expires_at" in r]
    queue = bootstrap.manual_queue()
    first = next(r for r in rows if r["kind"] == "quarantined")
    before = time.time()
    queue.resolve("event:" + first["pk"], by="alice", action="junk", why="looked at it")
    closed = next(r for r in kept(h) if r["pk"] == first["pk"])
    assert "manual_kind" not in closed
    assert (
        before + CLOSED_KEPT_DAYS * 86400 - 5
        <= closed["expires_at"]
        <= time.time() + CLOSED_KEPT_DAYS * 86400
    )


def test_R40_junk_cannot_crowd_out_the_channels_own_rejected_callback(h, sim):
    """Finding 8: 40 junk bodies with the merchant's fresh headers came first and took the hour's 20 kept
    slots; the channel's genuine callback (rejected for a stale key) was only counted and could not be
    booked after the key fix. Bodies that look like the channel's envelope have slots of their own."""
    m = stale_key(h, sim)
    h.create_order(m["mchid"], "GENUINE-0001")
    headers, body, _ = h.notification(m["mchid"], "GENUINE-0001", 100)
    for i in range(ingest.REJECTED_KEPT + 20):
        assert h.notify(m["mchid"], headers, json.dumps({"junk": i}).encode())["statusCode"] == 401
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 401  # the channel's own, rejected
    rows = kept(h, "rejected")
    assert len(rows) == ingest.REJECTED_KEPT + 1
    (genuine,) = [r for r in rows if r.get("body") == body.decode()]
    h.add_merchant()  # the key fixed
    assert (
        bootstrap.manual_queue().replay("event:" + genuine["pk"], by="bob", why="key")["outcome"]
        == "accepted"
    )
    h.drain()
    assert h.order(m["mchid"], "GENUINE-0001")["status"] == "PAID"


def _items_read(client):
    """Counts the items every DynamoDB read of `client` returns (Query, Scan, GetItem, BatchGetItem)."""
    seen = {"items": 0, "calls": 0}

    def after(http_response, parsed, model, **kw):
        if model.name in ("Query", "Scan", "GetItem", "BatchGetItem"):
            seen["calls"] += 1
            seen["items"] += len(parsed.get("Items") or [])
            seen["items"] += 1 if parsed.get("Item") else 0
            seen["items"] += sum(len(v) for v in (parsed.get("Responses") or {}).values())

    client.meta.events.register("after-call.dynamodb.*", after)
    return seen, lambda: client.meta.events.unregister("after-call.dynamodb.*", after)


def test_R40_a_listing_reads_the_same_rows_after_one_hour_or_thirty_of_junk(h):
    """Finding 7: kept rejected rows were bounded per merchant, cause and *hour*, and every listing read them
    all plus one counter per hour: it grew by the hour. Now the bound is per merchant and cause: after 30
    hours of 25 junk requests, `list()` reads no more DynamoDB items than after the first hour."""
    m = h.add_merchant()
    start = time.time()
    headers, _, _ = h.notification(m["mchid"], "JUNK-0001", 100, timestamp=int(start) - 86400)  # stale

    def an_hour_of_junk(hour):
        bootstrap.set_clock(lambda: start + hour * 3600)
        for i in range(25):
            h.notify(m["mchid"], headers, json.dumps({"hour": hour, "junk": i}).encode())

    def listing_cost():
        queue = bootstrap.work_queue()
        seen, stop = _items_read(bootstrap.tables().ddb)
        try:
            items = queue.list()
        finally:
            stop()
        return seen["items"], items

    try:
        an_hour_of_junk(0)
        after_one, items = listing_cost()
        for hour in range(1, 30):
            an_hour_of_junk(hour)
        after_thirty, items_later = listing_cost()
    finally:
        bootstrap.set_clock(time.time)
    assert after_thirty == after_one, (after_one, after_thirty)
    (item,) = [i for i in items_later if i["kind"] == "rejected"]
    assert item["count"] == 30 * 25 and item["kept"] <= ingest.REJECTED_KEPT + ingest.REJECTED_KEPT_GENUINE


@pytest.mark.parametrize("named", ["another configured merchant", "an unconfigured id"])
def test_R39_R40_forgeries_are_filed_under_the_reporting_merchant_and_bounded(h, sim, named):
    """Finding 6: 60 signed partner-form reports naming another merchant made 60 suspected-forgery items
    under *that* merchant (or under an unconfigured id). Now they are filed under the merchant whose keys
    signed them, at most FORGERIES_KEPT open rows per cause, every one counted, and the queue shows them as one
    case with the count and the claimed ids (issue #38 items 6-8)."""
    reporter = h.add_merchant()
    victim = h.add_merchant(mchid="1900000777")["mchid"] if named.startswith("another") else "1900000999"
    for i in range(60):
        headers, body = partner_report(h, sim, reporter["mchid"], victim, f"FORGED-{i:04d}")
        assert h.notify(reporter["mchid"], headers, body)["statusCode"] == 204
    rows = kept(h, "suspected_forgery")
    assert len(rows) == FORGERIES_KEPT
    assert {r["mchid"] for r in rows} == {reporter["mchid"]} and {r["claimed_mchid"] for r in rows} == {
        victim
    }
    (counter,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r.get("kind") == "forgery_count"]
    assert counter["rejections"] == 60 and counter["mchid"] == reporter["mchid"]
    queue = bootstrap.work_queue()
    assert [i for i in queue.list() if i.get("merchant") == victim] == []
    # one case for the reporting merchant and cause: the count of every report and the ids they claimed
    (case,) = queue.list("kind=suspected-forgery")
    assert (case["count"], case["kept"], case["ids"]) == (60, FORGERIES_KEPT, [victim])
    assert case["merchant"] == reporter["mchid"] and case["id"].startswith("forgery-")
    assert "60 report(s)" in case["reason"] and victim in case["reason"]
    # closing the case closes every kept row, and the slots come back for the next wave
    queue.act(case["id"], "resolve", by="ops", reason="reported to security", code="reported")
    assert queue.list("kind=suspected-forgery") == []
    assert all(
        "manual_kind" not in r and r["resolution"]["by"] == "ops" for r in kept(h, "suspected_forgery")
    )
    (counter,) = [r for r in h.scan("NOTIFY_EVENT_TABLE") if r.get("kind") == "forgery_count"]
    assert counter["kept_other"] == 0


def test_R39_a_reported_merchant_id_that_is_no_merchant_id_is_quarantined_at_the_edge(h, sim):
    """Finding 4: a partner-form report naming sub-merchant `1,merchant=1900000109` was filed under that id,
    and a replay filter for it then selected the demo merchant's items. A merchant id is 1-32 digits: anything
    else is quarantined under the merchant that signed it (R5), nothing is filed under the made-up id."""
    reporter = h.add_merchant(mchid="1900000321")
    headers, body = partner_report(h, sim, reporter["mchid"], "1,merchant=1900000109", "EDGE-0001")
    assert h.notify(reporter["mchid"], headers, body)["statusCode"] == 204
    rows = kept(h)
    assert [(r["kind"], r["mchid"]) for r in rows] == [("quarantined", reporter["mchid"])]
    assert "not a merchant id" in rows[0]["reason"]
    assert all("1,merchant" not in str(r.get("mchid")) for r in h.scan("NOTIFY_EVENT_TABLE"))


def test_a_filter_value_cannot_rewrite_the_filter():
    """Finding 4: the console joined filter values with "," unescaped and the replay split them again, so a
    merchant value `1,merchant=1900000109` became a filter for 1900000109. Values are escaped, and a filter
    that names a field twice is refused."""
    from tally.console.actions import filter_text
    from tally.service.queue import QueueError, parse_filter

    text = filter_text({"kind": "unbooked-payment", "merchant": "1,merchant=1900000109"})
    assert parse_filter(text) == {"kind": "unbooked-payment", "merchant": "1,merchant=1900000109"}
    with pytest.raises(QueueError, match="twice"):
        parse_filter("merchant=1,merchant=1900000109")


def test_R40_forgeries_cost_a_listing_the_same_reads_at_thirty_or_ninety(h, sim):
    """Issue #38 items 6-8: a listing reads a forgery group's kept rows (at most FORGERIES_KEPT) and its one
    counter row, however many forged reports arrived and however many merchant ids they claimed."""
    reporter = h.add_merchant()

    def forge(start, n):
        for i in range(start, start + n):
            headers, body = partner_report(h, sim, reporter["mchid"], f"19000{i:05d}", f"FORGED-{i:04d}")
            assert h.notify(reporter["mchid"], headers, body)["statusCode"] == 204

    def listing_cost():
        seen, stop = _items_read(bootstrap.tables().ddb)
        try:
            items = bootstrap.work_queue().list("kind=suspected-forgery")
        finally:
            stop()
        return seen["items"], items

    forge(0, 30)
    after_thirty, _ = listing_cost()
    forge(30, 60)
    after_ninety, items = listing_cost()
    assert after_ninety == after_thirty, (after_thirty, after_ninety)
    (case,) = items
    assert case["count"] == 90 and len(case["ids"]) == refund_inbox.FORGERY_IDS_NAMED
