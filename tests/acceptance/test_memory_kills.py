"""Issue 38: memory is written by a run's fenced finish, once. `wakeful serve` SIGKILLed after
a run wrote its memory and before the run ended writes nothing; the restarted process's retry
writes the note once, at version 1, and replies once, on both stores (the engine-level
fenced-finish and retry cases are in tests/integration/test_memory.py)."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest

from tests.support.slack_app import (
    BOT_USER,
    TEAM,
    TOKEN,
    dm,
    eventually,
    launch,
    pg_schema_url,
    shut_down,
)
from wakeful.devtools.emulator import SlackEmulator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
ALICE = "U0ALICE"
NOTE = "/memories/notes.md"


def settings(hold: Path) -> dict[str, str]:
    return {
        "WAKEFUL_AGENT": "remembering:factory",
        "WAKEFUL_AGENT_PATH": str(FIXTURES),
        "WAKEFUL_BATCH_WINDOW": "0.05",
        "WAKEFUL_LEASE_TTL": "2",
        "REMEMBERING_HOLD": str(hold),
    }


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def test_a_kill_after_the_memory_write_and_before_the_finish_writes_it_once(
    tmp_path: Path, backend: str
) -> None:
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            db = str(tmp_path / "wakeful.db")
        else:
            db = stack.enter_context(pg_schema_url())
        killed_then_retried(tmp_path, db, backend)


def killed_then_retried(tmp_path: Path, db: str, backend: str) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    inbox = f"{TEAM}:{ALICE}"
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        app = launch(tmp_path, emu, db, settings(hold), backend=backend)
        try:
            assert app.sender.message(ALICE, "the blue door code").status == 200
            # The run wrote its memory and waits at the hold: running, nothing finished.
            assert eventually(lambda: running(app.store, inbox), 15), app.tail()
            assert app.store.memory_docs(inbox) == []
            app.proc.popen.send_signal(signal.SIGKILL)
            assert app.proc.stop() == -signal.SIGKILL
        finally:
            app.store.close()
        assert launch_store_docs(db, inbox) == []  # the killed run wrote no memory
        hold.unlink()
        again = launch(tmp_path, emu, db, settings(hold), backend=backend)
        try:
            again.wait_post(dm(ALICE), "Noted: the blue door code", timeout=30)
            versions = again.store.memory_versions(inbox, NOTE)
            assert [(v, t) for v, t, _ in versions] == [(1, "- the blue door code\n")]
            assert len(again.posts(dm(ALICE), "Noted:")) == 1
        finally:
            shut_down(again)


def running(store: object, inbox: str) -> bool:
    return any(e.status == "running" for e in store.events(inbox))  # type: ignore[attr-defined]


def launch_store_docs(db: str, inbox: str) -> list[object]:
    from wakeful.core.store import open_store

    store = open_store(db)
    try:
        return list(store.memory_docs(inbox))
    finally:
        store.close()
