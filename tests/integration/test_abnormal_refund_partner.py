"""ABNORMAL refunds of a service provider's sub-merchant (partner mode, issue #21): the provider's credentials sign
the refund, its query (`?sub_mchid=`) and `tally manual abnormal-refund` (POST .../{refund_id}/apply-abnormal-refund
with `sub_mchid`; the user's card fields encrypted with the platform key); the simulator takes a partner request
only for the sub-merchant's own refund through that provider. Hostile: another provider that now claims the
sub-merchant cannot reroute a refund made through the first one: the claim (the credentials that would sign) is
checked against the refund record it would change (R39, R11), nothing is sent, nothing changes."""

from __future__ import annotations

import json
import time

import pytest
from tally import bootstrap
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk
from tally.channels.wechatpay_v3.refunds import WeChatRefunds
from tally.domain.refunds import AnswerKind
from tally.observability import metrics

from tests.integration.cli_helpers import local_cli_state
from tests.integration.refund_helpers import deliver, order_row, refund


@pytest.fixture
def partner(h, sim):
    """A provider and one sub-merchant; the simulator holds every refund undecided and unnotified."""
    previous = sim.set_refund_behaviour()
    sim.set_refund_behaviour(outcome="hold", drop=True, after_accept=None)
    sp = h.add_merchant(mchid=f"12{time.time_ns() % 10**8:08d}")["mchid"]
    sub = f"11{time.time_ns() % 10**8:08d}"
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid=sub, sp_mchid=sp)
    yield sp, sub
    sim.set_refund_behaviour(**{k: previous[k] for k in ("outcome", "drop", "after_accept")})
    sim._refund_plans.clear()
    sim.clear_faults()
    metrics.flush_metrics()
    h._collect_metrics()


@pytest.fixture
def cli(h, tmp_path, monkeypatch, capsys):
    from tally_cli.main import main

    local_cli_state(h, tmp_path, monkeypatch)

    def run(*argv):
        capsys.readouterr()
        code = main([*argv, "--local"])
        out = capsys.readouterr()
        return code, out.out + out.err

    return run


def svc():
    return bootstrap.refund_service()


def queue():
    return bootstrap.work_queue()


def abnormal_partner_refund(h, sim, sp, sub, amount=40):
    """A sub-merchant's order paid through the provider (partner prepay, partner notification at the provider's
    URL), refunded, and reported ABNORMAL in a partner-shaped REFUND.ABNORMAL notification."""
    otn = f"P{time.time_ns() % 10**12:012d}"
    assert h.create_order(sub, otn, amount_cent=100, prepay=True)["statusCode"] == 201
    sim.pay_partner(sp, sub, otn, drop=True)
    resource = sim.partner_transaction_view(sp, sub, otn)
    assert h.notify(sp, *sim.build_notification(sp, resource))["statusCode"] == 204
    assert h.drain() == []
    assert h.order(sub, otn)["status"] == "PAID"
    status, made = refund(h, sub, otn, amount)
    assert status in (200, 201, 202), made
    no = made["refund_no"]
    assert svc().store.find(sub, no)["sp_mchid"] == sp
    sim.settle_refund(no, "abnormal")
    deliver(h, sp, no)  # signed by the provider, sp_mchid + sub_mchid in the resource
    assert svc().show(no)["status"] == "MANUAL"
    return otn, no


def ledger_refunds(h):
    return [e for e in h.scan("LEDGER_TABLE") if e["kind"] == "REFUND"]


def test_r29_r11_partner_abnormal_refund_to_the_merchant_bank_card_via_the_cli_tracked_to_success(
    h, sim, partner, cli
):
    sp, sub = partner
    otn, no = abnormal_partner_refund(h, sim, sp, sub)
    item_id = f"refund-{sub}#{no}"
    code, out = cli(
        "manual", "abnormal-refund", item_id, "--to", "merchant-bank-card", "--by", "alice", "--why", "frozen"
    )
    assert code == 0, out
    # accepted only because the request named sub_mchid: the simulator finds a partner refund no other way
    assert sim.abnormal_applied(no) == {"type": "MERCHANT_BANK_CARD"}
    row = svc().store.find(sub, no)
    assert row["status"] == "ACCEPTED" and row["abnormal_route"] == "merchant-bank-card"
    assert item_id not in {i["id"] for i in queue().list()}
    assert ledger_refunds(h) == []  # the apply answer books nothing (R29)

    # the notification is lost: the poller's partner query (?sub_mchid=) finds SUCCESS and books it once
    sim.settle_refund(no, "success")
    bootstrap.set_clock(lambda: time.time() + 61)
    try:
        assert svc().poll_due() == {"APPLIED": 1}
    finally:
        bootstrap.set_clock(time.time)
    asked = [r["path"] for r in sim.requests if r["path"].startswith(f"/v3/refund/domestic/refunds/{no}")]
    assert f"/v3/refund/domestic/refunds/{no}?sub_mchid={sub}" in asked
    assert svc().show(no)["status"] == "SUCCESS"
    deliver(h, sp, no, times=2)  # the late partner notification, twice: nothing more
    (entry,) = ledger_refunds(h)
    assert entry["amount_cent"] == 40 and entry["mchid"] == sub
    assert order_row(h, sub, otn)["refundable_cent"] == 60


def test_r29_partner_abnormal_refund_to_the_user_card_encrypts_the_card_fields(h, sim, partner):
    sp, sub = partner
    _, no = abnormal_partner_refund(h, sim, sp, sub)
    queue().act(
        f"refund-{sub}#{no}",
        "abnormal-refund",
        by="alice",
        reason="the user gave a new card",
        to="user-bank-card",
        bank_type="CMB_DEBIT",
        bank_account="6214830000005678",
        real_name="李四",
    )
    assert sim.abnormal_applied(no) == {  # decrypted by the simulator with the platform key's private half
        "type": "USER_BANK_CARD",
        "bank_type": "CMB_DEBIT",
        "bank_account": "6214830000005678",
        "real_name": "李四",
    }
    stored = json.dumps(svc().store.find(sub, no), ensure_ascii=False, default=str)
    assert "6214830000005678" not in stored and "李四" not in stored
    sim.settle_refund(no, "success")
    deliver(h, sp, no)
    assert svc().show(no)["status"] == "SUCCESS" and len(ledger_refunds(h)) == 1


def test_r39_another_provider_claiming_the_sub_merchant_cannot_reroute_its_refund(h, sim, partner, cli):
    """The sub-merchant is re-registered under a second provider (a mistake, or that provider's operator): the
    refund was made through the first. The reroute is refused before anything is sent; the refund stays with a
    person, ABNORMAL, its reservation held; the simulator never heard of a reroute."""
    sp, sub = partner
    otn, no = abnormal_partner_refund(h, sim, sp, sub)
    other = h.add_merchant(mchid=f"10{time.time_ns() % 10**8:08d}")["mchid"]
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay_partner(sub_mchid=sub, sp_mchid=other)
    item_id = f"refund-{sub}#{no}"
    before = svc().store.find(sub, no)

    code, out = cli(
        "manual", "abnormal-refund", item_id, "--to", "merchant-bank-card", "--by", "mallory", "--why", "mine"
    )
    assert code != 0 and f"provider {sp}" in out and other in out, out
    with pytest.raises(ValueError, match="cannot send it to another account"):
        svc().apply_abnormal(f"{sub}#{no}", "merchant-bank-card", by="mallory", reason="mine")

    assert sim.abnormal_applied(no) is None  # nothing was sent
    after = svc().store.find(sub, no)
    assert (after["status"], after["manual_reason"], after.get("version")) == (
        "MANUAL",
        before["manual_reason"],
        before.get("version"),
    )
    assert item_id in {i["id"] for i in queue().list()}  # still with a person
    assert order_row(h, sub, otn)["refundable_cent"] == 60 and ledger_refunds(h) == []

    # and the channel itself: the other provider's signed request naming the refund finds no such refund
    directory = bootstrap.merchants()
    theirs = WeChatRefunds(
        wechatpay_v3_desk(directory).client(wechatpay_v3_desk(directory).wechatpay(other)), ""
    )
    answer = theirs.apply_abnormal({**after, "sp_mchid": other}, "merchant-bank-card")
    assert answer.kind is AnswerKind.REJECTED and answer.code == "RESOURCE_NOT_EXISTS"
    assert sim.abnormal_applied(no) is None
