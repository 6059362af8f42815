"""tally_cli/speak.py: one amount format (¥1,234.56), columns measured as a terminal shows them, the language
read when a line is written, and an error that speaks the person's language on stderr but English in --json."""

from __future__ import annotations

import pytest

from tally_cli import speak


def test_one_amount_format_grouped_with_the_yuan_sign_integer_cents_in():
    assert speak.money(123456) == "¥1,234.56"
    assert speak.money(-2) == "-¥0.02"  # the sign before the currency
    assert speak.money(0) == "¥0.00" and speak.money(None) == "-" and speak.money("") == "-"
    assert speak.money_text("1234.56") == "¥1,234.56" and speak.money_text("-0.30") == "-¥0.30"
    assert speak.money_text(None) == "-"


def test_columns_count_a_chinese_character_as_two():
    assert speak.width("微信支付 v3") == 11
    assert speak.pad("原因：", 8) == "原因：  " and speak.rpad("ab", 4) == "  ab"
    assert speak.aligned([("原因：", "x"), ("next:", "y")], indent=" ") == [" 原因： x", " next:  y"]


def test_times_read_in_asia_shanghai():
    assert speak.when("2026-12-01T09:05:09Z") == "2026-12-01 17:05:09"
    assert speak.when(None) == "-"


@pytest.mark.parametrize(("env", "said"), [("zh-CN", "待办队列"), ("en", "the work queue")])
def test_the_language_is_read_when_the_line_is_written(monkeypatch, env, said):
    monkeypatch.setenv("TALLY_LANG", env)
    assert speak._("the work queue: everything that needs a person").startswith(said)


def test_a_fault_speaks_chinese_to_the_person_and_english_to_a_script(monkeypatch):
    monkeypatch.setenv("TALLY_LANG", "zh-CN")
    error = speak.fault(ValueError, "date %(date)r is not a calendar day", {"date": "2024-02-30"})
    assert str(error) == "日期 '2024-02-30' 不是有效的日历日"
    assert speak.english(error) == "date '2024-02-30' is not a calendar day"
    assert speak.english(ValueError("plain")) == "plain"
