"""`wakeful backup` and `wakeful restore` as an operator runs them, against real processes.

The backup is taken while another process keeps writing; the restore is tried while a real
`wakeful worker` holds the store (refused, nothing changed), then after that process was
killed (the kernel dropped its lock), and with backups that must be refused.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import T0
from tests.support.slack_app import REPO, Proc, child_env, pg_schema_url, wakeful_cmd
from wakeful.core.store import open_store
from wakeful.devtools.audit import count_events


def wakeful(tmp: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        wakeful_cmd(*args),
        env=child_env(WAKEFUL_DB=db),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )


def keys(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {str(r[0]) for r in conn.execute("SELECT source_id FROM events")}
    finally:
        conn.close()


def integrity(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def seed(db: Path, prefix: str, n: int) -> None:
    store = open_store(db)
    for i in range(n):
        store.ingest(f"T1:U{i % 3}", "slack", f"{prefix}{i}", {"text": "hello"}, T0 + i)
    store.close()


def test_a_backup_during_a_write_load_is_whole_and_holds_every_acknowledged_event(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live.db"
    seed(live, "old", 2000)  # some history, so the copy is not a page or two
    # A reader holding an old snapshot (a long report, say) keeps checkpoints from moving the
    # writer's commits into the main file: they live in the WAL alone, as a busy server's
    # latest commits do between checkpoints. A copy of the file would miss them.
    pin = sqlite3.connect(live, isolation_level=None)
    pin.execute("BEGIN")
    pin.execute("SELECT COUNT(*) FROM events").fetchone()
    writer = Proc(
        [sys.executable, "-m", "tests.support.writer", str(live)],
        child_env(),
        REPO,
        tmp_path / "writer.log",
    )
    try:
        assert writer.next_line() == "ready"
        acknowledged = {writer.next_line() for _ in range(300)}
        result = wakeful(tmp_path, str(live), "backup", str(tmp_path / "copy.db"))
        assert result.returncode == 0, result.stderr
        copied = keys(tmp_path / "copy.db")
        # The load goes on past the backup: some acknowledged key is newer than the copy.
        later = next((k for k in iter(writer.next_line, None) if k not in copied), None)
    finally:
        pin.close()
        assert writer.stop() == 0, writer.tail()
    assert result.stdout.startswith(f"backed up {live} to {tmp_path / 'copy.db'}: ")
    assert integrity(tmp_path / "copy.db") == ["ok"]
    assert acknowledged <= copied, sorted(acknowledged - copied)[:5]
    assert {f"old{i}" for i in range(2000)} <= copied
    assert later is not None and later in keys(live)
    copy = tmp_path / "copy.db"
    # A backup is a store: wakeful opens it as it is.
    assert count_events(open_store(copy)) == len(copied)


def test_restore_is_refused_while_a_process_holds_the_store_and_works_once_it_is_gone(
    tmp_path: Path,
) -> None:
    live = tmp_path / "live.db"
    seed(live, "before", 5)
    backup = tmp_path / "backup.db"
    assert wakeful(tmp_path, str(live), "backup", str(backup)).returncode == 0
    seed(live, "after", 3)  # written after the backup: the restore would take it away
    worker = Proc(
        wakeful_cmd("worker"), child_env(WAKEFUL_DB=str(live)), tmp_path, tmp_path / "w.log"
    )
    try:
        assert worker.next_line().startswith("wakeful: worker running on")
        refused = wakeful(tmp_path, str(live), "restore", str(backup))
        assert refused.returncode == 1
        assert "held by a running wakeful process" in refused.stderr
        assert "Nothing was changed" in refused.stderr
        assert len(keys(live)) == 8
        assert not list(tmp_path.glob("live.db.before-restore-*"))
    finally:
        worker.popen.kill()  # no goodbye: the kernel drops the lock with the process
        worker.stop()
    restored = wakeful(tmp_path, str(live), "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert keys(live) == {f"before{i}" for i in range(5)}
    (aside,) = tmp_path.glob("live.db.before-restore-*")
    assert str(aside) in restored.stdout
    assert len(keys(aside)) == 8  # the replaced store is kept whole
    assert integrity(live) == ["ok"]


def newer_store(path: Path) -> None:
    seed(path, "x", 1)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 'x')")
    conn.commit()
    conn.close()


def not_wakeful(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (t TEXT)")
    conn.commit()
    conn.close()


def damaged(path: Path) -> None:
    """A wakeful store with 8 KiB in the middle of its file overwritten on disk."""
    seed(path, "y", 500)
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 8192)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_bytes(b"not a database at all" * 100), "is not a wakeful store"),
        (not_wakeful, "is not a wakeful store"),
        (newer_store, "newer than this wakeful"),
        (damaged, "integrity check"),
    ],
    ids=["garbage", "another-sqlite-db", "newer-schema", "damaged"],
)
def test_restore_checks_the_backup_before_touching_the_store(
    tmp_path: Path, make: object, says: str
) -> None:
    live = tmp_path / "live.db"
    seed(live, "keep", 4)
    bad = tmp_path / "bad.db"
    make(bad)  # type: ignore[operator]
    result = wakeful(tmp_path, str(live), "restore", str(bad))
    assert result.returncode in (1, 2), result
    assert says in result.stderr
    assert keys(live) == {f"keep{i}" for i in range(4)}
    assert not list(tmp_path.glob("live.db.*"))


def test_a_backup_never_overwrites_a_file_and_needs_a_store(tmp_path: Path) -> None:
    live = tmp_path / "live.db"
    seed(live, "a", 1)
    existing = tmp_path / "existing.db"
    existing.write_text("precious")
    result = wakeful(tmp_path, str(live), "backup", str(existing))
    assert result.returncode == 2
    assert "never overwrites" in result.stderr
    assert existing.read_text() == "precious"
    missing = wakeful(tmp_path, str(tmp_path / "none.db"), "backup", str(tmp_path / "b.db"))
    assert missing.returncode == 2
    assert missing.stderr == f"wakeful: no store at {tmp_path / 'none.db'}: nothing to back up\n"
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("command", ["backup", "restore"])
def test_on_postgresql_the_commands_point_to_pg_dump(tmp_path: Path, command: str) -> None:
    with pg_schema_url() as dsn:
        result = wakeful(tmp_path, dsn, command, str(tmp_path / f"{uuid.uuid4().hex}.dump"))
    assert result.returncode == 2
    assert "pg_dump" in result.stderr
    assert "nothing needs quiescing" in result.stderr
    assert not os.listdir(tmp_path)
