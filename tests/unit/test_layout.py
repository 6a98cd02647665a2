"""The layers: core never imports Slack, the Slack edge or the dev tools; the Slack edge reaches
the dev tools only from the commands that run them; no production module is over 500 lines."""

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
    allowed = {("cli.py", "_demo"), ("cli.py", "_dev"), ("cli.py", "_scenarios")}
    assert all((path.name, where) in allowed for _, where in used), used


@pytest.mark.parametrize("folder", PRODUCTION)
def test_no_production_module_is_over_500_lines(folder: str) -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules(folder)}
    assert not {p: n for p, n in sizes.items() if n > 500}


AGENT_MODULES = sorted((ROOT / "bot" / "builtin").glob("*.py")) + sorted(
    (ROOT / "examples").glob("*.py")
)


@pytest.mark.parametrize("path", AGENT_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_built_in_agents_and_the_examples_use_the_public_api_alone(path: Path) -> None:
    """Dogfooding: the refund desk, the Claude agent and the examples are written on
    `wakeful.agents` as a user's agent is (their shared helpers in bot/builtin too)."""
    own = ("wakeful.agents", "wakeful.bot.builtin")
    bad = [m for m, _ in imports(path) if m.startswith("wakeful") and not m.startswith(own)]
    assert not bad, f"{path} imports {bad}"


def test_every_public_name_of_the_agent_api_says_what_it_is() -> None:
    import wakeful.agents as api

    missing = [
        name
        for name in api.__all__
        if callable(getattr(api, name)) and not (getattr(api, name).__doc__ or "").strip()
    ]
    assert not missing, f"no docstring: {missing}"
    assert (ROOT / "agents" / "py.typed").exists()


def test_the_engine_alone_knows_only_its_own_outbox_kinds() -> None:
    """No Slack surface is named in core: the edge adds them to a registry of its own
    (bot/slack/kinds.py), and a store built without one knows the engine's alone."""
    import subprocess
    import sys

    code = (
        "import inspect, wakeful.core.store, wakeful.core.worker, wakeful.core.kinds as k\n"
        "print(k.ENGINE_KINDS.known())\n"
        "default = inspect.signature(wakeful.core.store.Store).parameters['kinds'].default\n"
        "print(default is k.ENGINE_KINDS)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # `ops` is the engine's own: the operators' channel's lines (core/store/ops.py); so is
    # `stream`, the end of a streamed reply's segment (core/streams.py).
    assert out.stdout.split("\n")[:2] == [
        "('digest', 'ephemeral', 'ops', 'post', 'stream', 'update')",
        "True",
    ]


def test_importing_the_slack_edge_changes_nothing_core_knows() -> None:
    """Whether a post of kind `home` is taken depends on the registry a store was built with,
    never on which modules a process happened to import (no registry filled by importing)."""
    import subprocess
    import sys

    code = (
        "import wakeful.core.kinds as k\n"
        "before = {name: id(value) for name, value in vars(k).items()}\n"
        "known = k.ENGINE_KINDS.known()\n"
        "import wakeful.bot.slack.kinds, wakeful.bot.slack.sender, wakeful.bot.slack.surfaces\n"
        "import wakeful.bot.front.listeners, wakeful.bot.process.runtime, wakeful.agents.testing\n"
        "after = {name: id(value) for name, value in vars(k).items()}\n"
        "print(before == after, k.ENGINE_KINDS.known() == known, k.ENGINE_KINDS.get('home'))\n"
        "print(wakeful.bot.slack.kinds.SLACK_KINDS.get('home') is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["True True None", "True"]
