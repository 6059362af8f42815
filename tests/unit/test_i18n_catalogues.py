"""Both languages stay complete (issue #31): every message of the `tally` domain has a Chinese translation (no
empty msgstr, no fuzzy), the committed .mo is the committed .po compiled, the catalogue holds every message the
code and the templates mark, no template carries visible English outside the translation calls, and every case
kind and difference class has a plain sentence with a next step."""

from __future__ import annotations

import gettext
import io
import re

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from tally import i18n
from tally.i18n import words

LOCALE = i18n.LOCALE_DIR
ROOT = LOCALE.parents[3]
TEMPLATES = ROOT / "layers/common/tally/console/templates"


def catalogue(lang: str):
    with open(LOCALE / lang / "LC_MESSAGES" / "tally.po", "rb") as po:
        return read_po(po)


def test_every_message_has_a_chinese_translation_none_fuzzy():
    cat = catalogue("zh_CN")
    missing = [
        m.id for m in cat if m.id and (not all(m.string) if isinstance(m.string, tuple) else not m.string)
    ]
    fuzzy = [m.id for m in cat if m.id and m.fuzzy]
    assert len(cat) > 300 and not missing and not fuzzy, (missing, fuzzy)


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_translation_keeps_the_placeholders_of_its_message(lang):
    """What `pybabel compile` checks (`make i18n` fails on it): a %(name)s the message does not fill."""
    problems = [(m.id, [str(e) for e in errors]) for m, errors in catalogue(lang).check() if errors]
    assert not problems, problems


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_the_committed_mo_is_the_committed_po_compiled(lang):
    compiled = io.BytesIO()
    write_mo(compiled, catalogue(lang))
    compiled.seek(0)
    expected = gettext.GNUTranslations(compiled)._catalog  # type: ignore[attr-defined]
    with open(LOCALE / lang / "LC_MESSAGES" / "tally.mo", "rb") as mo:
        committed = gettext.GNUTranslations(mo)._catalog  # type: ignore[attr-defined]
    assert committed == expected, "run `make i18n`: the .mo is not the .po compiled"


def test_the_catalogue_holds_every_message_the_code_and_templates_mark():
    """What babel.cfg names (the console, the shared words, the channels' labels, the order story's sentences)."""
    with open(LOCALE / "babel.cfg", encoding="utf-8") as cfg:
        method_map, options = parse_mapping_cfg(cfg)
    assert ("layers/common/tally/service/story.py", "python") in method_map
    marked = {
        found[2] if isinstance(found[2], str) else found[2][0]
        for found in extract_from_dir(str(ROOT), method_map, options_map=options)  # type: ignore[arg-type]
    }
    held = {m.id if isinstance(m.id, str) else m.id[0] for m in catalogue("zh_CN") if m.id}
    assert len(marked) > 300 and not marked - held, (
        f"run `make i18n`: not in the catalogue: {sorted(marked - held)}"
    )


def test_a_page_in_chinese_reads_chinese():
    speaker = i18n.speaker(i18n.ZH)
    w = words.Words(speaker)
    assert speaker.gettext("Queue") == "待办" and w.money(123456) == "¥1,234.56"
    assert w.channel("wechatpay") == "微信支付" and w.channel("alipay") == "支付宝"
    assert "旧版" in w.channel("wechatpay-v2")


VISIBLE = re.compile(r"[A-Za-z]{3,}")
ALLOWED = {"Tally", "HTTP", "CSV", "headers", "body"}  # the brand, protocol words, raw-record captions


@pytest.mark.parametrize("template", sorted(p.name for p in TEMPLATES.glob("*.html")))
def test_no_template_shows_english_outside_the_translation_calls(template):
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    text = re.sub(r"\{#.*?#\}", " ", text, flags=re.S)
    text = re.sub(r"\{%.*?%\}", " ", text, flags=re.S)
    text = re.sub(r"\{\{.*?\}\}", " ", text, flags=re.S)
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S)
    text = re.sub(r"<[^>]*>", " ", text, flags=re.S)
    text = re.sub(r"&[a-z]+;", " ", text)
    leaks = [word for word in VISIBLE.findall(text) if word not in ALLOWED]
    assert not leaks, f"{template}: text outside _() / {{% trans %}}: {leaks}"


def test_every_case_kind_and_difference_class_has_a_plain_sentence_and_a_next_step():
    from tally.domain.recon import DIFF_CLASSES
    from tally.service.queue import KINDS

    zh = i18n.speaker(i18n.ZH).gettext
    for kind in KINDS:
        found = words.KIND_REASONS.get(kind)
        assert found is not None, f"no plain words for case kind {kind}"
        assert all(zh(text) != text for text in (found.title, found.reason, found.todo)), kind
    for cls in DIFF_CLASSES:
        found = words.DIFF_REASONS.get(cls)
        assert found is not None, f"no plain words for difference class {cls}"
        assert all(zh(text) != text for text in (found.title, found.reason, found.todo)), cls
