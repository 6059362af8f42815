"""`tally ledger backfill-settlement` (R43 migration, docs/settlement.md §8 "2 legacy"): entries booked before
R43 get their settlement figures from what Tally kept (the raw row's figures, the kept body read again through
the channel's own notify step, the refund's report), written once with `attribute_not_exists(settlement_cent)`;
what cannot be settled stays legacy and is listed with its reason; a second run writes nothing. Moto + the
simulator's signed notifications."""

from __future__ import annotations

import json
import random

import pytest
from tally import bootstrap
from tally.store.codec import from_item, to_item

from tests.integration.refund_helpers import D, deliver, pay_v3, refund, settle_v3_on_d

pytestmark = pytest.mark.usefixtures("refunds_held", "days_of_2024")

R43_FIELDS = {
    "total_cent",
    "payer_cent",
    "settlement_cent",
    "cash_promotion_cent",
    "nocash_promotion_cent",
    "merchant_funded_cent",
    "channel_funded_cent",
    "other_funded_cent",
    "unattributed_cent",
    "point_cent",
    "invoice_cent",
    "refund_cent",
    "settlement_refund_cent",
    "payer_refund_cent",
    "discount_refund_cent",
    "fee_refund_cent",
    "settlement_state",
}


@pytest.fixture
def m(h):
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def ledger(h, pk):
    return from_item(h.ddb.get_item(TableName=h.env["LEDGER_TABLE"], Key=to_item({"pk": pk})).get("Item"))


def as_before_r43(h, pk):
    """The entry as it was booked before R43: amount_cent and the rest, no settlement figures."""
    row = {k: v for k, v in ledger(h, pk).items() if k not in R43_FIELDS}
    h.ddb.put_item(TableName=h.env["LEDGER_TABLE"], Item=to_item(row))
    return row


def strip_raw(h, table, key, *, body=False):
    """A raw row written before R43: no `settlement` (and, with body=True, no kept body either)."""
    remove = "REMOVE settlement, settlement_error, settlement_basis" + (", body" if body else "")
    h.ddb.update_item(TableName=h.env[table], Key=to_item(key), UpdateExpression=remove)


def test_r43_backfill_settles_legacy_entries_from_what_was_kept_lists_the_rest_and_is_idempotent(h, m, svc):
    mchid = m["mchid"]
    # a CASH coupon payment whose raw row predates R43: its kept body (the signed v3 envelope) is read again
    cash = pay_v3(h, mchid, 1000, 900, "CASH")
    cash_pk = f"wechatpay#{mchid}#{h.sim.get_order(mchid, cash)['transaction']['transaction_id']}"
    # a NOCASH payment whose raw row kept its R43 figures but whose entry lacks them (booked by an old worker)
    nocash = pay_v3(h, mchid, 2000, 1500, "NOCASH")
    nocash_pk = f"wechatpay#{mchid}#{h.sim.get_order(mchid, nocash)['transaction']['transaction_id']}"
    # a plain payment, nothing kept but the entry: the payer paid the whole order, so it settles in full
    plain = pay_v3(h, mchid, 300, 300)
    plain_pk = f"wechatpay#{mchid}#{h.sim.get_order(mchid, plain)['transaction']['transaction_id']}"
    # a coupon payment with neither figures nor body kept: it stays legacy, listed
    lost = pay_v3(h, mchid, 700, 600, "CASH")
    lost_pk = f"wechatpay#{mchid}#{h.sim.get_order(mchid, lost)['transaction']['transaction_id']}"
    # a refund of the CASH payment, its report kept without figures: rebuilt with the backfilled payment
    status, r = refund(h, mchid, cash, 500)
    assert status == 201, r
    settle_v3_on_d(h, mchid, cash, r["refund_no"], 500)
    deliver(h, mchid, r["refund_no"])
    refund_pk = f"wechatpay#{mchid}#{r['refund_no']}"

    for pk in (cash_pk, nocash_pk, plain_pk, lost_pk, refund_pk):
        as_before_r43(h, pk)
    strip_raw(h, "NOTIFY_RAW_TABLE", {"pk": cash_pk})
    strip_raw(h, "NOTIFY_RAW_TABLE", {"pk": plain_pk}, body=True)
    strip_raw(h, "NOTIFY_RAW_TABLE", {"pk": lost_pk}, body=True)
    strip_raw(h, "REFUND_RAW_TABLE", {"pk": refund_pk, "sk": "SUCCESS"})

    before = svc.run("wechatpay", mchid, D, pass_="T+1")
    assert before["stats"]["legacy_payments"] == 4 and before["stats"]["legacy_refunds"] == 1
    assert (
        before["open_diffs"] == 2
    )  # the CASH coupons: 9.00 ≠ 10.00 and 6.00 ≠ 7.00 (NOCASH: 15.00 either way)

    fill = bootstrap.settlement_backfill()
    dry = fill.run("wechatpay", D, dry_run=True)
    assert (dry["done"], dry["legacy"]) == (4, 1) and dry["dry_run"] is True
    assert "settlement_cent" not in ledger(h, cash_pk)  # a dry run writes nothing

    progress = []
    result = fill.run("wechatpay", D, D, progress=progress.append, every=1)
    assert (result["examined"], result["done"], result["already"], result["legacy"]) == (5, 4, 0, 1)
    assert len(progress) == 5 and progress[-1]["examined"] == 5
    (listed,) = result["legacy_entries"]
    assert listed["pk"] == lost_pk and listed["kind"] == "PAYMENT" and listed["amount"] == "6.00"
    assert "no body kept" in listed["reason"] and "coupon split is unknown" in listed["reason"]

    entry = ledger(h, cash_pk)
    assert (entry["settlement_cent"], entry["cash_promotion_cent"], entry["amount_cent"]) == (1000, 100, 900)
    assert entry["settlement_state"] == "KNOWN" and entry["settlement_backfilled_at"]
    assert (ledger(h, nocash_pk)["settlement_cent"], ledger(h, plain_pk)["settlement_cent"]) == (1500, 300)
    entry = ledger(h, refund_pk)
    # the report predates R43 (no figures, no basis): the amount and the payment's settlement (no NOCASH)
    # settle it in full; what went back to the payer is not stated, so it is not invented
    assert (entry["settlement_refund_cent"], entry["amount_cent"]) == (500, 500)
    assert "payer_refund_cent" not in entry
    assert "settlement_cent" not in ledger(h, lost_pk)

    again = fill.run("wechatpay", D)
    assert (again["done"], again["already"], again["legacy"]) == (
        0,
        4,
        1,
    )  # idempotent: nothing written twice

    after = svc.run("wechatpay", mchid, D, pass_="manual")
    assert after["stats"]["legacy_payments"] == 1 and after["stats"]["legacy_refunds"] == 0
    assert after["open_diffs"] == 1  # only the entry that stays legacy, as listed


def test_r43_backfill_cli_prints_counts_and_json_and_refuses_a_bad_range(h, m, monkeypatch, capsys):
    from tally_cli import ledger as cli_ledger
    from tally_cli.main import main

    mchid = m["mchid"]
    otn = pay_v3(h, mchid, 1000, 900, "CASH")
    pk = f"wechatpay#{mchid}#{h.sim.get_order(mchid, otn)['transaction']['transaction_id']}"
    as_before_r43(h, pk)
    monkeypatch.setattr(cli_ledger, "connect", lambda args: {"env": h.env})
    capsys.readouterr()
    argv = ["ledger", "backfill-settlement", "--channel", "wechatpay", "--from", D, "--local"]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing written" in out and "1 would write" in out
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["done"], doc["legacy"], doc["channel"], doc["from"], doc["to"]) == (1, 0, "wechatpay", D, D)
    assert ledger(h, pk)["settlement_cent"] == 1000
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already"] >= 1
    assert (
        main(["ledger", "backfill-settlement", "--channel", "wechatpay", "--from", D, "--to", "2024-04-01"])
        != 0
    )
