"""The language Tally speaks (docs/language.md): the person's setting, else Accept-Language, else the
deployment's default; the CLI's TALLY_LANG, else the POSIX locale, else en. And the committed .mo files are
the compiled .po files (the layer ships them without a build step)."""

from __future__ import annotations

import io
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from tally import i18n
from tally.i18n.words import KIND_REASONS, Words
from tally.service.queue import KINDS


def test_the_person_setting_beats_the_browser_which_beats_the_deployment():
    assert i18n.console_language("en", "zh-CN,zh;q=0.9", "zh-CN") == "en"
    assert i18n.console_language(None, "en-US,en;q=0.9", "zh-CN") == "en"
    assert i18n.console_language(None, "fr-FR, zh-Hans;q=0.5, en;q=0.2", "en") == "zh_CN"
    assert i18n.console_language(None, "fr-FR", "en") == "en"
    assert i18n.console_language(None, None, None) == "zh_CN"  # a merchant in China
    assert i18n.from_accept_language("en;q=0, zh-CN;q=0.1") == "zh_CN"  # q=0 means "not this one"


def test_the_cli_reads_tally_lang_then_the_locale_then_speaks_english():
    assert i18n.cli_language({"TALLY_LANG": "zh_CN", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert i18n.cli_language({"LC_ALL": "zh_CN.UTF-8"}) == "zh_CN"
    assert i18n.cli_language({"LANG": "C.UTF-8"}) == "en"
    assert i18n.cli_language({}) == "en"


def test_every_case_kind_has_a_plain_reason_and_amounts_read_as_yuan():
    assert set(KINDS) <= set(KIND_REASONS)
    words = Words(i18n.speaker("en"))
    assert words.money(123456) == "¥1,234.56" and words.money(None) == ""
    assert words.age(3 * 3600 + 5 * 60) == "3 h 5 min"


def test_the_committed_mo_files_are_the_compiled_po_files():
    for lang in i18n.LANGUAGES:
        folder = Path(i18n.LOCALE_DIR) / lang / "LC_MESSAGES"
        with open(folder / "tally.po", "rb") as po:
            catalog = read_po(po)
        compiled = io.BytesIO()
        write_mo(compiled, catalog)
        assert compiled.getvalue() == (folder / "tally.mo").read_bytes(), f"{lang}: run make i18n"
