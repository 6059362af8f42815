"""R49: one money arithmetic. Every view of a merchant-day — `tally ledger day` (JSON and its CSV), the statement
(`--statement`, its `--csv` file, the copy recon writes to S3), the console's Ledger and Recon pages and the
Morning page — shows the same booked, fees and net to the cent, fees with one sign (a cost, positive), and a day
whose differences are all worked reads as done everywhere. Real recon on moto, the simulator's real bills."""

from __future__ import annotations

import csv
import html
import io
import json
import random

import boto3
import pytest
from tally import bootstrap
from tally.console import app, data
from tally.console.auth import Identity
from tally.console.web import Request
from tally.i18n import speaker
from tally.i18n.words import Words

from tally_cli import ledger as cli_ledger
from tally_cli import recon as cli_recon
from tally_cli.main import main
from tests.integration.channel_kit import Alipay
from tests.integration.money_helpers import assert_views_agree
from tests.integration.recon_helpers import alipay_pay

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-06-07"


@pytest.fixture
def connected(h, monkeypatch):
    for module in (cli_ledger, cli_recon):
        monkeypatch.setattr(module, "connect", lambda args: {"env": h.env})


def _page(page: str, **query: str) -> str:
    who = Identity("sub-1", "finance", frozenset({"viewers"}), "jti-1")
    request = Request("GET", page, dict(query), {}, {}, f"/console/{page}")
    response = app.PAGES[page](request, who)
    assert response.status == 200, response.body
    body = response.body
    return html.unescape(body.decode() if isinstance(body, bytes) else body)


def views_of(h, capsys, tmp_path, channel: str, mchid: str, day: str) -> dict[str, tuple[str, str, str]]:
    """(booked payments, fees, net) in yuan as each view shows the merchant's day."""
    out: dict[str, tuple[str, str, str]] = {}
    capsys.readouterr()
    assert main(["ledger", "day", day, "--merchant", mchid, "--json", "--local"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["channel"] == channel]
    out["ledger day --json"] = (row["payment_yuan"], row["fee_yuan"], row["net_yuan"])

    table = tmp_path / f"ledger-{mchid}-{day}.csv"
    assert main(["ledger", "day", day, "--merchant", mchid, "--csv", str(table), "--local"]) == 0
    text = capsys.readouterr().out
    assert row["net_yuan"] in text and Words(speaker("en")).landing(row) in text
    assert "fees back" in text  # every term of the net has its column, so the table adds up (R49)
    (line,) = [
        r
        for r in csv.DictReader(io.StringIO(table.read_text(encoding="utf-8").lstrip("\ufeff")))
        if r["channel"] == channel
    ]
    out["ledger day --csv"] = (line["payments_yuan"], line["fees_yuan"], line["net_yuan"])

    statement = tmp_path / f"statement-{mchid}-{day}.csv"
    assert (
        main(["ledger", "day", day, "--merchant", mchid, "--statement", "--csv", str(statement), "--local"])
        == 0
    )
    assert "written to" in capsys.readouterr().out
    (srow,) = list(csv.DictReader(io.StringIO(statement.read_text(encoding="utf-8").lstrip("\ufeff"))))
    out["statement --csv"] = (srow["settlement_yuan"], srow["fees_yuan"], srow["net_yuan"])

    key = f"reports/{channel}/{mchid}/{day}/statement.csv"
    body = boto3.client("s3").get_object(Bucket=bootstrap.settings().bills_bucket, Key=key)["Body"].read()
    (rrow,) = list(csv.DictReader(io.StringIO(body.decode("utf-8").lstrip("\ufeff"))))
    out["statement recon wrote"] = (rrow["settlement_yuan"], rrow["fees_yuan"], rrow["net_yuan"])

    page = _page("ledger", date=day, merchant=mchid)
    for figure in out["ledger day --json"]:
        assert figure in page, figure
    out["console ledger"] = out["ledger day --json"]
    recon = data.recon_day(channel, mchid, day)["day"]["figures"]
    out["console recon"] = (recon["payment_yuan"], recon["fee_yuan"], recon["net_yuan"])
    assert recon["net_yuan"] in _page("recon", channel=channel, mchid=mchid, date=day)
    return out


def test_r49_every_view_of_an_alipay_day_agrees_to_the_cent_fees_positive(
    h, svc, connected, capsys, tmp_path
):
    """R49: the Alipay day whose fees the ledger showed as -1.65 (net above gross) and the statement as 1.65:
    one figure now, positive, and the same net in every view; the fund flow's shortfall is the gap."""
    app_id = Alipay(h).setup()
    for cents, hour in ((10000, 9), (7500, 12), (10000, 18)):
        alipay_pay(h, app_id, cents, f"{D} {hour}:00:00")
    assert svc.run("alipay", app_id, D)["status"] == "MATCHED"
    h.sim.alipay.bills.fundflow.fault("drop_credit")  # planted: one credit never lands
    try:
        assert svc.fund_flow("alipay", app_id, D)["fund_verdict"] == "FUND_DIFFERS"
    finally:
        h.sim.alipay.bills.fundflow.faults.clear()

    views = views_of(h, capsys, tmp_path, "alipay", app_id, D)
    assert_views_agree(D, [("alipay", app_id)])
    assert len(set(views.values())) == 1, views  # one arithmetic (R49)
    payments, fees, net = views["ledger day --json"]
    assert payments == "275.00" and not fees.startswith("-") and float(fees) > 0  # a cost, positive
    assert int(net.replace(".", "")) == 27500 - int(fees.replace(".", ""))  # net below gross

    (row,) = bootstrap.ledger_day_service().day(D, merchant=app_id)["rows"]
    (credit,) = [d for d in svc.show("alipay", app_id, D)["diffs"] if d["item"] == "SETTLEMENT"]
    gap = credit["local_amount_cent"] - credit["channel_amount_cent"]
    assert gap in (7500, 10000)  # one of the day's credits
    assert row["landing"] == "SHORT" and row["short_cent"] == gap  # the gap, not the channel's figure
    assert row["landed_cent"] == row["expected_cent"] - gap
    assert f"short by {row['short_yuan']}" in row["landing_words"]


def test_r49_a_day_whose_differences_are_all_worked_reads_done_in_every_view(h, svc, connected, capsys):
    """R49: "DIFFS: 2 resolved, 0 open" is done and green — in `recon show`, `ledger day`, the statement, the
    console's Recon, Ledger and Morning pages — never DIFFS with an open count nobody can lower."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    day = data.yesterday_cst()
    for n in range(2):  # the channel has them, we never heard of them: CHANNEL_ONLY
        otn = f"W{random.randrange(10**15, 10**16)}"
        assert h.create_order(m["mchid"], otn, amount_cent=300 + n, prepay=True)["statusCode"] == 201
        h.sim.pay(m["mchid"], otn, drop=True, success_time=f"{day}T10:0{n}:00+08:00")
    run = svc.run("wechatpay", m["mchid"], day)
    assert run["status"] == "DIFFS"
    open_now = [d for d in svc.show("wechatpay", m["mchid"], day)["diffs"] if d["handle_status"] == "OPEN"]
    assert len(open_now) == 2

    (row,) = bootstrap.ledger_day_service().day(day, merchant=m["mchid"])["rows"]
    assert row["recon"]["state"] == "DIFFS" and row["recon"]["words"] == "DIFFS: 0 resolved, 2 open"
    assert row["verdict"]["code"] == "DIFFERS"

    for d in open_now:
        svc.resolve("wechatpay", m["mchid"], day, d["sk"], by="ana", note="booked by the pull path")

    (row,) = bootstrap.ledger_day_service().day(day, merchant=m["mchid"])["rows"]
    assert (row["recon"]["state"], row["recon"]["words"]) == ("DONE", "DIFFS: 2 resolved, 0 open")
    assert row["verdict"]["code"] == "DONE"
    capsys.readouterr()
    assert main(["ledger", "day", day, "--merchant", m["mchid"], "--local"]) == 0
    assert "done (2 resolved, 0 open)" in capsys.readouterr().out
    assert main(["ledger", "day", day, "--merchant", m["mchid"], "--statement", "--json", "--local"]) == 0
    (srow,) = json.loads(capsys.readouterr().out)["statement"]
    assert srow["verdict"] == "DONE" and "2 resolved, 0 open" in srow["reason"]
    assert (
        main(["recon", "show", "--channel", "wechatpay", "--mchid", m["mchid"], "--date", day, "--local"])
        == 0
    )
    shown = capsys.readouterr().out
    assert "done (2 resolved, 0 open)" in shown and "2 open difference(s)" not in shown

    (mine,) = [r for r in data.recon_yesterday(__import__("time").time()) if r["mchid"] == m["mchid"]]
    assert (mine["status"], mine["open_diffs"], mine["worked_diffs"]) == ("DONE", 0, 2)
    assert "DONE" in _page("morning") and "verdict done" in _page(
        "recon", channel="wechatpay", mchid=m["mchid"], date=day
    )
    assert "verdict done" in _page("ledger", date=day, merchant=m["mchid"])


def test_r54_the_heartbeat_merchant_and_its_payments_stay_out_of_the_books_by_default(
    h, svc, connected, capsys
):
    """R54: the synthetic merchant (0000000000) is in no finance total, statement, Morning recon row, Merchants
    or Recon page list; asked for by name, its day is still there (its health is the point)."""
    beat = bootstrap.settings().heartbeat_mchid
    h.add_merchant(mchid=beat)
    real = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    day = data.yesterday_cst()
    for mchid, cents in ((beat, 1), (beat, 1), (real["mchid"], 4200)):
        otn = f"W{random.randrange(10**15, 10**16)}"
        assert h.create_order(mchid, otn, amount_cent=cents, prepay=True)["statusCode"] == 201
        h.sim.pay(mchid, otn, drop=True, success_time=f"{day}T10:00:00+08:00")
        headers, body = h.sim.build_notification(mchid, h.sim.get_order(mchid, otn)["transaction"])
        assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []

    view = bootstrap.ledger_day_service().day(day)
    assert beat not in {r["mchid"] for r in view["rows"]} and real["mchid"] in {
        r["mchid"] for r in view["rows"]
    }
    assert view["totals"]["payment_cent"] == sum(r["payment_cent"] for r in view["rows"])
    assert beat not in {r["merchant"] for r in bootstrap.ledger_day_service().statement(day)}
    assert beat not in {r["mchid"] for r in data.recon_yesterday(__import__("time").time())}
    assert beat not in {str(m["id"]) for m in data.merchants()}
    assert beat not in {m for _, m in data.merchants_configured()}
    assert beat not in _page("ledger", date=day) and beat not in _page("merchants")
    assert beat not in _page("recon") and beat not in _page("morning")
    capsys.readouterr()
    assert main(["ledger", "day", day, "--json", "--local"]) == 0
    assert beat not in capsys.readouterr().out
    # asked for by name: its own day, for whoever watches the heartbeat
    (own,) = bootstrap.ledger_day_service().day(day, merchant=beat)["rows"]
    assert own["payments"] == 2 and own["payment_cent"] == 2


def test_the_small_ones_statement_csv_written_or_refused_and_the_story_in_asia_shanghai(
    h, connected, capsys, tmp_path
):
    """#30 item 10: `--statement --csv FILE` writes the file (exit 0) or is refused (exit 2, no file, why);
    the console's order story reads its times in Asia/Shanghai, as its footer says."""
    from datetime import datetime

    from tally.domain.clock import CHINA

    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn = f"W{random.randrange(10**15, 10**16)}"
    assert h.create_order(m["mchid"], otn, amount_cent=1200, prepay=True)["statusCode"] == 201
    day = data.yesterday_cst()
    h.sim.pay(m["mchid"], otn, drop=True, success_time=f"{day}T10:00:00+08:00")
    headers, body = h.sim.build_notification(m["mchid"], h.sim.get_order(m["mchid"], otn)["transaction"])
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []

    good = tmp_path / "statement.csv"
    assert (
        main(["ledger", "day", day, "--merchant", m["mchid"], "--statement", "--csv", str(good), "--local"])
        == 0
    )
    assert good.read_text(encoding="utf-8").startswith("\ufeffmerchant,")
    bad = tmp_path / "no-such-dir" / "statement.csv"
    with pytest.raises(SystemExit) as refused:
        main(["ledger", "day", day, "--merchant", m["mchid"], "--statement", "--csv", str(bad), "--local"])
    assert "cannot write" in str(refused.value.code) and not bad.exists()

    raw = bootstrap.story_service().story(m["mchid"], otn)
    shown = data.order_story(m["mchid"], otn)
    stored = next(e["at"] for e in raw["entries"] if e.get("at"))
    moment = datetime.fromisoformat(stored.replace("Z", "+00:00"))
    first = next(e["at"] for e in shown["entries"] if e.get("at"))
    assert first == moment.astimezone(CHINA).strftime("%Y-%m-%d %H:%M:%S")


def test_a_story_shows_only_the_recon_rows_about_its_order(h, svc):
    """#30 item 10: the day's recon run is on the story of an order whose money is on that day, not on the
    story of an order created that day that never paid (before, its story started with that run)."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    day = data.yesterday_cst()
    paid, unpaid = (f"W{random.randrange(10**15, 10**16)}" for _ in range(2))
    for otn in (paid, unpaid):
        assert h.create_order(m["mchid"], otn, amount_cent=800, prepay=True)["statusCode"] == 201
    h.sim.pay(m["mchid"], paid, drop=True, success_time=f"{day}T10:00:00+08:00")
    headers, body = h.sim.build_notification(m["mchid"], h.sim.get_order(m["mchid"], paid)["transaction"])
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    assert h.drain() == []
    svc.run("wechatpay", m["mchid"], day)
    today = data.today_cst(__import__("time").time()).isoformat()
    svc.run("wechatpay", m["mchid"], today)  # the day the orders were created (the bound the story looks at)

    def recon_rows(otn):
        story = bootstrap.story_service().story(m["mchid"], otn)
        return [e for e in story["entries"] if e["kind"] == "recon"]

    assert [e["title"][:16] for e in recon_rows(paid)] == [f"recon {day}"]
    assert recon_rows(unpaid) == []


def test_r49_the_order_story_shows_the_order_money_from_the_one_arithmetic(h):
    """A payment with a CASH coupon (the payer paid 11.00, the channel settles the whole 14.00) refunded in
    part: the story's ledger net is the merchant-day arithmetic over the order's own entries (settled
    amounts, before fees), the same figure `tally ledger day` shows for a day with only this order."""
    from tests.integration.refund_helpers import deliver, refund

    mchid = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    otn = f"W{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=1400, prepay=True)["statusCode"] == 201
    h.sim.pay(mchid, otn, drop=True, success_time=f"{D}T09:00:00+08:00", payer_total=1100, coupon_type="CASH")
    headers, body = h.sim.build_notification(mchid, h.sim.get_order(mchid, otn)["transaction"])
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []
    story = bootstrap.story_service().story(mchid, otn)
    (row,) = [r for r in bootstrap.ledger_day_service().day(D, mchid)["rows"] if r["mchid"] == mchid]
    assert story["summary"]["ledger_net_yuan"] == row["payment_yuan"] == "14.00", (story["summary"], row)
    assert row["net_yuan"] == "14.00" and row["fees_status"] == "not booked yet"  # no recon run read fees yet

    status, answer = refund(h, mchid, otn, 200)
    assert status in (200, 201, 202), answer
    h.sim.settle_refund(answer["refund_no"], "success")
    deliver(h, mchid, answer["refund_no"])
    story = bootstrap.story_service().story(mchid, otn)
    refunded = [e for e in h.scan("LEDGER_TABLE") if e.get("kind") == "REFUND" and e.get("mchid") == mchid]
    (entry,) = refunded
    settled_refund = int(entry.get("settlement_refund_cent", entry["amount_cent"]))
    assert story["summary"]["ledger_net_cent"] == 1400 - settled_refund, (story["summary"], entry)
