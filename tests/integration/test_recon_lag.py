"""The channel's bill lag (#30 item 3): money booked just before midnight that the channel's bill of its day does
not list is EXPECTED (in transit, due on the channel's next bill day), not a case; the next day's bill closes it
when it lists the money, or it turns missing by itself and opens for a person then (R34, R36, R49)."""

from __future__ import annotations

import random
from datetime import datetime

import pytest
from tally import bootstrap
from tally.domain.clock import CHINA
from tally.domain.merchant_day import count_diffs, day_state
from tally.store.codec import from_item, to_item
from tally.store.recon import with_bill_shard

from tests.integration.recon_helpers import D, metric, pay

pytestmark = pytest.mark.usefixtures("days_of_2024")
D1, D2, D3 = "2024-05-02", "2024-05-03", "2024-05-04"


def morning_of(day: str) -> float:
    """10:30 Asia/Shanghai, when the scheduled run reads yesterday's bill."""
    return datetime.fromisoformat(f"{day}T10:30:00").replace(tzinfo=CHINA).timestamp()


def booked_just_before_midnight(h, mchid: str, tid: str | None = None) -> str:
    """A ledger entry we booked at 23:58:00 of D: the channel's own clock put the money on its next bill day
    (tid given: a payment the simulator took on D1 at 00:00:30), or never took it (no tid: a ghost)."""
    table = h.env["LEDGER_TABLE"]
    if tid is not None:
        pk = f"wechatpay#{mchid}#{tid}"
        row = from_item(h.ddb.get_item(TableName=table, Key=to_item({"pk": pk}))["Item"])
    else:
        tid = f"42000000000000000{random.randrange(10**10, 10**11)}"
        row = {
            "pk": f"wechatpay#{mchid}#{tid}",
            "kind": "PAYMENT",
            "channel": "wechatpay",
            "mchid": mchid,
            "transaction_id": tid,
            "order_pk": f"{mchid}#LATE",
            "out_trade_no": "LATE",
            "amount_cent": 990,
            "settlement_cent": 990,
            "booked_at": "2024-05-01T15:58:01.000Z",
            "source": "notify",
        }
    row.update(bill_date=D, success_time=f"{D}T23:58:00+08:00")
    row.pop("bill_shard", None)
    h.ddb.put_item(TableName=table, Item=to_item(with_bill_shard(row)))
    return f"PAYMENT#wechatpay#{tid}"


def diff_of(svc, mchid: str, sk: str, day: str = D) -> dict:
    return next(d for d in svc.show("wechatpay", mchid, day)["diffs"] if d["sk"] == sk)


def state_of(svc, mchid: str, day: str = D) -> str:
    view = svc.show("wechatpay", mchid, day)
    latest = next(r for r in view["runs"] if r.get("leg") != "fundflow")
    return day_state(latest["status"], count_diffs(view["diffs"]))[0]


def every_view(svc, mchid: str) -> set[str]:
    """The day's state as `tally recon show`, `tally ledger day`, the console's Recon and Morning pages and the
    statement (whose verdict word for money in transit is PENDING) read it (R49: they agree)."""
    from tally.console import data

    from tally_cli.recon import as_it_stands

    view = svc.show("wechatpay", mchid, D)
    latest = next(r for r in view["runs"] if r.get("leg") != "fundflow")
    ledger = next(r for r in bootstrap.ledger_day_service().day(D)["rows"] if r["mchid"] == mchid)
    morning = next(r for r in data.recon_yesterday(morning_of(D1)) if r["mchid"] == mchid)
    (statement,) = (r for r in bootstrap.ledger_day_service().statement(D) if r["merchant"] == mchid)
    words = {
        as_it_stands(latest, view["diffs"])["status"],
        ledger["recon"]["state"],
        data.recon_day("wechatpay", mchid, D)["day"]["status"],
        morning["status"],
    }
    assert "due 2024-05-02" in morning["words"], morning
    return words | {f"{statement['verdict']} (statement)"}


def queue_ids(mchid: str) -> list[str]:
    return [i["id"] for i in bootstrap.work_queue().list(f"merchant={mchid}")]


def test_a_payment_the_channel_books_on_its_next_bill_day_is_expected_then_closed_by_that_bill_R34(h, svc):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    pay(h, m, 300, f"{D}T09:00:00+08:00")
    _, tid = pay(h, m, 880, f"{D1}T00:00:30+08:00")  # the channel's bill of D1 lists it
    sk = booked_just_before_midnight(h, m, tid)

    svc.clock = lambda: morning_of(D1)
    run = svc.run("wechatpay", m, D, pass_="T+1")
    d = diff_of(svc, m, sk)
    assert (d["cls"], d["handle_status"], d["due"]) == ("LOCAL_ONLY", "EXPECTED", D1)
    assert "wait for the channel's bill of 2024-05-02" in d["next_step"] and "open_pk" not in d
    assert run["status"] == "DIFFS" and "1 expected" in run["reason"] and "due on" in run["reason"]
    assert state_of(svc, m) == "EXPECTED" and queue_ids(m) == []  # in transit: nobody's work yet
    assert every_view(svc, m) == {"EXPECTED"} | {"PENDING (statement)"}

    svc.clock = lambda: morning_of(D2)
    assert svc.run("wechatpay", m, D1, pass_="T+1")["status"] == "MATCHED"  # found there: cross-day
    d = diff_of(svc, m, sk)
    assert (
        d["handle_status"] == "RESOLVED" and "in the channel's bill of 2024-05-02" in d["history"][-1]["note"]
    )
    again = svc.run("wechatpay", m, D, pass_="T+2")  # the bill of D still lacks it: no case opens
    assert again["status"] == "MATCHED" and diff_of(svc, m, sk)["handle_status"] == "RESOLVED"
    assert state_of(svc, m) == "MATCHED" and queue_ids(m) == [] and metric(h, "ReconDiffOpened") == 0


def test_money_booked_before_midnight_that_no_bill_lists_turns_missing_by_itself_and_opens_then(h, svc):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    pay(h, m, 300, f"{D}T09:00:00+08:00")
    pay(h, m, 400, f"{D1}T09:00:00+08:00")
    sk = booked_just_before_midnight(h, m)

    svc.clock = lambda: morning_of(D1)
    svc.run("wechatpay", m, D, pass_="T+1")
    assert diff_of(svc, m, sk)["handle_status"] == "EXPECTED" and queue_ids(m) == []
    assert metric(h, "ReconDiffOpened") == 0

    svc.clock = lambda: morning_of(D2)
    svc.run("wechatpay", m, D1, pass_="T+1")  # the bill it was due on does not list it: missing, opened now
    d = diff_of(svc, m, sk)
    assert d["handle_status"] == "OPEN" and "nor of 2024-05-02" in d["next_step"]
    assert d["history"][-1]["action"] == "OPENED" and "either" in d["history"][-1]["note"]
    (item,) = bootstrap.work_queue().list(f"merchant={m}")
    assert (
        item["kind"] == "recon-diff" and item["amount_cent"] == 990 and "nor of 2024-05-02" in item["reason"]
    )
    assert metric(h, "ReconDiffOpened") == 1
    assert svc.run("wechatpay", m, D, pass_="T+2")["status"] == "DIFFS" and state_of(svc, m) == "DIFFS"


def test_an_expected_difference_turns_missing_by_the_clock_when_the_next_day_is_never_read(h, svc):
    """The schedule's later pass of the day opens it once the next bill day's bill is overdue, even when
    that day's own run never came (its bill blocked or not fetched)."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    pay(h, m, 300, f"{D}T09:00:00+08:00")
    sk = booked_just_before_midnight(h, m)
    svc.clock = lambda: morning_of(D1)
    svc.run("wechatpay", m, D, pass_="T+1")
    svc.clock = lambda: morning_of(D2)
    svc.run("wechatpay", m, D, pass_="T+2")
    assert diff_of(svc, m, sk)["handle_status"] == "EXPECTED"  # the bill of D1 may still come today
    svc.clock = lambda: morning_of(D3)
    assert svc.run("wechatpay", m, D, pass_="T+3")["status"] == "DIFFS"
    assert diff_of(svc, m, sk)["handle_status"] == "OPEN" and len(queue_ids(m)) == 1


def test_a_local_only_away_from_midnight_opens_at_once_R36(h, svc):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    pay(h, m, 300, f"{D}T09:00:00+08:00")
    sk = booked_just_before_midnight(h, m)
    table = h.env["LEDGER_TABLE"]
    pk = "wechatpay#" + m + "#" + sk.rsplit("#", 1)[1]
    row = from_item(h.ddb.get_item(TableName=table, Key=to_item({"pk": pk}))["Item"])
    h.ddb.put_item(TableName=table, Item=to_item({**row, "success_time": f"{D}T21:00:00+08:00"}))
    svc.clock = lambda: morning_of(D1)
    assert svc.run("wechatpay", m, D, pass_="T+1")["status"] == "DIFFS"
    assert diff_of(svc, m, sk)["handle_status"] == "OPEN" and len(queue_ids(m)) == 1
