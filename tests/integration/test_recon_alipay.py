"""Alipay reconciliation end to end: payments through the simulator's Alipay gateway, the signed
alipay.data.dataservice.bill.downloadurl.query answer, the zip of GBK CSVs built from the simulator's own
ledger, parse → guards → match (R31–R36), and a payment it has and we lack queried and applied (R36 → R23)."""

from __future__ import annotations

import io
import zipfile

import boto3
import pytest
from tally import bootstrap
from tally.store.codec import from_item, to_item
from tally.store.recon import with_bill_shard

from tests.integration.channel_kit import Alipay
from tests.integration.recon_helpers import D_BEFORE, D, metric
from tests.integration.recon_helpers import alipay_pay as pay

pytestmark = pytest.mark.usefixtures("days_of_2024")


@pytest.fixture
def app(h):
    return Alipay(h).setup()


def ledger(h, pk):
    return from_item(h.ddb.get_item(TableName=h.env["LEDGER_TABLE"], Key=to_item({"pk": pk})).get("Item"))


def diffs(svc, app_id, day=D):
    return {d["sk"]: d for d in svc.show("alipay", app_id, day)["diffs"]}


def test_alipay_day_downloads_parses_guards_and_matches_with_no_diffs_R31_R36(h, app, svc):
    """Three payments (one created 23:59:58 the day before, paid 00:00:02) and a refund we booked: the run
    downloads the zip through the signed gateway answer, keeps it, and finds bill and ledger equal."""
    _, cross = pay(h, app, 880, f"{D} 00:00:02", created_at=f"{D_BEFORE} 23:59:58")
    otn, tid = pay(h, app, 2000, f"{D} 10:00:00")
    pay(h, app, 1, f"{D} 23:59:59")
    h.sim.alipay.bills.add_refund(app, otn, 500, "RF-A-1", refunded_at=f"{D} 14:00:00")
    h.ddb.put_item(
        TableName=h.env["LEDGER_TABLE"],
        Item=to_item(
            with_bill_shard(
                {  # the refunds subsystem's ledger shape
                    "pk": "alipay#RF-A-1",
                    "kind": "REFUND",
                    "channel": "alipay",
                    "mchid": app,
                    "transaction_id": tid,
                    "refund_no": "RF-A-1",
                    "order_pk": f"{app}#{otn}",
                    "amount_cent": 500,
                    "bill_date": D,
                    "booked_at": "x",
                    "source": "notify",
                }
            )
        ),
    )
    assert ledger(h, f"alipay#{app}#{cross}")["bill_date"] == D  # the success time's day, Asia/Shanghai (R34)
    assert (
        svc.run("alipay", app, D_BEFORE)["status"] == "QUIET"
    )  # nothing the day the cross-midnight one began
    run = svc.run("alipay", app, D)
    assert run["status"] == "MATCHED", run["reason"]
    assert (run["totals"]["payments"], run["totals"]["payment_cent"]) == (3, 2881)
    assert (run["totals"]["refunds"], run["totals"]["refund_cent"]) == (1, 500)
    assert run["guard"] == "PASSED" and all(c["ok"] for c in run["totals"]["checks"])
    assert {c["name"] for c in run["totals"]["checks"]} >= {
        "交易合计商家实收",
        "退款合计笔数",
        "汇总交易订单总笔数",
    }
    assert run["stats"]["matched"] == 4 and diffs(svc, app) == {}
    kept = boto3.client("s3").get_object(Bucket=bootstrap.settings().bills_bucket, Key=run["bill_key"])
    names = [
        i.filename.encode("cp437").decode("gbk")
        for i in zipfile.ZipFile(io.BytesIO(kept["Body"].read())).infolist()
    ]
    assert sorted(n.rsplit("_", 1)[1] for n in names) == [
        "业务明细(汇总).csv",
        "业务明细.csv",
    ]  # GBK names, no flag
    assert run["bill_key"].startswith(f"bills/alipay/{app}/{D}/") and run["sha1"] in run["bill_key"]
    assert [r["method"] for r in h.sim.alipay.requests][
        -1
    ] == "alipay.data.dataservice.bill.downloadurl.query"


def test_alipay_payment_it_has_and_we_lack_is_one_channel_only_diff_queried_and_applied_R36_R23(h, app, svc):
    pay(h, app, 300, f"{D} 09:00:00")
    otn, tid = pay(
        h, app, 1200, f"{D} 10:00:00", deliver=False, receipt=1150
    )  # the callback never came: 掉单
    run = svc.run("alipay", app, D)
    assert run["status"] == "DIFFS"
    (d,) = diffs(svc, app).values()  # exactly one
    assert (d["sk"], d["cls"], d["channel_amount_cent"], d["recovery"]) == (
        f"PAYMENT#alipay#{tid}",
        "CHANNEL_ONLY",
        1150,
        "QUEUED",
    )
    raw = from_item(
        h.ddb.get_item(TableName=h.env["NOTIFY_RAW_TABLE"], Key=to_item({"pk": f"alipay#{app}#{tid}"}))[
            "Item"
        ]
    )
    assert raw["source"] == "recon" and raw["paid_cent"] == 1150
    assert h.drain() == []  # the same worker path as a callback
    booked = ledger(h, f"alipay#{app}#{tid}")
    assert (booked["amount_cent"], booked["source"], booked["bill_date"]) == (1150, "recon", D)
    assert h.order(app, otn)["status"] == "PAID"
    rerun = svc.run("alipay", app, D, pass_="T+3")
    assert rerun["status"] == "MATCHED" and rerun["stats"]["auto_resolved"] == 1
    assert metric(h, "ReconDiffOpened") == 1 and metric(h, "ReconRecoverQueued") == 1


@pytest.mark.parametrize(
    "fault, code",
    [
        ("empty_nonzero_summary", "EMPTY_BILL"),  # R31
        ("wrong_summary", "SUMMARY_MISMATCH"),  # R32
        ("changed_header", "LAYOUT_QUARANTINED"),  # a renamed column: a new layout (docs/recon.md)
        ("html_error", "PARSE_FAILED"),
        ("mixed_encoding", "PARSE_FAILED"),
        ("no_statement", "NO_STATEMENT_BUT_LEDGER"),
    ],
)
def test_a_bad_alipay_bill_is_blocked_before_matching_R31_R32(h, app, svc, fault, code):
    for i in range(2):
        pay(h, app, 100 + i, f"{D} 1{i}:00:00")
    h.sim.alipay.bills.fault(fault)
    run = svc.run("alipay", app, D)
    assert (run["status"], run["block_code"]) == ("BLOCKED", code), run["reason"]
    assert diffs(svc, app) == {} and "stats" not in run  # nothing matched, nothing called "no differences"
    assert metric(h, "ReconBlocked") == 1


def test_an_alipay_volume_drop_is_blocked_until_confirmed_R33(h, app, svc):
    svc.min_previous_rows, svc.min_ratio = 2, 0.5
    for i in range(4):
        pay(h, app, 100, f"{D_BEFORE} 1{i}:00:00")
        pay(h, app, 100, f"{D} 1{i}:00:00")
    assert svc.run("alipay", app, D_BEFORE)["status"] == "MATCHED"
    h.sim.alipay.bills.fault("volume_drop")  # 1 row of 4, trailers and 汇总 that agree with it
    run = svc.run("alipay", app, D)
    assert (run["status"], run["block_code"]) == ("BLOCKED", "VOLUME_DROP")
    confirmed = svc.confirm("alipay", app, D, "carol", "promo ended")
    assert confirmed["status"] == "DIFFS"
    assert sum(d["cls"] == "LOCAL_ONLY" for d in diffs(svc, app).values()) == 3
