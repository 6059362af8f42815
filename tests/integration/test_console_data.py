"""What the console's Morning and Merchants pages read (#17), against moto through the real handlers: the
last callback seen per merchant (an index read, nothing more on the notify path) and items opened and
cleared per day (the queue's day counter rows)."""

from __future__ import annotations

import json
import random
import time

from tally import bootstrap
from tally.console import data


def _merchant(h):
    return h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))


def _unbooked(h, m, no):
    h.create_order(m["mchid"], no, amount_cent=506)
    headers, body, _ = h.notification(m["mchid"], no, 5)  # 0.05 yuan on a 5.06 order: to a person
    h.notify(m["mchid"], headers, body)
    h.drain()


def test_merchants_page_shows_the_last_callback_seen_from_one_index_query(h, monkeypatch):
    quiet, busy = _merchant(h), _merchant(h)
    for no in ("SEEN0001", "SEEN0002"):
        order = json.loads(h.create_order(busy["mchid"], no, amount_cent=300)["body"])
        headers, body, _ = h.notification(busy["mchid"], order["out_trade_no"], 300)
        assert h.notify(busy["mchid"], headers, body)["statusCode"] == 204
        time.sleep(0.01)
    store = bootstrap.work_queue().store
    queries = []
    real = store.ddb.query
    monkeypatch.setattr(store.ddb, "query", lambda **kw: queries.append(kw) or real(**kw))
    newest = store.last_callback(busy["mchid"])
    assert queries[0]["IndexName"] == "by_merchant" and queries[0]["Limit"] == 1  # no Scan, one page
    raw = bootstrap.tables().get(bootstrap.tables().notify_raw, newest["pk"])
    assert raw["out_trade_no"] == "SEEN0002"  # newest first
    assert store.last_callback(quiet["mchid"]) is None

    rows = {r["id"]: r for r in data.merchants()}
    assert rows[busy["mchid"]]["last_seen"]["channel"] == "wechatpay"
    assert rows[busy["mchid"]]["last_seen"]["at"] == data.cst(raw["notified_at"])
    assert rows[quiet["mchid"]]["last_seen"] is None


def test_the_fourteen_days_count_items_opened_and_cleared_per_day(h):
    m = _merchant(h)
    for no in ("DAYS0001", "DAYS0002", "DAYS0003"):
        _unbooked(h, m, no)
    queue = bootstrap.work_queue()
    today = data.today_cst(time.time()).isoformat()

    def today_row():
        return next(d for d in data.fourteen_days(time.time(), data.queue_items()) if d["date"] == today)

    before = today_row()
    mine = queue.list(f"merchant={m['mchid']}")
    assert len(mine) == 3
    queue.act(mine[0]["id"], "resolve", by="ops", reason="refunded by hand", code="refunded-by-hand")
    queue.bulk(f"merchant={m['mchid']}", "ignore", by="ops", reason="test traffic", dry_run=False)
    after = today_row()
    assert after["cleared"] == before["cleared"] + 3
    assert after["opened"] == before["opened"]  # cleared today, opened today: still counted as opened
    assert after["still_open"] == before["still_open"] - 3
    _unbooked(h, m, "DAYS0004")
    (item,) = queue.list(f"merchant={m['mchid']}")
    queue.act(item["id"], "ack", by="ops")  # an acknowledgement clears nothing
    assert today_row()["cleared"] == after["cleared"]
