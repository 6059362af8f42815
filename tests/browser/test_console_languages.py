"""The console in both languages in a real browser (issue #31): the morning walked in Chinese (the default) from
the queue to a case, acted on with a code, then the recon day and the ledger day; every page read for English
sentences and raw values outside the "details" toggles; the same walk in English; the Settings page's choice
kept for the person over the browser's language."""

from __future__ import annotations

import re
import time
import urllib.parse

import pytest

from tests.browser.conftest import shot, sign_in, sim_post
from tests.browser.helpers import MCHID, create_order, unbooked_payment

pytestmark = pytest.mark.e2e

# what a person must never read outside "details": raw values, rule ids, internal states and codes, CLI commands.
# Word edges are ASCII edges: a code right after a Chinese character (状态WAIT_PAY) is still a code.
A, Z = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"
FORBIDDEN = [
    re.compile(A + r"None" + Z),
    re.compile(r"handled="),
    re.compile(A + r"R\d{1,2}" + Z),
    re.compile(r"`"),
    re.compile(A + r"tally (manual|bill|merchant|webhooks|ledger|recon)" + Z),
    re.compile(A + r"17\d{8}" + Z),  # epoch seconds (2023..2033)
    re.compile(A + r"(?!HTTP|CSV)[A-Z]{4,}(_[A-Z]+)*" + Z),  # an internal code: WAIT_PAY, OPENED, ILLEGAL, …
]
ENGLISH_SENTENCE = re.compile(A + r"[A-Za-z]{2,}(?:[ ,'’-]+[A-Za-z]{2,}){3,}")  # four English words in a row


def plain_text(page) -> str:
    """What a person reads on the page: its visible text with every <details> (closed or not) hidden."""
    return page.evaluate(
        """() => { const hide = document.createElement('style');
                   hide.textContent = 'details { display: none !important; }';
                   document.head.appendChild(hide);
                   const text = document.body.innerText;
                   hide.remove();
                   return text; }"""
    )


def assert_plain(page, chinese: bool) -> str:
    text = plain_text(page)
    for pattern in FORBIDDEN:
        assert not pattern.search(text), f"{pattern.pattern} on {page.url}: {pattern.search(text)}"
    if chinese:
        assert re.search(r"[\u4e00-\u9fff]", text), page.url
        english = ENGLISH_SENTENCE.findall(text)
        assert not english, f"English on {page.url}: {english}"
    return text


def walk(stack, new_page, locale: str, no: str) -> dict[str, str]:
    """Morning → queue → the case → resolve with a code → recon day → ledger day; each page's plain text."""
    from tally import bootstrap
    from tally.console.data import today_cst

    chinese = locale.startswith("zh")
    item_id = unbooked_payment(stack, no)
    day = today_cst(time.time()).isoformat()
    bootstrap.recon_service().run("wechatpay", MCHID, day)
    page = sign_in(new_page(locale=locale), stack, "operator")
    seen = {"morning": assert_plain(page, chinese)}
    assert page.get_attribute("html", "lang") == ("zh-CN" if chinese else "en")
    if chinese:
        shot(page, "zh-morning")
    page.goto(stack.api_url + "/console/queue?" + urllib.parse.urlencode({"kind": "unbooked-payment"}))
    page.wait_for_selector("#queue")
    seen["queue"] = assert_plain(page, chinese)
    if chinese:
        shot(page, "zh-queue")
    page.click(f'#queue tr[data-id="{item_id}"] a.open-item')
    page.wait_for_selector("#act")
    seen["case"] = assert_plain(page, chinese)
    if chinese:
        shot(page, "zh-case")
    page.select_option("#act select[name=action]", "resolve")
    page.select_option("#act select[name=code]", "confirmed-junk")
    page.fill("#act input[name=reason]", "测试付款" if chinese else "a test payment")
    page.click("#act button[type=submit]")
    page.wait_for_selector(".notice")
    seen["done"] = assert_plain(page, chinese)
    assert page.get_attribute("#state", "data-state") == "RESOLVED"
    page.goto(
        stack.api_url
        + "/console/recon?"
        + urllib.parse.urlencode({"channel": "wechatpay", "mchid": MCHID, "date": day})
    )
    page.wait_for_selector("#day")
    seen["recon"] = assert_plain(page, chinese)
    if chinese:
        shot(page, "zh-recon-day")
    page.goto(stack.api_url + "/console/ledger?" + urllib.parse.urlencode({"date": day, "merchant": MCHID}))
    page.wait_for_selector("#ledger")
    seen["ledger"] = assert_plain(page, chinese)
    if chinese:
        shot(page, "zh-ledger-day")
    return seen


def test_the_morning_walked_in_chinese_reads_chinese_with_codes_only_behind_details(stack, new_page):
    seen = walk(stack, new_page, "zh-CN", "zhwalk-0001")
    assert "早上好" in seen["morning"] and "待办" in seen["queue"]
    assert "付款未入账" in seen["case"] and "下一步：" in seen["case"]  # the plain reason and its next step
    assert "已完成" in seen["done"] and "已解决" in seen["done"]
    assert "对账日报" in seen["recon"] and "账本日报" in seen["ledger"]
    assert "¥" in seen["ledger"] and "微信支付" in seen["ledger"]


def test_the_same_walk_in_english_for_a_browser_that_asks_for_english(stack, new_page):
    seen = walk(stack, new_page, "en-US", "enwalk-0001")
    assert "Good morning" in seen["morning"] and "Payment not booked" in seen["case"]
    assert "Next step:" in seen["case"] and "Done: Resolve" in seen["done"]
    assert "Recon day" in seen["recon"] and "WeChat Pay" in seen["ledger"]
    assert not re.search(r"[\u4e00-\u9fff]", seen["case"].replace("简体中文", ""))


def test_the_settings_page_keeps_the_person_s_language_over_the_browser_s(stack, new_page):
    from tally.console import lang

    page = sign_in(new_page(locale="en-US"), stack, "viewer")
    assert "Good morning" in page.inner_text("main")
    page.click("#settings-link")
    page.select_option("#locale", "zh-CN")
    page.click("#save")
    page.wait_for_selector("#saved")
    assert "已保存" in page.inner_text("#saved") and page.get_attribute("html", "lang") == "zh-CN"
    lang._locales.clear()  # another container: the choice is read back from the pool
    page.goto(stack.api_url + "/console")
    page.wait_for_selector("#morning-number")
    assert "早上好" in page.inner_text("main")  # the English browser reads Chinese: the person chose it
    page.click("#settings-link")
    page.select_option("#locale", "en")
    page.click("#save")
    page.wait_for_selector("#saved")
    assert "Saved" in page.inner_text("#saved")


def test_an_amount_over_a_thousand_reads_grouped_with_the_yuan_sign(stack, new_page):
    create_order(stack, "zhamount-0002", 123456)
    sim_post(stack, "/_sim/pay", {"mchid": MCHID, "out_trade_no": "zhamount-0002"})
    stack.drain(10)
    page = sign_in(new_page(locale="zh-CN"), stack, "operator")
    page.goto(
        stack.api_url + "/console/story?" + urllib.parse.urlencode({"mchid": MCHID, "order": "zhamount-0002"})
    )
    page.wait_for_selector("#order-summary")
    assert "¥1,234.56" in page.inner_text("#order-summary")
    assert_plain(page, True)


def test_every_other_page_reads_chinese_too(stack, new_page):
    """The order story, refunds, merchants, webhooks, incidents, settings: no English sentence or raw value
    outside details."""
    unbooked_payment(stack, "zhpages-0003")
    page = sign_in(new_page(locale="zh-CN"), stack, "operator")
    pages = {
        "story": "/console/story?" + urllib.parse.urlencode({"mchid": MCHID, "order": "zhpages-0003"}),
        "refunds": "/console/refunds",
        "merchants": "/console/merchants",
        "webhooks": "/console/webhooks",
        "incidents": "/console/incidents",
        "settings": "/console/settings",
    }
    for name, path in pages.items():
        page.goto(stack.api_url + path)
        page.wait_for_selector("main")
        assert_plain(page, True)
        shot(page, f"zh-{name}")


def test_the_sealed_books_read_chinese_and_the_day_verifies(stack, new_page):
    """Today's journal sealed as the next night's run would: the list and the day page in plain Chinese, the
    day verified; its zip downloads."""
    from tally import bootstrap
    from tally.console.data import today_cst

    create_order(stack, "zhbooks-0004", 2500)
    sim_post(stack, "/_sim/pay", {"mchid": MCHID, "out_trade_no": "zhbooks-0004"})
    stack.drain(10)
    day = today_cst(time.time()).isoformat()
    bootstrap.set_clock(lambda: time.time() + 86400)
    try:
        bootstrap.audit_service().seal_day(day)
    finally:
        bootstrap.set_clock(time.time)
    page = sign_in(
        new_page(locale="zh-CN"), stack, "operator"
    )  # the viewer keeps English (the Settings test)
    page.click('nav a:has-text("账簿封存")')
    page.wait_for_selector("#books")
    text = assert_plain(page, True)
    assert "已封存" in text and page.locator(f'#books tr[data-day="{day}"][data-sealed="yes"]').count() >= 1
    shot(page, "zh-books")
    page.click(f'#books tr[data-day="{day}"][data-merchant="{MCHID}"] a.day')
    page.wait_for_selector("#verdict")
    assert "核验通过" in assert_plain(page, True)
    assert page.get_attribute("#verdict", "data-verdict") == "verified"
    with page.expect_download() as download:
        page.click("#zip-day")
    assert download.value.suggested_filename == f"tally-books-{day}.zip"
