"""The attacks of issue #38 as actors of the simulated day: a hostile tenant and a careless operator.

Like REFUND_FORGED and PAYMENT_PREEMPTED (tests/sim/day.py), each attack is drawn from a random stream of its own
(so every other draw of a seed stays what it was), played at an instant of the day through the real handlers, and
checked when the day is over (`check`, called by scenario.check). What each must end as:

    BACKDATED      after the night, the hostile tenant registers an order of its own (on half the days it lets the
                   order expire and be closed first) and signs its SUCCESS itself, dated on a day whose
                   reconciliation has finished (10 days back) or in 2099: parked for a person, "not booked", no
                   ledger entry, no refund task, ApplyDayOutOfWindow counted (R50 before R17)
    FORGERY_BURST  the hostile tenant signs more partner-form payment reports naming another merchant than may be
                   kept: filed under the hostile tenant (claimed_mchid names the victim), at most FORGERIES_KEPT
                   open, every one counted; none in the victim's queue (R39, R40)
    COMMA_MERCHANT the hostile tenant names sub-merchant `1,merchant=<victim>`: quarantined under the hostile
                   tenant, no row under the made-up id; the careless operator's filter for that value selects
                   nothing of the victim's, and a filter naming `merchant` twice is refused (escaped filters)
    JUNK_BURST     a stranger posts more junk bodies than may be kept, with the headers of a genuine callback of a
                   day's payment, around that callback: at most REJECTED_KEPT + REJECTED_KEPT_GENUINE kept, all
                   counted, and the payment still ends as planned (R40; scenario.check's I1b)
    REPLAY_OPS     the careless operator, after the night: `tally manual replay --run ID --dry-run` on a paused
                   run changes nothing (finding 3), and a bulk confirm whose previewed set changed acts on nothing
                   and answers with the new preview (R52)
    HEARTBEAT_TWICE the heartbeat's schedule fires twice in one minute: one order, one payment, no refund task,
                   nothing with a person (R54)

The previous release (tests/sim/upgrade.py) predates these fixes, so the deploy days leave them out.
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.sim.channels import cst

if TYPE_CHECKING:
    from tests.sim.day import OrderPlan
    from tests.sim.scenario import Scenario

BACKDATED = "hostile tenant signs its own SUCCESS on a finished or future day (R50)"
FORGERY_BURST = "hostile tenant's partner-form reports naming another merchant, past the bound (R39, R40)"
COMMA_MERCHANT = "hostile tenant names sub-merchant '1,merchant=<victim>'; the operator filters on it"
JUNK_BURST = "junk burst with a genuine callback's headers around it (R40)"
REPLAY_OPS = "careless operator: --run with --dry-run, a bulk confirm after the set changed (R52)"
HEARTBEAT_TWICE = "the heartbeat's schedule delivered twice in one minute (R54)"
P_ATTACK = {
    BACKDATED: 0.12,
    FORGERY_BURST: 0.08,
    COMMA_MERCHANT: 0.08,
    JUNK_BURST: 0.08,
    REPLAY_OPS: 0.1,
    HEARTBEAT_TWICE: 0.08,
}
V3 = "wechatpay_v3"
FAR_FUTURE = "2099-01-01T10:00:00+08:00"


@dataclass
class Attack:
    kind: str
    at_s: float  # seconds after the day starts
    hostile: str  # the merchant whose keys sign (BACKDATED, bursts) or whose URL is attacked (JUNK_BURST)
    victim: str = ""
    count: int = 0  # reports or junk bodies in a burst; BACKDATED: the amount in cents
    when: str = ""  # BACKDATED: "finished" (10 days back) or "future"
    closed: bool = False  # BACKDATED: the order is CLOSED before its SUCCESS (the paid-after-close path)
    order_key: str = ""  # JUNK_BURST: the order whose genuine callback the junk surrounds


def draw(seed: int, merchants: list[tuple[str, str]], orders: list[OrderPlan]) -> list[Attack]:
    """The day's attacks; each from its own stream, so the day's other draws do not change."""
    from tally.service.ingest import REJECTED_KEPT
    from tally.service.refund_inbox import FORGERIES_KEPT

    from tests.sim.channels import KINDS

    pool = list(KINDS[V3].pool)
    busy = {o.preempted_by for o in orders} | {r.forged_by for o in orders for r in o.refunds}
    victims = [m for ch, m in merchants if ch == V3]
    attacks = []
    for kind, p in P_ATTACK.items():
        rng = random.Random(f"{kind}#{seed}")
        if rng.random() >= p:
            continue
        at = rng.uniform(0, 300)
        if kind == BACKDATED:
            when = rng.choice(("finished", "future"))
            hostile, amount = rng.choice(pool), rng.randint(1, 10**6)
            closed = rng.random() < 0.5  # drawn last: the draws before it are what they were
            attacks.append(Attack(kind, at, hostile, count=amount, when=when, closed=closed))
        elif kind in (FORGERY_BURST, COMMA_MERCHANT) and victims:
            victim = rng.choice(victims)
            # a hostile tenant that forges nothing else today: the bound is per reporting merchant and cause
            free = [m for m in pool if m != victim and m not in busy]
            if free:
                attacks.append(Attack(kind, at, rng.choice(free), victim, FORGERIES_KEPT + rng.randint(1, 8)))
        elif kind == JUNK_BURST:
            paid = [o for o in orders if o.channel == V3 and o.pay_s is not None and o.registered]
            if paid:
                o = rng.choice(paid)
                attacks.append(
                    Attack(
                        kind,
                        o.pay_s or 0.0,
                        o.mchid,
                        count=REJECTED_KEPT + rng.randint(1, 8),
                        order_key=o.key,
                    )
                )
        elif kind == REPLAY_OPS:
            attacks.append(Attack(kind, at, ""))
        elif kind == HEARTBEAT_TWICE:  # both beats in the first half of one minute
            attacks.append(Attack(kind, 60 * (at // 60) + at % 30, ""))
    return attacks


# ---------------------------------------------------------------------------------------------- playing


def schedule(run: Scenario) -> None:
    for attack in run.day.attacks:
        if attack.kind == REPLAY_OPS:
            run.at(attack.at_s, _preview, run, attack)  # confirmed after the night (operate)
            continue
        if attack.kind == BACKDATED:
            continue  # after the night (operate): see _backdated_after_the_night
        if attack.kind == HEARTBEAT_TWICE:
            run.at(attack.at_s, _beat, run)
            run.at(attack.at_s + 20.0, _beat, run)  # the same minute: a duplicate EventBridge delivery
        else:
            run.at(attack.at_s + (0.5 if attack.kind == JUNK_BURST else 0.0), PLAYS[attack.kind], run, attack)


def _post(run: Scenario, mchid: str, headers: dict[str, str], body: bytes) -> dict[str, Any] | None:
    route = run.kinds[V3].route(mchid)
    event = run.env.http_event("POST", route.path, body, {**route.headers, **headers}, route.params)
    response, _ = run._invoke("NotifyFunction", event)
    run._wake_worker()
    return response


def signed(
    run: Scenario, mchid: str, resource: dict[str, Any], prefixes: str = "AB"
) -> tuple[dict[str, str], bytes]:
    """A payment report `mchid` signs with its own keys, now; nonces unique in the day (`prefixes`: the
    envelope's and the resource's first letters)."""
    run._seq += 1
    return run.world.sim.build_notification(
        mchid,
        resource,
        timestamp=int(run.env.clock.now),
        nonce=f"{prefixes[0]}{run._seq:031d}",
        resource_nonce=f"{prefixes[1]}{run._seq:011d}",
        notification_id=f"00000000-0000-4000-8000-{run._seq:012d}",
    )


def _backdated_otn(run: Scenario, attack: Attack) -> str:
    return f"B{run.day.seed % 10**8:08d}"


def _backdated_tx(run: Scenario) -> str:
    return f"4200000038{run.day.seed % 10**8:08d}{0:010d}"


def _register(run: Scenario, attack: Attack) -> None:
    body = {
        "mchid": attack.hostile,
        "out_trade_no": _backdated_otn(run, attack),
        "amount_cent": attack.count,
        "description": "sim order",
        "prepay": False,
        "expire_minutes": 15,
        "channel": run.kinds[V3].order_channel,
    }
    response, error = run._invoke(
        "OrdersFunction", run.env.http_event("POST", "/orders", json.dumps(body).encode(), {}, {})
    )
    if not response or response.get("statusCode") not in (200, 201):
        run.result.unhandled.append(f"the hostile tenant's order was refused: {response or error}")


def _backdate(run: Scenario, attack: Attack) -> None:
    when = (
        cst(run.start - 10 * 86400).isoformat(timespec="seconds") if attack.when == "finished" else FAR_FUTURE
    )
    resource = run.world.sim.transaction_resource(
        attack.hostile,
        _backdated_otn(run, attack),
        attack.count,
        transaction_id=_backdated_tx(run),
        success_time=when,
    )
    response = _post(run, attack.hostile, *signed(run, attack.hostile, resource))
    status = response and response.get("statusCode")
    run.log(f"hostile {attack.hostile} signed its own SUCCESS dated {when}: {status}")
    if status not in (200, 204):
        run.result.unhandled.append(f"the hostile tenant's SUCCESS was answered {status}")


def _partner(run: Scenario, hostile: str, named: str, otn: str) -> tuple[dict[str, str], bytes]:
    resource = run.world.sim.transaction_resource(hostile, otn, 100)
    resource["sp_mchid"] = resource.pop("mchid")
    resource["sub_mchid"] = named
    return signed(run, hostile, resource)


def _burst_otn(run: Scenario, i: int) -> str:
    return f"F{run.day.seed % 10**8:08d}{i:03d}"


def _forgery_burst(run: Scenario, attack: Attack) -> None:
    answers: Counter = Counter()
    for i in range(attack.count):
        response = _post(
            run, attack.hostile, *_partner(run, attack.hostile, attack.victim, _burst_otn(run, i))
        )
        answers[response and response.get("statusCode")] += 1
    run.log(f"hostile {attack.hostile} sent {attack.count} reports naming {attack.victim}: {dict(answers)}")


def _comma_otn(run: Scenario) -> str:
    return f"C{run.day.seed % 10**8:08d}"


def _comma_merchant(run: Scenario, attack: Attack) -> None:
    named = f"1,merchant={attack.victim}"
    response = _post(run, attack.hostile, *_partner(run, attack.hostile, named, _comma_otn(run)))
    run.log(
        f"hostile {attack.hostile} named sub-merchant {named!r}: {response and response.get('statusCode')}"
    )


def _junk_burst(run: Scenario, attack: Attack) -> None:
    payment = next((p for p in run.payments.values() if p.order.key == attack.order_key), None)
    if payment is None:
        return  # not paid (yet): nothing genuine to imitate
    run._seq += 1
    headers, _ = run.kinds[V3].notification(payment, run.env.clock.now, run._seq)
    answers: Counter = Counter()
    for i in range(attack.count):
        response = _post(run, attack.hostile, headers, json.dumps({"junk": i}).encode())
        answers[response and response.get("statusCode")] += 1
    run.log(f"junk burst of {attack.count} on {attack.hostile}'s URL: {dict(answers)}")


def _beat(run: Scenario) -> None:
    """One run of the heartbeat λ's beat, its callback posted to the notify λ (the API it would call)."""
    from tally import bootstrap

    from tests.sim.faults import SimulatedCrash

    beat = bootstrap.heartbeat()
    beat.api_url = "https://api.sim"

    def post(url: str, headers: dict[str, str], body: bytes) -> int:
        return int((_post(run, beat.mchid, headers, body) or {}).get("statusCode") or 0)

    beat.post = post
    handler = (
        run.env.observer._handler
    )  # the beat's own log lines: kept off stdout (the λs' go to the observer)
    previous = handler.setStream(io.StringIO())
    try:
        answer: Any = beat.beat()
    except (Exception, SimulatedCrash) as exc:  # noqa: BLE001 - an injected fault: the next minute beats again
        answer = type(exc).__name__
    finally:
        handler.setStream(previous)
    run.log(f"heartbeat beat: {answer}")


PLAYS = {FORGERY_BURST: _forgery_burst, COMMA_MERCHANT: _comma_merchant, JUNK_BURST: _junk_burst}


# ---------------------------------------------------------------------------------------------- checking


def check(run: Scenario) -> None:
    """Each attack of the day ended where it must (one violation line per breach)."""
    if not run.day.attacks:
        return
    events = run.env.scan("NOTIFY_EVENT_TABLE")
    for attack in run.day.attacks:
        CHECKS[attack.kind](run, attack, events, run.result.violations)


def _check_backdated(run: Scenario, attack: Attack, events: list[dict[str, Any]], v: list[str]) -> None:
    tx = _backdated_tx(run)
    if any(e.get("transaction_id") == tx for e in run.env.scan("LEDGER_TABLE")):
        v.append(f"R50 the hostile tenant's self-signed SUCCESS {tx} dated {attack.when} was booked")
    if any(t.get("transaction_id") == tx for t in run.env.scan("REFUND_TASKS_TABLE")):
        v.append(
            f"R50 the hostile tenant's self-signed SUCCESS {tx} dated {attack.when} became a refund task"
        )
    if attack.closed:
        order = run.env.get("ORDERS_TABLE", f"{attack.hostile}#{_backdated_otn(run, attack)}") or {}
        if order.get("status") != "CLOSED":
            v.append(
                f"R50 {tx}: the hostile tenant's order is {order.get('status')}, not CLOSED, after its SUCCESS"
            )
    raw = run.env.get("NOTIFY_RAW_TABLE", f"wechatpay#{attack.hostile}#{tx}") or {}
    if raw.get("handled") != 2 or "not booked" not in str(raw.get("manual_reason")):
        v.append(f"R50 {tx} ({attack.when}) is not with a person: handled {raw.get('handled')}")
    if not run.result.metrics.get("ApplyDayOutOfWindow"):
        v.append(f"R50 {tx} ({attack.when}) parked without ApplyDayOutOfWindow")


def _check_forgery_burst(run: Scenario, attack: Attack, events: list[dict[str, Any]], v: list[str]) -> None:
    from tally.service.refund_inbox import FORGERIES_KEPT

    prefix = _burst_otn(run, 0)[:-3]
    mine = [r for r in events if str(r.get("out_trade_no", "")).startswith(prefix) and r.get("manual_kind")]
    if any(r.get("mchid") != attack.hostile for r in mine):
        v.append(f"R39 a forgery naming {attack.victim} was filed under another merchant than its signer")
    if not 0 < len(mine) <= FORGERIES_KEPT:
        v.append(f"R40 {len(mine)} open forgery rows kept of {attack.count} (bound {FORGERIES_KEPT})")
    counted = _counted(events, "forgery_count", attack.hostile)
    if counted < attack.count:
        v.append(f"R40 {attack.count} forgeries by {attack.hostile}, {counted} counted")
    _nothing_of_victim_named(run, attack, prefix, v)


def _counted(events: list[dict[str, Any]], kind: str, mchid: str) -> int:
    """What the aggregate rows of one kind count for one merchant (every report, kept or not)."""
    return sum(
        int(r.get("rejections") or 0) for r in events if r.get("kind") == kind and r.get("mchid") == mchid
    )


def _nothing_of_victim_named(run: Scenario, attack: Attack, prefix: str, v: list[str]) -> None:
    from tally import bootstrap

    for item in bootstrap.work_queue().list(f"merchant={attack.victim}"):
        if str(item.get("order") or "").startswith(prefix):
            v.append(f"R39 the victim {attack.victim}'s queue lists the hostile report {item.get('order')}")


def _check_comma_merchant(run: Scenario, attack: Attack, events: list[dict[str, Any]], v: list[str]) -> None:
    from tally import bootstrap
    from tally.console.actions import filter_text
    from tally.service.queue import QueueError, parse_filter

    named = f"1,merchant={attack.victim}"
    if any("," in str(r.get("mchid") or "") for r in events):
        v.append(f"R39 a row was filed under the made-up merchant id {named!r}")
    if not any(
        r.get("manual_kind") == "quarantined"
        and r.get("mchid") == attack.hostile
        and named in str(r.get("reason"))
        for r in events
    ):
        v.append(f"R5 the report naming {named!r} was not quarantined under its signer {attack.hostile}")
    try:  # the careless operator previews a replay for the merchant the report named
        selected = bootstrap.work_queue().list(filter_text({"merchant": named}))
    except QueueError:
        selected = []
    if any(i.get("merchant") == attack.victim for i in selected):
        v.append(f"the filter value {named!r} selected {attack.victim}'s items")
    try:
        parse_filter(f"merchant={named}")
        v.append(f"a filter naming merchant twice ({named!r}) was accepted")
    except QueueError:
        pass


def _check_junk_burst(run: Scenario, attack: Attack, events: list[dict[str, Any]], v: list[str]) -> None:
    from tally.service.ingest import REJECTED_KEPT, REJECTED_KEPT_GENUINE

    kept = [r for r in events if r.get("kind") == "rejected" and r.get("mchid") == attack.hostile]
    if len(kept) > REJECTED_KEPT + REJECTED_KEPT_GENUINE:
        v.append(f"R40 {len(kept)} rejected rows kept for {attack.hostile} after a burst of {attack.count}")
    if not any(p.order.key == attack.order_key for p in run.payments.values()):
        return
    counted = _counted(events, "rejected_count", attack.hostile)
    if counted < attack.count:
        v.append(f"R40 {attack.count} junk bodies on {attack.hostile}'s URL, {counted} counted")


def _check_heartbeat(run: Scenario, attack: Attack, events: list[dict[str, Any]], v: list[str]) -> None:
    """R54: two beats in one minute are one order and one payment; synthetic money opens no item or task."""
    from tally import bootstrap

    hb = synthetic_mchid()
    booked = Counter(
        e.get("order_pk")
        for e in run.env.scan("LEDGER_TABLE")
        if e.get("mchid") == hb and e["kind"] == "PAYMENT"
    )
    v += [f"R54 heartbeat order {pk} booked {n} payments" for pk, n in booked.items() if n > 1]
    v += [
        f"R54 a refund task for synthetic money: {t['pk']}"
        for t in run.env.scan("REFUND_TASKS_TABLE")
        if t.get("mchid") == hb
    ]
    v += [
        f"R54 the synthetic payment {r['pk']} went to a person"
        for r in run.env.scan("NOTIFY_RAW_TABLE")
        if r.get("mchid") == hb and r.get("handled") == 2
    ]
    if bootstrap.work_queue().list(f"merchant={hb}"):
        v.append("R54 the synthetic merchant has items in the work queue")


def synthetic_mchid() -> str:
    """The heartbeat's synthetic merchant: its money is the product's own, never the channel's (scenario.check)."""
    from tally import bootstrap

    return bootstrap.settings().heartbeat_mchid


CHECKS = {
    HEARTBEAT_TWICE: _check_heartbeat,
    BACKDATED: _check_backdated,
    FORGERY_BURST: _check_forgery_burst,
    COMMA_MERCHANT: _check_comma_merchant,
    JUNK_BURST: _check_junk_burst,
    REPLAY_OPS: lambda *_: None,  # checked as it acts, in operate()
}


# ---------------------------------------------------------------------------------------------- the operator

MONEY_TABLES = ("NOTIFY_RAW_TABLE", "ORDERS_TABLE", "LEDGER_TABLE", "REFUNDS_TABLE")
OPERATOR = "sim-operator"
UNBOOKED = "kind=unbooked"  # payments waiting for a person: what a key fix or a late order lets replay book


def _preview(run: Scenario, attack: Attack) -> None:
    """Mid-day, the operator previews replaying every replayable item (the preview a console page shows)."""
    from tally import bootstrap

    try:
        run.operator_preview = bootstrap.work_queue().bulk(None, "replay", by=OPERATOR, dry_run=True)
    except Exception as exc:  # noqa: BLE001 - an injected AWS fault: the operator sees an error page
        run.log(f"operator's preview failed: {type(exc).__name__}")
        return
    run.log(f"operator previewed replay of {run.operator_preview['would_change']} item(s)")


def _state(run: Scenario) -> dict[str, list[dict[str, Any]]]:
    return {
        t: sorted(run.env.scan(t), key=lambda r: str(r.get("pk")) + str(r.get("sk"))) for t in MONEY_TABLES
    }


def operate(run: Scenario) -> None:
    """After the night, before the checks: the careless operator confirms the mid-day preview, then runs a
    paused bulk replay with `--dry-run`. Neither may change a row of money (violations name the breach)."""
    for attack in run.day.attacks:
        if attack.kind == REPLAY_OPS:
            _stale_confirm(run)
            _dry_run_of_a_paused_run(run)
        elif attack.kind == BACKDATED:
            _backdated_after_the_night(run, attack)


def _backdated_after_the_night(run: Scenario, attack: Attack) -> None:
    """The hostile tenant registers an order and signs its SUCCESS dated 10 days back or in 2099. When the attack
    is `closed`, the order expires first and the poller closes it (at the channel, then here): the SUCCESS is then
    money paid after close, which R17 would make a refund task; R50 looks at its day first."""
    run.kinds[V3].record_order(attack.hostile, _backdated_otn(run, attack), attack.count)
    _register(run, attack)
    if attack.closed:
        run.env.clock.now += 16 * 60.0  # past the order's 15 minutes
        run.poller_tick(reschedule=False)
        order = run.env.get("ORDERS_TABLE", f"{attack.hostile}#{_backdated_otn(run, attack)}") or {}
        run.log(f"hostile {attack.hostile}'s order {_backdated_otn(run, attack)} is {order.get('status')}")
    run.env.clock.now += 5.0
    _backdate(run, attack)
    run._drain()


def _stale_confirm(run: Scenario) -> None:
    """R52: a bulk confirm carries the previewed set; when the set changed since, nothing is done and the new
    preview is the answer. (When it did not change, the operator has nothing careless to do here.)"""
    from tally import bootstrap
    from tally.service.queue import SetChanged

    preview = getattr(run, "operator_preview", None)
    if preview is None:
        return
    queue = bootstrap.work_queue()
    now = queue.bulk(None, "replay", by=OPERATOR, dry_run=True)
    if sorted(now["ids"]) == sorted(preview["ids"]):
        run.log("operator: the previewed set did not change; nothing careless to confirm")
        return
    expect = {"ids": preview["ids"], "count": preview["would_change"], "amount_cent": preview["amount_cent"]}
    before = _state(run)
    try:
        done = queue.bulk(None, "replay", by=OPERATOR, reason="confirm", dry_run=False, expect=expect)
        run.result.violations.append(
            f"R52 a confirm of {preview['would_change']} previewed item(s) acted on {done.get('changed')} "
            f"after the set changed to {now['would_change']}"
        )
    except SetChanged as changed:
        if sorted(changed.preview["ids"]) != sorted(now["ids"]):
            run.result.violations.append("R52 the refused confirm's new preview is not the set as it is now")
    if _state(run) != before:
        run.result.violations.append("R52 a refused bulk confirm changed rows of money")
    run.log(f"operator confirmed a stale preview ({preview['would_change']} → {now['would_change']} items)")


def _dry_run_of_a_paused_run(run: Scenario) -> None:
    """Finding 3: `tally manual replay --run ID --dry-run` replayed for real. A run paused after one item,
    then its dry run: the run's count and every row of money stay as they were."""
    from tally import bootstrap

    if len(bootstrap.work_queue().list(UNBOOKED)) < 2:
        return  # a run of one item is done after it, not paused
    started = _cli(
        run, "manual", "replay", "--filter", UNBOOKED, "--by", OPERATOR, "--why", "sim", "--limit", "1"
    )
    run._drain()  # what the one replayed item sent to the apply queue
    if not isinstance(started, dict) or "run_id" not in started:
        run.result.unhandled.append(f"operator: the bulk replay did not start: {started}")
        return
    before = _state(run)
    plan = _cli(run, "manual", "replay", "--run", started["run_id"], "--dry-run")
    run._drain()
    if _state(run) != before:
        run.result.violations.append("finding 3: `manual replay --run ID --dry-run` changed rows of money")
    if bootstrap.bulk_replay().show(started["run_id"])["done_items"] != started["done_items"]:
        run.result.violations.append("finding 3: `manual replay --run ID --dry-run` replayed items")
    run.log(f"operator: --run (paused after 1) --dry-run: {plan and plan.get('would_replay')}")


def _cli(run: Scenario, *argv: str) -> Any:
    """`tally … --json --local` as the operator types it, against this process's moto; its JSON document."""
    import contextlib
    import io
    import os
    import tempfile

    from tally_cli.main import main

    saved = {k: os.environ.get(k) for k in ("TALLY_STATE_DIR", "AWS_ENDPOINT_URL")}
    out = io.StringIO()
    with tempfile.TemporaryDirectory() as state:
        with open(os.path.join(state, "local.json"), "w") as f:
            json.dump({"endpoint_url": "", "region": "us-east-1", "api_url": "", "env": run.env.env}, f)
        os.environ["TALLY_STATE_DIR"] = state
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = main([*argv, "--json", "--local"])
        finally:
            for k, value in saved.items():
                if value is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = value
    try:
        return json.loads(out.getvalue()) if code == 0 else {"exit": code, "out": out.getvalue()[-300:]}
    except ValueError:
        return {"exit": code, "out": out.getvalue()[-300:]}
