"""Issue 34, item 6 (c): a store setting that is neither a file path nor a postgresql:// URL is
refused by every command that opens the store, before it starts anything. `wakeful`
processes (forked from one that imported wakeful, one a new interpreter), each in an empty
folder.

A libpq key=value string (`host=… password=…`) in WAKEFUL_DB used to become a SQLite file
named after it, password included. Now: exit 2, one line naming WAKEFUL_DB (or `--db`) and
what is accepted, no file created, nothing of the value printed.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.forked_cli import Forks
from tests.support.slack_app import child_env, pg_schema_url, wakeful_cmd
from wakeful.core.store import open_store

PASSWORD = "kv-SECRET-hunter2"
KEY_VALUE = f"host=127.0.0.1 port=5432 dbname=wakeful user=wakeful password={PASSWORD}"
COMMANDS = {
    "serve": ["serve"],
    "worker": ["worker"],
    "scheduler": ["scheduler"],
    "dispatcher": ["dispatcher"],
    "inspect": ["inspect"],
    "dead-letters": ["dead-letters"],
    "requeue": ["requeue", "event", "1"],
    "doctor": ["doctor"],
    "backup": ["backup", "copy.db"],
    "restore": ["restore", "copy.db"],
    "gateway": ["gateway", "--config", "gateway.toml"],
    "gateway revoke": ["gateway", "revoke", "stripe"],
    "gateway restore": ["gateway", "restore", "stripe"],
    "gateway status": ["gateway", "status"],
}
"""Every command that opens the store, with the arguments it needs to get that far."""
SETTINGS = {
    # what serve and the loops would need next: the store is refused before any of it
    "SLACK_BOT_TOKEN": "xoxb-1-store-setting",
    "SLACK_SIGNING_SECRET": "store-setting-secret",
    "SLACK_API_URL": "http://127.0.0.1:9/api/",
}


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    """The commands are forked from one process that imported wakeful once
    (tests/support/forked_cli.py: a new interpreter per command was most of this module's
    CPU); each is still a process of its own. The JSON refusal runs the real entry point."""
    with Forks(tmp_path_factory.mktemp("forks"), child_env()) as made:
        yield made


def run(
    forks: Forks | None, cwd: Path, args: list[str], **env: str
) -> subprocess.CompletedProcess[str]:
    """`wakeful *args`, forked, or a new interpreter where `forks` is None."""
    if forks is not None:
        return forks.run(args, env=child_env(**SETTINGS, **env), cwd=cwd)
    return subprocess.run(
        wakeful_cmd(*args),
        env=child_env(**SETTINGS, **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_refused(done: subprocess.CompletedProcess[str], cwd: Path, name: str) -> str:
    """Exit 2, one line naming `name` and what is accepted, nothing else printed, no file."""
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and done.stdout == "", out
    [line] = lines
    assert name in line and "a file path or a postgresql:// URL" in line, line
    assert PASSWORD not in out and "127.0.0.1 port" not in out, out
    assert list(cwd.iterdir()) == [], f"created {list(cwd.iterdir())}"
    return line


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_key_value_string_in_wakeful_db_is_refused_by_every_command(
    tmp_path: Path, command: str, forks: Forks
) -> None:
    done = run(forks, tmp_path, COMMANDS[command], WAKEFUL_DB=KEY_VALUE)
    line = assert_refused(done, tmp_path, "WAKEFUL_DB")
    assert line.startswith("wakeful: WAKEFUL_DB must be") and "key=value" in line, line


@pytest.mark.parametrize("command", [*COMMANDS, "scenarios"])
def test_a_key_value_string_in_db_flag_is_refused_naming_the_flag(
    tmp_path: Path, command: str, forks: Forks
) -> None:
    args = COMMANDS.get(command, [command])
    done = run(forks, tmp_path, [*args, "--db", KEY_VALUE])
    line = assert_refused(done, tmp_path, "--db")
    assert "WAKEFUL_DB" not in line, line


@pytest.mark.parametrize(
    "value",
    [
        f"mysql://wakeful:{PASSWORD}@db/wakeful",
        f"postgresql:host=db&password={PASSWORD}",
        f"dbname = wakeful password={PASSWORD}",
        f"{PASSWORD}\n.db",
        "sqlite:///",
    ],
    ids=["other-url", "scheme-without-slashes", "spaced-keywords", "newline", "empty-path"],
)
def test_other_values_that_name_no_store_are_refused_alike(
    tmp_path: Path, value: str, forks: Forks
) -> None:
    assert_refused(run(forks, tmp_path, ["inspect"], WAKEFUL_DB=value), tmp_path, "WAKEFUL_DB")


def test_the_refusal_is_one_json_line_in_the_json_log_format(tmp_path: Path) -> None:
    done = run(None, tmp_path, ["worker"], WAKEFUL_DB=KEY_VALUE, WAKEFUL_LOG_FORMAT="json")
    line = assert_refused(done, tmp_path, "WAKEFUL_DB")
    said = json.loads(line)
    assert said["level"] == "error" and said["message"].startswith("WAKEFUL_DB must be"), said


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_path_and_a_url_are_still_accepted(tmp_path: Path, backend: str, forks: Forks) -> None:
    """The control, on both stores: a file path (even one holding `=` past its start) and a
    postgresql:// URL open as before."""
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            (tmp_path / "run=1").mkdir()
            db = "./run=1/wakeful.db"
            open_store(tmp_path / db).close()
        else:
            db = stack.enter_context(pg_schema_url())
            open_store(db).close()
        done = run(forks, tmp_path, ["inspect"], WAKEFUL_DB=db)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "must be" not in done.stderr and "store" in done.stdout, done.stdout
