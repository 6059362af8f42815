"""Each channel's code lives in its own folder, channels/<name>/ (issue #19 item 2; docs/design.md §2).

Outside channels/, a module neither imports a channel package's modules nor spells a channel's name as a
string (so neither can it dispatch on one: a constant holding a spelling is itself a spelled string), nor decides
by an exception's text: it looks the channel up in channels/registry.py and reads an error's class or fields. The sites that still do are listed below, each with
why; the list only shrinks (a listed file that no longer needs its entry fails too, so the list stays true).
tally_local/, tests/ and docs/ are outside the rule (the simulator plays the channels; tests name them).
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from tally.channels import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers/common/tally"
PACKAGES = ("wechatpay_v3", "wechatpay_v2", "alipay")
SPELLINGS = {
    word
    for channel in registry.all_channels()
    for word in (
        channel.name,
        channel.stored,
        channel.route,
        channel.order_word,
        channel.api,
        channel.merchant_kind,
    )
    if word
}

# path (from layers/common/tally or the repo) -> why it still names a channel. Shrink it; never grow it
# without saying why here. Issue #19 moved the last service sites (merchants, heartbeat, keys) into the
# packages; the four left are acceptable for good: the operator's CLI is per channel by nature (each channel's
# subcommand takes that channel's credentials as flags, and the CLI lives outside the layer), and the pure
# domain may not import the registry, so where a rule is a table keyed by a channel's words the words are data.
STILL_NAMES_A_CHANNEL = {
    "tally_cli/verify.py": "one subcommand per channel, with that channel's flags (`tally verify wechatpay-v2`)",
    "tally_cli/merchant.py": "one subcommand per channel, with that channel's credential flags",
}


def _modules() -> list[pathlib.Path]:
    files = [p for p in LAYER.rglob("*.py") if "channels" not in p.relative_to(LAYER).parts[:1]]
    return sorted(
        files + list((ROOT / "functions").glob("*/app.py")) + list((ROOT / "tally_cli").glob("*.py"))
    )


def _name(path: pathlib.Path) -> str:
    return str(path.relative_to(LAYER if LAYER in path.parents else ROOT))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def channel_mentions(path: pathlib.Path) -> list[str]:
    """The lines where a module imports a channel package's module or spells a channel as a string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value in SPELLINGS:
                hits.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            if node.module == "tally.channels":
                modules = [f"tally.channels.{alias.name}" for alias in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[:2] == ["tally", "channels"] and len(parts) > 2 and parts[2] in PACKAGES:
                    hits.append(f"line {node.lineno}: imports {module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["tally", "channels"] and len(parts) > 2 and parts[2] in PACKAGES:
                    hits.append(f"line {node.lineno}: imports {alias.name}")
    return hits


def message_matching(path: pathlib.Path) -> list[str]:
    """The lines where a module decides by an error's text: `"…" in str(exc)`, `str(exc).startswith("…")` or the
    like on a name an `except … as exc` bound. An error's meaning travels as its class or a field the channel
    set (errors.SignatureError `cause`), never as English a channel may reword."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hits = []
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or not handler.name:
            continue
        for node in ast.walk(handler):
            text = None
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                text = node.comparators
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("startswith", "endswith", "find", "index", "count"):
                    text = [node.func.value]
            if text and any(_names(part, handler.name) for part in text):
                hits.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    return hits


def _names(node: ast.AST, name: str) -> bool:
    """`node` reads the text of the exception `name`: str(exc), repr(exc), exc.args, exc.message, exc.msg."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("str", "repr", "format"):
            if any(isinstance(a, ast.Name) and a.id == name for a in n.args):
                return True
        if isinstance(n, ast.Attribute) and n.attr in ("args", "message", "msg"):
            if isinstance(n.value, ast.Name) and n.value.id == name:
                return True
    return False


def test_the_rule_sees_what_it_forbids(tmp_path):
    """The checker itself: an import of a wire module and a spelled channel are found, a docstring is not."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Mentions "alipay" in prose: fine."""\n'
        "from tally.channels.alipay import wire as ali\n"
        "from tally.channels import wechatpay_v2\n"
        'if channel == "wechatpay-v2":\n    pass\n',
        encoding="utf-8",
    )
    assert channel_mentions(probe) == [
        "line 2: imports tally.channels.alipay",
        "line 3: imports tally.channels.wechatpay_v2",
        "line 4: 'wechatpay-v2'",
    ]


def test_no_module_outside_channels_names_a_channel_except_the_listed_sites():
    offenders = {
        _name(path): hits
        for path in _modules()
        if (hits := channel_mentions(path)) and _name(path) not in STILL_NAMES_A_CHANNEL
    }
    assert not offenders, f"look the channel up in tally.channels.registry instead: {offenders}"


def test_no_module_outside_channels_decides_by_an_errors_text():
    found = {_name(path): hits for path in _modules() if (hits := message_matching(path))}
    assert not found, f"raise a class or set a field in the channel package instead: {found}"


def test_the_message_rule_sees_what_it_forbids(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "try:\n    pass\nexcept ValueError as exc:\n"
        "    if 'timestamp' in str(exc):\n        pass\n"
        "    if exc.args[0].startswith('bad'):\n        pass\n"
        "    if 'x' in {'x'}:\n        pass\n"
        "    if 0 in exc.failed:\n        pass\n",
        encoding="utf-8",
    )
    assert [hit.split(":")[0] for hit in message_matching(probe)] == ["line 4", "line 6"]


@pytest.mark.parametrize("site", sorted(STILL_NAMES_A_CHANNEL))
def test_each_listed_site_still_needs_its_entry(site):
    path = LAYER / site if (LAYER / site).exists() else ROOT / site
    assert path.is_file(), f"{site} is gone: drop it from STILL_NAMES_A_CHANNEL"
    assert channel_mentions(path), f"{site} names no channel any more: drop it from STILL_NAMES_A_CHANNEL"


def test_a_channel_package_imports_no_other_channel_package_except_v2_on_v3s_tables():
    """v2 stores v3's channel and reads v3's state and refund tables (channels/wechatpay_v2/channel.py):
    that is the one crossing; nothing else reaches into another channel's folder."""
    allowed = {("wechatpay_v2", "wechatpay_v3")}
    for package in PACKAGES:
        for path in sorted((LAYER / "channels" / package).glob("*.py")):
            for hit in channel_mentions(path):
                if "imports tally.channels." not in hit:
                    continue
                other = hit.split("imports tally.channels.")[1].split(".")[0]
                assert other == package or (package, other) in allowed, f"{_name(path)} {hit}"


def test_every_package_holds_its_channel_and_the_registry_lists_them_all():
    assert registry.names() == list(PACKAGES)
    for name in PACKAGES:
        assert (LAYER / "channels" / name / "channel.py").is_file()
        assert (LAYER / "channels" / name / "wire.py").is_file()
        assert (LAYER / "channels" / name / "pull.py").is_file()
