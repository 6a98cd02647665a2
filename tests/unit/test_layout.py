"""The layers: core never imports Slack, the Slack edge or the dev tools; the Slack edge reaches
the dev tools only from the two commands that run them; no production module is over 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wakeful.bot
import wakeful.core
import wakeful.devtools

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("core", "bot")


def imports(path: Path) -> list[tuple[str, str]]:
    """(module imported, name of the enclosing function or '<module>') for every import."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef) else where
            if isinstance(child, ast.Import):
                found.extend((alias.name, where) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{path}: relative import of a parent package"
                found.append((child.module or "", where))
            visit(child, inner)

    visit(tree, "<module>")
    return found


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_the_top_level_folders_are_the_import_names() -> None:
    assert Path(wakeful.core.__file__).parent == ROOT / "core"
    assert Path(wakeful.bot.__file__).parent == ROOT / "bot"
    assert Path(wakeful.devtools.__file__).parent == ROOT / "devtools"
    assert not (ROOT / "wakeful").exists(), "no wakeful/ source folder remains"


@pytest.mark.parametrize("path", modules("core"), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_never_imports_slack_the_edge_or_the_dev_tools(path: Path) -> None:
    banned = ("slack_bolt", "slack_sdk", "wakeful.bot", "wakeful.devtools", "waitress")
    bad = [m for m, _ in imports(path) if m.startswith(banned)]
    assert not bad, f"{path} imports {bad}"


@pytest.mark.parametrize("path", modules("bot"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_edge_reaches_the_dev_tools_only_from_their_commands(path: Path) -> None:
    used = [(m, where) for m, where in imports(path) if m.startswith("wakeful.devtools")]
    allowed = {("cli.py", "_demo"), ("cli.py", "_scenarios")}
    assert all((path.name, where) in allowed for _, where in used), used


@pytest.mark.parametrize("folder", PRODUCTION)
def test_no_production_module_is_over_500_lines(folder: str) -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules(folder)}
    assert not {p: n for p, n in sizes.items() if n > 500}
