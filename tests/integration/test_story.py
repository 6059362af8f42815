"""The order story (service/story.py, `tally order story`): one read-only timeline of everything about one order,
and `tally order show` that no longer asks the channel unless told to (R42)."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from datetime import datetime

import boto3
import pytest
from tally import bootstrap
from tally.service.story import CHINA, KINDS

from tally_cli import order as cli_order
from tally_cli.main import main
from tests.integration.channel_kit import DRIVERS
from tests.integration.refund_helpers import deliver, paid_order, refund

WRITES = {
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
    "SendMessage",
    "PutEvents",
}


@pytest.fixture
def m(h):
    return h.add_merchant()


@pytest.fixture
def calls(monkeypatch):
    """Every AWS operation and every HTTP request to the channel the code under test makes."""
    seen: list[str] = []

    def record(model, **_):
        seen.append(model.name)

    original = boto3.client

    def client(*a, **kw):
        c = original(*a, **kw)
        c.meta.events.register("before-call.*.*", record)
        return c

    monkeypatch.setattr(boto3, "client", client)
    bootstrap.reset()
    for built in (bootstrap._client,):
        built.cache_clear()
    return seen


def cli(monkeypatch, h):
    monkeypatch.setattr(cli_order, "connect", lambda args: {"env": h.env})


def test_story_tells_a_paid_refunded_order_in_time_order(h, m):
    otn, tid = paid_order(h, m["mchid"], amount=506)
    # the same callback again: the row is already applied, nothing new is stored (NOT_STORED names it)
    headers, body = h.sim.build_notification(m["mchid"], h.sim.transaction_view(m["mchid"], otn))
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    previous = h.sim.set_refund_behaviour()
    h.sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    try:
        status, made = refund(h, m["mchid"], otn, 106, refund_no=f"RS{uuid.uuid4().hex[:20]}")
        assert status in (200, 201), made
        h.sim.settle_refund(made["refund_no"], "success", notify=False)
        deliver(h, m["mchid"], made["refund_no"])
    finally:
        h.sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})

    story = bootstrap.story_service().story(m["mchid"], otn)
    kinds = [e["kind"] for e in story["entries"]]
    for kind in ("order", "delivery", "transition", "ledger", "refund", "refund_report", "outbox"):
        assert kind in kinds, (kind, kinds)
    assert set(kinds) <= set(KINDS)
    times = [e["at"] for e in story["entries"]]
    assert all(t.endswith("+08:00") for t in times)  # Asia/Shanghai for people and the console
    utc = [e["at_utc"] for e in story["entries"]]
    assert utc == sorted(utc, key=lambda s: s.replace("Z", "+00:00"))  # oldest first
    ledger = [e for e in story["entries"] if e["kind"] == "ledger"]
    assert [(e["state"], e["amount_cent"], e["amount_yuan"]) for e in ledger] == [
        ("PAYMENT", 506, "5.06"),
        ("REFUND", -106, "-1.06"),
    ]
    s = story["summary"]
    assert (s["paid_cent"], s["refunded_cent"], s["ledger_net_cent"], s["ledger_net_yuan"]) == (
        506,
        106,
        400,
        "4.00",
    )
    outbox = {e["state"] for e in story["entries"] if e["kind"] == "outbox"}
    assert outbox == {"OrderPaid", "RefundSucceeded"}
    assert any(
        f"wechatpay#{m['mchid']}#{tid}" == e["ref"] for e in story["entries"] if e["kind"] == "delivery"
    )
    assert all("body" not in e["detail"] for e in story["entries"])  # raw bodies only with raw=True
    raw = bootstrap.story_service().story(m["mchid"], otn, raw=True)
    (delivery,) = [e for e in raw["entries"] if e["kind"] == "delivery"]
    assert json.loads(delivery["detail"]["body"])["event_type"] == "TRANSACTION.SUCCESS"
    assert "wechatpay-signature" in delivery["detail"]["headers"]
    assert any("NotifyDuplicate" in n for n in story["not_stored"])
    json.dumps(story)  # plain data all the way down (the console renders the same dicts)


def test_story_shows_the_in_between_callback_and_a_person_s_queue_item(h, m):
    otn = f"T{uuid.uuid4().hex[:20]}"
    assert h.create_order(m["mchid"], otn, amount_cent=300)["statusCode"] == 201
    headers, body, _ = h.notification(m["mchid"], otn, total=300, trade_state="USERPAYING")
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    headers, body, _ = h.notification(m["mchid"], otn, total=30)  # wrong amount: with a person (R12)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    story = bootstrap.story_service().story(m["mchid"], otn)
    states = [(e["kind"], e["state"]) for e in story["entries"]]
    assert ("delivery", "IN_BETWEEN") in states and ("delivery", "MANUAL") in states
    assert story["summary"]["open_items"] == 1
    (manual,) = [e for e in story["entries"] if e["state"] == "MANUAL"]
    assert manual["needs_person"] and "amount 0.30 yuan ≠ order's 3.00 yuan" in manual["title"]
    assert manual["detail"]["order_total_cent"] == 30  # machine fields keep cents
    # a person resolves it (the queue's history on the source row): the story shows who, what and why
    bootstrap.manual_queue().resolve(
        f"raw:{manual['ref']}", by="alice", action="refunded-by-hand", why="called"
    )
    story = bootstrap.story_service().story(m["mchid"], otn)
    (action,) = [e for e in story["entries"] if e["kind"] == "queue"]
    assert (
        "alice" in action["title"] and "refunded by hand" in action["title"] and "called" in action["title"]
    )
    assert story["summary"]["open_items"] == 0


def test_r42_story_and_order_show_only_read(h, m, calls, monkeypatch, capsys):
    """An unpaid order the channel has as paid: reading it (story, show, --json) neither asks the channel nor
    writes a row; `order show --ask-channel` is the explicit way to ask, and then it books."""
    otn = f"T{uuid.uuid4().hex[:20]}"
    assert h.create_order(m["mchid"], otn, amount_cent=250, prepay=True)["statusCode"] == 201
    h.sim.pay(m["mchid"], otn, drop=True)  # paid at the channel, the callback lost
    asked = lambda: [r for r in h.sim.requests if otn in r["path"] and r["method"] == "GET"]  # noqa: E731
    before = len(asked())
    cli(monkeypatch, h)
    calls.clear()
    assert main(["order", "story", m["mchid"], otn, "--json", "--local"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["status"] == "WAIT_PAY"
    assert main(["order", "show", m["mchid"], otn, "--json", "--local"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "WAIT_PAY"
    assert main(["order", "show", m["mchid"], otn, "--local"]) == 0
    capsys.readouterr()
    assert calls and not set(calls) & WRITES, calls
    assert len(asked()) == before  # the channel was not asked
    bootstrap.set_clock(lambda: time.time() + 10)  # the return-page query waits a few seconds after creation
    assert main(["order", "show", m["mchid"], otn, "--ask-channel", "--json", "--local"]) == 0
    capsys.readouterr()
    assert len(asked()) == before + 1
    h.drain()
    assert bootstrap.story_service().story(m["mchid"], otn)["summary"]["status"] == "PAID"


def test_order_story_human_output_in_yuan_without_log_lines(h, m, monkeypatch, capsys):
    otn, _ = paid_order(h, m["mchid"], amount=1999)
    cli(monkeypatch, h)
    capsys.readouterr()
    assert main(["order", "story", m["mchid"], otn, "--local"]) == 0
    out = capsys.readouterr().out
    assert "19.99" in out and "1999" not in out.replace(otn, "")
    assert '"level"' not in out  # no Powertools log line in human output
    assert main(["order", "story", m["mchid"], "NOPE-000001", "--local"]) == 1


def test_story_reads_are_bounded_by_the_order_not_the_tables(h, m, calls):
    """Every source is read through a key or an index of this order (no Scan): the calls grow with the
    order's own rows (one raw row, one refund here), not with the tables."""
    otn, _ = paid_order(h, m["mchid"], amount=900)
    for _ in range(3):  # other orders in the same tables must not cost the story anything
        paid_order(h, m["mchid"], amount=100)
    calls.clear()
    started = time.perf_counter()
    story = bootstrap.story_service().story(m["mchid"], otn)
    elapsed = time.perf_counter() - started
    assert "Scan" not in calls and not set(calls) & WRITES, calls
    print(f"story of a paid order: {len(calls)} AWS calls {dict(Counter(calls))}, {elapsed * 1000:.0f} ms")
    assert len(calls) <= 13, calls  # 12, and the order's webhook deliveries (docs/webhooks.md)
    assert story["summary"]["ledger_net_cent"] == 900


def test_story_shows_the_recon_difference_of_a_payment_we_never_heard_of(h, m):
    otn = f"T{uuid.uuid4().hex[:20]}"
    assert h.create_order(m["mchid"], otn, amount_cent=321, prepay=True)["statusCode"] == 201
    tid = h.sim.pay(m["mchid"], otn, drop=True)  # paid today, the callback lost
    today = datetime.now(CHINA).date().isoformat()
    run = bootstrap.recon_service().run("wechatpay", m["mchid"], today, pass_="cli")
    assert run["status"] == "DIFFS", run
    story = bootstrap.story_service().story(m["mchid"], otn)
    recon = [e for e in story["entries"] if e["kind"] == "recon"]
    assert any(e["state"] == "DIFFS" for e in recon)  # the day's verdict
    (diff,) = [e for e in recon if e["state"] == "OPEN"]
    assert (
        diff["needs_person"]
        and tid in diff["detail"]["key"]
        and diff["says"]["params"]["diff_class"] == "CHANNEL_ONLY"
    )
    assert "Only on the channel's bill" in diff["title"]
    assert diff["amount_yuan"] == "3.21"


@pytest.mark.parametrize(
    "driver", [d for d in DRIVERS if d.name in ("alipay", "wechatpay_v2")], ids=lambda d: d.name
)
def test_story_of_a_paid_order_on_every_channel(h, driver):
    ch = driver(h)
    mid = ch.setup()
    otn = ch.order(mid, 1234)
    body, headers, tid = ch.callback(mid, otn, 1234)
    ch.notify(mid, body, headers)
    assert h.drain() == []
    story = bootstrap.story_service().story(mid, otn)
    assert story["summary"]["status"] == "PAID" and story["summary"]["ledger_net_yuan"] == "12.34"
    (delivery,) = [e for e in story["entries"] if e["kind"] == "delivery"]
    assert delivery["ref"].endswith(tid) and delivery["state"] == "ACCEPTED"
    assert [e["state"] for e in story["entries"] if e["kind"] == "ledger"] == ["PAYMENT"]


def test_story_shows_the_poller_s_answers_for_an_order_whose_callbacks_were_lost(h, m):
    from tests.integration.pull_helpers import due_now, run_poller

    otn = f"T{uuid.uuid4().hex[:20]}"
    assert h.create_order(m["mchid"], otn, amount_cent=880, prepay=True)["statusCode"] == 201
    due_now(h, {"mchid": m["mchid"], "out_trade_no": otn})
    run_poller(h)  # not paid yet: NOTPAY, the order stays in the poll with a later due time
    unpaid = bootstrap.story_service().story(m["mchid"], otn)
    (poll,) = [e for e in unpaid["entries"] if e["kind"] == "poll"]
    assert "1 poll(s)" in poll["title"] and poll["detail"]["poll_count"] == 1
    h.sim.pay(m["mchid"], otn, drop=True)  # paid, every callback lost
    due_now(h, {"mchid": m["mchid"], "out_trade_no": otn})
    assert run_poller(h)["outcomes"] == {"BOOKED": 1}
    story = bootstrap.story_service().story(m["mchid"], otn)
    (delivery,) = [e for e in story["entries"] if e["kind"] == "delivery"]
    assert delivery["title"].startswith("poll answer: paid") and delivery["state"] == "ACCEPTED"
    assert [e["detail"]["source"] for e in story["entries"] if e["kind"] == "transition"] == ["query"]
    assert story["summary"]["ledger_net_yuan"] == "8.80"


def test_story_shows_a_double_payment_and_its_refund_task(h, m):
    otn, first = paid_order(h, m["mchid"], amount=700)
    headers, body, resource = h.notification(
        m["mchid"], otn, total=700
    )  # another transaction for the same order
    assert resource["transaction_id"] != first
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    story = bootstrap.story_service().story(m["mchid"], otn)
    (task,) = [e for e in story["entries"] if e["kind"] == "refund" and e["state"].startswith("TASK_")]
    assert resource["transaction_id"] in task["title"] and task["amount_yuan"] == "7.00"
    assert story["summary"]["ledger_net_cent"] == 700  # the second payment was not booked
    states = [e["state"] for e in story["entries"] if e["kind"] == "delivery"]
    assert states == ["ACCEPTED", "MANUAL"]


def test_story_follows_the_work_queue_state_on_the_source_row_R41(h, m):
    """Closing an item through the queue (state on the source row) closes it in the story too."""
    otn = f"T{uuid.uuid4().hex[:20]}"
    assert h.create_order(m["mchid"], otn, amount_cent=300)["statusCode"] == 201
    headers, body, _ = h.notification(m["mchid"], otn, total=30)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    assert bootstrap.story_service().story(m["mchid"], otn)["summary"]["open_items"] == 1
    queue = bootstrap.work_queue()
    (item,) = [i for i in queue.list("") if i.get("order") == otn]
    queue.act(item["id"], "ignore", by="bob", reason="test traffic")
    story = bootstrap.story_service().story(m["mchid"], otn)
    assert story["summary"]["open_items"] == 0
    assert any("bob" in e["title"] and e["kind"] == "queue" for e in story["entries"])
