"""`tally demo`: a scripted day through the embedded stack, then the morning report.

The day is *yesterday* (Asia/Shanghai): the product's clock and the simulated channels' clock are moved back
one day while it plays, then put right, and the day is reconciled the morning after, as the 10:30 schedule
does; so every page and command that defaults to yesterday (the Morning page, `tally recon show`, `tally
ledger day`) has the day in it.

Orders on WeChat Pay v3 (public-key and certificate mode) and Alipay, paid over real HTTP by the
simulator with the faults a real day brings: duplicate and lost callbacks, a platform-certificate
rotation mid-day, coupons, an amount mismatch, a payment after close, refunds. Then the poller runs
(the pull path recovers what the push path lost) and the report checks the one promise: every
payment the channel took is booked, or with a person, or has a refund task. Exit 1 otherwise.
Then two past coupon days are reconciled three ways (ledger = trade bill = fund flow, R45): one agrees
with zero differences, the other has a settlement credit the fund flow never shows, and it is found.
The report is taken once the queue has settled: counts per kind, the first few items of each.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import pathlib
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tally.channels.alipay.merchant import alipay_desk
from tally.channels.wechatpay_v3.merchant import wechatpay_v3_desk

from tally_cli.demo import ORDER_NOT_FOUND, log_line, progress_line, render, stack_keeps_running
from tally_local.lambda_io import emf_metrics
from tally_local.stack import EmbeddedStack

SCENARIOS = ("paid", "duplicates", "lost", "coupon", "alipay_paid", "refund", "mismatch", "paid_after_close")
DEMO_STATE = pathlib.Path("/tmp/tally-demo-state")


@dataclass
class Day:
    stack: EmbeddedStack
    wechat: str = ""
    wechat_cert: str = ""
    alipay: str = ""
    taken: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # order → (merchant, channel, txn)
    scenarios: Counter[str] = field(default_factory=Counter)
    bill_date: str = ""  # the day played: yesterday, Asia/Shanghai


def main(orders: int = 200, out=sys.stdout, keep: bool = False) -> int:
    """The day on a stack of its own, thrown away afterwards; `keep`: the day is loaded into a stack that
    keeps running like `make run` (TALLY_DEMO=1 make run does the same), so a person can work its queue."""
    if keep:
        import os

        from tally_local import stack as stack_module

        os.environ["TALLY_DEMO"] = str(orders)
        return stack_module.main()
    report = play_alone(orders, DEMO_STATE)
    return tell(report, DEMO_STATE / "product.log", out)


def play_alone(orders: int, state_dir: pathlib.Path) -> dict[str, Any]:
    """The day on an embedded stack of its own (in `state_dir`), stopped afterwards: its morning report."""
    metrics_out = io.StringIO()
    with (
        contextlib.redirect_stdout(metrics_out),
        product_log_to(state_dir / "product.log"),
        EmbeddedStack(api_port=0, state_dir=str(state_dir), simulator_options={"fixed_keys": True}) as stack,
    ):
        return play(stack, orders, metrics_out)


def tell(report: dict[str, Any], log: pathlib.Path, out) -> int:
    """The report after the progress bar, where the day's log lines are; exit 1 if a payment is unaccounted for."""
    print(file=sys.stderr)
    out.write(render(report))
    out.write(log_line(log) + "\n")
    return 0 if not report["unaccounted"] else 1


@contextlib.contextmanager
def product_log_to(path: pathlib.Path) -> Iterator[None]:
    """The product's log lines (Powertools' JSON and the embedded stack's own: the front door, the simulator,
    the pumps) go to a file while the day plays: the terminal belongs to the progress bar and the report. What
    a handler wrote to stdout or stderr it writes to `path`, and so does Python's last-resort handler (a
    logger without handlers: `tally demo` without `--keep`); afterwards they write where they did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    terminal = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    handlers = [
        h
        for lg in every_logger()
        for h in lg.handlers
        if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in terminal
    ]
    last_resort = logging.lastResort
    with open(path, "w", encoding="utf-8") as f:
        before = [h.setStream(f) for h in handlers]
        logging.lastResort = logging.StreamHandler(f)
        logging.lastResort.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Powertools' "no application metrics to publish"
            try:
                yield
            finally:
                logging.lastResort = last_resort
                for h, stream in zip(handlers, before, strict=True):
                    h.setStream(stream)


def every_logger() -> list[logging.Logger]:
    """The root logger and every named one (Powertools' "tally", the stack's "tally_local", ...)."""
    named = [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    return [logging.getLogger(), *named]


def play(stack: EmbeddedStack, orders: int, emitted: io.StringIO) -> dict[str, Any]:
    """The scripted day on a running stack, played as yesterday: merchants, payments with their faults, a
    platform-certificate rotation half way, the poller; then, this morning, the day's reconciliation and the
    morning report once the queue has settled."""
    day = Day(stack)
    set_up_merchants(day)
    old_serial = stack.simulator.platform_serial
    with yesterday() as bill_date:
        day.bill_date = bill_date
        for i in range(orders):
            if i == orders // 2:
                stack.simulator.rotate_platform_certificate()  # R3: callbacks switch to a new serial
            run_scenario(day, i, SCENARIOS[i % len(SCENARIOS)])
            progress(i + 1, orders)
        settle(day)
        work_refund_tasks()
        # read before the clock moves on: set_clock rebuilds the services (a new container), which forgets the
        # serial a callback downloaded (R3, in memory only; the keys function stores certificates)
        rotated = rotation(day, old_serial)
    recon = reconcile(day)
    settlement = settlement_days(day)
    settled_queue(day)
    report = morning_report(day, emitted.getvalue())
    report["recon_failed"] = recon
    report["settlement"] = settlement
    report["rotation"] = rotated
    report["bill_date"] = day.bill_date
    return report


def back_to(day: str, hour: int) -> float:
    """How many days (with a fraction) ago `day` at `hour` o'clock Asia/Shanghai was: for `yesterday`."""
    from datetime import datetime
    from datetime import time as clock_time

    from tally.domain.clock import CHINA

    then = datetime.combine(datetime.fromisoformat(day).date(), clock_time(hour), tzinfo=CHINA)
    return (time.time() - then.timestamp()) / 86400


@contextlib.contextmanager
def yesterday(days: float = 1) -> Iterator[str]:
    """Inside, the product's clock and the simulated channels' clock read `days` days earlier: what is played
    happens then (Asia/Shanghai; one day: yesterday), which is the date the block yields. A fraction of a day
    sets the hour as well (`back_to`)."""
    from datetime import datetime, timedelta

    from tally import bootstrap
    from tally.domain.clock import CHINA

    from tally_local.simulator import kernel

    bootstrap.set_clock(lambda: time.time() - days * 86400)
    try:
        with kernel.days_behind(days):
            yield (datetime.now(CHINA) - timedelta(days=days)).date().isoformat()
    finally:
        bootstrap.set_clock(time.time)


def settled_queue(day: Day, quiet_s: float = 2.0, limit_s: float = 30.0) -> None:
    """Wait until the work queue has stopped changing (refund tasks, the poller's findings arrive after the
    day's last callback): the report counts what a person will find, not what was there a moment before."""
    from tally import bootstrap

    deadline = time.monotonic() + limit_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        day.stack.drain(5)
        now = sorted(item["id"] for item in bootstrap.work_queue().list())
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)


def play_into(stack: EmbeddedStack, orders: int, out=sys.stdout) -> int:
    """`TALLY_DEMO=N make run` / `tally demo --keep`: the day into this running stack, the report printed; the
    product's log lines go to the stack's product log file while it plays, not under the progress bar."""
    emitted = io.StringIO()
    log = pathlib.Path(getattr(stack, "state_dir", "/tmp/tally-demo-state")) / "product.log"
    with product_log_to(log), contextlib.redirect_stdout(emitted):
        report = play(stack, orders, emitted)
    exit_code = tell(report, log, out)
    out.write(stack_keeps_running(stack.api_url, getattr(stack, "console_logins", None) or {}))
    out.flush()
    return exit_code


# ------------------------------------------------------------------ set-up


def set_up_merchants(day: Day) -> None:
    from tally import bootstrap

    from tally_local.demo import seed_demo

    sim, stack = day.stack.simulator, day.stack
    day.wechat = seed_demo(stack)["mchid"]
    m = sim.register_test_merchant("certificate")
    day.wechat_cert = "1900000110"
    sim.register_merchant(
        day.wechat_cert,
        m["apiv3_key"],
        m["merchant_public_key_pem"],
        m["merchant_serial"],
        appid=m["appid"],
        verify_mode="certificate",
    )
    wechatpay_v3_desk(bootstrap.merchants()).add_wechatpay(
        mchid=day.wechat_cert,
        apiv3_key=m["apiv3_key"],
        merchant_key_pem=m["merchant_private_key_pem"],
        merchant_serial=m["merchant_serial"],
        appid=m["appid"],
        notify_url=f"{stack.api_url}/notify/wechatpay/{day.wechat_cert}",
        platform_certs=[sim.platform_cert_pem],
    )
    a = sim.alipay.register_test_merchant("public_key")
    day.alipay = a["app_id"]
    alipay_desk(bootstrap.merchants()).add_alipay(
        app_id=day.alipay,
        app_private_key=a["app_private_key_pem"],
        notify_url=f"{stack.api_url}/notify/alipay/{day.alipay}",
        alipay_public_key=a["alipay_public_key_pem"],
    )


# ------------------------------------------------------------------ the day


def run_scenario(day: Day, i: int, scenario: str) -> None:
    sim, no = day.stack.simulator, f"DAY{i:06d}"
    day.scenarios[scenario] += 1
    if scenario == "alipay_paid":
        create(day, day.alipay, no, 1000 + i, channel="alipay")
        day.taken[no] = (day.alipay, "alipay", sim.alipay.pay(day.alipay, no))
        return
    mchid = day.wechat_cert if i % 2 else day.wechat
    amount = 500 + i
    create(day, mchid, no, amount)
    if scenario == "paid_after_close":
        close(day, mchid, no)
        resource = sim.transaction_resource(
            mchid, no, amount
        )  # the buyer paid anyway (a race at the channel)
        headers, body = sim.build_notification(mchid, resource)
        post(f"{day.stack.api_url}/notify/wechatpay/{mchid}", body, headers)
        day.taken[no] = (mchid, "wechatpay", resource["transaction_id"])
        return
    options = {
        "duplicates": {"duplicates": 3},
        "lost": {"drop": True},
        "coupon": {"payer_total": amount - 100},
        "mismatch": {"amount_total": amount // 100},
    }.get(scenario, {})
    day.taken[no] = (mchid, "wechatpay", sim.pay(mchid, no, **options))
    if scenario == "refund":
        wait_paid(day, mchid, no)
        call(
            "POST",
            f"{day.stack.api_url}/refunds",
            {"mchid": mchid, "out_trade_no": no, "amount_cent": 100, "reason": "demo partial refund"},
        )


def settle(day: Day) -> None:
    """Let retries land, then one poller run finds what every callback lost (all made due now)."""
    from tally import bootstrap

    time.sleep(1.0)
    day.stack.drain(60)
    ddb, table = bootstrap.tables().ddb, day.stack.env["ORDERS_TABLE"]
    for no, (mchid, _, _) in day.taken.items():
        with contextlib.suppress(ddb.exceptions.ConditionalCheckFailedException):
            ddb.update_item(
                TableName=table,
                Key={"pk": {"S": f"{mchid}#{no}"}},
                UpdateExpression="SET poll_due = :d",
                ConditionExpression="attribute_exists(poll_pk)",
                ExpressionAttributeValues={":d": {"S": "2000-01-01T00:00:00.000Z"}},
            )
    bootstrap.poll_service().run(out_of_time=lambda: False)
    day.stack.drain(60)


def work_refund_tasks() -> None:
    """What the poller's next run does with the day's refund tasks (RefundTaskPolicy=manual: to a person)."""
    from tally import bootstrap

    bootstrap.refund_service().work_tasks()


def reconcile(day: Day) -> list[dict[str, str]]:
    """The day's reconciliation for every merchant, the morning after, as the 10:30 schedule runs it for
    yesterday: the trade bill, then the fund flow (WeChat's T+1 credit is due today: in transit until its
    bill is out tomorrow). What came of it is in the ledger day (the report's money rows); this answers the
    merchants whose reconciliation failed, and why."""
    from tally import bootstrap

    failed = []
    for channel, mchid in (("wechatpay", day.wechat), ("wechatpay", day.wechat_cert), ("alipay", day.alipay)):
        try:
            bootstrap.recon_service().run(channel, mchid, day.bill_date)
            bootstrap.recon_service().fund_flow(channel, mchid, day.bill_date)
        except Exception as exc:  # noqa: BLE001 - the demo reports what happened; the queue shows the rest
            failed.append({"channel": channel, "mchid": mchid, "why": f"{type(exc).__name__}: {exc}"[:160]})
    day.stack.drain(30)
    return failed


COUPON_DAY = (  # (order total, payer total, coupon type): what the coupon day's buyers paid (R43)
    (1500, 1400, "CASH"),  # a CASH coupon (充值型): the merchant is settled the whole 15.00
    (2000, 1700, "NOCASH"),  # a NOCASH coupon (免充值): settled 17.00, the merchant gave up 3.00
    (999, 999, "CASH"),  # no coupon
)


def settlement_days(day: Day) -> dict[str, Any]:
    """Did the money land (R45)? Two past days of coupon payments on the demo merchant, each reconciled three
    ways as the schedule would on T+2: the first with zero differences (ledger = trade bill = fund flow), the
    second with a settlement credit the channel's fund flow never shows (planted: `drop_credit`), found."""
    from datetime import datetime, timedelta

    from tally import bootstrap
    from tally.domain.clock import CHINA
    from tally.domain.statement import day_verdict

    from tally_local.simulator import kernel

    sim, mchid = day.stack.simulator, day.wechat
    # two past days, each paid on its own day (the clocks moved back to it: R50 parks a report dated on a day
    # reconciliation has finished with), reconciled this morning
    first = (datetime.now(CHINA) - timedelta(days=20)).date()
    days = [first.isoformat(), (first + timedelta(days=1)).isoformat()]
    for d, when in enumerate(days):
        # the clocks read 22:00 of that day: its payments (10:00 to 12:00) are in its past, whatever the hour now
        with yesterday(back_to(when, hour=22)):
            for n, (total, payer, coupon) in enumerate(COUPON_DAY):
                no = f"SETTLE{d}{n}{first:%m%d}"
                create(day, mchid, no, total)
                sim.pay(
                    mchid, no, payer_total=payer, coupon_type=coupon, success_time=f"{when}T1{n}:00:00+08:00"
                )
                wait_paid(day, mchid, no)
            day.stack.drain(30)
    recon, out = bootstrap.recon_service(), {}
    for d, when in enumerate(days):
        trade = recon.run("wechatpay", mchid, when)
        if d == 1:  # planted: the first credit of the fund-flow day missing (both days asked: L, L+1)
            sim.bills.fundflow.fault("drop_credit", count=2)
        with kernel.next_morning():  # the second day's T+1 credit lands today: its fund flow is out tomorrow
            fund = recon.fund_flow("wechatpay", mchid, when)
        sim.bills.fundflow.faults.clear()
        diffs = [
            x
            for x in recon.show("wechatpay", mchid, when)["diffs"]
            if x.get("handle_status") == "OPEN" and x.get("cls") == "SETTLEMENT_DIFFERS"
        ]
        verdict = day_verdict(recon.store.run_rows(trade["pk"]))
        figures = fund.get("figures") or {}
        out[when] = {
            "trade": trade.get("status"),
            "verdict": verdict.code,
            "legs": list(verdict.legs),
            "settlement_cent": (figures.get("ledger") or {}).get("settlement_cent"),
            "diffs": [
                {
                    "item": x["item"],
                    "gap_cent": x.get("gap_cent", 0),
                    "local_cent": x.get("local_amount_cent"),
                    "channel_cent": x.get("channel_amount_cent"),
                    "fund_day": x.get("fund_day"),
                }
                for x in diffs
            ],
            "planted": d == 1,
        }
    return out


def rotation(day: Day, old_serial: str) -> dict[str, Any]:
    """What the platform-certificate rotation did: the serials Tally stores for the cert-mode merchant."""
    from tally import bootstrap
    from tally.store.keys import PlatformCertStore

    new_serial = day.stack.simulator.platform_serial
    stored = (PlatformCertStore(bootstrap.tables()).get(day.wechat_cert) or {}).get("certs", {})
    known = wechatpay_v3_desk(bootstrap.merchants()).wechatpay(day.wechat_cert).creds.platform.by_serial
    have = set(stored) | set(known)
    return {
        "old": old_serial,
        "new": new_serial,
        "merchant": day.wechat_cert,
        "serials": len(have),
        "included": new_serial in have,
    }


# ------------------------------------------------------------------ the report


def morning_report(day: Day, emitted: str) -> dict[str, Any]:
    from tally import bootstrap
    from tally.observability import ALARMED

    orders = bootstrap.order_service()
    statuses: Counter[str] = Counter()
    unaccounted = []
    manual = bootstrap.work_queue().list()
    with_person = {item["order"] for item in manual}
    tasks = {row["out_trade_no"] for row in scan(day, "REFUND_TASKS_TABLE")}
    for no, (mchid, _, txn) in day.taken.items():
        view = orders.orders.get(mchid, no) or {}
        statuses[view.get("status", ORDER_NOT_FOUND)] += 1
        if view.get("transaction_id") != txn and no not in with_person and no not in tasks:
            unaccounted.append(f"{mchid}/{no} ({txn})")
    metrics = emitted_metrics(emitted)
    return {
        "orders": len(day.taken),
        "scenarios": dict(day.scenarios),
        "statuses": dict(statuses),
        "ledger": Counter(row["kind"] for row in scan(day, "LEDGER_TABLE")),
        "manual": manual,
        "refund_tasks": len(tasks),
        "pending": bootstrap.pending_report().report(),
        "alarms": {name: n for name, n in sorted(metrics.items()) if name in ALARMED and n},
        "unaccounted": unaccounted,
        # yesterday's money per merchant, the one merchant-day arithmetic (R49), with its recon state and verdict
        "money": bootstrap.ledger_day_service().day(day.bill_date)["rows"] if day.bill_date else [],
    }


# ------------------------------------------------------------------ helpers


def create(day: Day, mchid: str, no: str, amount: int, **extra: Any) -> None:
    status, body = call(
        "POST",
        f"{day.stack.api_url}/orders",
        {"mchid": mchid, "out_trade_no": no, "amount_cent": amount, "description": "demo day", **extra},
    )
    if status not in (200, 201):  # 200: the same order was there already (a re-run)
        raise RuntimeError(f"creating {no} failed: {status} {body}")


def close(day: Day, mchid: str, no: str) -> None:
    from tally import bootstrap

    ddb = bootstrap.tables().ddb
    ddb.update_item(
        TableName=day.stack.env["ORDERS_TABLE"],
        Key={"pk": {"S": f"{mchid}#{no}"}},
        UpdateExpression="SET expire_at = :x, poll_due = :x",
        ExpressionAttributeValues={":x": {"S": "2000-01-01T00:00:00.000Z"}},
    )
    bootstrap.poll_service().run(out_of_time=lambda: False)  # expired: closed at the channel, then here


def wait_paid(day: Day, mchid: str, no: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if call("GET", f"{day.stack.api_url}/orders/{mchid}/{no}")[1].get("status") == "PAID":
            return
        time.sleep(0.05)


def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """The merchant backend's signed call (SigV4 with the stack's fake credentials: tally_local/sigv4.py)."""
    from tally_local.sigv4 import signed_headers

    data = json.dumps(body).encode() if body is not None else None
    return post(url, data, signed_headers(method, url, data, {"content-type": "application/json"}), method)


def post(url: str, data: bytes | None, headers: dict[str, str], method: str = "POST") -> tuple[int, Any]:
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        raw, status = err.read(), err.code
    try:
        return status, json.loads(raw or b"{}")
    except ValueError:
        return status, {}


def scan(day: Day, env_var: str) -> list[dict[str, Any]]:
    from tally import bootstrap
    from tally.store.codec import from_item

    ddb, rows, kwargs = bootstrap.tables().ddb, [], {"TableName": day.stack.env[env_var]}
    while True:
        page = ddb.scan(**kwargs)  # a report over a demo's tables, never product code
        rows += [from_item(i) for i in page.get("Items", [])]
        if "LastEvaluatedKey" not in page:
            return rows
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def emitted_metrics(stdout: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for name, value in emf_metrics(stdout):
        counts[name] += int(value)
    return counts


def progress(done: int, total: int) -> None:
    sys.stderr.write("\r" + progress_line(done, total))
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
