"""Loading the agent: WAKEFUL_AGENT's factory found (the current directory, WAKEFUL_AGENT_PATH),
checked at start-up, and refused with one line that says what is expected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.process.loading import build_runner, load_factory
from wakeful.core.store import open_store

FOLDER = str(Path(__file__).resolve().parents[1] / "fixtures" / "agents")
EXPECTED = "expected a factory taking one argument, setup: wakeful.agents.Setup"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            "shapes:old_style",
            f"takes (config: Any, store: Any, tz_lookup: Any) -> None: {EXPECTED}",
        ),
        ("shapes:no_args", f"takes () -> None: {EXPECTED}"),
        ("shapes:missing", "module shapes has no 'missing'"),
        ("nosuch_module:factory", "cannot be loaded: No module named 'nosuch_module'"),
    ],
)
def test_a_factory_of_the_wrong_shape_is_refused_with_what_is_expected(
    spec: str, said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_factory(spec, {"WAKEFUL_AGENT_PATH": FOLDER})
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_module_not_found_says_where_it_was_looked_for() -> None:
    with pytest.raises(ConfigError) as refused:
        load_factory("nosuch_module:factory", {"WAKEFUL_AGENT_PATH": FOLDER})
    assert FOLDER in str(refused.value) and "WAKEFUL_AGENT_PATH" in str(refused.value)


def test_an_agent_without_run_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.db")
    config = Config.from_env({"WAKEFUL_AGENT": "shapes:no_run", "WAKEFUL_AGENT_PATH": FOLDER})
    try:
        with pytest.raises(ConfigError, match="returned object, which has no run"):
            build_runner(config, store, None, env={"WAKEFUL_AGENT_PATH": FOLDER})
        good = Config.from_env({"WAKEFUL_AGENT": "shapes:Good"})
        runner = build_runner(good, store, None, env={"WAKEFUL_AGENT_PATH": FOLDER})
        assert type(runner.agent).__name__ == "Good"
    finally:
        store.close()


def test_wakeful_worker_refuses_an_old_style_factory_in_one_line(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "WAKEFUL_DB": str(tmp_path / "w.db"),
        "WAKEFUL_AGENT": "shapes:old_style",
        "WAKEFUL_AGENT_PATH": FOLDER,
    }
    done = subprocess.run(
        [sys.executable, "-m", "wakeful.bot.commands.cli", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and EXPECTED in lines[0], done.stderr


def test_a_module_found_whose_own_import_fails_names_what_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "needs_more.py").write_text(
        "import no_such_dependency_i27a\n\ndef factory(setup): ...\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_factory("needs_more:factory", {"WAKEFUL_AGENT_PATH": str(tmp_path)})
    assert str(refused.value) == (
        "WAKEFUL_AGENT 'needs_more:factory': its module needs_more was found but cannot import "
        "'no_such_dependency_i27a' (No module named 'no_such_dependency_i27a'): install it in "
        "the environment wakeful runs in"
    )
