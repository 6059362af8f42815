"""`tally ledger day` (service/ledger_day.py): one bill date's payments, refunds, fees and net per merchant and
channel, next to the recon verdict; read-only; dates checked before anything is read or recorded."""

from __future__ import annotations

import csv
import io
import json
import random
import types

import pytest
from tally import bootstrap
from tally.store.recon import with_bill_shard

from tally_cli import ledger as cli_ledger
from tally_cli import recon as cli_recon
from tally_cli.main import main

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"


@pytest.fixture
def m(h, monkeypatch):
    for module in (cli_ledger, cli_recon):
        monkeypatch.setattr(module, "connect", lambda args: {"env": h.env})
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def pay(h, mchid, cents, success_time):
    otn = f"L{random.randrange(10**15, 10**16)}"
    assert h.create_order(mchid, otn, amount_cent=cents, prepay=True)["statusCode"] == 201
    h.sim.pay(mchid, otn, drop=True, success_time=success_time)
    headers, body = h.sim.build_notification(mchid, h.sim.get_order(mchid, otn)["transaction"])
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    assert h.drain() == []
    return otn


def test_ledger_day_sums_the_day_and_books_fees_once_recon_read_the_bill(h, m, capsys, tmp_path):
    pay(h, m["mchid"], 5000, f"{D}T08:00:00+08:00")
    pay(h, m["mchid"], 1000, f"{D}T23:59:59+08:00")  # still D in Asia/Shanghai (R34)
    pay(h, m["mchid"], 700, "2024-05-01T16:00:01Z")  # 00:00:01 on 05-02 in Asia/Shanghai: not this day
    capsys.readouterr()

    before = bootstrap.ledger_day_service().day(D, merchant=m["mchid"])
    (row,) = before["rows"]
    assert (row["channel"], row["payments"], row["payment_cent"], row["payment_yuan"]) == (
        "wechatpay",
        2,
        6000,
        "60.00",
    )
    assert row["fee_cent"] is None and row["fee_yuan"] == "" and row["recon"] is None
    assert row["fees_status"] == "not booked yet"  # a number's column holds a number or nothing
    assert row["net_cent"] == 6000 and not row["net_includes_fee"]

    assert (
        main(["recon", "run", "--channel", "wechatpay", "--mchid", m["mchid"], "--date", D, "--local"]) == 0
    )
    capsys.readouterr()
    csv_file = tmp_path / "day.csv"
    assert (
        main(["ledger", "day", D, "--merchant", m["mchid"], "--csv", str(csv_file), "--json", "--local"]) == 0
    )
    view = json.loads(capsys.readouterr().out)  # exactly one JSON document on stdout
    (row,) = view["rows"]
    assert row["recon"]["status"] == "MATCHED"
    assert (row["fee_cent"], row["fee_yuan"]) == (36, "0.36")  # 0.60 % of 50.00 and of 10.00, by the bill
    assert (row["net_cent"], row["net_yuan"], row["net_includes_fee"]) == (5964, "59.64", True)
    assert view["totals"]["net_yuan"] == "59.64"
    lines = list(csv.reader(io.StringIO(csv_file.read_text(encoding="utf-8").lstrip("\ufeff"))))
    assert lines[0][:5] == ["bill_date", "channel", "merchant", "payments", "payments_yuan"]
    assert lines[1][:5] == [D, "wechatpay", m["mchid"], "2", "60.00"] and "MATCHED" in lines[1]
    assert lines[-1][1] == "TOTAL"

    assert main(["ledger", "day", D, "--merchant", m["mchid"], "--local"]) == 0
    out = capsys.readouterr().out
    assert "60.00" in out and "0.36" in out and "59.64" in out and "matched" in out
    assert "6000" not in out and '"level"' not in out


@pytest.mark.parametrize("bad", ["2024-13-01", "yesterdy", "01/05/2024", "2999-01-01"])
def test_an_invalid_date_exits_2_and_nothing_is_recorded(h, m, capsys, bad):
    runs = lambda: h.scan("RECON_RUNS_TABLE")  # noqa: E731
    assert main(["ledger", "day", bad, "--local"]) == 2
    assert (
        main(["recon", "run", "--channel", "wechatpay", "--mchid", m["mchid"], "--date", bad, "--local"]) == 2
    )
    err = capsys.readouterr().err
    assert "YYYY-MM-DD" in err or "calendar day" in err or "future" in err
    assert runs() == []  # no BLOCKED run, nothing sent to the channel
    assert not [r for r in h.sim.requests if "bill" in r["path"] and r.get("mchid") == m["mchid"]]


def test_dates_today_yesterday_and_the_default_are_asia_shanghai(h, m, capsys, monkeypatch):
    from tally_cli import common as cli_common
    from tally_cli.common import parse_date

    # 2024-05-01 16:30 UTC is 2024-05-02 00:30 in Asia/Shanghai
    clock = lambda: 1714581000.0  # noqa: E731
    assert parse_date("today", clock) == "2024-05-02"
    assert parse_date("yesterday", clock) == "2024-05-01"
    assert parse_date(None, clock) == "2024-05-01"
    assert parse_date("2024-02-29", clock) == "2024-02-29"
    monkeypatch.setattr(cli_common, "time", types.SimpleNamespace(time=clock))  # only the CLI's clock
    assert main(["ledger", "day", "--json", "--local"]) == 0
    assert json.loads(capsys.readouterr().out)["bill_date"] == "2024-05-01"
    assert main(["recon", "show", "--channel", "wechatpay", "--mchid", m["mchid"], "--local"]) == 0
    assert f"wechatpay#{m['mchid']}#2024-05-01: no runs yet" in capsys.readouterr().out
    assert (
        main(["recon", "show", "--channel", "wechatpay", "--mchid", m["mchid"], "--date", "today", "--local"])
        == 0
    )
    assert "#2024-05-02: no runs yet" in capsys.readouterr().out


def test_refunds_and_reversals_count_against_the_net_and_merchants_are_apart(h, m):
    from tally.store.codec import to_item

    day = "2024-04-30"
    other = str(random.randrange(10**9, 10**10))
    rows = [
        ("wechatpay#T1", "PAYMENT", 1000, m["mchid"]),
        ("wechatpay#T2", "PAYMENT", 250, m["mchid"]),
        ("wechatpay#RF1", "REFUND", 300, m["mchid"]),
        ("wechatpay#T2#REVERSAL#2024-04-30", "REVERSAL", -250, m["mchid"]),
        ("alipay#A1", "PAYMENT", 999, other),
    ]
    for pk, kind, cents, mchid in rows:
        h.ddb.put_item(
            TableName=h.env["LEDGER_TABLE"],
            Item=to_item(
                with_bill_shard(
                    {
                        "pk": pk,
                        "kind": kind,
                        "amount_cent": cents,
                        "channel": pk.split("#")[0],
                        "mchid": mchid,
                        "bill_date": day,
                    }
                )
            ),
        )
    view = bootstrap.ledger_day_service().day(day)
    by = {(r["channel"], r["mchid"]): r for r in view["rows"]}
    mine = by[("wechatpay", m["mchid"])]
    assert (mine["payments"], mine["refunds"], mine["reversals"]) == (2, 1, 1)
    assert (mine["payment_yuan"], mine["refund_yuan"], mine["reversal_yuan"], mine["net_yuan"]) == (
        "12.50",
        "3.00",
        "-2.50",
        "7.00",
    )
    assert by[("alipay", other)]["net_cent"] == 999 and by[("alipay", other)]["recon"] is None
    assert view["totals"]["net_cent"] == 700 + 999 and view["totals"]["fees_missing_for"] == 2
    only = bootstrap.ledger_day_service().day(day, merchant=other)
    assert [(r["channel"], r["mchid"]) for r in only["rows"]] == [("alipay", other)]


def test_recon_show_without_a_merchant_shows_every_merchant_of_the_day_but_the_heartbeat_s(h, m, capsys):
    """The demo's last lines say `tally recon show` (default: yesterday): without --channel and --mchid it is every
    configured merchant's day, the heartbeat's synthetic merchant left out (R54); one of the two alone is a usage
    error (exit 2), nothing read."""
    pay(h, m["mchid"], 1200, f"{D}T10:00:00+08:00")
    bootstrap.recon_service().run("wechatpay", m["mchid"], D)
    assert main(["recon", "show", "--date", D, "--json", "--local"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["date"] == D
    mine = [v for v in shown["merchants"] if v["mchid"] == m["mchid"]]
    assert len(mine) == 1 and mine[0]["channel"] == "wechatpay" and mine[0]["runs"], mine
    assert bootstrap.settings().heartbeat_mchid not in {v["mchid"] for v in shown["merchants"]}
    assert main(["recon", "show", "--date", D, "--local"]) == 0
    human = capsys.readouterr().out
    assert m["mchid"] in human and f"wechatpay#{m['mchid']}#{D}" in human
    assert main(["recon", "show", "--channel", "wechatpay", "--date", D, "--local"]) == 2
