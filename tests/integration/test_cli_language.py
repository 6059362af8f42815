"""The CLI speaks the person's language (issue #31): TALLY_LANG=zh-CN (or a zh locale) prints the morning flow in
Chinese — pending, manual list/show, ledger day, recon show, find — with reasons and next steps from the same
sentences the console uses (tally/i18n/words.py), amounts as ¥1,234.56 and times in Asia/Shanghai; nothing set,
or an English locale, prints English; `--json` is the same document, byte for byte, in both languages."""

from __future__ import annotations

import json
import random
import re

import pytest
from tally import bootstrap
from tally.i18n import speaker
from tally.i18n.words import Words

from tally_cli.main import main
from tests.integration.refund_helpers import paid_order

pytestmark = pytest.mark.usefixtures("days_of_2024")

D = "2024-05-01"
RAW = re.compile(r"\bNone\b|handled=2\b|\bR\d{2}\b")  # what no human line of the morning flow shows


@pytest.fixture
def day(h, tmp_path, monkeypatch):
    """A merchant with a paid order, an amount mismatch waiting for a person, and a reconciled day with two
    payments only the channel's bill has; the CLI pointed at this test's moto (.tally/local.json)."""
    state = {"endpoint_url": "", "region": "us-east-1", "api_url": "http://127.0.0.1:9", "env": h.env}
    (tmp_path / "local.json").write_text(json.dumps(state))
    monkeypatch.setenv("TALLY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("USER", "alice")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    m = h.add_merchant(mchid=str(random.randrange(10**9, 10**10)))
    otn, _ = paid_order(h, m["mchid"], amount=123456)
    for _n in range(2):  # the channel has them, we never heard of them: two recon differences
        lost = f"L{random.randrange(10**15, 10**16)}"
        assert h.create_order(m["mchid"], lost, amount_cent=120, prepay=True)["statusCode"] == 201
        h.sim.pay(m["mchid"], lost, drop=True, success_time=f"{D}T10:00:00+08:00")
    odd = f"M{random.randrange(10**15, 10**16)}"  # paid 0.30 on an order of 3.00: a person decides
    assert h.create_order(m["mchid"], odd, amount_cent=300)["statusCode"] == 201
    headers, body, _ = h.notification(m["mchid"], odd, total=30)
    assert h.notify(m["mchid"], headers, body)["statusCode"] == 204
    h.drain()
    bootstrap.recon_service().run("wechatpay", m["mchid"], D, pass_="cli")
    return {"mchid": m["mchid"], "otn": otn, "odd": odd}


def tally(capsys, *argv: str, expect: tuple[int, ...] = (0,)) -> str:
    capsys.readouterr()
    code = main([*argv, "--local"])
    out = capsys.readouterr()
    assert code in expect, (argv, code, out.out[-2000:], out.err[-2000:])
    return out.out


def morning(capsys, day) -> dict[str, str]:
    """The morning walk (docs/morning.md) as a person types it; the item is the amount mismatch."""
    recon = ["--channel", "wechatpay", "--mchid", day["mchid"], "--date", D]
    capsys.readouterr()
    assert main(["manual", "list", "--json", "--local"]) in (0, 3)
    items = json.loads(capsys.readouterr().out)["items"]
    (item,) = [i for i in items if i["order"] == day["odd"]]
    return {
        "pending": tally(capsys, "pending", expect=(0, 3)),
        "list": tally(capsys, "manual", "list", expect=(0, 3)),
        "show": tally(capsys, "manual", "show", item["id"]),
        "ledger": tally(capsys, "ledger", "day", "today", "--merchant", day["mchid"]),  # the paid order's day
        "recon": tally(capsys, "recon", "show", *recon),
        "find": tally(capsys, "find", day["otn"]),
        "item_kind": item["kind"],
    }


def test_the_morning_flow_reads_chinese_with_tally_lang_zh(day, capsys, monkeypatch):
    monkeypatch.setenv("TALLY_LANG", "zh-CN")
    monkeypatch.setenv("LANG", "en_US.UTF-8")  # TALLY_LANG wins over the locale
    said = morning(capsys, day)
    zh = Words(speaker("zh_CN"))
    reason = zh.reason(said["item_kind"])

    assert "卡住：超过 10 分钟未处理的通知：" in said["pending"] and "待人工处理的事项：" in said["pending"]
    assert reason.title in said["pending"] and "tally manual show ID" in said["pending"]

    assert re.search(r"\d+ 项待人工处理，最早的在前", said["list"])
    assert f"原因：     {reason.reason}" in said["list"] and f"处理：     {reason.todo}" in said["list"]
    assert "金额 ¥0.30" in said["list"]

    show = said["show"]
    assert f"原因：    {reason.reason}" in show and f"处理：    {reason.todo}" in show
    assert "下一步：  tally manual " in show and "详情：" in show  # the kind and the recorded reason, last
    assert re.search(r"已等待：  .*（自 \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} 起）", show)  # Asia/Shanghai

    ledger = said["ledger"]
    assert "账务（账单日，北京时间）" in ledger and "手续费为成本" in ledger
    assert "1 × ¥1,234.56" in ledger  # one amount format: grouped, with the yuan sign
    assert f"资金 {zh.channel('wechatpay')} {day['mchid']}：" in ledger
    assert zh.run("no run yet") in ledger

    recon = said["recon"]
    assert "（cli，北京时间 " in recon and "差异：" in recon and "渠道 ¥1.20 / 我方 -" in recon
    assert zh.diff("CHANNEL_ONLY").title in recon and "已匹配 " in recon

    assert f"的订单 {day['otn']} 的交易号" not in said["find"]  # found by out_trade_no, not a transaction id
    assert f"是{zh.channel('wechatpay')}商户 {day['mchid']} 的订单 {day['otn']} 的商户订单号" in said["find"]
    assert "时间为北京时间" in said["find"]

    assert re.search(
        r"^渠道 +编号 +模式 +服务商 +密钥模式 +证书到期$", tally(capsys, "merchant", "list"), re.M
    )

    for name in ("pending", "list", "show", "ledger", "recon"):
        assert not RAW.search(said[name]), (name, RAW.search(said[name]), said[name])
        for english in ("waiting for a person", "amount:", "next:", "bill date", "differences:", "no runs"):
            assert english not in said[name], (name, english)


def test_the_morning_flow_stays_english_when_nothing_asks_for_chinese(day, capsys, monkeypatch):
    monkeypatch.delenv("TALLY_LANG", raising=False)
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    said = morning(capsys, day)
    en = Words(speaker("en"))
    reason = en.reason(said["item_kind"])
    assert "stuck: notifications not applied for 10 min:" in said["pending"]
    assert re.search(r"\d+ items? waiting for a person, oldest first", said["list"])
    assert f"why:     {reason.reason}" in said["list"]
    assert f"reason:   {reason.reason}" in said["show"] and "next:     tally manual " in said["show"]
    assert "(bill date, Asia/Shanghai)" in said["ledger"] and "1 × ¥1,234.56" in said["ledger"]
    assert "Asia/Shanghai)" in said["recon"] and "Only on the channel's bill" in said["recon"]
    assert f"is the merchant's order number (out_trade_no) of order {day['otn']}" in said["find"]
    assert not re.search(r"[\u4e00-\u9fff]", said["show"] + said["list"] + said["pending"])


def test_a_zh_locale_alone_chooses_chinese(day, capsys, monkeypatch):
    monkeypatch.delenv("TALLY_LANG", raising=False)
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.setenv("LC_MESSAGES", "zh_CN.UTF-8")
    assert re.search(r"\d+ 项待人工处理，最早的在前", tally(capsys, "manual", "list", expect=(0, 3)))


def test_json_is_the_same_document_byte_for_byte_in_both_languages(day, capsys, monkeypatch):
    """--json is codes and numbers (issue #31): the language changes no byte of it."""
    fixed = bootstrap._clock()
    bootstrap.set_clock(lambda: fixed)  # ages and `at` read one instant in both runs (conftest puts it back)
    recon = ["--channel", "wechatpay", "--mchid", day["mchid"], "--date", D]
    capsys.readouterr()
    assert main(["manual", "list", "--json", "--local"]) in (0, 3)
    item = json.loads(capsys.readouterr().out)["items"][0]["id"]
    commands = [
        ["pending"],
        ["manual", "list"],
        ["manual", "show", item],
        ["ledger", "day", D],
        ["recon", "diffs", *recon],
        ["find", day["otn"]],
        ["order", "story", day["mchid"], day["otn"]],
        ["audit", "verify", "--day", "today"],  # the journal of today, not sealed yet (exit 1)
        ["audit", "seal", "--day", "today"],  # refused (exit 2): today has not closed
        ["ledger", "day", "2024-02-30"],  # refused (exit 2): the document says why in English
        ["manual", "resolve", "--why", "x"],  # neither an item nor --filter (exit 1)
    ]
    printed: dict[str, list[str]] = {}
    for lang in ("zh-CN", "en"):
        monkeypatch.setenv("TALLY_LANG", lang)
        printed[lang] = []
        for argv in commands:
            capsys.readouterr()
            assert main([*argv, "--json", "--local"]) in (0, 1, 2, 3), argv
            printed[lang].append(capsys.readouterr().out)
    for argv, zh, en in zip(commands, printed["zh-CN"], printed["en"], strict=True):
        assert zh == en, argv
        json.loads(zh)
    assert json.loads(printed["en"][-2])["error"] == "date '2024-02-30' is not a calendar day"


def test_tally_audit_speaks_the_cli_language_and_keeps_the_finding_technical(day, capsys, monkeypatch):
    """The provable books' verify in Chinese: its lines and its plain first finding translated, the finding
    itself (record name and technical why) as the export's verify writes it; help in Chinese too."""
    monkeypatch.setenv("TALLY_LANG", "zh-CN")
    said = tally(capsys, "audit", "verify", "--day", "today", expect=(1,))
    assert re.search(r"审计 \d{4}-\d{2}-\d{2}：\d+ 条记录", said) and "核验未通过" in said
    assert "这一天没有封存。" in said and "the day is not sealed" in said
    capsys.readouterr()
    assert main(["audit", "seal", "--day", "today", "--local"]) == 2
    assert "还没有结束（北京时间）" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["audit", "verify", "--help"])
    assert "导出目录：离线核验" in capsys.readouterr().out
    monkeypatch.setenv("TALLY_LANG", "en")
    said = tally(capsys, "audit", "verify", "--day", "today", expect=(1,))
    assert "NOT VERIFIED" in said and "The day has no seal." in said


def test_argparse_help_and_errors_speak_the_cli_language(capsys, monkeypatch):
    monkeypatch.setenv("TALLY_LANG", "zh_CN")
    with pytest.raises(SystemExit) as done:
        main(["manual", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("用法：tally manual")  # argparse's own words, in Chinese
    assert "所有未关闭的待办，最早的在前" in text and "显示此帮助信息并退出" in text
    with pytest.raises(SystemExit) as done:
        main(["pending", "--no-such-flag"])
    assert done.value.code == 2
    assert "tally：错误：无法识别的参数：--no-such-flag" in capsys.readouterr().err
    assert main(["ledger", "day", "2024-02-30", "--local"]) == 2
    assert "日期 '2024-02-30' 不是有效的日历日" in capsys.readouterr().err

    monkeypatch.setenv("TALLY_LANG", "en")
    with pytest.raises(SystemExit):
        main(["manual", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: tally manual") and "every open item, oldest first" in text
