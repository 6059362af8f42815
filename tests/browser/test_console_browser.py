"""The console in a real browser (headless Chromium): what support and finance do every morning.

Each test signs in through the page (Cognito on moto issues the JWT, the front door checks it as API
Gateway's authorizer would, the service worker attaches it), then clicks like a person.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pytest
from tally.console.auth import csrf_token, identity

from tests.browser.conftest import http, morning_total, shot, sign_in, sim_post, token_for
from tests.browser.helpers import MCHID, create_order, unbooked_payment

pytestmark = pytest.mark.e2e


def rejected_callback(stack, body: str, nonce: str) -> None:
    """Anyone can post this: a body that fails the signature check is kept (7 days) for a replay."""
    headers = {
        "content-type": "application/json",
        "wechatpay-signature": "forged",
        "wechatpay-serial": "FORGED",
        "wechatpay-timestamp": str(int(time.time())),
        "wechatpay-nonce": nonce,
        "wechatpay-signature-type": "WECHATPAY2-SHA256-RSA2048",
    }
    status, _, _ = http("POST", f"{stack.api_url}/notify/wechatpay/{MCHID}", body.encode(), headers)
    assert status == 401


def fill_action(page, form: str, action: str, reason: str, code: str = "") -> None:
    """Choose the action (and its code), type the reason and submit the form (#act or #bulk)."""
    page.select_option(f"{form} select[name=action]", action)
    if code:
        page.select_option(f"{form} select[name=code]", code)
    page.fill(f"{form} input[name=reason]", reason)
    page.click(f"{form} button[type=submit]")


def test_stuck_payment_found_in_two_clicks_story_opened_acted_on_and_the_morning_number_falls(
    stack, new_page
):
    unbooked_payment(stack, "CONSOLE0001")
    page = sign_in(new_page(), stack, "operator")
    before = morning_total(page)
    assert before >= 1
    shot(page, "morning")

    page.click('a[data-kind="unbooked-payment"]')  # click 1: the kind on the morning page
    page.wait_for_selector("#queue")
    shot(page, "queue")
    page.click('tr:has-text("CONSOLE0001") a.open-item')  # click 2: the payment itself
    page.wait_for_selector("#act")
    assert "5.06" not in page.inner_text("#state")  # sanity: the item page, not the order
    assert "0.05" in page.text_content("main") and "5.06" in page.text_content("main")  # the what: in details
    shot(page, "item")

    page.click("#story-link")
    page.wait_for_selector("#timeline")
    assert "notification" in page.inner_text("#timeline")  # a delivery, as people call it
    page.click("#timeline details.raw summary")  # the raw body behind its toggle
    assert "resource" in page.inner_text("#timeline pre.body")
    shot(page, "story")
    page.go_back()

    fill_action(page, "#act", "resolve", "refunded 0.05 by hand on the merchant platform", "refunded-by-hand")
    page.wait_for_selector(".notice")
    assert "resolved" in page.inner_text(".notice")
    assert "operator" in page.inner_text("ol.history")  # the audit history names the token's user

    page.click('nav a:has-text("Morning")')
    page.wait_for_selector("#morning-number")
    assert morning_total(page) == before - 1


def test_a_viewer_reads_but_cannot_act_button_absent_and_post_refused(stack, new_page):
    item_id = unbooked_payment(stack, "CONSOLE0002")
    page = sign_in(new_page(), stack, "viewer")
    page.goto(stack.api_url + "/console/item?" + urllib.parse.urlencode({"id": item_id}))
    page.wait_for_selector("#viewer-note")
    assert page.query_selector("#act") is None
    assert page.query_selector("#bulk") is None

    # The POST itself, from the viewer's own page (the service worker adds the viewer's token) ...
    status = page.evaluate(
        """async (id) => (await fetch('/console/act', {method: 'POST',
             headers: {'content-type': 'application/x-www-form-urlencoded'},
             body: new URLSearchParams({id, action: 'resolve', reason: 'x', csrf: 'x'})})).status""",
        item_id,
    )
    assert status == 403
    # ... and with the viewer's real CSRF token, straight over HTTP: still refused, the item untouched.
    token = token_for(stack, "viewer")
    claims = json.loads(_b64(token.split(".")[1]))
    who = identity({"requestContext": {"authorizer": {"jwt": {"claims": claims}}}})
    form = urllib.parse.urlencode(
        {"id": item_id, "action": "resolve", "reason": "x", "csrf": csrf_token(who)}
    )
    status, _, body = http(
        "POST",
        stack.api_url + "/console/act",
        form.encode(),
        {"authorization": f"Bearer {token}", "content-type": "application/x-www-form-urlencoded"},
    )
    assert status == 403, body
    from tally import bootstrap

    assert item_id in {i["id"] for i in bootstrap.work_queue().list()}


def test_a_rejected_callback_with_script_in_body_and_headers_renders_inert(stack, new_page):
    payload = (
        '{"id":"<script>window.__xss=1;alert(1)</script>",'
        '"summary":"\\"><img src=x onerror=\\"window.__xss=2;alert(2)\\">"}'
    )
    rejected_callback(stack, payload, nonce='"><img src=x onerror="window.__xss=3">')
    page = sign_in(new_page(), stack, "operator")
    page.goto(stack.api_url + "/console/queue?kind=rejected")
    page.wait_for_selector("#queue")
    page.click("a.open-item")
    page.wait_for_selector("details.card")
    page.click("details.card summary")
    text = page.inner_text("dl.raw")
    assert "<script>window.__xss=1;alert(1)</script>" in text  # shown as the text it is
    assert 'onerror="window.__xss=3"' in text
    assert page.query_selector("main img") is None and page.query_selector("main script") is None
    assert page.evaluate("window.__xss") is None
    assert page.dialogs == []
    shot(page, "rejected-inert")


def test_sign_out_forgets_the_token_and_a_page_then_asks_to_sign_in_again(stack, new_page):
    page = sign_in(new_page(), stack, "viewer")
    page.click("text=sign out")
    page.wait_for_selector("#bye")
    page.wait_for_function(  # the page's script deletes the token from Cache Storage
        "async () => !(await (await caches.open('tally-console')).match('/console/static/__token'))"
    )
    page.goto(stack.api_url + "/console/queue?kind=rejected")
    page.wait_for_selector("input[name=password]")  # the service worker turned the 401 into the sign-in page
    assert "/console/login?next=" in page.url and "queue" in page.url
    page.fill("input[name=username]", "viewer")
    page.fill("input[name=password]", stack.console_logins["viewer"])
    page.click("button[type=submit]")
    page.wait_for_url("**/console/queue?kind=rejected")  # back where the person was going


_SPOIL_TOKEN = """async () => {
  const cache = await caches.open('tally-console');
  const token = await (await cache.match('/console/static/__token')).text();
  const spoilt = token.slice(0, -4) + (token.endsWith('AAAA') ? 'BBBB' : 'AAAA');
  await cache.put('/console/static/__token', new Response(spoilt));
}"""


def test_an_expired_sign_in_gets_a_clear_sign_in_page_and_comes_back_where_it_was(stack, new_page):
    """#17: the ID token lives 60 minutes; after that API Gateway answers 401. A page asks to sign in again
    and comes back; a form sent with the old token says it was NOT done and comes back to its item."""
    item_id = unbooked_payment(stack, "CONSOLE0EXP")
    page = sign_in(new_page(), stack, "operator")
    page.goto(stack.api_url + "/console/item?id=" + urllib.parse.quote(item_id))
    page.wait_for_selector("#act")
    page.evaluate(_SPOIL_TOKEN)  # what API Gateway sees once the token has expired: 401
    page.select_option("#act select[name=action]", "ignore")
    page.fill("#act input[name=reason]", "sent after the sign-in expired")
    page.click("#act button[type=submit]")
    page.wait_for_selector("#expired")
    assert "not done" in page.inner_text("#expired")
    from tally import bootstrap

    assert [i["id"] for i in bootstrap.work_queue().list({"id": item_id})] == [item_id]  # still open
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", stack.console_logins["operator"])
    page.click("button[type=submit]")
    page.wait_for_selector("#act")  # back on the item, free to repeat the action
    assert item_id in urllib.parse.unquote(page.url)  # ids hold "#" (merchant-scoped keys), sent as %23

    page.evaluate(_SPOIL_TOKEN)
    page.goto(stack.api_url + "/console/refunds")
    page.wait_for_selector("#expired")
    assert "expired" in page.inner_text("#expired") and "refunds" in page.url
    page.fill("input[name=username]", "operator")
    page.fill("input[name=password]", stack.console_logins["operator"])
    page.click("button[type=submit]")
    page.wait_for_url("**/console/refunds")


def test_the_queue_s_bulk_replay_previews_the_cli_dry_run_and_runs_as_a_replay_run(stack, new_page):
    """#21 item 4 in the console: the preview names the `tally manual replay --filter … --dry-run` that prints
    the same numbers; confirming runs a replay run, whose id the page reports."""
    from tally import bootstrap

    unbooked_payment(stack, "CONSOLE0RPL")
    page = sign_in(new_page(), stack, "operator")
    page.goto(stack.api_url + "/console/queue?kind=unbooked-payment")
    page.wait_for_selector("#bulk")
    shown = len(page.query_selector_all("#queue tbody tr[data-id]"))
    page.select_option("#bulk select[name=action]", "replay")
    page.fill("#bulk input[name=reason]", "order amounts fixed")
    page.click("#bulk button[type=submit]")
    page.wait_for_selector("#replay-plan")
    plan = page.text_content("#replay-plan")  # the CLI's same dry run: behind the details toggle
    assert "tally manual replay --filter 'kind=unbooked-payment' --dry-run" in plan
    dry = bootstrap.bulk_replay().preview("kind=unbooked-payment")
    assert dry["would_change"] == shown and f"¥{dry['amount']}" in page.inner_text("h1")
    page.click("#confirm")
    page.wait_for_selector(".notice")
    notice = page.text_content(".notice")
    assert "replay run r" in notice and f"{shown} of {shown} cases tried again" in notice, notice


def test_console_is_usable_on_a_phone(stack, new_page):
    page = sign_in(new_page(390, 844), stack, "operator")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400  # nothing forces sideways scrolling of the page (wide tables scroll in their box)
    shot(page, "morning-phone")


def _b64(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def test_a_demo_day_s_queue_is_taken_to_zero_through_the_ui_alone(stack, new_page):
    """The demo's scripted day (tally_local/day.py: mismatches, payments after close, lost callbacks …) is
    loaded into this stack; then only the browser: each kind is filtered, previewed and resolved in bulk."""
    from tally import bootstrap
    from tally.console.data import today_cst

    from tally_local import day as demo

    today = demo.Day(stack)
    demo.set_up_merchants(today)
    for i in range(16):
        demo.run_scenario(today, i, demo.SCENARIOS[i % len(demo.SCENARIOS)])
    demo.settle(today)
    listed = bootstrap.work_queue().list()
    kinds = sorted({i["kind"] for i in listed})  # each case's leading kind: what the morning page links
    parts = {k for i in listed for k in i.get("kinds") or [i["kind"]]}
    assert len(parts) >= 2, parts  # a real morning: more than one kind of work (R48: in fewer cases)

    page = sign_in(new_page(), stack, "operator")
    assert morning_total(page) >= len(kinds)
    shot(page, "morning-demo-day")
    page.click('nav a:has-text("Queue")')  # one item acknowledged first: the owner shows on it
    page.click("#queue a.open-item")
    page.select_option("#act select[name=action]", "ack")
    page.fill("#act input[name=reason]", "looking at it")
    page.click("#act button[type=submit]")
    page.wait_for_selector(".notice")
    assert page.get_attribute("#state", "data-state") == "ACKNOWLEDGED" and "operator" in page.inner_text(
        "#state"
    )
    page.click('nav a:has-text("Morning")')
    while page.query_selector("a[data-kind]") is not None:
        page.click("a[data-kind]")  # the first kind left on the morning page
        page.wait_for_selector("#bulk")
        page.select_option("#bulk select[name=action]", "resolve")
        page.fill("#bulk input[name=reason]", "rehearsal: checked each on the merchant platform")
        page.click("#bulk button[type=submit]")
        page.wait_for_selector("#preview")
        assert "Nothing has changed yet" in page.inner_text("main")
        shot(page, "bulk-preview")
        page.click("#confirm")
        page.wait_for_selector("#bulk-done")
        assert "Not done" not in page.inner_text("main")
        page.click('nav a:has-text("Morning")')
        page.wait_for_selector("#morning-number")
    assert morning_total(page) == 0
    assert bootstrap.work_queue().list() == []
    today_row = f'tr[data-day="{today_cst(time.time()).isoformat()}"]'
    cleared = int(page.inner_text(today_row + " td.cleared"))  # the chart: items opened and cleared per day
    assert cleared >= len(kinds)
    shot(page, "morning-clear")


def test_r48_r52_every_item_action_completes_or_says_why_and_keeps_the_form(stack, new_page):
    """A payment after close (a case of two parts) closed with close-task and its code; an amount mismatch
    accepted at the amount paid; another refunded now; ticked rows resolved in bulk with a code; the search
    box: none ends on a 404 or a lost form."""
    from tally import bootstrap

    from tally_local import day as demo

    today = demo.Day(stack)
    demo.set_up_merchants(today)
    demo.run_scenario(today, 900, "paid_after_close")
    stack.drain(20)
    bootstrap.refund_service().work_tasks()
    mchid = today.taken["DAY000900"][0]
    (case,) = [i for i in bootstrap.work_queue().list() if i.get("order") == "DAY000900"]
    page = sign_in(new_page(), stack, "operator")

    # close-task: offered with exactly its codes; refused without one, the typed reason kept
    page.goto(stack.api_url + "/console/item?" + urllib.parse.urlencode({"id": case["id"]}))
    page.wait_for_selector("#parts")
    assert "Money to give back" in page.inner_text("#parts") and "Payment not booked" in page.inner_text(
        "#parts"
    )
    page.select_option("#act select[name=action]", "close-task")
    codes = page.eval_on_selector_all(
        "#act select[name=code] optgroup:not([disabled]) option", "os => os.map(o => o.value)"
    )
    assert codes == ["refunded-at-channel", "booked-after-all"]
    page.fill("#act input[name=reason]", "refunded in the merchant portal")
    page.click("#act button[type=submit]")
    page.wait_for_selector(".notice")
    assert "Not done" in page.inner_text(".notice")
    assert "close-task needs --code refunded-at-channel" in page.text_content(".notice")  # why: in details
    assert page.input_value("#act input[name=reason]") == "refunded in the merchant portal"
    page.select_option("#act select[name=code]", "refunded-at-channel")
    page.click("#act button[type=submit]")
    page.wait_for_selector(".notice")
    assert "task closed" in page.text_content(".notice") and "No such" not in page.inner_text("main")
    assert not [i for i in bootstrap.work_queue().list() if i.get("order") == "DAY000900"]  # the whole case

    # accept the amount paid, and refund another now, each from its item page
    for no, action, said in (
        ("CONSOLE0801", "accept-amount", "5.06 → 0.05"),
        ("CONSOLE0802", "refund-now", "sent"),
    ):
        item_id = unbooked_payment(stack, no)
        page.goto(stack.api_url + "/console/item?" + urllib.parse.urlencode({"id": item_id}))
        fill_action(page, "#act", action, f"{action} from the console")
        page.wait_for_selector(".notice")
        assert said in page.text_content(".notice") and "No such" not in page.inner_text("main"), no

    # bulk with a code on the ticked rows only
    ids = [unbooked_payment(stack, no) for no in ("CONSOLE0811", "CONSOLE0812")]
    page.goto(stack.api_url + "/console/queue?" + urllib.parse.urlencode({"merchant": MCHID}))
    page.check(f'#queue input[name=pick][value="{ids[0]}"]')
    fill_action(page, "#bulk", "resolve", "test payments", "confirmed-junk")
    page.wait_for_selector("#preview")
    assert "Preview: Resolve (dealt with), 1 case, ¥0.05" in page.inner_text("h1")
    page.click("#confirm")
    page.wait_for_selector("#bulk-done")
    assert "Done: Resolve (dealt with), 1 case" in page.inner_text(
        "h1"
    ) and "Every case was done" in page.inner_text("main")
    assert {i["id"] for i in bootstrap.work_queue().list()} & set(ids) == {ids[1]}

    # the search box: the order's number opens its story
    page.fill("#search input[name=q]", "CONSOLE0812")
    page.click("#search button")
    page.wait_for_selector("#timeline")
    assert page.url.endswith(f"/console/story?mchid={MCHID}&order=CONSOLE0812") and mchid


def test_every_page_answers_its_question_for_a_viewer(stack, new_page):
    """Recon day (runs, guards, diffs, the report download), refunds, merchants, ledger day (CSV download), the
    sealed books (a day verified, its zip downloaded)."""
    from tally import bootstrap
    from tally.console.data import today_cst

    day = today_cst(time.time()).isoformat()
    create_order(stack, "CONSOLE0100", 1234)
    sim_post(stack, "/_sim/pay", {"mchid": MCHID, "out_trade_no": "CONSOLE0100"})
    stack.drain(10)
    run = bootstrap.recon_service().run("wechatpay", MCHID, day)
    assert run.get("status"), run

    page = sign_in(new_page(), stack, "viewer")
    page.click('nav a:has-text("Recon day")')
    page.select_option("select[name=mchid]", MCHID)
    page.select_option("select[name=channel]", "wechatpay")
    page.fill("input[name=date]", day)
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("text=Runs")
    assert page.locator(f'[data-status="{run["status"]}"]').count() > 0
    assert "expected" in page.inner_text("#money")  # R49: "expected X, landed Y, short by Z" (or in transit)
    with page.expect_download() as download:
        page.click("#report")
    assert download.value.suggested_filename.endswith(".csv")
    shot(page, "recon-day")
    diff_link = page.query_selector("a.diff")
    if diff_link is not None:  # an open difference opens its case: itself, or the item that leads it (R48)
        diff_link.click()
        page.wait_for_selector("#viewer-note")
        heading = page.inner_text("h1")
        assert page.locator('[data-kind="recon-diff"]').count() or "recon-diff" in page.text_content(
            "#parts"
        ), heading
        page.go_back()

    page.click('nav a:has-text("Ledger day")')
    page.fill("input[name=date]", day)
    page.fill("input[name=merchant]", MCHID)
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("#ledger")
    (row,) = [
        r for r in bootstrap.ledger_day_service().day(day, MCHID)["rows"] if r["channel"] == "wechatpay"
    ]
    assert row["payment_cent"] >= 1234
    assert row["payment_yuan"] in page.inner_text("#ledger") and row["net_yuan"] in page.inner_text("#ledger")
    # the three-way verdict (R45): its code and its reason on the row, never a blank cell
    assert (
        row["verdict"]["code"] in ("AGREES", "DIFFERS", "DONE", "PENDING", "NOT_CHECKED")
        and row["verdict"]["reason"]
    )
    cells = page.locator("#ledger td.verdict").all_text_contents()  # the code and reason: in details
    assert any(row["verdict"]["code"] in c and row["verdict"]["reason"][:40] in c for c in cells), cells
    with page.expect_download() as download:
        page.click("#csv")
    downloaded = Path(download.value.path()).read_text(encoding="utf-8-sig")
    assert row["payment_yuan"] in downloaded and row["verdict"]["code"] in downloaded
    from tally.i18n import EN, speaker
    from tally.i18n.words import Words

    assert Words(speaker(EN)).landing(row) in page.inner_text(
        "#ledger"
    )  # R49: where the money is, per merchant and day
    with page.expect_download() as download:  # the statement, the same figures (R49)
        page.click("#statement")
    statement = Path(download.value.path()).read_text(encoding="utf-8-sig")
    assert statement.startswith("merchant,") and row["net_yuan"] in statement
    shot(page, "ledger-day")

    page.click('nav a:has-text("Merchants")')
    page.wait_for_selector("#merchants")
    text = page.inner_text("#merchants")
    assert MCHID in text and "BEGIN" not in page.content()  # no key or certificate material
    seen = page.inner_text(f'#merchants tr:has-text("{MCHID}") td.seen')  # #17: last callback seen
    assert day in seen and "ago" in seen, seen
    shot(page, "merchants")

    page.click('nav a:has-text("Refunds")')
    page.wait_for_selector("#refunds-manual")
    shot(page, "refunds")

    sealer = (
        bootstrap.audit_service()
    )  # the night after, today's day is sealed (docs/audit.md); not set_clock:
    clock = sealer.clock  # its reset() would build new AWS clients the call recorder does not watch
    sealer.clock = lambda: clock() + 86400
    try:
        sealer.seal_day(day)
    finally:
        sealer.clock = clock
    page.click('nav a:has-text("Sealed books")')
    page.wait_for_selector("#books")
    page.click(f'#books tr[data-day="{day}"][data-merchant="{MCHID}"] a.day')
    page.wait_for_selector("#verdict")
    assert page.get_attribute("#verdict", "data-verdict") == "verified"
    with page.expect_download() as download:  # a viewer hands the day's books to an auditor
        page.click("#zip-day")
    assert download.value.suggested_filename == f"tally-books-{day}.zip"


def test_every_aws_call_the_console_made_is_granted_by_its_policy(console_calls):
    """The calls recorded while the tests above clicked (pages, actions, bulk, downloads) against
    ConsoleFunction's policy in the transformed template: a missing grant is a 500 on AWS, never locally."""
    from tally_local.resources import load_template
    from tests.integration.template_helpers import TEMPLATE, sam_transform
    from tests.integration.template_helpers import resource_name as _resource_name

    transformed = sam_transform(load_template(TEMPLATE), "us-east-1")["Resources"]
    role = transformed[transformed["ConsoleFunction"]["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
    granted: dict[str, set[str]] = {}
    for policy in role.get("Policies", []):
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            for resource in resources:
                granted.setdefault(_resource_name(resource), set()).update(actions)
    assert len(console_calls) > 10  # the recorder saw the console work
    assert {("kms:GetPublicKey", "AuditKey"), ("s3:ListBucket", "AuditBucket")} <= console_calls  # the books
    missing = sorted(
        (action, resource)
        for action, resource in console_calls
        if not action.startswith("cognito-idp:")  # InitiateAuth is Cognito's public sign-in API (no IAM)
        and action not in granted.get(resource, set())
        and action
        not in granted.get(resource.rsplit("/", 1)[0] + "/*", set())  # an index: the table's every index
    )
    assert missing == []
