"""The pull path on moto + the signed simulator: poller, expiry, return page, sweeper, morning number
(R21–R25, R37). Time is moved by back-dating the rows (`poll_due`, `expire_at`, `pending_at`), so
every request to the simulator is signed with the real clock."""

from __future__ import annotations

import json
import re
import time

import pytest
from tally import bootstrap
from tally.domain.poll import Answer
from tally.service.ingest import raw_row
from tally.service.pull import QueryResult
from tally.store.tables import iso_now

from tests.integration.pull_helpers import due_now, expire_now, ledger, run_poller, set_fields, stored


@pytest.fixture
def m(h):
    return h.add_merchant()


@pytest.fixture(autouse=True)
def _no_faults_left(sim):
    yield
    sim.clear_faults()


def new_order(h, m, amount=100, prepay=True, **extra):
    response = h.create_order(m["mchid"], amount_cent=amount, prepay=prepay, **extra)
    assert response["statusCode"] == 201, response
    return json.loads(response["body"])


# ------------------------------------------------------------------------------------ lost callbacks


def test_R21_R23_all_callbacks_lost_poller_alone_books_once_then_late_callback_is_duplicate(h, m, sim):
    order = new_order(h, m, amount=100)
    tid = sim.pay(m["mchid"], order["out_trade_no"], payer_total=90, drop=True)  # every callback lost
    run_poller(h)
    assert stored(h, order)["status"] == "WAIT_PAY"  # not due yet: the first query is 30 s after creation
    due_now(h, order)
    result = run_poller(h)
    assert result["outcomes"] == {"BOOKED": 1}
    view = h.order(m["mchid"], order["out_trade_no"])
    assert view["status"] == "PAID" and view["transaction_id"] == tid
    assert [(r["source"], r["handled"]) for r in view["raw"]] == [("query", 1)]
    assert [t["source"] for t in view["transitions"]] == ["query"]
    (entry,) = ledger(h)
    assert (
        entry["pk"] == f"wechatpay#{m['mchid']}#{tid}"
        and entry["amount_cent"] == 90
        and entry["source"] == "query"
    )  # R13
    assert "poll_pk" not in stored(h, order)  # out of the poll index: never asked again
    assert run_poller(h)["orders_read"] == 0

    # the channel's late callback: same key, already booked → success ACK, nothing booked twice (R9)
    resource = sim.get_order(m["mchid"], order["out_trade_no"])["transaction"]
    headers, body = sim.build_notification(m["mchid"], resource)
    assert h.notify(m["mchid"], headers, body)["statusCode"] in (200, 204)
    assert h.drain() == []
    assert len(ledger(h)) == 1
    assert h.metric("NotifyDuplicate") == 1


def test_R22_order_not_exist_for_a_while_is_not_closed_then_paid(h, m, sim):
    order = new_order(h, m)
    sim.pay(m["mchid"], order["out_trade_no"], drop=True)
    sim.hide_until(m["mchid"], order["out_trade_no"], float("inf"))  # the channel's replica lags
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"NOT_CREATED": 1}
    row = stored(h, order)
    assert row["status"] == "WAIT_PAY" and row["poll_last"] == "ORDER_NOT_EXIST"
    assert row["poll_pk"].startswith("poll#") and row["poll_due"] > iso_now(
        time.time() + 50
    )  # backoff: 1 min
    sim.hide_until(m["mchid"], order["out_trade_no"], 0)
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"BOOKED": 1}
    assert len(ledger(h)) == 1


def test_R21_waiting_order_backs_off_30s_1m_5m_15m_30m(h, m):
    order = new_order(h, m)  # prepaid at the simulator: NOTPAY
    created = stored(h, order)
    assert created["poll_pk"].startswith("poll#") and created["poll_count"] == 0
    gaps = []
    for _ in range(6):
        due_now(h, order)
        before = time.time()
        assert run_poller(h)["outcomes"] == {"WAITING": 1}
        gaps.append(
            round(
                (
                    time.mktime(time.strptime(stored(h, order)["poll_due"][:19], "%Y-%m-%dT%H:%M:%S"))
                    - time.mktime(time.gmtime(before))
                )
                / 30
            )
            * 30
        )
    assert gaps == [60, 300, 900, 1800, 1800, 1800]
    assert stored(h, order)["poll_count"] == 6


# ------------------------------------------------------------------------------------ races (R19, R23, R24)


def wrap_query(monkeypatch, between):
    """Run `between(result)` after the channel answered and before the poller acts on the answer."""
    registry = bootstrap.pull_channels()
    real = registry._entries["wechatpay"]

    def query(order, fast=False):
        result = real[0](order, fast)
        between(result)
        return result

    monkeypatch.setitem(registry._entries, "wechatpay", (query, real[1]))


def callback(h, m, sim, order):
    resource = sim.get_order(m["mchid"], order["out_trade_no"])["transaction"]
    headers, body = sim.build_notification(m["mchid"], resource)
    assert h.notify(m["mchid"], headers, body)["statusCode"] in (200, 204)


@pytest.mark.parametrize(
    "race",
    [
        "callback applied first",
        "callback stored first, worker later",
        "query answered, callback applied before the poller books",
        "poller first, callback later",
    ],
)
def test_R19_R23_query_racing_callback_books_exactly_once(h, m, sim, monkeypatch, race):
    order = new_order(h, m)
    tid = sim.pay(m["mchid"], order["out_trade_no"], drop=True)
    due_now(h, order)
    if race == "callback applied first":
        callback(h, m, sim, order)
        h.drain()
        assert run_poller(h)["orders_read"] == 0  # the transition took it out of the index
    elif race == "callback stored first, worker later":
        callback(h, m, sim, order)  # raw row at handled=0, message queued
        assert run_poller(h)["outcomes"] == {"BOOKED": 1}  # the poller applies the callback's own raw row
        assert h.drain() == []  # the worker then finds it handled
    elif race == "query answered, callback applied before the poller books":
        wrap_query(monkeypatch, lambda result: (callback(h, m, sim, order), h.drain()))
        assert run_poller(h)["outcomes"] == {"DUPLICATE": 1}
    else:
        assert run_poller(h)["outcomes"] == {"BOOKED": 1}
        callback(h, m, sim, order)
        assert h.drain() == []
    (entry,) = ledger(h)
    assert entry["pk"] == f"wechatpay#{m['mchid']}#{tid}"
    (raw,) = h.scan("NOTIFY_RAW_TABLE")
    assert raw["handled"] == 1
    assert len(h.order(m["mchid"], order["out_trade_no"])["transitions"]) == 1


@pytest.mark.parametrize("snapshot", ["NOTPAY", "CLOSED"])
def test_R24_older_unpaid_snapshot_never_moves_a_paid_order_back(h, m, sim, monkeypatch, snapshot):
    order = new_order(h, m)
    due_now(h, order)

    def pay_meanwhile(result):  # the channel answered "unpaid"; then the user pays and the callback books
        assert result.word == "NOTPAY"
        sim.pay(m["mchid"], order["out_trade_no"], drop=True)
        callback(h, m, sim, order)
        h.drain()

    if snapshot == "CLOSED":
        registry = bootstrap.pull_channels()
        real = registry._entries["wechatpay"]

        def closed_snapshot(o, fast=False):
            pay_meanwhile(real[0](o, fast))
            return QueryResult(Answer.CLOSED, "CLOSED")

        monkeypatch.setitem(registry._entries, "wechatpay", (closed_snapshot, real[1]))
    else:
        wrap_query(monkeypatch, pay_meanwhile)
    outcome = run_poller(h)["outcomes"]
    assert outcome == {"STALE": 1} if snapshot == "CLOSED" else {"WAITING": 1}
    row = stored(h, order)
    assert row["status"] == "PAID" and "poll_pk" not in row and "poll_due" not in row
    assert len(ledger(h)) == 1
    assert [t["to_status"] for t in h.order(m["mchid"], order["out_trade_no"])["transitions"]] == ["PAID"]


# ------------------------------------------------------------------------------------ expiry (R21)


def test_R21_expired_order_is_closed_at_the_channel_then_locally(h, m, sim):
    order = new_order(h, m)
    expire_now(h, order)
    assert run_poller(h)["outcomes"] == {"CLOSED": 1}
    assert sim.get_order(m["mchid"], order["out_trade_no"])["trade_state"] == "CLOSED"
    row = stored(h, order)
    assert row["status"] == "CLOSED" and "poll_pk" not in row
    (transition,) = h.order(m["mchid"], order["out_trade_no"])["transitions"]
    assert (transition["event"], transition["from_status"], transition["to_status"]) == (
        "CLOSE",
        "WAIT_PAY",
        "CLOSED",
    )
    assert ledger(h) == [] and h.metric("PollClosed") == 1


def test_R21_R23_paid_just_before_expiry_is_booked_not_closed(h, m, sim):
    order = new_order(h, m)
    sim.pay(m["mchid"], order["out_trade_no"], drop=True)
    expire_now(h, order)
    assert run_poller(h)["outcomes"] == {"BOOKED": 1}  # close answers ORDER_PAID; the query books it
    assert stored(h, order)["status"] == "PAID" and len(ledger(h)) == 1


def test_R21_close_refused_goes_to_a_person_with_a_metric(h, m, sim):
    order = new_order(h, m)
    expire_now(h, order)
    sim.inject_fault(
        "error", path_contains=f"{order['out_trade_no']}/close", status=403, code="NO_AUTH", message="无权限"
    )
    assert run_poller(h)["outcomes"] == {"PERSON": 1}
    row = stored(h, order)
    assert row["status"] == "WAIT_PAY" and row["poll_pk"].startswith("manual#")
    assert "NO_AUTH" in row["manual_reason"]
    assert h.metric("PollCloseFailed") == 1 and h.metric("PollManual") == 1
    assert run_poller(h)["orders_read"] == 0  # nothing is queried forever


def test_R21_R38_close_failing_transiently_retries_then_a_person(h, m, sim):
    order = new_order(h, m)
    sim.inject_fault(
        "error", count=100, path_contains=f"{order['out_trade_no']}/close", status=500, code="SYSTEM_ERROR"
    )
    outcomes = []
    for _ in range(5):
        expire_now(h, order)
        outcomes += list(run_poller(h)["outcomes"])
    assert outcomes == ["RETRY"] * 4 + ["PERSON"]
    assert stored(h, order)["poll_pk"].startswith("manual#") and h.metric("PollManual") == 1


def test_R22_expired_and_unknown_to_the_channel_goes_to_a_person_not_closed(h, m):
    order = new_order(h, m, prepay=False)  # the channel never heard of it
    expire_now(h, order)
    assert run_poller(h)["outcomes"] == {"PERSON": 1}
    row = stored(h, order)
    assert row["status"] == "WAIT_PAY" and "does not exist" in row["manual_reason"]


# ------------------------------------------------------------------------------------ answers → outcomes


def test_R22_unmapped_code_lands_with_a_person_with_a_metric(h, m, sim):
    order = new_order(h, m)
    due_now(h, order)
    sim.inject_fault("error", path_contains=order["out_trade_no"], status=403, code="BRAND_NEW_CODE")
    assert run_poller(h)["outcomes"] == {"PERSON": 1}
    assert h.metric("PollUnmapped") == 1 and h.metric("PollManual") == 1
    assert "BRAND_NEW_CODE" in stored(h, order)["manual_reason"]


@pytest.mark.parametrize(
    "fault, word", [("error", "SYSTEM_ERROR"), ("bad_signature", "RESPONSE_NOT_VERIFIED")]
)
def test_R22_R38_failed_queries_are_bounded(h, m, sim, fault, word):
    """Transient failures are asked again on the backoff, five in a row go to a person; a 2xx whose
    signature does not verify (possibly forged, §2.1) goes to a person at once."""
    order = new_order(h, m)
    sim.inject_fault(fault, count=100, path_contains=order["out_trade_no"], method="GET")
    outcomes = []
    for _ in range(5):
        due_now(h, order)
        outcomes += list(run_poller(h)["outcomes"])
        if outcomes[-1] == "PERSON":
            break
    assert outcomes == (["RETRY"] * 4 + ["PERSON"] if word == "SYSTEM_ERROR" else ["PERSON"])
    assert word in stored(h, order)["manual_reason"]


def test_R22_closed_at_the_channel_before_expiry_is_closed_locally(h, m, sim):
    order = new_order(h, m)
    sim.close_order(m["mchid"], order["out_trade_no"])  # e.g. closed on the merchant platform
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"CLOSED": 1}
    assert stored(h, order)["status"] == "CLOSED"


# ------------------------------------------------------------------------------------ the return page


def test_return_page_confirms_once_and_books_through_the_same_path(h, m, sim):
    order = new_order(h, m)
    tid = sim.pay(m["mchid"], order["out_trade_no"], drop=True)
    path = f"/orders/{m['mchid']}/{order['out_trade_no']}"
    params = {"mchid": m["mchid"], "out_trade_no": order["out_trade_no"]}
    fresh = json.loads(h.call("OrdersFunction", "GET", path, b"", {}, params)["body"])
    assert fresh["status"] == "WAIT_PAY"  # younger than a few seconds: no channel call
    queries = lambda: [r for r in sim.requests if order["out_trade_no"] in r["path"] and r["method"] == "GET"]  # noqa: E731
    assert queries() == []
    now = time.time() + 10
    bootstrap.set_clock(lambda: now)
    set_fields(h, m["mchid"], order["out_trade_no"], last_query_at=iso_now(now - 1))  # asked 1 s ago
    assert json.loads(h.call("OrdersFunction", "GET", path, b"", {}, params)["body"])["status"] == "WAIT_PAY"
    assert queries() == []  # rate-limited per order
    bootstrap.set_clock(lambda: now + 10)
    view = json.loads(h.call("OrdersFunction", "GET", path, b"", {}, params)["body"])
    assert view["status"] == "PAID" and view["transaction_id"] == tid and len(queries()) == 1
    assert "raw" not in view  # the merchant's answer shows no raw rows; the operator's view does
    assert [r["source"] for r in h.order(m["mchid"], order["out_trade_no"])["raw"]] == ["query"]
    assert len(ledger(h)) == 1
    assert h.metric("ReturnPageQueried") == 1


# ------------------------------------------------------------------------------------ the sweeper (R25, R37)


def stuck_raw_row(h, m, sim, minutes_old, out_trade_no=None):
    out_trade_no = out_trade_no or new_order(h, m, prepay=False)["out_trade_no"]
    resource = sim.transaction_resource(m["mchid"], out_trade_no, 100)
    from tally.channels.wechatpay_v3 import wire as wx

    row = raw_row(wx.to_payment_notice(resource), time.time() - minutes_old * 60, body=b"{}", headers=None)
    bootstrap.poll_service().raw.put_new(row)  # stored, never enqueued (an enqueue that failed)
    return row


def test_R25_R37_sweeper_requeues_stale_rows_and_publishes_the_morning_number(h, m, sim):
    row = stuck_raw_row(h, m, sim, minutes_old=12)
    fresh = stuck_raw_row(h, m, sim, minutes_old=1)
    result = run_poller(h)
    assert (result["requeued"], result["pending_over_10m"], result["manual_over_24h"]) == (1, 1, 0)
    assert h.metric("PendingOver10m") == 1 and h.metric("SweepRequeued") == 1
    assert h.drain() == []
    assert h.scan("LEDGER_TABLE")[0]["pk"] == row["pk"]
    h.metric_log.clear()
    result = run_poller(h)
    assert (result["requeued"], result["pending_over_10m"]) == (0, 0)  # published as zero, every run
    assert [m_["name"] for m_ in h.metric_log].count("PendingOver10m") == 1 and h.metric(
        "PendingOver10m"
    ) == 0
    assert bootstrap.poll_service().raw.get(fresh["pk"])["handled"] == 0  # young rows are the worker's


def test_R25_rows_that_keep_failing_go_to_a_person(h, m, sim):
    row = stuck_raw_row(h, m, sim, minutes_old=30, out_trade_no="NO-SUCH-ORDER-1")
    sweeper = bootstrap.sweep_service()
    sweeper.every_s = 0  # re-queue every run (in production at most once per 5 minutes)
    assert [sweeper.run().requeued for _ in range(3)] == [1, 1, 1]
    report = sweeper.run()
    assert (report.requeued, report.to_person) == (0, 1)
    stuck = bootstrap.poll_service().raw.get(row["pk"])
    assert stuck["handled"] == 2 and "re-queues" in stuck["manual_reason"]
    from tally.observability import metrics

    metrics.flush_metrics()
    h._collect_metrics()
    assert h.metric("SweepGaveUp") == 1 and h.metric("ApplyManual") == 1


def test_R37_tally_pending_shows_both_counts_oldest_age_and_a_line_per_stuck_row(
    h, m, sim, tmp_path, monkeypatch, capsys
):
    from tally_cli.main import main

    stuck_raw_row(h, m, sim, minutes_old=15)
    manual = stuck_raw_row(h, m, sim, minutes_old=60 * 30)
    bootstrap.poll_service().raw.send_to_person(
        manual["pk"], "amount 100 != order's 99", iso_now(time.time() - 86400 * 2)
    )
    order = new_order(h, m, prepay=False)
    expire_now(h, order)
    run_poller(h)  # unknown at the channel and expired → a person
    capsys.readouterr()
    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:3000", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert main(["pending", "--local", "--json"]) == 3  # R41: something is stuck / overdue (cron-able)
    report = json.loads(capsys.readouterr().out)
    assert (report["pending_over_10m"], report["manual_over_24h"], report["orders_with_person"]) == (1, 1, 1)
    assert report["oldest_age_s"] >= 2 * 86400
    whys = {r["kind"]: r for r in report["rows"]}
    assert whys["unbooked-payment"]["why"] == "amount 100, expected order's 99"
    assert whys["order"]["order"] == order["out_trade_no"]
    assert set(whys["stuck-notification"]) >= {"channel", "merchant", "order", "age_s", "why"}
    assert main(["pending", "--local"]) == 3
    text = capsys.readouterr().out
    assert re.search(r"notifications not applied for 10 min: +1\n", text)
    assert re.search(r"past their threshold: +1\n", text)
    assert m["apiv3_key"] not in text


# ------------------------------------------------------------------------------------ R21: an index, not a scan


@pytest.mark.slow  # ~30 s of CPU writing 10,000 orders: make test runs it, make check does not
def test_R21_poller_over_10k_orders_with_100_due_reads_a_few_hundred_items_never_scans(h, m, capsys):
    """10k pending orders (all in the poll index), 100 due: the run reads what is due, not the table.
    The 100k variant (and 1k) is `python -m bench.poller_items` (writing 100k rows to moto takes ~50 s)."""
    from bench.poller_items import ReadMeter, write_orders

    ddb = bootstrap.tables().ddb
    write_orders(ddb, h.env["ORDERS_TABLE"], m["mchid"], 10_000, 100, time.time())
    meter = ReadMeter(ddb)
    result = run_poller(h)
    assert result["orders_read"] == 100 and result["orders_polled"] == 100
    assert result["outcomes"] == {"NOT_CREATED": 100}  # the simulator never heard of them: kept, not closed
    assert "Scan" not in meter.calls
    assert meter.items_read <= 300, (meter.items_read, meter.calls)
    # poll shards (+ top-ups) + stale rows + the refund reports' pending shards (4, audit L2) + the stale count
    # + the refunds' poll shards and open tasks
    # + the work queue's sparse indexes (4 + 6 kinds + 1 + 4 + 1 + 1 + 1 + 4 = 22, R41; merchant_not_ready R47,
    # settlement_unknown R43; + 1 kind bill_upload, audit L5; + webhook_failing, event_generation_failed and
    # alert_delivery: docs/webhooks.md, docs/alerts.md; + heartbeat_echo: docs/channels.md; + audit_mismatch:
    # docs/audit.md)
    assert meter.calls["Query"] <= 8 + 4 + 4 + 8 + 8 + 28
    meter.reset()
    assert run_poller(h)["orders_read"] == 0 and meter.items_read == 0  # advanced: nothing due any more


def test_R25_R37_R48_paid_order_whose_payment_went_to_a_person_leaves_the_poll_into_its_case(h, m, sim):
    """The channel reports another amount: the payment goes to the manual queue and the order stays open.
    The next query can only say "paid" again; the order leaves the poll, not asked every minute, and opens
    no item of its own: the payment's case is the one a person works (R48)."""
    from tally import bootstrap

    order = new_order(h, m, amount=100)
    sim.pay(m["mchid"], order["out_trade_no"], drop=True, amount_total=99)
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"MANUAL": 1}  # mismatch (R12): handled=2, order WAIT_PAY
    due_now(h, order)
    assert run_poller(h)["outcomes"] == {"CASE": 1}
    row = stored(h, order)
    assert row["status"] == "WAIT_PAY" and "poll_pk" not in row and row["case_of"].startswith("wechatpay#")
    assert h.metric("PollManual") == 1
    assert run_poller(h)["orders_read"] == 0 and ledger(h) == []  # nothing is queried forever
    (case,) = bootstrap.work_queue().list(f"order={order['out_trade_no']}")
    assert case["kind"] == "unbooked-payment" and "parts" not in case  # one item: the payment's
