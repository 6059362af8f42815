"""An order's story in the reader's language: each line is a template with raw parameters (`says`), rendered by
the one renderer `Words.story_title` (¥ amounts, channel names, plain states); `title` is its English reading,
`--json` keeps codes and numbers (docs/story.md, docs/language.md)."""

from __future__ import annotations

import ast
import html
import json
import re
import uuid
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from tally import bootstrap, i18n
from tally.console import app
from tally.i18n.words import Words
from tally.service import story_entries
from tally.service.story_entries import entry

from tally_cli import order as cli_order
from tally_cli.main import main
from tests.integration.refund_helpers import deliver, paid_order, refund

STORY_MODULES = sorted(Path(story_entries.__file__).parent.glob("story*.py"))
ZH = Words(i18n.speaker(i18n.ZH))
EN = Words(i18n.speaker(i18n.EN))
CODES = re.compile(r"\b(SUCCESS|WAIT_PAY|PAID|BOOKED|PAYMENT|REFUND|ACCEPTED|PENDING|CNY|notify|wechatpay)\b")
# parameters that name a record (numbers, keys, ids): shown as stored in every language
IDENTIFIERS = ("ref", "refund_no", "event_id", "transaction_id", "endpoint_id", "mchid", "by")
CLAIMS = {"sub": "sub-ops", "cognito:username": "alice", "cognito:groups": "[operators]", "token_use": "id"}


def _n_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "N_"]


def _is_template(node: ast.AST) -> bool:
    """A title argument that is an N_() message, a choice between such messages, or `template` (history_entry's
    own, chosen the same way): never text built outside the catalogue (an f-string, a literal, a join)."""
    if isinstance(node, ast.IfExp):
        return _is_template(node.body) and _is_template(node.orelse)
    if isinstance(node, ast.Name):
        return node.id == "template"
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "N_"
        and isinstance(node.args[0], ast.Constant)
    )


def test_every_story_title_is_an_n_marked_template_with_a_chinese_translation():
    catalogue = {m.id: m.string for m in read_po((i18n.LOCALE_DIR / "zh_CN/LC_MESSAGES/tally.po").open("rb"))}
    templates: set[str] = set()
    calls = 0
    for module in STORY_MODULES:
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "entry" and len(call.args) >= 3:
                calls += 1
                assert _is_template(call.args[2]), (module.name, ast.unparse(call.args[2]))
        templates |= {c.args[0].value for c in _n_calls(tree) if isinstance(c.args[0], ast.Constant)}
    assert calls >= 20 and len(templates) >= 30, (calls, len(templates))
    untranslated = sorted(t for t in templates if not catalogue.get(t))
    assert not untranslated, f"run `make i18n` and translate: {untranslated}"


@pytest.fixture
def refunded(h):
    """A paid order (¥19.99) with a partial refund (¥5.01) the channel reported as succeeded."""
    m = h.add_merchant()
    otn, _ = paid_order(h, m["mchid"], amount=1999)
    status, made = refund(h, m["mchid"], otn, 501, refund_no=f"RS{uuid.uuid4().hex[:20]}", reason="退货")
    assert status in (200, 201, 202), made
    h.sim.settle_refund(made["refund_no"], "success")
    deliver(h, m["mchid"], made["refund_no"])
    story = bootstrap.story_service().story(m["mchid"], otn)
    return {"mchid": m["mchid"], "otn": otn, "story": story, "h": h}


def _without_identifiers(text: str, entries: list[dict]) -> str:
    """The text with every record's number or key taken out (longest first: one may hold another)."""
    values = {str(e["says"]["params"][n]) for e in entries for n in IDENTIFIERS if e["says"]["params"].get(n)}
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, " ")
    return text


def _english_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[A-Za-z_]{3,}", text) if w not in ("HTTP",)]


def test_in_english_the_rendered_title_is_the_entry_s_title(refunded):
    entries = refunded["story"]["entries"]
    kinds = {e["kind"] for e in entries}
    assert {"order", "delivery", "transition", "ledger", "refund", "refund_report", "outbox"} <= kinds
    for e in entries:
        assert EN.story_title(e) == e["title"], e["says"]
        assert ZH.story_title(e) != e["title"], e["says"]


def test_a_story_s_params_keep_cents_and_codes_R14(refunded):
    """Machines read `says`: integer cents under `*_cent`, codes as stored, never words or yuan text."""
    entries = refunded["story"]["entries"]
    (created,) = [e for e in entries if e["says"]["text"].startswith("order created")]
    assert created["says"]["params"] == {"amount_cent": 1999, "channel": "wechatpay"}
    ledger = [e["says"]["params"] for e in entries if e["kind"] == "ledger"]
    assert [(p["ledger_kind"], p["amount_cent"]) for p in ledger] == [("PAYMENT", 1999), ("REFUND", -501)]
    json.dumps(refunded["story"])


def test_the_cli_story_in_chinese_reads_chinese_with_yuan_amounts(refunded, monkeypatch, capsys):
    monkeypatch.setattr(cli_order, "connect", lambda args: {"env": refunded["h"].env})
    monkeypatch.setenv("TALLY_LANG", "zh-CN")
    capsys.readouterr()
    assert main(["order", "story", refunded["mchid"], refunded["otn"], "--local"]) == 0
    out = capsys.readouterr().out
    timeline, _, footnotes = out.partition("以下内容不保存")
    timeline = _without_identifiers(timeline, refunded["story"]["entries"]).replace(refunded["otn"], " ")
    assert not _english_words(timeline) and not CODES.search(timeline), timeline
    assert "订单创建：¥19.99，微信支付" in out and "入账：退款 -¥5.01" in out
    assert "待支付 → 已支付（支付，通知）" in out
    assert "¥19.99" in out and "19.99 CNY" not in out and not re.search(r"(?<![¥,\d])19\.99", out)
    assert "NotifyDuplicate" in footnotes and "Repeated deliveries" not in footnotes
    print(out)


def _console_story(mchid: str, otn: str, language: str) -> str:
    event = {
        "version": "2.0",
        "routeKey": "GET /console/{page}",
        "rawPath": "/console/story",
        "headers": {"host": "console.test", "accept-language": language},
        "queryStringParameters": {"mchid": mchid, "order": otn},
        "pathParameters": {"page": "story"},
        "requestContext": {"http": {"method": "GET"}, "authorizer": {"jwt": {"claims": CLAIMS}}},
        "body": "",
        "isBase64Encoded": False,
    }
    answer = app.handle(event)
    assert answer["statusCode"] == 200, answer.get("body", "")[:500]
    return answer["body"]


def _timeline_lines(page: str) -> list[str]:
    """Each timeline line's sentence as the console shows it (the `says` span of every entry)."""
    return [html.unescape(t) for t in re.findall(r'<span class="says">(.*?)</span>', page, re.S)]


def test_the_console_story_in_chinese_shows_translated_titles_and_footnotes(refunded):
    page = _console_story(refunded["mchid"], refunded["otn"], "zh-CN")
    titles = _timeline_lines(page)
    entries = refunded["story"]["entries"]
    assert len(titles) == len(entries)
    shown = _without_identifiers("\n".join(titles), entries)
    assert not _english_words(shown) and not CODES.search(shown), shown
    assert "订单创建：¥19.99，微信支付" in titles and "19.99 CNY" not in page
    footnotes = re.search(r"这里看不到的内容及原因.*?</ul>", page, re.S)
    assert footnotes and "Repeated deliveries" not in footnotes.group(0)
    english = _console_story(refunded["mchid"], refunded["otn"], "en")
    assert _timeline_lines(english) == [e["title"] for e in entries]


def test_the_console_timeline_says_what_the_cli_says_and_a_refund_never_reads_paid(refunded):
    """One truth: each console line is the sentence the CLI's story prints for that entry, so a refund's SUCCESS
    reads as refunded, not as a payment's paid (a state code alone means different things per kind)."""
    titles = _timeline_lines(_console_story(refunded["mchid"], refunded["otn"], "zh-CN"))
    assert titles == [ZH.story_title(e) for e in refunded["story"]["entries"]]
    refund_lines = [
        t for t, e in zip(titles, refunded["story"]["entries"], strict=True) if "refund" in e["kind"]
    ]
    assert refund_lines and all("已支付" not in line for line in refund_lines), refund_lines


def test_an_unknown_status_channel_or_amount_reads_as_itself():
    """The story shows whatever the rows hold: a code no table knows is printed, never an error."""
    odd = entry(
        "2026-12-07T01:00:00Z",
        "transition",
        "%(from_status)s → %(to_status)s (%(event)s, %(source)s) %(channel)s %(trade_state)s %(amount_cent)s",
        "x",
        params={
            "from_status": "LIMBO",
            "to_status": "ELSEWHERE",
            "event": "TELEPORT",
            "source": "carrier-pigeon",
            "channel": "unionpay",
            "trade_state": None,
            "amount_cent": "12.30",
        },
    )
    expected = "LIMBO → ELSEWHERE (TELEPORT, carrier-pigeon) unionpay - 12.30"
    assert odd["title"] == expected and ZH.story_title(odd) == expected
    handled = entry(
        None, "delivery", "%(handled)s %(refund_status)s", "x", params={"handled": 7, "refund_status": 1}
    )
    assert ZH.story_title(handled) == "7 1"
    assert ZH.story_title({"title": "an entry from before says"}) == "an entry from before says"
