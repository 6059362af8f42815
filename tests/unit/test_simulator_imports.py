"""The channel simulator's modules form an acyclic import graph and import each other only at module level
(issue #19 item 7: it was one 11-module cycle held together by 24 function-level imports). The graph is read
from the source with ``ast``: every import counts, deferred and ``TYPE_CHECKING`` ones included."""

from __future__ import annotations

import ast
from pathlib import Path

import tally_local.simulator as package

PACKAGE = Path(package.__file__).parent
NAME = "tally_local.simulator"


def _siblings_imported(node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level == 1 and node.module:
            named = {node.module.split(".")[0]}
        elif node.level == 1 or node.module == NAME:
            named = {alias.name for alias in node.names}
        elif node.module and node.module.startswith(NAME + "."):
            named = {node.module[len(NAME) + 1 :].split(".")[0]}
        else:
            named = set()
    else:
        named = {a.name[len(NAME) + 1 :].split(".")[0] for a in node.names if a.name.startswith(NAME + ".")}
    return named & modules


def import_graph(directory: Path = PACKAGE) -> tuple[dict[str, set[str]], list[str]]:
    """(module → sibling modules it imports, the imports made inside a function or class body)."""
    modules = {p.stem for p in directory.glob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    deferred: list[str] = []
    for module in sorted(modules):
        tree = ast.parse((directory / f"{module}.py").read_text(encoding="utf-8"))
        top: set[int] = set()  # module-level imports, those under a top-level if/try (TYPE_CHECKING) included
        for statement in tree.body:
            top.add(id(statement))
            if isinstance(statement, (ast.If, ast.Try)):
                top |= {id(n) for n in ast.walk(statement) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            found = _siblings_imported(node, modules) - {module}
            graph[module] |= found
            if found and id(node) not in top:
                deferred.append(f"{module}.py:{node.lineno} imports {sorted(found)}")
    return graph, deferred


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_simulator_import_graph_has_no_cycle():
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_simulator_modules_import_each_other_at_module_level_only():
    _, deferred = import_graph()
    assert deferred == []


def test_the_kernel_imports_no_desk():
    graph, _ = import_graph()
    assert graph["kernel"] <= {"_crypto"}
    assert graph["faults"] == set()
    assert graph["delivery"] <= {"kernel"}


def test_cycle_finder_finds_a_cycle():
    """The check above would see a cycle: the finder is not vacuous."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
