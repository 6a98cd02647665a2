"""Issue 21, item 9: the SQLite store's files and its backups are created readable by their
owner only (0600): the database, its -wal and -shm, the lock file, `wakeful backup` output and
a restored store. The store holds people's messages and slash commands' response_urls.

Run under the common umask 022, which alone would leave them readable by everyone.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import T0
from wakeful.core.store import open_store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(folder: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in sorted(folder.iterdir())}


def wakeful(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "SLACK_"))}
    env.update(WAKEFUL_DB=str(db), PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "wakeful.bot.commands.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_new_store_and_its_wal_shm_and_lock_are_owner_only(tmp_path: Path) -> None:
    store = open_store(tmp_path / "wakeful.db")
    try:
        store.ingest("T1:U1", "slack", "Ev1", {"text": "private words"}, T0)
        assert modes(tmp_path) == {
            "wakeful.db": 0o600,
            "wakeful.db-lock": 0o600,
            "wakeful.db-shm": 0o600,
            "wakeful.db-wal": 0o600,
        }
    finally:
        store.close()


def test_an_existing_store_keeps_the_mode_its_operator_gave_it(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    open_store(db).close()
    db.chmod(0o640)
    store = open_store(db)
    try:
        store.ingest("T1:U1", "slack", "Ev1", {}, T0)
        assert mode(db) == 0o640
    finally:
        store.close()


def test_backup_output_and_a_restored_store_are_owner_only(tmp_path: Path) -> None:
    live = tmp_path / "live" / "wakeful.db"
    live.parent.mkdir()
    store = open_store(live)
    store.ingest("T1:U1", "slack", "Ev1", {"text": "private words"}, T0)
    store.close()
    copy = tmp_path / "backup.db"
    backed = wakeful("backup", str(copy), db=live)
    assert backed.returncode == 0, backed.stderr
    assert modes(tmp_path) == {"backup.db": 0o600, "live": 0o755}

    target = tmp_path / "restored" / "wakeful.db"
    target.parent.mkdir()
    restored = wakeful("restore", str(copy), db=target)
    assert restored.returncode == 0, restored.stderr
    assert modes(target.parent) == {
        "wakeful.db": 0o600,
        "wakeful.db-lock": 0o600,
    }
