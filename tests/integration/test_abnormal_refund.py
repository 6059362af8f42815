"""An ABNORMAL WeChat v3 refund sent through apply-abnormal-refund from its queue item, then tracked to SUCCESS
by the one refund state machine (issue #21 item 3; R29). Real HTTP to the simulator, real RSA-OAEP for the
user's card fields, moto for the tables."""

from __future__ import annotations

import json
import time

import pytest
from tally import bootstrap
from tally.observability import metrics

from tests.integration.refund_helpers import deliver, order_row, paid_order, refund


@pytest.fixture
def m(h, sim):
    previous = sim.set_refund_behaviour()
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    yield h.add_merchant()
    sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})
    sim._refund_plans.clear()
    metrics.flush_metrics()
    h._collect_metrics()


def svc():
    return bootstrap.refund_service()


def queue():
    return bootstrap.work_queue()


def abnormal(h, m, sim, amount=40):
    otn, _ = paid_order(h, m["mchid"], 100)
    no = refund(h, m["mchid"], otn, amount)[1]["refund_no"]
    sim.settle_refund(no, "abnormal")
    deliver(h, m["mchid"], no)
    assert svc().show(no)["status"] == "MANUAL"
    return otn, no


def ledger_refunds(h):
    return [e for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND"]


def test_r29_abnormal_refund_to_the_merchant_bank_card_is_tracked_to_success_and_booked_once(h, m, sim):
    otn, no = abnormal(h, m, sim)
    (item,) = [i for i in queue().list() if i["id"] == f"refund-{m['mchid']}#{no}"]
    assert "abnormal-refund" in item["actions"]
    done = queue().act(
        item["id"], "abnormal-refund", by="alice", reason="card frozen", to="merchant-bank-card"
    )
    assert "merchant bank card" in done["outcome"]
    row = svc().store.find(m["mchid"], no)
    assert row["status"] == "ACCEPTED" and row["abnormal_route"] == "merchant-bank-card"
    assert [i for i in queue().list() if i["id"] == item["id"]] == []  # off the queue: the poller tracks it
    assert sim.abnormal_applied(no) == {"type": "MERCHANT_BANK_CARD"}
    assert order_row(h, m["mchid"], otn)["refundable_cent"] == 60  # still reserved
    assert ledger_refunds(h) == []  # the apply answer books nothing (R29): only an outcome does

    # the notification is lost: the poller's query finds SUCCESS and books it
    sim.settle_refund(no, "success")
    bootstrap.set_clock(lambda: time.time() + 61)
    assert svc().poll_due() == {"APPLIED": 1}
    bootstrap.set_clock(time.time)
    assert svc().show(no)["status"] == "SUCCESS"
    deliver(h, m["mchid"], no, times=2)  # the late notification, twice: nothing more
    (entry,) = ledger_refunds(h)
    assert entry["amount_cent"] == 40
    assert order_row(h, m["mchid"], otn)["refundable_cent"] == 60


def test_r29_abnormal_refund_to_the_user_card_sends_its_fields_encrypted_and_keeps_no_secret(h, m, sim):
    _, no = abnormal(h, m, sim)
    item_id = f"refund-{m['mchid']}#{no}"
    _, second = abnormal(h, m, sim)
    with pytest.raises(ValueError, match="one user's bank card is for one refund"):
        queue().bulk(
            "kind=refund", "abnormal-refund", by="alice", reason="x", dry_run=True, to="user-bank-card"
        )
    with pytest.raises(ValueError, match="bank_type, bank_account, real_name"):
        queue().act(item_id, "abnormal-refund", by="alice", reason="to the user", to="user-bank-card")
    assert (
        svc().store.find(m["mchid"], no)["status"] == "MANUAL"
    )  # refused before the channel: nothing changed
    queue().act(
        item_id,
        "abnormal-refund",
        by="alice",
        reason="user gave a new card",
        to="user-bank-card",
        bank_type="ICBC_DEBIT",
        bank_account="6222020000001234",
        real_name="张三",
    )
    assert sim.abnormal_applied(no) == {
        "type": "USER_BANK_CARD",
        "bank_type": "ICBC_DEBIT",
        "bank_account": "6222020000001234",
        "real_name": "张三",
    }
    stored = json.dumps(svc().store.find(m["mchid"], no), ensure_ascii=False, default=str)
    assert "6222020000001234" not in stored and "张三" not in stored  # the history keeps who and why only
    sim.settle_refund(no, "success")
    deliver(h, m["mchid"], no)
    assert svc().show(no)["status"] == "SUCCESS" and len(ledger_refunds(h)) == 1


def test_abnormal_refund_is_offered_only_for_abnormal_and_a_channel_refusal_changes_nothing(h, m, sim):
    otn, _ = paid_order(h, m["mchid"], 100)
    expired = refund(h, m["mchid"], otn, 10)[1]["refund_no"]
    bootstrap.set_clock(lambda: time.time() + 8 * 86400)
    assert svc().poll_due() == {"EXPIRED": 1}
    bootstrap.set_clock(time.time)
    (item,) = [i for i in queue().list() if i["id"] == f"refund-{m['mchid']}#{expired}"]
    assert "abnormal-refund" not in item["actions"]
    with pytest.raises(ValueError, match="only a refund the channel reported ABNORMAL"):
        svc().apply_abnormal(f"{m['mchid']}#{expired}", "merchant-bank-card", by="alice", reason="x")

    _, no = abnormal(h, m, sim, amount=20)
    sim.inject_fault("error", path_contains="apply-abnormal-refund", status=400, code="INVALID_REQUEST")
    with pytest.raises(ValueError, match="stays with a person"):
        queue().act(
            f"refund-{m['mchid']}#{no}", "abnormal-refund", by="alice", reason="x", to="merchant-bank-card"
        )
    sim.clear_faults()
    assert svc().store.find(m["mchid"], no)["status"] == "MANUAL"
    assert f"refund-{m['mchid']}#{no}" in {i["id"] for i in queue().list()}


def test_r29_a_reroute_that_lost_a_race_is_not_reported_as_sent_and_the_money_stays_reserved(h, m, sim):
    """Issue #38 finding 5: while apply-abnormal-refund waited for the channel, another operator recorded the
    refund FAIL (60.00 released); the channel took the reroute and the command said "sent … tracked". Now the
    refund is claimed while the call is out: the other operator's outcome is refused and says why, the reroute
    is tracked, the 60.00 stays reserved until the channel's outcome."""
    otn, no = abnormal(h, m, sim, amount=60)
    item_id = f"refund-{m['mchid']}#{no}"
    meanwhile = {}

    def another_operator(_refund_no):
        try:
            queue().act(item_id, "refund-outcome", by="bob", reason="looked failed", outcome="FAIL")
            meanwhile["outcome"] = "recorded"
        except ValueError as exc:
            meanwhile["outcome"] = str(exc)

    sim.abnormal_while_answering = another_operator
    done = queue().act(item_id, "abnormal-refund", by="alice", reason="card frozen", to="merchant-bank-card")
    assert "being sent to another account by alice" in meanwhile["outcome"]
    assert "tracked to its outcome" in done["outcome"]
    row = svc().store.find(m["mchid"], no)
    assert row["status"] == "ACCEPTED" and "reroute_since" not in row
    assert (
        order_row(h, m["mchid"], otn)["refundable_cent"] == 40
    )  # 60.00 still reserved: not refundable again
    sim.settle_refund(no, "success")
    deliver(h, m["mchid"], no)
    assert svc().show(no)["status"] == "SUCCESS" and sum(e["amount_cent"] for e in ledger_refunds(h)) == 60


def test_r29_a_timed_out_reroute_is_unknown_and_tracked_not_did_not_take(h, m, sim, monkeypatch):
    """Issue #38 finding 5: a reroute whose call timed out was reported "did not take" although the channel
    may have taken it (and a person would then pay the money out by hand again). Now: "answer unknown",
    tracked like any refund (the amount reserved); the refund query tells, and books it once."""
    otn, no = abnormal(h, m, sim, amount=60)
    monkeypatch.setenv("TALLY_HTTP_TIMEOUT_S", "0.2")
    bootstrap.reset()
    sim.abnormal_while_answering = lambda _no: time.sleep(0.8)  # taken; the answer comes too late
    done = queue().act(
        f"refund-{m['mchid']}#{no}",
        "abnormal-refund",
        by="alice",
        reason="card frozen",
        to="merchant-bank-card",
    )
    assert "answer unknown" in done["outcome"] and "reserved" in done["outcome"]
    row = svc().store.find(m["mchid"], no)
    assert row["status"] == "ACCEPTED" and row["abnormal_answer"] == "unknown"
    assert order_row(h, m["mchid"], otn)["refundable_cent"] == 40
    monkeypatch.setenv("TALLY_HTTP_TIMEOUT_S", "10")
    bootstrap.reset()
    sim.settle_refund(no, "success")
    deliver(h, m["mchid"], no)
    assert svc().show(no)["status"] == "SUCCESS" and sum(e["amount_cent"] for e in ledger_refunds(h)) == 60
