"""The CLI's catalogue stays complete (issue #31): gettext domain `tally_cli`
(tally/locale/<lang>/LC_MESSAGES/tally_cli.po, `make i18n`). Every sentence in tally_cli/ is in the catalogue,
every message has a Chinese translation that is not fuzzy and keeps the placeholders, and the committed .mo
is the compiled .po."""

from __future__ import annotations

import gettext
import re
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po
from tally.i18n import LOCALE_DIR

ROOT = Path(__file__).resolve().parents[2]
PO = LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / "tally_cli.po"
PLACEHOLDER = re.compile(r"%(?:\([a-z_]+\))?[sdr]")


def catalogue(lang: str = "zh_CN"):
    with open(LOCALE_DIR / lang / "LC_MESSAGES" / "tally_cli.po", "rb") as f:
        return read_po(f, locale=lang)


def messages(cat) -> dict[str, object]:
    return {(m.id[0] if isinstance(m.id, tuple) else m.id): m for m in cat if m.id}


def test_every_sentence_of_the_cli_is_in_the_catalogue():
    """A `_()` added in tally_cli/ without `make i18n` fails here, not on a Chinese reader's screen."""
    in_code = {
        (found[2][0] if isinstance(found[2], tuple) else found[2])
        for found in extract_from_dir(str(ROOT / "tally_cli"), method_map=[("**.py", "python")])
    }
    missing = in_code - set(messages(catalogue()))
    assert not missing, f"run `make i18n` and translate: {sorted(missing)}"


def test_every_message_has_a_chinese_translation_not_fuzzy_with_the_same_placeholders():
    untranslated, fuzzy, broken = [], [], []
    for msgid, m in messages(catalogue()).items():
        strings = m.string if isinstance(m.string, tuple) else (m.string,)
        if not all(strings):
            untranslated.append(msgid)
        if m.fuzzy:
            fuzzy.append(msgid)
        for text in strings:
            if sorted(PLACEHOLDER.findall(text)) != sorted(PLACEHOLDER.findall(msgid)):
                broken.append(msgid)
    assert (untranslated, fuzzy, broken) == ([], [], [])


@pytest.mark.parametrize("lang", ["zh_CN", "en"])
def test_the_committed_mo_is_the_compiled_po(lang):
    with open(LOCALE_DIR / lang / "LC_MESSAGES" / "tally_cli.mo", "rb") as f:
        compiled = gettext.GNUTranslations(f)
    for msgid, m in messages(catalogue(lang)).items():
        if isinstance(m.id, tuple):
            want = m.string[0] or m.id[0]
            assert compiled.ngettext(m.id[0], m.id[1], 1) == want, msgid
        else:
            assert compiled.gettext(msgid) == (m.string or msgid), msgid


def test_the_cli_domain_is_apart_from_the_console_domain():
    """Babel extracts tally_cli/ into `tally_cli` only (babel_cli.cfg); the `tally` domain (babel.cfg) does not
    take the CLI's sentences, so the two catalogues are translated and checked apart."""
    sections = [line for line in (LOCALE_DIR / "babel.cfg").read_text().splitlines() if line.startswith("[")]
    assert not [s for s in sections if "tally_cli" in s]
    assert "[python: tally_cli/**.py]" in (LOCALE_DIR / "babel_cli.cfg").read_text()
