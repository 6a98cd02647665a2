"""Issue 38, item 5: the operator's commands for what is kept about a person, run as a reader
runs them (`wakeful` processes) on both stores: `inspect INBOX --memory` lists documents
and never their text unless `--contents`; `forget` asks on a terminal, refuses without one
unless `--yes`, and leaves no byte of the person's words in the store's files (SQLite's file
and WAL, PostgreSQL's pages) while another person's stay, also while `serve` runs the store;
`export` is the JSON of everything kept, the person's words before a forget and none after."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import need_pg
from tests.support.forked_cli import Forks
from tests.support.raw_bytes import pg_tables_holding, sqlite_files_holding
from tests.support.slack_app import (
    BOT_USER,
    TEAM,
    TOKEN,
    child_env,
    dm,
    launch,
    shut_down,
    wakeful_cmd,
)
from wakeful.bot.commands.privacy import PROMPT
from wakeful.core.clock import ManualClock
from wakeful.core.events import Message
from wakeful.core.inbox_id import InboxId
from wakeful.core.run import Run
from wakeful.core.runner import runner_for
from wakeful.core.store import open_store
from wakeful.core.worker import Worker
from wakeful.devtools.emulator import SlackEmulator

A, B = InboxId.person(TEAM, "UA"), InboxId.person(TEAM, "UB")


class Keeping:
    """Keeps what each person says: a reply quoting it, a profile that grows by a line per
    message (a new version each run), the latest message alone, the saved conversation."""

    def run(self, run: Run) -> None:
        for e in run.events:
            if not isinstance(e, Message):
                continue
            run.reply(f"Noted: {e.text}", to=e)
            profile = run.memory.read("/memories/profile.md") or ""
            run.memory.write("/memories/profile.md", f"{profile}\n- {e.text}".lstrip("\n"))
            run.memory.write("/memories/last.md", e.text)
            run.save({"history": [e.text]})


def keep(db: str, now: int, said: Sequence[tuple[str, str]]) -> None:
    """Each (user, text) said in a DM of team T1 and run by its own worker tick, at `now`."""
    store = open_store(db)
    try:
        for n, (user, text) in enumerate(said):
            event = Message(text=text, user=user, team=TEAM, channel=dm(user), ts=f"{now}.{n:06d}")
            inbox = InboxId.person(TEAM, user)
            assert store.ingest(inbox, "slack", f"Ev{user}{n}", event.to_wire(), now).event_id
            runner = runner_for(Keeping(), store)
            Worker(store=store, clock=ManualClock(now), runner=runner).tick(now)
    finally:
        store.close()


@contextmanager
def pg_schema() -> Iterator[tuple[str, str]]:
    """A fresh PostgreSQL schema: (its URL for the commands, its name for the raw reads)."""
    import psycopg

    dsn = need_pg()
    schema = f"wakeful_forget_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{sep}options=-csearch_path%3D{schema}", schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Kept:
    """A store where A and B each said something with a marker of their own, twice for A.
    Its commands are forked (tests/support/forked_cli.py: a new interpreter per command was
    most of this module's CPU) unless `real`: the no-terminal refusal, the terminal's
    questions and the forget beside serve run as new processes of the real entry point."""

    def __init__(self, db: str, schema: str | None, folder: Path, forks: Forks) -> None:
        self.db, self.schema, self.folder, self.forks = db, schema, folder, forks
        self.mark_a, self.mark_b = f"alpha-{uuid.uuid4().hex}", f"bravo-{uuid.uuid4().hex}"
        keep(
            db,
            int(time.time()) - 90,
            [
                ("UA", f"my locker code is {self.mark_a}"),
                ("UB", f"my locker code is {self.mark_b}"),
                ("UA", "call me Al"),
            ],
        )
        assert self.raw(self.mark_a) and self.raw(self.mark_b)  # the test can see them

    def raw(self, marker: str) -> list[str]:
        """Where the store's raw bytes hold `marker`: files (SQLite) or relations (PG)."""
        if self.schema is None:
            return sqlite_files_holding(self.db, marker)
        return pg_tables_holding(need_pg(), self.schema, marker)

    def run(self, *args: str, real: bool = False) -> subprocess.CompletedProcess[str]:
        """`wakeful *args` with stdin /dev/null."""
        env = child_env(WAKEFUL_DB=self.db)
        if not real:
            return self.forks.run(args, env=env, cwd=self.folder)
        return subprocess.run(
            wakeful_cmd(*args),
            cwd=self.folder,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def exported(self, inbox: str) -> str:
        done = self.run("export", inbox)
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)  # valid JSON
        return done.stdout


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    with Forks(tmp_path_factory.mktemp("forks"), child_env()) as made:
        yield made


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def kept(request: pytest.FixtureRequest, tmp_path: Path, forks: Forks) -> Iterator[Kept]:
    if request.param == "sqlite":
        yield Kept(str(tmp_path / "wakeful.db"), None, tmp_path, forks)
    else:
        with pg_schema() as (url, schema):
            yield Kept(url, schema, tmp_path, forks)


def test_inspect_memory_lists_path_size_version_and_last_write_and_never_the_text(
    kept: Kept,
) -> None:
    listed = kept.run("inspect", A, "--memory")
    assert listed.returncode == 0, listed.stderr
    assert f"memory of {A}: 2 documents" in listed.stdout
    table = listed.stdout.split("\n", 2)[2].splitlines()
    assert table[0].split() == ["path", "bytes", "version", "last", "write"]
    profile = f"- my locker code is {kept.mark_a}\n- call me Al"
    rows = [row.split() for row in table[1:]]
    assert [row[:3] for row in rows] == [
        ["/memories/last.md", "10", "2"],
        ["/memories/profile.md", str(len(profile)), "2"],
    ]
    assert all(row[3].startswith("1m") and row[4:] == ["ago"] for row in rows), rows
    assert kept.mark_a not in listed.stdout and "call me Al" not in listed.stdout

    contents = kept.run("inspect", A, "--memory", "--contents")
    assert contents.returncode == 0, contents.stderr
    lines = contents.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  /memories/profile.md"))
    assert lines[at + 1 : at + 3] == [
        f"    | - my locker code is {kept.mark_a}",
        "    | - call me Al",
    ]
    assert "    | call me Al" in lines  # last.md's text, below its own row
    assert kept.mark_b not in contents.stdout  # another person's never

    as_json = kept.run("inspect", A, "--memory", "--json")
    docs = json.loads(as_json.stdout)["memory"]
    assert [(d["path"], d["version"]) for d in docs] == [
        ("/memories/last.md", 2),
        ("/memories/profile.md", 2),
    ]
    assert all("text" not in d for d in docs)

    usage = kept.run("inspect", A, "--contents")
    assert usage.returncode == 2
    assert "--contents" in usage.stderr and "--memory" in usage.stderr
    assert kept.run("inspect", "--memory").returncode == 2  # whose memory?


def test_forget_without_yes_and_without_a_terminal_exits_2_and_erases_nothing(
    kept: Kept,
) -> None:
    before = kept.exported(A)
    done = kept.run("forget", A, real=True)
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert "pass --yes" in line and "nothing was erased" in line
    assert kept.exported(A) == before
    assert kept.raw(kept.mark_a)


def test_forget_yes_prints_the_counts_and_no_byte_of_the_person_is_left(kept: Kept) -> None:
    exported = json.loads(kept.exported(A))
    assert kept.mark_a in json.dumps(exported)
    assert kept.mark_b not in json.dumps(exported)
    done = kept.run("forget", A, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"forgot {A}: 2 documents (4 versions), 2 events, 2 outbox rows\n"
    assert kept.raw(kept.mark_a) == []
    assert kept.raw(kept.mark_b) != []
    after = kept.exported(A)
    assert kept.mark_a not in after and "call me Al" not in after
    data = json.loads(after)
    assert data["memory"] == [] and data["conversation"] is None
    assert len(data["events"]) == 2  # the rows stay, without their text
    [audit] = data["forgotten"]
    assert audit["asked_by"].startswith("cli:") and audit["documents"] == 2
    assert kept.mark_b in kept.exported(B)
    listed = kept.run("inspect", A, "--memory")
    assert f"memory of {A}: 0 documents" in listed.stdout and "(none)" in listed.stdout


def test_export_writes_a_file_whole_for_its_owner_only_and_overwrites_only_with_force(
    tmp_path: Path, forks: Forks
) -> None:
    kept = Kept(str(tmp_path / "wakeful.db"), None, tmp_path, forks)
    done = kept.run("export", A, "--out", "a.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"exported {A} to a.json: 4 memory versions, 2 events, 2 outbox rows\n"
    written = tmp_path / "a.json"
    data = json.loads(written.read_text())
    assert data["inbox"] == A and kept.mark_a in json.dumps(data)
    assert written.stat().st_mode & 0o777 == 0o600  # a person's words
    kept.run("forget", A, "--yes")
    refused = kept.run("export", A, "--out", "a.json")
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert kept.mark_a in written.read_text()  # untouched
    forced = kept.run("export", A, "--out", "a.json", "--force")
    assert forced.returncode == 0, forced.stderr
    assert kept.mark_a not in written.read_text()
    assert sorted(p.name for p in tmp_path.glob("*.json*")) == ["a.json"]  # no temp file left


@pytest.mark.parametrize(
    "command",
    [
        ["forget", "", "--yes"],
        ["forget", "T1", "--yes"],
        ["forget", "T1:U1 x", "--yes"],
        ["forget", "ops", "--yes"],
        ["export", "  "],
        ["export", ":U1"],
        ["export", "T1:U1:U2"],
        ["inspect", "T1:", "--memory"],
        ["inspect", "T1:C1", "--memory"],
    ],
)
def test_a_malformed_inbox_is_a_usage_error_before_any_store_is_touched(
    tmp_path: Path, command: list[str], forks: Forks
) -> None:
    env = child_env(WAKEFUL_DB=str(tmp_path / "none.db"))
    done = forks.run(command, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("wakeful: INBOX must be an inbox id like T123:U456"), line
    assert list(tmp_path.iterdir()) == []  # no store was created


def answer_on_a_terminal(kept: Kept, answer: str) -> tuple[int, str]:
    """`wakeful forget A` with a terminal for stdin and stdout: what it printed there until
    it asked, then `answer` typed; its exit code and everything the terminal showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        wakeful_cmd("forget", A),
        cwd=kept.folder,
        env=child_env(WAKEFUL_DB=kept.db),
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    shown = b""
    try:
        deadline = time.monotonic() + 30
        while PROMPT.format(inbox=A).encode() not in shown:
            assert time.monotonic() < deadline, f"no prompt: {shown!r}"
            if select.select([leader], [], [], 0.1)[0]:
                shown += os.read(leader, 4096)
        os.write(leader, f"{answer}\n".encode())
        code = proc.wait(30)
        while select.select([leader], [], [], 0.1)[0]:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return code, shown.decode()


def test_forget_on_a_terminal_asks_and_goes_on_only_on_yes(tmp_path: Path, forks: Forks) -> None:
    kept = Kept(str(tmp_path / "wakeful.db"), None, tmp_path, forks)
    for no in ("", "n", "sure"):
        code, shown = answer_on_a_terminal(kept, no)
        assert code == 1, shown
        assert "nothing was forgotten" in shown
        assert kept.raw(kept.mark_a)
    code, shown = answer_on_a_terminal(kept, "y")
    assert code == 0, shown
    assert f"forgot {A}: 2 documents (4 versions)" in shown
    assert kept.raw(kept.mark_a) == [] and kept.raw(kept.mark_b)


def test_forget_while_serve_runs_the_store_erases_and_serve_keeps_serving(
    tmp_path: Path, forks: Forks
) -> None:
    kept = Kept(str(tmp_path / "wakeful.db"), None, tmp_path, forks)
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        app = launch(tmp_path, emu, kept.db, {"WAKEFUL_BATCH_WINDOW": "0"})
        try:
            app.sender.message("UA", "what do you know about me?")
            app.wait_post(dm("UA"), "Handled 1 message.")  # the worker has held A's lease
            done = kept.run("forget", A, "--yes", real=True)
            assert done.returncode == 0, done.stderr + app.tail()
            assert done.stdout.startswith(f"forgot {A}: 2 documents (4 versions), 3 events")
            app.sender.message("UB", "still there?")
            app.wait_post(dm("UB"), "Handled 1 message.")
            assert app.store.memory_docs(A) == [] and app.store.memory_docs(B) != []
            assert kept.mark_a not in kept.exported(A)
            assert kept.mark_b in kept.exported(B)
        finally:
            if app.proc.popen.poll() is None:
                shut_down(app)
    assert kept.raw(kept.mark_a) == []
    assert kept.raw(kept.mark_b) != []
