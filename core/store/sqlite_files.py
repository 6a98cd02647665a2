"""A SQLite store's file as an operator handles it: who holds it, an online backup, a restore.

SQLite cannot say which processes have a file open, so every process that opens a store holds
a shared `flock` on a sidecar file (`<store>-lock`) for as long as it has the store open; the
kernel drops it when the process exits, however it exits. A restore needs that lock exclusively
and does not wait for it: while any wakeful process holds the store, the restore is refused
before anything is touched. A process starting while a restore runs waits for it to end.

Should the file be removed or replaced anyway while a process has it open, every transaction
of that process notices (`FileWatch`: the file's device and inode, checked at each start and
after each write's commit): from then on it refuses (503, /healthz fails) instead of answering
500 or acknowledging writes into a file no one will read, copies the store it still has open
beside it, and says in one log line how to put it back.

The backup uses SQLite's backup API in one step, inside one read transaction: the copy is the
store as of one commit, taken while writers go on (WAL lets them), never a torn file copy.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wakeful.core.errors import InvalidInput, StoreError, StoreReplaced, StoreUnavailable
from wakeful.core.store.sql import load_migrations

log = logging.getLogger("wakeful")
LOCK_SUFFIX = "-lock"
HOLD_WAIT = 30.0
"""Seconds a process opening a store waits for a running restore before giving up."""
PRIVATE = 0o600
"""The mode of every file wakeful creates for a store: the store holds people's messages and
a slash command's response_url, so only its owner reads it. SQLite gives the -wal, -shm and
-journal files the database file's own mode."""


def create_private(path: str) -> None:
    """Create `path` empty and readable by its owner only, unless it exists (an existing
    file keeps the mode its operator gave it). SQLite then opens it as a new database."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE))


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


def check_store_path(db: str) -> None:
    """Refuse, before anything is created beside it, a store path that cannot be a SQLite
    store: a directory, a path whose folder does not exist, a file that is not a SQLite
    database. An empty file is a new store. InvalidInput says what the path is and what
    to do."""
    if os.path.isdir(db):
        raise InvalidInput(
            f"the store {db} is a directory, not a SQLite file: name a file, e.g. "
            f"{os.path.join(db, 'wakeful.db')}"
        )
    parent = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(parent):
        raise InvalidInput(
            f"the store {db} cannot be created: the folder {parent} does not exist "
            "(create it, or name a path in an existing folder)"
        )
    try:
        with open(db, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreUnavailable(f"cannot read the SQLite store {db}: {exc}") from exc
    if head and head != SQLITE_HEADER:
        raise InvalidInput(
            f"{db} is not a SQLite database (it does not start with SQLite's header); "
            "nothing was created beside it: name a wakeful store or a new path"
        )


class StoreHeld(StoreError):
    """A running process holds the store: it cannot be replaced under it."""


def lock_path(db: str) -> str:
    return f"{db}{LOCK_SUFFIX}"


class Holder:
    """A shared lock on the store's sidecar, held while this process has the store open."""

    def __init__(self, db: str, wait: float = HOLD_WAIT) -> None:
        self._fd: int | None = None
        if _in_memory(db):
            return  # not a file an operator restores
        check_store_path(db)
        path = lock_path(db)
        try:
            create_private(db)  # the first process to open a store creates it: owner only
        except OSError as exc:
            raise StoreUnavailable(f"cannot create the SQLite store {db}: {exc}") from exc
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE)
        except OSError as exc:
            raise StoreUnavailable(f"cannot open the store's lock file {path}: {exc}") from exc
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreUnavailable(
                        f"the SQLite store {db} is being restored ({path} is held exclusively)"
                    ) from None
                time.sleep(0.05)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock


class FileWatch:
    """The store file's identity (device and inode) as this process opened it, checked by
    every transaction (one `stat`, a few microseconds), so a file removed (`rm`) or swapped
    (`os.replace` by an old copy) under a running process is noticed before the next write is
    acknowledged, not after requests fail with `no such table` or land in the wrong file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._opened: tuple[int, int] | None = None
        self._lost: str | None = None
        self._lock = threading.Lock()

    def pin(self) -> None:
        """Remember the file as it is now: called once the store has it open."""
        if self._opened is None and not _in_memory(self.path):
            with contextlib.suppress(FileNotFoundError):  # not written yet: the next one
                st = os.stat(self.path)
                self._opened = (st.st_dev, st.st_ino)

    def check(self, source: Callable[[], sqlite3.Connection | None]) -> None:
        """Raise StoreReplaced unless the path still names the file opened. The first time,
        the store this process still has open (through `source`, an idle connection of its
        own) is copied to a new file beside it, and one log line says what happened and how
        to put the store back."""
        if self._lost is None:
            if self._opened is None:
                return
            try:
                st = os.stat(self.path)
                now: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except FileNotFoundError:
                now = None
            if now == self._opened:
                return
            with self._lock:  # the others wait, so the report is the first line they follow
                if self._lost is None:
                    what = "deleted" if now is None else "replaced by another file"
                    self._report(source, what)
                    self._lost = what
        raise StoreReplaced(
            f"the SQLite store {self.path} was {self._lost} under this process; "
            "nothing is acknowledged until it is restored and the process restarted"
        )

    def _report(self, source: Callable[[], sqlite3.Connection | None], what: str) -> None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        saved = f"{self.path}.rescued-{stamp}"
        kept = False
        try:
            conn = source()
            if conn is not None and not os.path.lexists(saved):
                _copy(conn, saved)  # the deleted or displaced file is still open here
                kept = True
        except Exception as exc:  # the report must go out whatever the copy met
            log.warning("could not copy the store this process had open: %s", exc)
        put_back = (
            f"the store it had open (every event it acknowledged) was copied to {saved}: stop "
            f"every wakeful process on it, then `wakeful restore {saved}`"
            if kept
            else "stop every wakeful process on it and put the right file back with "
            "`wakeful restore <backup>`"
        )
        log.error(
            "the SQLite store file %s was %s while this process had it open (device %d, inode "
            "%d): every request is answered 503 and /healthz fails from now on; %s, then start "
            "wakeful again",
            self.path,
            what,
            *(self._opened or (0, 0)),
            put_back,
        )


def _in_memory(db: str) -> bool:
    return db == ":memory:" or db.startswith("file:")


@dataclass(frozen=True, slots=True)
class Copied:
    """What a backup or a restore wrote."""

    path: str
    bytes: int
    schema_version: int
    events: int
    seconds: float
    set_aside: str | None = None
    """Restore: where the replaced store was moved (nothing is deleted)."""


def backup(source: str, target: str) -> Copied:
    """A consistent copy of the store at `source` in a new file `target`, checked with
    `PRAGMA integrity_check`. Never overwrites: `target` must not exist."""
    started = time.monotonic()
    if os.path.lexists(target):
        raise InvalidInput(f"{target} exists; a backup never overwrites a file: choose a new path")
    if not os.path.isfile(source):
        raise InvalidInput(f"no store at {source}: nothing to back up")
    partial = f"{target}.partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial)
    src = _connect(source)
    try:
        version = _wakeful_version(src, source)
        _copy(src, partial)
    finally:
        src.close()
    try:
        events = _check(partial, target)
        _publish(partial, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
    size = os.path.getsize(target)
    return Copied(target, size, version, events, time.monotonic() - started)


def restore(source: str, target: str) -> Copied:
    """Replace the store at `target` with the backup at `source`.

    The backup is checked first (a wakeful store, integrity ok, not from a newer wakeful);
    then, only while no process holds `target`, it is copied beside it, and the old store is
    moved aside (never deleted) before the copy takes its name. A refusal changes nothing."""
    started = time.monotonic()
    if os.path.abspath(source) == os.path.abspath(target):
        raise InvalidInput("the backup and the store are the same file")
    if not os.path.isfile(source):
        raise InvalidInput(f"no backup at {source}")
    src = _connect(source)
    try:
        version = _wakeful_version(src, source)
        latest = max(v for v, _, _ in load_migrations("sqlite"))
        if version > latest:
            raise InvalidInput(
                f"{source} is at schema version {version}, newer than this wakeful ({latest})"
            )
        _integrity(src, source)
    finally:
        src.close()
    fd = _exclusive(target)
    try:
        incoming = f"{target}.restoring"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(incoming)
        src = _connect(source)
        try:
            _copy(src, incoming)
        finally:
            src.close()
        events = _check(incoming, source)
        aside = _set_aside(target) if os.path.exists(target) else None
        _publish(incoming, target)
    finally:
        os.close(fd)
    size = os.path.getsize(target)
    return Copied(target, size, version, events, time.monotonic() - started, aside)


def _connect(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from exc


def _wakeful_version(conn: sqlite3.Connection, path: str) -> int:
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        conn.execute("SELECT 1 FROM events LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        if "malformed" in str(exc):
            raise InvalidInput(f"{path} fails the integrity check: {exc}") from exc
        raise InvalidInput(f"{path} is not a wakeful store ({exc})") from exc
    return int(row[0] or 0)


def _integrity(conn: sqlite3.Connection, path: str) -> None:
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{path} fails the integrity check: {exc}") from exc
    if [tuple(r) for r in rows] != [("ok",)]:
        problems = "; ".join(str(r[0]) for r in rows[:3])
        raise InvalidInput(f"{path} fails the integrity check: {problems}")


def _copy(src: sqlite3.Connection, path: str) -> None:
    """Every page of `src` into a new file (owner only), in one step: one read transaction, one
    snapshot."""
    try:
        create_private(path)
    except OSError as exc:
        raise StoreError(f"cannot create {path}: {exc}") from exc
    dst = sqlite3.connect(path, isolation_level=None)
    try:
        src.backup(dst, pages=-1)
        dst.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error as exc:
        raise StoreError(f"copy to {path} failed: {exc}") from exc
    finally:
        dst.close()


def _check(path: str, shown: str) -> int:
    """The copy's integrity, then its event count; the file is synced to disk."""
    conn = _connect(path)
    try:
        _integrity(conn, shown)
        events = int(conn.execute("SELECT COUNT(*) FROM events").fetchone()[0])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    _fsync(path)
    return events


def _exclusive(target: str) -> int:
    """The sidecar lock, exclusively, at once: StoreHeld when any process holds the store."""
    path = lock_path(target)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreHeld(
            f"{target} is held by a running wakeful process ({path} is locked); stop every "
            "process using it, then restore. Nothing was changed."
        ) from None
    return fd


def _set_aside(target: str) -> str:
    """Checkpoint the old store into its main file and move it (with any WAL) aside."""
    conn = _connect(target)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.DatabaseError:
        pass  # not a readable store: it is moved aside as it is, WAL and all
    finally:
        conn.close()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = f"{target}.before-restore-{stamp}"
    os.replace(target, aside)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(target + suffix):
            os.replace(target + suffix, aside + suffix)
    return aside


def _publish(path: str, target: str) -> None:
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)
    _fsync(str(Path(target).resolve().parent))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
