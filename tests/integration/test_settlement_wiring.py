"""R43 wired (docs/settlement.md §6.1–§6.3): the payment entry keeps the channel's settlement figures next
to amount_cent, recon matches the settlement amount, an unknown settlement goes to a person, and entries
booked before R43 are matched on amount_cent, explicitly, and counted. On moto with the simulator's
real-format notifications and bills."""

from __future__ import annotations

import csv
import io
import random

import pytest
from tally import bootstrap
from tally.store.codec import from_item, to_item

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"


@pytest.fixture
def m(h):
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def ledger(h, pk):
    return from_item(h.ddb.get_item(TableName=h.env["LEDGER_TABLE"], Key=to_item({"pk": pk})).get("Item"))


def pay(h, mchid, cents, when, **kw):
    otn = f"S{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=cents, prepay=True)["statusCode"] == 201
    tid = h.sim.pay(mchid, otn, drop=True, success_time=when, **kw)
    resource = h.sim.get_order(mchid, otn)["transaction"]
    return otn, tid, resource


def deliver(h, mchid, resource):
    headers, body = h.sim.build_notification(mchid, resource)
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []


def metric(h, name):
    from tally.observability import metrics

    metrics.flush_metrics()
    h._collect_metrics()
    return h.metric(name)


def test_r43_a_v3_cash_and_a_nocash_coupon_payment_book_their_settlement_amounts_and_reconcile(h, m, svc):
    """CASH (充值型): the merchant is settled the whole order; NOCASH (免充值): the order less the coupon. The
    entry keeps what the payer paid in amount_cent (R12/R13 unchanged) and the settlement next to it; the
    simulator's bill writes 应结订单金额 = total − NOCASH, and the day reconciles with zero diffs."""
    _, cash_tid, cash = pay(h, m["mchid"], 1000, f"{D}T10:00:00+08:00", payer_total=900)
    _, nocash_tid, nocash = pay(
        h, m["mchid"], 2000, f"{D}T11:00:00+08:00", payer_total=1500, coupon_type="NOCASH"
    )
    _, plain_tid, plain = pay(h, m["mchid"], 300, f"{D}T12:00:00+08:00")
    for resource in (cash, nocash, plain):
        deliver(h, m["mchid"], resource)

    entry = ledger(h, f"wechatpay#{m['mchid']}#{cash_tid}")
    assert entry["amount_cent"] == 900 and entry["order_total_cent"] == 1000
    assert entry["settlement_cent"] == 1000 and entry["cash_promotion_cent"] == 100
    assert entry["settlement_state"] == "KNOWN" and entry["merchant_funded_cent"] == 100
    entry = ledger(h, f"wechatpay#{m['mchid']}#{nocash_tid}")
    assert (entry["amount_cent"], entry["settlement_cent"], entry["nocash_promotion_cent"]) == (
        1500,
        1500,
        500,
    )
    assert ledger(h, f"wechatpay#{m['mchid']}#{plain_tid}")["settlement_cent"] == 300

    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["stats"]["matched"] == 3 and run["open_diffs"] == 0
    assert run["stats"]["legacy_payments"] == 0 and run["stats"]["settlement_unknown"] == 0
    assert run["totals"]["payment_cent"] == 1000 + 1500 + 300  # Σ 应结订单金额


def test_r43_before_the_wiring_the_cash_coupon_would_differ(h, m, svc):
    """The same CASH coupon booked the old way (amount_cent = payer_total, no settlement fields) is a legacy
    entry: matched on amount_cent, so AMOUNT_DIFFERS, and the run counts it so a person sees why."""
    _, tid, resource = pay(h, m["mchid"], 1000, f"{D}T10:00:00+08:00", payer_total=900)
    deliver(h, m["mchid"], resource)
    row = ledger(h, f"wechatpay#{m['mchid']}#{tid}")
    legacy = {
        k: v
        for k, v in row.items()
        if k
        in {
            "pk",
            "kind",
            "channel",
            "transaction_id",
            "order_pk",
            "mchid",
            "out_trade_no",
            "amount_cent",
            "order_total_cent",
            "currency",
            "success_time",
            "bill_date",
            "booked_at",
            "source",
            "bill_shard",  # the sharded bill-date index recon reads (store/recon.py)
        }
    }
    h.ddb.put_item(TableName=h.env["LEDGER_TABLE"], Item=to_item(legacy))  # as booked before R43
    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["stats"]["legacy_payments"] == 1
    assert run["stats"]["by_class"] == {"AMOUNT_DIFFERS": 1}, run["stats"]


def test_r43_legacy_entries_are_matched_on_amount_cent_and_counted(h, m, svc):
    """Entries without settlement_cent (booked before R43) still match when amount_cent is the bill's
    figure (no coupon), and every one is counted in the run's stats."""
    tids = []
    for i, cents in enumerate((100, 250)):
        _, tid, resource = pay(h, m["mchid"], cents, f"{D}T1{i}:00:00+08:00")
        deliver(h, m["mchid"], resource)
        row = ledger(h, f"wechatpay#{m['mchid']}#{tid}")
        for name in [k for k in row if k.endswith("_cent") and k not in ("amount_cent", "order_total_cent")]:
            del row[name]
        del row["settlement_state"]
        h.ddb.put_item(TableName=h.env["LEDGER_TABLE"], Item=to_item(row))
        tids.append(tid)
    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["stats"]["legacy_payments"] == 2 and run["stats"]["matched"] == 2


def test_r43_a_payment_whose_settlement_is_unknown_is_booked_and_goes_to_a_person(h, m, svc):
    """Contradicting coupon figures (the promotions do not add up to total − payer_total): the money arrived,
    so it is booked (UNKNOWN, on the payer amount), with one work-queue item and the alarmed metric; a
    redelivery adds neither a second entry nor a second item."""
    otn, tid, resource = pay(h, m["mchid"], 1000, f"{D}T10:00:00+08:00", payer_total=900)
    resource["promotion_detail"][0]["amount"] = 50  # 1000 − 900 != 50
    resource["promotion_detail"][0]["merchant_contribute"] = 50
    deliver(h, m["mchid"], resource)

    entry = ledger(h, f"wechatpay#{m['mchid']}#{tid}")
    assert entry["amount_cent"] == 900 and entry["settlement_state"] == "UNKNOWN"
    assert "settlement_cent" not in entry
    assert h.order(m["mchid"], otn)["status"] == "PAID"
    assert metric(h, "SettlementUnknown") == 1

    items = [i for i in bootstrap.work_queue().list() if i["kind"] == "settlement-unknown"]
    items = [i for i in items if i["merchant"] == m["mchid"]]
    assert len(items) == 1
    (item,) = items
    assert item["amount_cent"] == 900 and item["order"] == otn
    assert "settlement amount unknown" in item["reason"] and "promotions" in item["reason"]

    deliver(h, m["mchid"], resource)  # the channel sends it again
    again = [i for i in bootstrap.work_queue().list() if i["kind"] == "settlement-unknown"]
    assert [i["id"] for i in again if i["merchant"] == m["mchid"]] == [item["id"]]
    assert metric(h, "SettlementUnknown") == 1

    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["stats"]["settlement_unknown"] == 1  # matched on amount_cent, explicitly


def fee_rows(h, mchid):
    return {r["pk"]: r for r in h.scan("LEDGER_TABLE") if r.get("kind") == "FEE" and r.get("mchid") == mchid}


def test_r43_fee_entries_are_booked_once_per_bill_row_across_reruns(h, m, svc):
    """After the bill passes its guards each row's fee is a FEE entry keyed by the row; a re-run books nothing
    new; a bill whose fee differs from the booked one is a FEE AMOUNT_DIFFERS and the entry is not overwritten;
    the finance day reads its fees from these entries."""
    tids = []
    for i, cents in enumerate((1000, 2550)):
        _, tid, resource = pay(h, m["mchid"], cents, f"{D}T1{i}:00:00+08:00")
        deliver(h, m["mchid"], resource)
        tids.append(tid)
    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    assert run["stats"]["fees_booked"] == 2 and run["stats"]["fee_diffs"] == 0
    fees = fee_rows(h, m["mchid"])
    scoped = f"fee#wechatpay#{m['mchid']}#"  # merchant-scoped like every entry (issue #15)
    assert set(fees) == {scoped + t for t in tids}
    assert {pk: r["amount_cent"] for pk, r in fees.items()} == {
        scoped + tids[0]: 6,  # 10.00 × 0.6 % = 0.06
        scoped + tids[1]: 15,  # 25.50 × 0.6 % = 0.153 → 0.15
    }
    assert {r["of"] for r in fees.values()} == {"PAYMENT"}
    assert {r["transaction_id"] for r in fees.values()} == set(tids)
    assert all(r["bill_date"] == D and r["source_run"] == run["run_id"] for r in fees.values())
    assert run["totals"]["fee_e5"] == 6000 + 15000  # the simulator writes fees rounded to the fen

    again = svc.run("wechatpay", m["mchid"], D, pass_="T+3")
    assert again["status"] == "MATCHED" and again["stats"]["fees_booked"] == 0
    assert fee_rows(h, m["mchid"]) == fees  # idempotent: the first run's entries, untouched

    pk = scoped + tids[0]
    h.ddb.update_item(  # as if an earlier bill had said 0.07: the channel changed its fee
        TableName=h.env["LEDGER_TABLE"],
        Key=to_item({"pk": pk}),
        UpdateExpression="SET amount_cent = :a",
        ExpressionAttributeValues={":a": {"N": "7"}},
    )
    third = svc.run("wechatpay", m["mchid"], D, pass_="manual")
    assert third["status"] == "DIFFS" and third["stats"]["fee_diffs"] == 1
    (diff,) = [d for d in svc.show("wechatpay", m["mchid"], D)["diffs"] if d["item"] == "FEE"]
    assert (diff["cls"], diff["channel_amount_cent"], diff["local_amount_cent"]) == ("AMOUNT_DIFFERS", 6, 7)
    assert diff["key"] == pk and ledger(h, pk)["amount_cent"] == 7  # never overwritten
    assert svc.run("wechatpay", m["mchid"], D, pass_="manual")["open_diffs"] == 1  # seen again, not healed

    view = bootstrap.ledger_day_service().day(D, merchant=m["mchid"])
    (row,) = view["rows"]
    assert row["fee_cent"] == 7 + 15 and row["fee_entries"] == 2  # read from the ledger, not the run
    assert row["reversals"] == 0 and row["payment_cent"] == 1000 + 2550


def test_r43_the_daily_statement_is_written_next_to_the_report_and_tally_ledger_day_prints_the_same(
    h, m, svc, monkeypatch, capsys
):
    """A CASH and a NOCASH coupon day: the statement (docs/settlement.md §5) shows gross, the merchant-funded
    discount, what the payer paid, the settlement, fees from the FEE entries and the net, in yuan; the recon
    run writes it at reports/{channel}/{mchid}/{day}/statement.csv and `tally ledger day --statement` prints
    the same text."""
    import boto3

    from tally_cli import ledger as cli_ledger
    from tally_cli.main import main

    pay_and_deliver = [(1000, 900, "CASH"), (2000, 1500, "NOCASH")]
    for i, (total, payer, kind) in enumerate(pay_and_deliver):
        _, _, resource = pay(
            h, m["mchid"], total, f"{D}T1{i}:00:00+08:00", payer_total=payer, coupon_type=kind
        )
        deliver(h, m["mchid"], resource)
    run = svc.run("wechatpay", m["mchid"], D, pass_="T+1")
    assert run["status"] == "MATCHED", run["reason"]
    key = f"reports/wechatpay/{m['mchid']}/{D}/statement.csv"
    assert run["statement_key"] == key
    body = boto3.client("s3").get_object(Bucket=bootstrap.settings().bills_bucket, Key=key)["Body"].read()
    text = body.decode("utf-8")
    assert text.startswith("\ufeff")
    (row,) = list(csv.DictReader(io.StringIO(text.removeprefix("\ufeff"))))
    assert row["merchant"] == m["mchid"] and row["payments"] == "2"
    assert (row["gross_yuan"], row["merchant_funded_discount_yuan"], row["payer_paid_yuan"]) == (
        "30.00",
        "6.00",
        "24.00",
    )
    assert (
        row["settlement_yuan"] == "25.00"
    )  # 10.00 (CASH: settled in full) + 15.00 (NOCASH: less the coupon)
    assert row["fees_yuan"] == "0.15" and row["net_yuan"] == "24.85"  # 0.06 + 0.09, from the FEE entries
    assert row["verdict"] == "PENDING" and row["differs"] == ""  # the fund-flow check runs on T+2 (R45)

    monkeypatch.setattr(cli_ledger, "connect", lambda args: {"env": h.env})
    capsys.readouterr()
    assert main(["ledger", "day", D, "--merchant", m["mchid"], "--statement", "--local"]) == 0
    assert capsys.readouterr().out == text.removeprefix("\ufeff")
