"""No raw value on a page, not even behind a details toggle (issue #31): nothing reads "—", a stored time (ISO
or epoch seconds, as an order's `expire_at`) reads as Beijing time, an amount as ¥1,234.56 in both languages."""

from __future__ import annotations

from tally import i18n
from tally.console.app import fact
from tally.console.data import yuan
from tally.i18n.words import Words


def test_nothing_reads_a_dash_and_a_stored_time_reads_as_beijing_time():
    assert fact("poll_last", None) == "—" and fact("sp_mchid", "") == "—"
    assert fact("expire_at", 1797062765) == "2026-12-12 16:06:05"  # epoch seconds, never the number
    assert fact("notified_at", "2026-12-01T09:05:09Z") == "2026-12-01 17:05:09"
    assert fact("poll_count", 3) == "3"


def test_one_amount_format_everywhere_in_the_console():
    for lang in i18n.LANGUAGES:
        assert Words(i18n.speaker(lang)).money(123456) == "¥1,234.56" == yuan(123456)
    assert Words(i18n.speaker(i18n.ZH)).money_text("1234.56") == "¥1,234.56"
    assert Words(i18n.speaker(i18n.EN)).money(-501) == "-¥5.01" and yuan(None) == ""
