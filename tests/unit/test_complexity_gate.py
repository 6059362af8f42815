"""The complexity ceiling of `make lint` (docs/gates.md "Complexity"): ruff's C901 over the product, the CLI and
the local stack; a function past the ceiling fails the lint."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _function_of_complexity(n: int) -> str:
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(n - 1))
    return f"def f(x):\n{branches}\n    return -1\n"


def test_the_ceiling_is_on_and_at_most_20():
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] and lint["mccabe"]["max-complexity"] <= 20


def test_a_function_past_the_ceiling_fails_the_lint(tmp_path):
    ceiling = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["mccabe"][
        "max-complexity"
    ]
    ruff = pathlib.Path(sys.executable).with_name("ruff")
    for n, flagged in ((ceiling, False), (ceiling + 1, True)):
        source = tmp_path / f"complex_{n}.py"
        source.write_text(_function_of_complexity(n))
        done = subprocess.run(
            [str(ruff), "check", "--config", str(ROOT / "pyproject.toml"), "--select", "C901", str(source)],
            capture_output=True,
            text=True,
        )
        assert ("C901" in done.stdout) is flagged, done.stdout


CLASS_CEILING = 400  # lines of one class in the deployed layer: a room a person can hold in their head


def test_no_deployed_class_is_over_the_ceiling():
    """Issue #37: every class of layers/common/tally is at most CLASS_CEILING lines (a large service is split
    along its use cases: docs/design.md)."""
    import ast

    over = []
    for path in sorted((ROOT / "layers/common/tally").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > CLASS_CEILING:
                over.append(
                    f"{path.relative_to(ROOT)} {node.name}: {node.end_lineno - node.lineno + 1} lines"
                )
    assert not over, over
