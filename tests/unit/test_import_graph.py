"""Imports in one direction: no module of the package (core/, bot/, agents/, devtools/) or of the
bench reaches itself through its imports.

Type-only imports (under TYPE_CHECKING) and imports inside functions count too: a circle
hidden there still means two modules that cannot be read, tested or moved apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("core", "bot", "agents", "devtools")
"""The folders installed as wakeful.core, wakeful.bot, wakeful.agents and wakeful.devtools."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    prefix = "" if parts[0] == "bench" else "wakeful."
    return prefix + ".".join(parts)


def imports_of(folders: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of `folders` it imports (at the top, in a function, TYPE_CHECKING)."""
    paths = {module_name(p): p for f in folders for p in (ROOT / f).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # `from .common import x` (the bench's relative imports)
                    up = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{up}.{base}" if base else up
                # `from wakeful.core import metrics` names a module; `from x import Name`, x.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names
                ]
            graph[name] |= {t for t in targets if t in paths and t != name}
    return graph


def core_imports() -> dict[str, set[str]]:
    return imports_of(("core",))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_core_s_imports() -> None:
    graph = core_imports()
    assert "wakeful.core.errors" in graph["wakeful.core.effects"]
    assert "wakeful.core.metrics" in graph["wakeful.core.store.claims"]


def test_the_check_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_has_no_import_circles() -> None:
    assert circles(core_imports()) == []


def test_the_graph_sees_the_package_s_and_the_bench_s_imports() -> None:
    graph = imports_of((*PACKAGE, "bench"))
    assert "wakeful.bot.process.config" in graph["wakeful.bot.slack.installations"] or (
        "wakeful.bot.process.env_values" in graph["wakeful.bot.slack.installations"]
    )
    assert "bench.common" in graph["bench.engine"]  # a relative import
    assert "wakeful.devtools.emulator.server" in graph["wakeful.devtools.emulator.state"]


def test_the_package_and_the_bench_have_no_import_circles() -> None:
    assert circles(imports_of((*PACKAGE, "bench"))) == []
