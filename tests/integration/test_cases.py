"""Cases, not fragments (R48), and bulk actions that do exactly what their preview showed (R52), on moto through
the real handlers: the console's pages and forms are driven in-process through its own router (app.handle)
with an operator's verified claims, the CLI as a person types it."""

from __future__ import annotations

import html
import json
import random
import re
import time
import urllib.parse

import pytest
from tally import bootstrap
from tally.console import app
from tally.console.auth import csrf_token, identity
from tally.store.codec import to_item

from tests.integration.queue_helpers import inject_refund_task, orphan_payments
from tests.integration.refund_helpers import paid_order

CLAIMS = {
    "sub": "sub-ops",
    "cognito:username": "alice",
    "cognito:groups": "[operators]",
    "jti": "jti-ops",
    "token_use": "id",
}
D = "2024-05-01"


@pytest.fixture
def cli(tally_cli):
    return tally_cli


def console(method: str, page: str, form: dict | list | None = None, **query: str) -> tuple[int, str, dict]:
    """One request to the console's router, as API Gateway hands it over after the JWT check."""
    event = {
        "version": "2.0",
        "routeKey": f"{method} /console/{{page}}",
        "rawPath": f"/console/{page}",
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "host": "console.test",
            "accept-language": "en",
        },
        "queryStringParameters": query or None,
        "pathParameters": {"page": page},
        "requestContext": {"http": {"method": method}, "authorizer": {"jwt": {"claims": CLAIMS}}},
        "body": urllib.parse.urlencode(form or {}),
        "isBase64Encoded": False,
    }
    answer = app.handle(event)
    return answer["statusCode"], answer.get("body") or "", answer.get("headers") or {}


def csrf() -> str:
    who = identity({"requestContext": {"authorizer": {"jwt": {"claims": CLAIMS}}}})
    assert who is not None
    return csrf_token(who)


def form_fields(page: str, form_id: str) -> list[tuple[str, str]]:
    """The named inputs of one form of a page, as the browser would post them."""
    found = re.search(rf'<form[^>]*id="{form_id}".*?</form>', page, re.S) or re.search(
        r'<form method="post"(?:(?!</form>).)*name="confirm" value="yes".*?</form>', page, re.S
    )
    assert found, f"no form {form_id}"
    return [
        (html.unescape(n), html.unescape(v))
        for n, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', found.group(0))
    ]


def open_ids() -> set[str]:
    return {i["id"] for i in bootstrap.work_queue().list()}


# ---------------------------------------------------------------------------------------- R48: cases


def test_r48_a_payment_after_close_and_its_refund_task_are_one_case_closed_once_through_either_door(
    h, sim, cli
):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    inject_refund_task(h, m, sim)
    (case,) = bootstrap.work_queue().list()
    assert case["kind"] == "unbooked-payment" and [p["kind"] for p in case["parts"]] == [
        "unbooked-payment",
        "refund-task",
    ]
    task_id = next(p["id"] for p in case["parts"] if p["kind"] == "refund-task")
    assert case["codes"] == {
        "resolve": ["refunded-by-hand", "settled-outside-tally", "confirmed-junk", "other"],
        "close-task": ["refunded-at-channel", "booked-after-all"],
    }
    # the page lists every part with its state, and offers the task's codes under close-task
    status, page, _ = console("GET", "item", id=task_id)
    assert status == 200 and 'id="parts"' in page and case["id"] in page and task_id in page
    assert (
        '<optgroup label="Close the refund task" data-action="close-task"><option value="refunded-at-channel"'
        in page
    )

    # closed through the task's door: the payment part closes with it, so nobody refunds it a second time
    done = cli(
        "manual",
        "close-task",
        task_id,
        "--code",
        "refunded-at-channel",
        "--why",
        "refunded in portal",
        "--json",
    )
    assert done["state"] == "RESOLVED" and open_ids() == set()
    again = cli("manual", "resolve", case["id"], "--code", "refunded-by-hand", "--why", "me too", expect=1)
    assert "is not open" in again
    raw = h.ddb.get_item(TableName=h.env["NOTIFY_RAW_TABLE"], Key=to_item({"pk": case["source_key"]}))["Item"]
    assert raw["q_state"]["S"] == "RESOLVED" and "R48" in raw["resolution"]["M"]["why"]["S"]
    shown = cli("manual", "show", case["id"], "--json")
    assert shown["state"] == "RESOLVED"


def test_r48_the_poller_opens_no_item_for_an_order_whose_payment_is_a_case(h, sim):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    order = json.loads(h.create_order(m["mchid"], amount_cent=506, prepay=True)["body"])
    sim.pay(m["mchid"], order["out_trade_no"], drop=True, amount_total=5)  # the channel took another amount
    h.ddb.update_item(
        TableName=h.env["ORDERS_TABLE"],
        Key=to_item({"pk": f"{m['mchid']}#{order['out_trade_no']}"}),
        UpdateExpression="SET poll_due = :p",
        ExpressionAttributeValues={":p": {"S": "2000-01-01T00:00:00.000Z"}},
    )
    bootstrap.poll_service().run(out_of_time=lambda: False)  # finds it paid: the payment goes to a person
    h.drain()
    h.ddb.update_item(
        TableName=h.env["ORDERS_TABLE"],
        Key=to_item({"pk": f"{m['mchid']}#{order['out_trade_no']}"}),
        UpdateExpression="SET poll_due = :p",
        ExpressionAttributeValues={":p": {"S": "2000-01-01T00:00:00.000Z"}},
    )
    bootstrap.poll_service().run(out_of_time=lambda: False)  # asks again: "paid", the payment's case decides
    items = bootstrap.work_queue().list(f"merchant={m['mchid']}")
    assert [(i["kind"], i["order"]) for i in items] == [("unbooked-payment", order["out_trade_no"])]
    assert "parts" not in items[0]  # no order item attached: none was opened


def test_r48_a_script_working_cases_sees_each_money_once_and_takes_the_queue_to_zero(h, sim, cli):
    """Two problems about two orders (a payment after close with its refund task; an unbooked payment with an
    ABNORMAL refund of the same order is not mixed in): the script lists, works the first case, lists again;
    no order comes back after its case was worked."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    inject_refund_task(h, m, sim)
    otn, _ = paid_order(h, m["mchid"], 300)
    headers, body = sim.build_notification(m["mchid"], sim.transaction_resource(m["mchid"], otn, 300))
    h.notify(m["mchid"], headers, body)  # a second payment of that order too
    h.drain()
    assert bootstrap.refund_service().work_tasks() == {"MANUAL": 1}
    problems = 2
    seen: list[tuple[str, str]] = []
    for _ in range(10):
        listed = cli("manual", "list", "--json")["items"]
        assert len(listed) <= problems
        if not listed:
            break
        case = listed[0]
        money = (case["merchant"], case["order"])
        assert money not in seen, f"the same money twice: {money}"
        seen.append(money)
        cli("manual", "close-task", case["id"], "--code", "refunded-at-channel", "--why", "portal", "--json")
    assert len(seen) == problems and open_ids() == set()


def mismatch_on_a_reconciled_day(h, sim, mchid: str) -> tuple[str, dict]:
    """An order of 5.06 the channel took 0.05 for on D (not booked, with a person), then D reconciled: the
    channel's bill has the payment, the ledger not (CHANNEL_ONLY): the payment and the difference are one case."""
    order = json.loads(h.create_order(mchid, amount_cent=506, prepay=True)["body"])
    otn = order["out_trade_no"]
    sim.pay(mchid, otn, drop=True, amount_total=5, success_time=f"{D}T10:00:00+08:00")
    headers, body = sim.build_notification(mchid, sim.get_order(mchid, otn)["transaction"])
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    h.drain()
    assert bootstrap.recon_service().run("wechatpay", mchid, D)["status"] == "DIFFS"
    h.drain()  # recon's query of the channel-only payment goes through the worker: still the wrong amount
    (case,) = bootstrap.work_queue().list(f"merchant={mchid}")
    assert sorted(p["kind"] for p in case["parts"]) == ["recon-diff", "unbooked-payment"], case
    return otn, case


def diff_state(mchid: str, sk: str) -> str:
    return bootstrap.recon_service().store.diff(f"wechatpay#{mchid}#{D}", sk)["handle_status"]


@pytest.mark.usefixtures("days_of_2024")
def test_r48_tally_recon_resolve_closes_the_case_its_difference_belongs_to(h, sim, cli):
    """The recon door: resolving the difference with `tally recon resolve` closes the payment part of its
    case too (one decision), so nobody works the same money again from the queue."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    _, case = mismatch_on_a_reconciled_day(h, sim, m["mchid"])
    diff = next(p for p in case["parts"] if p["kind"] == "recon-diff")
    payment = next(p for p in case["parts"] if p["kind"] == "unbooked-payment")
    sk = diff["source_key"][1]
    done = cli(
        "recon", "resolve", "--channel", "wechatpay", "--mchid", m["mchid"], "--date", D, sk,
        "--by", "erin", "--note", "customer paid 0.05 by mistake, refunded in portal", "--json",
    )  # fmt: skip
    assert done["handle_status"] == "RESOLVED" and payment["id"] in done["outcome"]
    assert bootstrap.work_queue().list(f"merchant={m['mchid']}") == []
    raw = h.ddb.get_item(TableName=h.env["NOTIFY_RAW_TABLE"], Key=to_item({"pk": payment["source_key"]}))
    assert raw["Item"]["q_state"]["S"] == "RESOLVED" and "R48" in raw["Item"]["resolution"]["M"]["why"]["S"]
    again = cli("manual", "resolve", payment["id"], "--code", "refunded-by-hand", "--why", "me too", expect=1)
    assert "is not open" in again


@pytest.mark.usefixtures("days_of_2024")
def test_r48_closing_a_case_through_its_payment_settles_its_recon_difference(h, sim, cli):
    """The payment door: the case closed on its payment item settles the recon difference part (RESOLVED with
    the same decision in its history), so the day reads as worked."""
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    _, case = mismatch_on_a_reconciled_day(h, sim, m["mchid"])
    diff = next(p for p in case["parts"] if p["kind"] == "recon-diff")
    payment = next(p for p in case["parts"] if p["kind"] == "unbooked-payment")
    cli("manual", "resolve", payment["id"], "--code", "settled-outside-tally", "--why", "cash at the till")
    sk = diff["source_key"][1]
    assert diff_state(m["mchid"], sk) == "RESOLVED"
    row = bootstrap.recon_service().store.diff(f"wechatpay#{m['mchid']}#{D}", sk)
    assert "cash at the till" in row["history"][-1]["note"] and "R48" in row["history"][-1]["note"]
    assert bootstrap.work_queue().list(f"merchant={m['mchid']}") == []
    shown = bootstrap.recon_service().show("wechatpay", m["mchid"], D)
    from tally.domain.merchant_day import count_diffs, day_state

    assert day_state(shown["runs"][0]["status"], count_diffs(shown["diffs"]))[0] == "DONE"


# ---------------------------------------------------------------------------------------- codes


def test_r48_codes_the_console_would_not_offer_are_refused_by_the_cli_and_the_form_keeps_the_reason(
    h, sim, cli
):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    inject_refund_task(h, m, sim)
    (case,) = bootstrap.work_queue().list()
    out = cli("manual", "resolve", case["id"], "--code", "foo", "--why", "x", expect=1)
    assert "resolve takes --code refunded-by-hand" in out and "'foo'" in out
    out = cli("manual", "close-task", case["id"], "--code", "refunded-by-hand", "--why", "x", expect=1)
    assert "close-task needs --code refunded-at-channel or --code booked-after-all" in out
    dry = cli(
        "manual", "resolve", "--filter", f"merchant={m['mchid']}", "--code", "foo", "--dry-run", expect=1
    )
    assert "FAILED" in dry and "'foo'" in dry
    assert open_ids() == {case["id"]}

    # the console: a refusal says why and keeps the chosen action, code and typed reason
    form = {"csrf": csrf(), "id": case["id"], "action": "close-task", "code": "", "reason": "typed with care"}
    status, page, _ = console("POST", "act", form)
    assert (
        status == 409 and "Not done." in page and "close-task needs --code refunded-at-channel" in page
    )  # the why behind details
    assert 'value="typed with care"' in page and '<option value="close-task" selected' in page
    # done from the item page: it lands on a page that exists, never a 404
    form |= {"code": "refunded-at-channel"}
    status, _, headers = console("POST", "act", form)
    assert status == 303
    location = urllib.parse.urlparse(headers["location"])
    status, page, headers = console("GET", "item", **dict(urllib.parse.parse_qsl(location.query)))
    assert status in (200, 303) and "No such item" not in page
    assert open_ids() == set()


# ---------------------------------------------------------------------------------------- R52: bulk


def test_r52_a_bulk_confirm_acts_on_exactly_the_previewed_set_or_shows_the_new_preview(h):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    orphan_payments(h, m["mchid"], 2, "PRE")  # 1.00 + 1.01
    filters = {"kind": "unbooked-payment", "merchant": m["mchid"]}
    status, page, _ = console(
        "POST", "bulk", {"csrf": csrf(), "action": "ignore", **filters, "reason": "noise"}
    )
    assert status == 200 and "Preview: Ignore (nothing to do), 2 cases, ¥2.01" in page
    confirm = form_fields(page, "confirm-form")
    before = open_ids()

    orphan_payments(h, m["mchid"], 1, "LATE")  # a 1.00 payment arrives between preview and confirm
    status, page, _ = console("POST", "bulk", [*confirm, ("reason", "noise")])
    assert status == 409 and "the cases changed since the preview" in page
    assert "Preview: Ignore (nothing to do), 3 cases, ¥3.01" in page  # the new preview, to confirm again
    assert len(open_ids()) == len(before) + 1  # nothing was done

    confirm = form_fields(page, "confirm-form")
    status, page, _ = console("POST", "bulk", [*confirm, ("reason", "noise")])
    assert status == 200 and "Done: Ignore (nothing to do), 3 cases, ¥3.01" in page and open_ids() == set()


def test_r52_ticked_rows_only_and_each_item_not_done_is_listed_with_why(h, sim):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    orphan_payments(h, m["mchid"], 3, "TICK")
    items = sorted(bootstrap.work_queue().list(f"merchant={m['mchid']}"), key=lambda i: i["order"])
    picked = [("pick", items[0]["id"]), ("pick", items[2]["id"])]
    base = [("csrf", csrf()), ("action", "resolve"), ("merchant", m["mchid"]), ("code", "foo")]
    status, page, _ = console("POST", "bulk", [*base, *picked, ("reason", "x")])
    assert (
        status == 200
        and "Would not be done (2)" in page
        and "not &#39;foo&#39;" in page.replace("'", "&#39;")
    )
    base[-1] = ("code", "confirmed-junk")
    status, page, _ = console("POST", "bulk", [*base, *picked, ("reason", "x")])
    assert "Preview: Resolve (dealt with), 2 cases, ¥2.02" in page
    status, page, _ = console("POST", "bulk", [*form_fields(page, "confirm-form"), ("reason", "x")])
    assert "Done: Resolve (dealt with), 2 cases, ¥2.02" in page and open_ids() == {items[1]["id"]}


def test_r52_a_bulk_replay_confirm_replays_only_the_previewed_items(h):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    orphan_payments(h, m["mchid"], 2, "RPL")
    filters = {"kind": "unbooked-payment", "merchant": m["mchid"]}
    status, page, _ = console(
        "POST", "bulk", {"csrf": csrf(), "action": "replay", **filters, "reason": "fixed"}
    )
    assert "Preview: Try again through the normal path (after a fix), 2 cases" in page
    confirm = form_fields(page, "confirm-form")
    time.sleep(0.01)
    orphan_payments(h, m["mchid"], 1, "LATER")
    status, page, headers = console("POST", "bulk", [*confirm, ("reason", "fixed")])
    assert status == 303 and "2 of 2 cases tried again" in urllib.parse.unquote_plus(headers["location"])
    h.drain()
    (late,) = bootstrap.work_queue().list(f"merchant={m['mchid']}")
    assert late["order"] == "LATER0000"  # arrived after the preview: not replayed

    # a previewed item closed meanwhile: the set changed, nothing starts, the new preview is shown
    orphan_payments(h, m["mchid"], 2, "AGAIN")
    status, page, _ = console(
        "POST", "bulk", {"csrf": csrf(), "action": "replay", **filters, "reason": "fixed"}
    )
    assert "Preview: Try again through the normal path (after a fix), 3 cases" in page
    confirm = form_fields(page, "confirm-form")
    bootstrap.work_queue().act(late["id"], "ignore", by="bob", reason="not ours")
    status, page, _ = console("POST", "bulk", [*confirm, ("reason", "fixed")])
    assert status == 409 and "Preview: Try again through the normal path (after a fix), 2 cases" in page
    assert len(bootstrap.work_queue().list(f"merchant={m['mchid']}")) == 2  # nothing replayed


def test_r52_manual_replay_run_dry_run_never_acts(h, cli):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    orphan_payments(h, m["mchid"], 3, "DRY")
    selector = f"kind=unbooked,merchant={m['mchid']}"
    run = cli(
        "manual", "replay", "--filter", selector, "--by", "ops", "--why", "fixed", "--limit", "1", "--json"
    )
    assert run["status"] == "PAUSED" and run["done_items"] == 1
    h.drain()
    left = open_ids()
    plan = cli("manual", "replay", "--run", run["run_id"], "--dry-run", "--json")
    assert plan["dry_run"] and plan["would_replay"]["would_change"] == 2 and plan["done_items"] == 1
    text = cli("manual", "replay", "--run", run["run_id"], "--dry-run")
    assert "dry run: nothing changed" in text
    h.drain()
    assert open_ids() == left and len(left) == 2  # nothing replayed
    assert bootstrap.bulk_replay().show(run["run_id"])["done_items"] == 1


# ---------------------------------------------------------------------------------------- manual show


def test_manual_show_prints_facts_reason_next_step_and_history_raw_only_asked_ciphertext_never(h, sim, cli):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    inject_refund_task(h, m, sim)
    (case,) = bootstrap.work_queue().list()
    cli("manual", "ack", case["id"], "--why", "looking")
    text = cli("manual", "show", case["id"])
    assert f"{case['id']}: Payment not booked" in text and "amount:   ¥1.00" in text
    assert "details:  unbooked-payment: " in text  # the kind and the recorded reason, behind the plain words
    assert "reason:" in text and "part:     task-" in text
    assert (
        f"next:     tally manual close-task {case['id']} --code refunded-at-channel|booked-after-all" in text
    )
    assert "history:" in text and "ack by alice: looking" in text
    assert "raw row" not in text and "ciphertext" not in text.lower()
    raw = cli("manual", "show", case["id"], "--raw")
    assert "raw row:" in raw and "handled: 2" in raw
    assert "characters, not shown" in raw  # the body's ciphertext replaced by its length


def test_manual_show_into_a_closed_pipe_ends_quietly():
    """`tally manual show … | head`: the reader is gone; the command ends with exit 0 and no traceback."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader (`| head`) is gone before anything is written
    code = "from argparse import Namespace\nfrom tally_cli.common import emit\nemit({}, 'x' * 200_000, Namespace())\n"
    done = subprocess.run([sys.executable, "-c", code], stdout=write, stderr=subprocess.PIPE, timeout=60)
    os.close(write)
    assert done.returncode == 0 and b"Broken pipe" not in done.stderr and b"Traceback" not in done.stderr


# ---------------------------------------------------------------------------------------- search


def test_find_opens_the_order_story_from_a_transaction_id_a_refund_number_a_refund_id_or_out_trade_no(
    h, sim, cli
):
    from tests.integration.refund_helpers import deliver, refund

    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn, txn = paid_order(h, m["mchid"], 500)
    status, body = refund(h, m["mchid"], otn, 120)
    assert status in (200, 201, 202), body
    refund_no = body["refund_no"]
    sim.settle_refund(refund_no, "success")
    deliver(h, m["mchid"], refund_no)
    refund_id = bootstrap.refund_service().show(refund_no)["refund_id"]
    assert refund_id and refund_id != refund_no

    for number, found_as in (
        (txn, "transaction id"),
        (refund_no, "refund number"),
        (refund_id, "refund id"),
        (otn, "out_trade_no"),
    ):
        found = cli("find", number, "--json")
        assert [(x["mchid"], x["out_trade_no"], x["found_as"]) for x in found["matches"]] == [
            (m["mchid"], otn, found_as)
        ], number
        assert found["story"]["order"]["out_trade_no"] == otn
        status, _, headers = console("GET", "find", q=number)  # the console's search box
        assert status == 303 and headers["location"] == f"/console/story?mchid={m['mchid']}&order={otn}"
    assert f"is the transaction id of order {otn}" in cli("find", txn)
    assert "nothing found" in cli("find", "4200000000000000000000000000", expect=1)
    status, page, _ = console("GET", "find", q="no-such-number")
    assert status == 200 and 'id="not-found"' in page

    # the Refunds page lists it on its day, by merchant and state
    from tally.console.data import today_cst

    today = today_cst(time.time()).isoformat()
    status, page, _ = console("GET", "refunds", date=today, merchant=m["mchid"])
    assert status == 200 and refund_no in page.split('id="refunds-booked"')[1]
    status, page, _ = console("GET", "refunds", date=today, merchant=m["mchid"], state="MANUAL")
    assert refund_no not in page


def test_the_refunds_page_and_refund_list_show_refunds_in_every_state_with_filters(h, sim, cli):
    """#30 item 7: a refund that succeeded, one the channel closed (FAIL) and one with a person (ABNORMAL) are
    all listed for the day they changed on, narrowed by state and merchant, on the page and in the CLI."""
    from tally.console.data import today_cst

    from tests.integration.refund_helpers import deliver, refund

    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    other = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))["mchid"]
    numbers = {}
    for outcome, state in (("success", "SUCCESS"), ("closed", "FAIL"), ("abnormal", "MANUAL")):
        otn, _ = paid_order(h, m, 500)
        status, body = refund(h, m, otn, 120)
        assert status in (200, 201, 202), body
        sim.settle_refund(body["refund_no"], outcome)
        deliver(h, m, body["refund_no"])
        numbers[state] = body["refund_no"]
    otn, _ = paid_order(h, other, 300)
    assert refund(h, other, otn, 100)[0] in (200, 201, 202)  # another merchant's: filtered out
    today = today_cst(time.time()).isoformat()

    listed = cli("refund", "list", "--day", today, "--merchant", m, "--json")
    assert {r["refund_no"]: r["status"] for r in listed} == {n: s for s, n in numbers.items()}
    failed = cli("refund", "list", "--day", "today", "--merchant", m, "--state", "fail", "--json")
    assert [r["refund_no"] for r in failed] == [numbers["FAIL"]]
    assert "--state takes one of" in cli("refund", "list", "--day", "today", "--state", "CLOSEDX", expect=1)

    status, page, _ = console("GET", "refunds", date=today, merchant=m)
    changed = page.split('id="refunds-changed"')[1].split("</section>")[0]
    assert status == 200 and all(n in changed for n in numbers.values()) and "FAIL" in changed
    status, page, _ = console("GET", "refunds", date=today, merchant=m, state="FAIL")
    changed = page.split('id="refunds-changed"')[1].split("</section>")[0]
    assert (
        numbers["FAIL"] in changed and numbers["SUCCESS"] not in changed and numbers["MANUAL"] not in changed
    )


# ---------------------------------------------------------------------------------------- money actions


def mismatched_payment(h, sim, mchid: str) -> str:
    """An order of 5.06 the channel took 0.05 for (R12: not booked, with a person)."""
    order = json.loads(h.create_order(mchid, amount_cent=506, prepay=True)["body"])
    sim.pay(mchid, order["out_trade_no"], drop=True, amount_total=5)
    headers, body = sim.build_notification(mchid, sim.get_order(mchid, order["out_trade_no"])["transaction"])
    assert h.notify(mchid, headers, body)["statusCode"] == 204
    h.drain()
    return order["out_trade_no"]


def test_r48_accept_the_amount_paid_books_what_the_channel_took_audited_with_the_difference(h, sim, cli):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn = mismatched_payment(h, sim, m["mchid"])
    (case,) = bootstrap.work_queue().list()
    assert "accept-amount" in case["actions"] and "booked-by-hand" not in case["codes"]["resolve"]
    done = cli("manual", "accept-amount", case["id"], "--why", "the customer's price was 0.05", "--json")
    assert "5.06 → 0.05 yuan (difference -5.01)" in done["outcome"]
    h.drain()
    order = bootstrap.order_service().show(m["mchid"], otn)
    assert order["status"] == "PAID" and order["amount_cent"] == 5
    entries = [e for e in h.scan("LEDGER_TABLE") if e.get("out_trade_no") == otn and e["kind"] == "PAYMENT"]
    assert [e["amount_cent"] for e in entries] == [5]
    row = h.ddb.get_item(TableName=h.env["ORDERS_TABLE"], Key=to_item({"pk": f"{m['mchid']}#{otn}"}))["Item"]
    assert row["amount_before_cent"]["N"] == "506" and row["amount_accepted"]["M"]["by"]["S"] == "alice"
    assert open_ids() == set()


def test_r48_refund_now_on_an_unwanted_payment_refunds_once_through_the_refund_path_then_every_door_is_shut(
    h, sim, cli
):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn = mismatched_payment(h, sim, m["mchid"])
    (case,) = bootstrap.work_queue().list()
    done = cli("manual", "refund-now", case["id"], "--why", "not this price: money back", "--json")
    assert "sent to the channel" in done["outcome"] and open_ids() == set()
    (refund,) = bootstrap.refund_service().for_order(m["mchid"], otn)
    assert refund["amount_cent"] == 5 and refund["refund_no"].startswith("RT")  # the task's own number (R26)
    assert refund["status"] in ("ACCEPTED", "PENDING", "SUCCESS")
    task_pk = refund["hold_pk"]
    assert bootstrap.refund_service().store.task(task_pk)["status"] in ("REFUNDING", "DONE")
    assert bootstrap.order_service().show(m["mchid"], otn)["status"] == "WAIT_PAY"  # nothing booked
    # every other door is shut: the same money is not paid out again
    for argv in (("refund-now", case["id"]), ("resolve", case["id"], "--code", "refunded-by-hand")):
        assert "is not open" in cli("manual", *argv, "--why", "again", expect=1)
    with pytest.raises(Exception, match="REFUNDING|DONE"):
        bootstrap.refund_service().refund_task_now(task_pk)
    assert len([r for r in sim.refunds() if r["out_refund_no"] == refund["refund_no"]]) == 1


def test_r48_refund_now_the_channel_refuses_says_why_and_the_case_stays_open(h, sim, cli):
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    inject_refund_task(h, m, sim)  # a second payment the simulator's refund desk does not know
    (case,) = bootstrap.work_queue().list()
    assert "refund-now" in case["actions"]
    out = cli("manual", "refund-now", case["id"], "--why", "customer paid twice", expect=1)
    assert "the channel refused refund RT" in out and "RESOURCE_NOT_EXISTS" in out
    (still,) = bootstrap.work_queue().list()
    assert still["id"] == case["id"] and sorted(p["kind"] for p in still["parts"]) == [
        "refund-task",
        "unbooked-payment",
    ]
