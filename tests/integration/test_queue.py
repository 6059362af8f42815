"""The one work queue (R41): every kind of item is created by injecting its fault through the real handlers,
then taken from OPEN to RESOLVED through the CLI; `tally manual list`, `tally pending`, the morning number
the poller publishes (ManualOver24h) and the alarm's input agree at every step, by construction."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
import uuid

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.observability import metrics
from tally.service.queue import KINDS, QueueError, parse_filter, plain
from tally.store.codec import to_item
from tally.store.keys import PlatformCertStore
from tally.store.tables import EventStore, iso_now

from tally_local.simulator import _crypto as c
from tests.integration.queue_helpers import inject_refund_task
from tests.integration.recon_helpers import book_ghost
from tests.integration.refund_helpers import deliver, paid_order, refund

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"
LATER = 25 * 3600  # the checks look at the queue a day later, so every item is past its threshold


@pytest.fixture
def refunds_held(sim):
    previous = sim.set_refund_behaviour()
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    yield
    sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})
    sim._refund_plans.clear()
    sim.clear_faults()


def queue():
    return bootstrap.work_queue()


def flush(h):
    metrics.flush_metrics()
    h._collect_metrics()


def published_over(h) -> int:
    """What the poller publishes as ManualOver24h (the alarm's input), one run, a day from now."""
    flush(h)
    h.metric_log.clear()
    bootstrap.set_clock(lambda: time.time() + LATER)
    try:
        bootstrap.sweep_service().run()
        flush(h)
    finally:
        bootstrap.set_clock(time.time)
    return h.metric("ManualOver24h")


def doors(h, cli, still_open: set[str] | None = None) -> dict[str, set[str]]:
    """The ids each door shows, a day from now (so every open item is past its threshold). Given the ids that
    must still be open (the walk, after each step), the two doors a person uses are read; without, the
    alarm's number (the sweeper's ManualOver24h, one more queue listing and a sweep) is read too."""
    bootstrap.set_clock(lambda: time.time() + LATER)
    try:
        is_open = bool(still_open) if still_open is not None else bool(queue().list())
        expect = 3 if is_open else 0  # the exit code a script reads: 3 while anything is open
        listed = {i["id"] for i in cli("manual", "list", "--json", expect=expect)["items"]}
        report = cli("pending", "--json", expect=expect)
        pending = {r["key"] for r in report["rows"] if r["kind"] != "stuck-notification"}
        over = report["manual_over_24h"]
    finally:
        bootstrap.set_clock(time.time)
    assert over == len(pending) == len(listed)  # the morning number = the open items
    if still_open is None:
        assert over == published_over(h)  # = what the alarm watches
    return {"list": listed, "pending": pending}


# ---------------------------------------------------------------------------------------- the faults


def inject_unbooked_payment(h, m):
    order = json.loads(h.create_order(m["mchid"], amount_cent=506)["body"])
    headers, body, _ = h.notification(m["mchid"], order["out_trade_no"], 5)
    h.notify(m["mchid"], headers, body)
    h.drain()
    return order["out_trade_no"]


def new_merchant(h):
    """A merchant of its own: the simulator's test merchant id is shared by every h.add_merchant()."""
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def wrong_key_merchant(h, sim, **override):
    m = new_merchant(h)
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=m["mchid"],
        apiv3_key=override.get("apiv3_key", m["apiv3_key"]),
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url="http://127.0.0.1:9/n",
        public_key=override.get("public_key", sim.public_key_pem),
        public_key_id=sim.public_key_id,
    )
    return m


def inject_quarantined(h, sim):
    m = wrong_key_merchant(h, sim, apiv3_key="W" * 32)
    h.create_order(m["mchid"], "QUARANTINE-01")
    headers, body, _ = h.notification(m["mchid"], "QUARANTINE-01", 100)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    return m


def inject_rejected(h, sim, times=2):
    m = wrong_key_merchant(h, sim)
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=m["mchid"],
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url="http://127.0.0.1:9/n",
        public_key=m["merchant_public_key_pem"],  # a stale public key: every callback fails to verify
        public_key_id=sim.public_key_id,
    )
    for i in range(times):
        h.create_order(m["mchid"], f"REJECTED-{i:04d}")
        headers, body, _ = h.notification(m["mchid"], f"REJECTED-{i:04d}", 100)
        assert h.notify(m["mchid"], headers, body)["statusCode"] == 401
    return m


def inject_no_transaction_id(h, m):
    order = json.loads(h.create_order(m["mchid"], amount_cent=300)["body"])
    resource = h.sim.transaction_resource(m["mchid"], order["out_trade_no"], 300)
    resource.pop("transaction_id")
    headers, body = h.sim.build_notification(m["mchid"], resource)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    return order["out_trade_no"]


def inject_settlement_unknown(h, m):
    """R43: coupon figures that do not add up: booked UNKNOWN, one item (store/payments.py)."""
    order = json.loads(h.create_order(m["mchid"], amount_cent=500)["body"])
    resource = h.sim.transaction_resource(m["mchid"], order["out_trade_no"], 500, payer_total=400)
    resource["promotion_detail"][0]["amount"] = resource["promotion_detail"][0]["merchant_contribute"] = 10
    headers, body = h.sim.build_notification(m["mchid"], resource)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    return order["out_trade_no"]


def inject_forgery(m):
    """Kind `suspected_forgery` is written by the tenant-isolation code (R39); any manual_kind is shown."""
    EventStore(bootstrap.tables()).put(
        f"forgery#{uuid.uuid4().hex[:8]}",
        "suspected_forgery",
        time.time(),
        manual_kind="suspected_forgery",
        channel="wechatpay",
        mchid=m["mchid"],
        refund_no="FORGED00001",
        amount_cent=990,
        reason="refund report for merchant 1900000999 arrived on this merchant's route",
    )


def inject_refund_report(h, m, sim):
    resource = sim.refund_resource(
        m["mchid"], "OUTSIDE-001", "4200000000000000000000000009", "BYHAND0009", 5, 10
    )
    headers, body = sim.build_notification(
        m["mchid"], resource, event_type="REFUND.SUCCESS", associated_data="refund"
    )
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    for _ in range(6):
        h.drain(max_rounds=1)


def inject_abnormal_refund(h, m, sim):
    otn, _ = paid_order(h, m["mchid"], 100)
    no = refund(h, m["mchid"], otn, 40)[1]["refund_no"]
    sim.settle_refund(no, "abnormal")
    deliver(h, m["mchid"], no)
    return otn, no


def pay_on(h, mchid, cents, success_time):
    """A payment the channel's bill for that day lists (booked through notify + worker)."""
    otn = f"R{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=cents, prepay=True)["statusCode"] == 201
    h.sim.pay(mchid, otn, drop=True, success_time=success_time)
    headers, body = h.sim.build_notification(mchid, h.sim.get_order(mchid, otn)["transaction"])
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []


def inject_recon_diff(h, m):
    pay_on(h, m["mchid"], 300, f"{D}T09:00:00+08:00")
    book_ghost(h, m["mchid"], f"wechatpay#42000000000000000{random.randrange(10**10, 10**11)}")
    assert bootstrap.recon_service().run("wechatpay", m["mchid"], D)["status"] == "DIFFS"


def inject_recon_blocked(h, m):
    pay_on(h, m["mchid"], 100, "2024-05-02T10:00:00+08:00")
    pay_on(h, m["mchid"], 101, "2024-05-02T11:00:00+08:00")
    h.sim.bills.fault("wrong_summary")
    assert bootstrap.recon_service().run("wechatpay", m["mchid"], "2024-05-02")["status"] == "BLOCKED"
    h.sim.clear_faults()


def inject_order_with_person(h, m):
    order = json.loads(h.create_order(m["mchid"], amount_cent=100, prepay=False)["body"])
    past = iso_now(time.time() - 1)
    h.ddb.update_item(
        TableName=h.env["ORDERS_TABLE"],
        Key=to_item({"pk": f"{m['mchid']}#{order['out_trade_no']}"}),
        UpdateExpression="SET poll_due = :p, expire_at = :p",
        ExpressionAttributeValues={":p": {"S": past}},
    )
    bootstrap.poll_service().run()  # unknown at the channel and expired → a person
    return order["out_trade_no"]


def inject_expiring_certificate(h):
    """A cert-mode merchant whose only platform certificate has 3 days left: the hourly keys run files it."""
    m = h.add_merchant(verify_mode="certificate", mchid=str(random.randrange(10**9, 10**10)))
    soon = c.make_certificate(
        c.new_rsa_key(),
        "expiring",
        not_after=dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=3),
    )
    PlatformCertStore(bootstrap.tables()).put(
        m["mchid"],
        {
            c.serial_hex(soon): {
                "pem": c.certificate_pem(soon),
                "not_after": int(soon.not_valid_after_utc.timestamp()),
            }
        },
        refreshed_at=int(time.time()),
    )
    bootstrap.reset()  # a cold keys container
    h.invoke(
        "KeysFunction",
        {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}},
    )
    h.invoke(
        "KeysFunction",
        {"version": "0", "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}},
    )
    return m


# ---------------------------------------------------------------------------------------- the walk


def test_r41_every_kind_from_open_to_resolved_through_the_cli_and_every_door_agrees(
    h, sim, cli, refunds_held
):
    m, recon_m, blocked_m = new_merchant(h), new_merchant(h), new_merchant(h)
    assert doors(h, cli) == {"list": set(), "pending": set()}
    assert cli("pending") and cli("manual", "list").startswith("the queue is empty")

    otn_mismatch = inject_unbooked_payment(h, m)
    inject_quarantined(h, sim)
    rejected_m = inject_rejected(h, sim, times=2)
    otn_no_txn = inject_no_transaction_id(h, m)
    otn_settlement = inject_settlement_unknown(h, m)
    inject_forgery(m)
    inject_refund_report(h, m, sim)
    refund_otn, refund_no = inject_abnormal_refund(h, m, sim)
    inject_refund_task(h, m, sim)
    inject_recon_diff(h, recon_m)
    inject_recon_blocked(h, blocked_m)
    otn_order = inject_order_with_person(h, m)
    cert_m = inject_expiring_certificate(h)  # run twice: still one item

    listed = queue().list()
    kinds = {k for i in listed for k in i.get("kinds") or [i["kind"]]}
    by_kind = {kind: [i for i in listed if kind in (i.get("kinds") or [i["kind"]])] for kind in kinds}
    # walked elsewhere: volume-drop and bill-upload (test_recon.py), bill-layout (test_recon_layout.py),
    # webhook-failing and event-generation-failed (test_webhooks.py), alert-delivery (test_incidents.py),
    # heartbeat-echo (test_heartbeat_echo.py), audit-mismatch (test_audit.py)
    elsewhere = {
        "heartbeat-echo",
        "audit-mismatch",
        "volume-drop",
        "bill-upload",
        "bill-layout",
        "webhook-failing",
        "event-generation-failed",
        "alert-delivery",
    }
    assert set(by_kind) == set(KINDS) - elsewhere, set(KINDS) ^ set(by_kind)
    items = {kind: group[0] for kind, group in by_kind.items()}
    # R48: the second payment behind the refund task is an unbooked payment too (R17), and the two are one
    # case: one item with both parts, so the listing has one item per kind
    assert len(by_kind["unbooked-payment"]) == 2 and len(listed) == len(by_kind)
    task_case = items["refund-task"]
    assert task_case["kind"] == "unbooked-payment" and task_case["kinds"] == [
        "refund-task",
        "unbooked-payment",
    ]
    assert task_case["codes"]["close-task"] == ["refunded-at-channel", "booked-after-all"]
    # what a person reads: plain words, yuan, one readable id per item
    pay = next(i for i in by_kind["unbooked-payment"] if i["order"] == otn_mismatch)
    assert pay["id"].startswith("pay-wechatpay-") and pay["order"] == otn_mismatch and pay["amount"] == "0.05"
    # the reason says yuan at the source now (domain/notifications.py); plain() still converts rows stored earlier
    assert "0.05 yuan" in pay["reason"] and "5.06 yuan" in pay["reason"] and "(cents)" not in pay["reason"]
    assert items["rejected"]["count"] == 2 and items["rejected"]["merchant"] == rejected_m["mchid"]
    assert (
        items["no-transaction-id"]["order"] == otn_no_txn and items["no-transaction-id"]["amount"] == "3.00"
    )
    assert (
        items["suspected-forgery"]["amount"] == "9.90"
        and items["suspected-forgery"]["order"] == "FORGED00001"
    )
    report = items["refund-report"]
    assert report["id"].startswith("report-wechatpay-") and report["id"].endswith("BYHAND0009-SUCCESS")
    assert "refund BYHAND0009 is SUCCESS" in report["reason"]
    # the id names the merchant too: refund numbers are per merchant (R39)
    assert items["refund"]["id"] == f"refund-{m['mchid']}#{refund_no}" and items["refund"]["amount"] == "0.40"
    assert items["refund-task"]["amount"] == "1.00" and items["order"]["order"] == otn_order
    unknown = items["settlement-unknown"]
    assert unknown["order"] == otn_settlement and unknown["amount"] == "4.00"
    assert "settlement amount unknown" in unknown["reason"]
    cert = items["certificate"]
    assert (
        cert["overdue"] and cert["merchant"] == cert_m["mchid"] and "expires within 7 days" in cert["reason"]
    )

    flush(h)
    assert h.metric("NotifyNoTransactionId") == 1 and h.metric("RefundReportManual") == 1  # both alarmed
    seen = doors(h, cli)
    assert seen["list"] == seen["pending"] == {i["id"] for i in listed}

    # every kind through the CLI, the refund with its outcome from the merchant platform (books once)
    actions = {
        "unbooked-payment": ["resolve", "--code", "refunded-by-hand", "--why", "wrong amount, refunded"],
        "quarantined": ["ignore", "--why", "test callback from a sandbox"],
        "rejected": ["resolve", "--code", "key-fixed", "--why", "stale public key replaced"],
        "no-transaction-id": ["resolve", "--code", "booked-by-query", "--why", "found on the platform"],
        "suspected-forgery": ["resolve", "--code", "reported", "--why", "sent to security"],
        "refund-report": ["resolve", "--code", "refunded-by-hand", "--why", "support refunded in portal"],
        "refund": ["refund-outcome", "--outcome", "SUCCESS", "--why", "platform shows it refunded"],
        "refund-task": ["close-task", "--code", "refunded-at-channel", "--why", "refunded in portal"],
        "recon-diff": ["resolve", "--reverse", "--why", "test booking"],
        "recon-blocked": ["ignore", "--why", "sandbox merchant"],
        "order": ["resolve", "--code", "closed-by-hand", "--why", "customer gave up"],
        "certificate": ["resolve", "--code", "added", "--why", "successor uploaded"],
        "settlement-unknown": [
            "resolve",
            "--code",
            "queried",
            "--why",
            "order query: CASH coupon, settled 5.00",
        ],
        # the rejected/quarantined merchants' wrong keys fail the hourly live check too (R47)
        "merchant-not-ready": ["resolve", "--code", "key-fixed", "--why", "credentials fixed"],
    }
    remaining = set(seen["list"])
    for kind, (verb, *rest) in actions.items():
        for item in by_kind[kind]:
            if item["id"] not in remaining or (kind == "unbooked-payment" and item is task_case):
                continue  # a case is closed once, through the door of its refund task (R48)
            done = cli("manual", verb, item["id"], "--by", "alice", *rest, "--json")
            assert done["state"] in ("RESOLVED", "IGNORED") and done["id"] == item["id"], done
            remaining.discard(item["id"])
            assert doors(h, cli, remaining) == {"list": remaining, "pending": remaining}, kind
    assert remaining == set() and doors(h, cli) == {"list": set(), "pending": set()}  # the alarm's too
    cli("pending")  # exit 0: nothing stuck, nothing overdue

    # the refund's outcome went through the refund state machine: SUCCESS and one ledger entry
    view = bootstrap.refund_service().show(refund_no)
    assert view["status"] == "SUCCESS"
    refunds = [e for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND" and e["refund_no"] == refund_no]
    assert len(refunds) == 1 and refunds[0]["amount_cent"] == 40 and refunds[0]["source"] == "person:alice"
    # every row keeps who, when, what, why
    shown = cli("manual", "show", pay["id"], "--raw", "--json")
    assert shown["state"] == "RESOLVED" and shown["history"][-1]["by"] == "alice"
    assert shown["history"][-1]["code"] == "refunded-by-hand" and shown["raw"][0]["handled"] == 2


def test_r41_ack_assigns_an_owner_and_keeps_the_item_open_with_its_history(h, cli):
    m = h.add_merchant()
    inject_unbooked_payment(h, m)
    (item,) = queue().list()
    done = cli("manual", "ack", item["id"], "--by", "alice", "--owner", "bob", "--json")
    assert done["state"] == "ACKNOWLEDGED" and done["item"]["owner"] == "bob"
    (again,) = queue().list()  # still open: acknowledged is not resolved, the morning number still counts it
    assert again["state"] == "ACKNOWLEDGED" and again["history"][-1]["action"] == "ack"
    assert queue().list("state=acknowledged,owner=bob")[0]["id"] == item["id"]
    assert published_over(h) == 1
    with pytest.raises(QueueError, match="say why"):
        queue().act(item["id"], "resolve", by="bob", reason="")
    queue().act(item["id"], "resolve", by="bob", reason="refunded", code="refunded-by-hand")
    with pytest.raises(QueueError, match="not open"):
        queue().act(item["id"], "resolve", by="bob", reason="twice")
    refused = cli("manual", "resolve", item["id"], "--by", "bob", "--why", "twice", "--json", expect=1)
    assert "not open" in refused["error"]  # --json: still exactly one document
    assert published_over(h) == 0


def test_r41_bulk_dry_run_prints_counts_and_yuan_and_changes_nothing(h, cli):
    m = h.add_merchant()
    for _ in range(3):
        inject_unbooked_payment(h, m)
    before = queue().list()
    text = cli(
        "manual", "ignore", "--filter", f"kind=unbooked,merchant={m['mchid']}", "--why", "x", "--dry-run"
    )
    assert "would ignore 3 of 3 item(s), ¥0.15 in all (dry run: nothing changed)" in text
    assert [i["id"] for i in queue().list()] == [i["id"] for i in before]
    report = cli(
        "manual", "ignore", "--filter", "kind=unbooked,age<1h", "--why", "load test", "--by", "ops", "--json"
    )
    assert report["changed"] == 3 and report["amount"] == "0.15" and queue().list() == []


def test_r41_replay_after_the_order_exists_books_through_the_product_path(h, cli):
    m = h.add_merchant()
    headers, body, _ = h.notification(m["mchid"], "CREATED-LATER-9", 100)
    h.notify(m["mchid"], headers, body)
    h.drain()
    (item,) = queue().list()
    assert "not found" in item["reason"]
    h.create_order(m["mchid"], "CREATED-LATER-9")
    cli("manual", "replay", item["id"], "--by", "alice", "--why", "order created by support")
    h.drain()
    assert h.order(m["mchid"], "CREATED-LATER-9")["status"] == "PAID" and queue().list() == []


def test_r41_old_ids_and_verbs_still_work(h, cli):
    m = h.add_merchant()
    inject_unbooked_payment(h, m)
    (item,) = queue().list()
    legacy = "raw:" + item["source_key"]
    assert cli("manual", "show", legacy, "--json")["id"] == item["id"]
    cli("manual", "resolve", legacy, "--by", "me", "--action", "refunded-by-hand", "--why", "old habit")
    assert queue().list() == []


def test_r41_a_refund_cannot_be_closed_without_its_outcome_and_fail_releases_the_amount(h, sim, refunds_held):
    m = h.add_merchant()
    otn, no = inject_abnormal_refund(h, m, sim)
    (item,) = queue().list("kind=refund")
    with pytest.raises(QueueError, match="--outcome SUCCESS"):
        queue().act(item["id"], "resolve", by="alice", reason="looks fine")
    queue().act(item["id"], "refund-outcome", by="alice", reason="platform: refund closed", outcome="FAIL")
    assert bootstrap.refund_service().show(no)["status"] == "FAIL"
    assert bootstrap.order_service().show(m["mchid"], otn)["refundable_cent"] == 100  # released, once
    assert queue().list() == []


def test_r41_r33_a_volume_drop_is_confirmed_from_the_queue_and_the_day_is_re_run(h, cli):
    """The volume-drop kind: the day is blocked (R33); `replay` confirms it (ReconService.confirm re-runs the
    day from the kept bill) and the item leaves the queue; the thin bill's differences become items."""
    m = new_merchant(h)
    svc = bootstrap.recon_service()
    svc.min_previous_rows, svc.min_ratio = 2, 0.5
    for i in range(4):
        pay_on(h, m["mchid"], 100, f"2024-04-30T1{i}:00:00+08:00")
        pay_on(h, m["mchid"], 100, f"{D}T1{i}:00:00+08:00")
    assert svc.run("wechatpay", m["mchid"], "2024-04-30")["status"] == "MATCHED"
    h.sim.bills.fault("volume_drop")
    try:
        assert svc.run("wechatpay", m["mchid"], D)["block_code"] == "VOLUME_DROP"
    finally:
        h.sim.clear_faults()
    (item,) = queue().list("kind=volume-drop")
    assert item["id"] == f"recon-wechatpay#{m['mchid']}#{D}" and "smaller" in item["what"]
    cli("manual", "ack", item["id"], "--by", "carol")
    done = cli("manual", "replay", item["id"], "--by", "carol", "--why", "promo day ended", "--json")
    assert done["outcome"] == "re-run: DIFFS" and done["state"] == "RESOLVED"
    assert queue().list("kind=volume-drop") == [] and len(queue().list("kind=recon-diff")) == 3
    # a later good run of a blocked day clears it by itself; a new block reopens it
    h.sim.bills.fault("wrong_summary")
    try:
        assert svc.run("wechatpay", m["mchid"], "2024-04-30")["status"] == "BLOCKED"
    finally:
        h.sim.clear_faults()
    assert [i["kind"] for i in queue().list("kind=recon-blocked")] == ["recon-blocked"]
    assert svc.run("wechatpay", m["mchid"], "2024-04-30")["status"] == "MATCHED"
    assert queue().list("kind=recon-blocked") == []


def test_r41_rejected_notifications_are_one_item_per_merchant_and_cause_acked_and_replayed_together(
    h, sim, cli
):
    m = inject_rejected(h, sim, times=3)
    (item,) = queue().list("kind=rejected")
    assert item["count"] == 3 and item["id"].startswith(f"rejected-wechatpay-{m['mchid']}-")  # + its cause
    cli("manual", "ack", item["id"], "--by", "dave")
    (item,) = queue().list("kind=rejected")
    assert item["state"] == "ACKNOWLEDGED" and item["owner"] == "dave"
    h.add_merchant(mchid=m["mchid"])  # the right public key
    done = cli("manual", "replay", item["id"], "--by", "dave", "--why", "public key fixed", "--json")
    assert done["outcome"] == "3 accepted" and queue().list() == []
    h.drain()
    assert all(h.order(m["mchid"], f"REJECTED-{i:04d}")["status"] == "PAID" for i in range(3))


def test_r41_closed_through_another_door_is_closed_here_too(h, sim, cli, refunds_held):
    """The refund's own later notification, and `tally recon resolve`, close their items in the queue too."""
    m = new_merchant(h)
    otn, no = inject_abnormal_refund(h, m, sim)
    assert [i["id"] for i in queue().list("kind=refund")] == [f"refund-{m['mchid']}#{no}"]
    sim.settle_refund(no, "success")  # fixed at the channel; its notification arrives
    deliver(h, m["mchid"], no)
    assert queue().list("kind=refund") == [] and published_over(h) == 0
    recon_m = new_merchant(h)
    inject_recon_diff(h, recon_m)
    (diff,) = queue().list("kind=recon-diff")
    pk, sk = diff["source_key"]
    cli(
        "recon",
        "resolve",
        "--channel",
        "wechatpay",
        "--mchid",
        recon_m["mchid"],
        "--date",
        D,
        sk,
        "--by",
        "erin",
        "--note",
        "test booking",
        "--reverse",
    )
    assert queue().list() == [] and published_over(h) == 0


def test_plain_words_and_filters():
    assert plain("amount 5 != order's 506 (cents)") == "amount ¥0.05, expected order's ¥5.06"
    assert (
        plain("paid 5 outside 0..506 (cents); unknown state 'X'")
        == "paid ¥0.05 outside ¥0.00..¥5.06; unknown state 'X'"
    )
    assert plain("AMOUNT_DIFFERS on 2024-05-01 10:00:00: channel 503 != ledger 403 (cents)") == (
        "AMOUNT_DIFFERS on 2024-05-01 10:00:00: channel ¥5.03, expected ledger ¥4.03"
    )
    assert parse_filter("kind=refund, merchant=19, age>2h") == {
        "kind": "refund",
        "merchant": "19",
        "age_gt": 7200,
    }
    with pytest.raises(QueueError):
        parse_filter("colour=red")


def test_r40_r41_the_rejected_group_shows_every_refusal_not_only_the_kept_rows(h, sim, cli):
    """Past the kept rows the rest are only counted on the group's aggregate row: the item (CLI and console
    read the same WorkQueue.list) says how many were refused, and how many are kept to replay. These are the
    channel's own callbacks (its envelope, fresh headers): they have REJECTED_KEPT_GENUINE slots, junk 20."""
    m = inject_rejected(h, sim, times=23)
    (item,) = queue().list("kind=rejected")
    assert (item["count"], item["kept"]) == (23, 23)
    assert item["reason"].startswith("23 notification(s) refused (23 kept): ")
    assert "×23" in cli("manual", "list", f"--filter=merchant={m['mchid']}", expect=0)
