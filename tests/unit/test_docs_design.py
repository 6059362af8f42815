"""docs/design.md answers "where is a payment booked?" and "where is a WeChat v2 refund signed?" with one
path each, and those paths stay true: the file exists and defines the class and method named."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs/design.md"
ANSWER = re.compile(r"^- \*\*(Where is [^*]+\?)\*\* `([^`]+\.py)`\s*·\s*`(\w+)\.(\w+)`", re.M)


def answers() -> dict[str, tuple[str, str, str]]:
    return {q: (path, cls, meth) for q, path, cls, meth in ANSWER.findall(DESIGN.read_text(encoding="utf-8"))}


def defines(path: pathlib.Path, cls: str, meth: str) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return any(isinstance(f, ast.FunctionDef) and f.name == meth for f in node.body)
    return False


def test_design_answers_the_two_questions_with_one_path_each():
    assert set(answers()) == {"Where is a payment booked?", "Where is a WeChat v2 refund signed?"}


def test_each_answer_names_a_file_and_method_that_exist():
    for question, (path, cls, meth) in answers().items():
        assert (ROOT / path).is_file(), f"{question}: {path} does not exist"
        assert defines(ROOT / path, cls, meth), f"{question}: {path} defines no {cls}.{meth}"


def test_the_booking_method_is_the_one_transaction_and_the_signing_method_signs():
    """The answers are not just names that exist: the booking one writes the ledger in its transaction
    (R18), the signing one calls the v2 signature."""
    source = {
        q: ast.get_source_segment((ROOT / p).read_text(encoding="utf-8"), _method(ROOT / p, c, m)) or ""
        for q, (p, c, m) in answers().items()
    }
    booked = source["Where is a payment booked?"]
    assert re.search(r"\btransact(_write_items)?\(", booked) and "_ledger" in booked
    assert "wx2.sign(" in source["Where is a WeChat v2 refund signed?"]


def test_readme_points_at_the_design_in_the_repo():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "DESIGN.md" not in readme
    assert "docs/design.md" in readme and "docs/rules.md" in readme


def _method(path: pathlib.Path, cls: str, meth: str) -> ast.AST:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == meth)
    raise LookupError(f"{cls}.{meth}")
