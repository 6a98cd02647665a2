"""Store faults: a locked database is retried within a bound, then a clear error; a full disk
(the page cap, or the real file system holding the database and its -wal filling up) and a
store made read-only under the running process make the endpoint answer 503 (Slack retries),
acknowledge nothing unstored, log one clear line, and recover on their own when fixed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import T0
from wakeful.core.errors import StoreUnavailable
from wakeful.core.store import open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender, SlackEmulator

ROOT = Path(__file__).resolve().parents[2]


def test_a_locked_database_is_retried_within_the_busy_timeout_then_a_clear_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.db"
    store = open_store(path, busy_timeout_ms=300)
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"locked|busy") as info:
        store.ingest("T1:U1", "slack", "Ev1", {}, T0)
    waited = time.monotonic() - started
    assert 0.25 <= waited < 5, f"gave up after {waited:.2f}s, expected about the 0.3 s bound"
    assert "SQLite store unavailable" in str(info.value)
    blocker.execute("ROLLBACK")
    # A lock released within the bound is simply waited out.
    blocker.execute("BEGIN IMMEDIATE")
    import threading

    threading.Timer(0.1, lambda: blocker.execute("ROLLBACK")).start()
    assert store.ingest("T1:U1", "slack", "Ev1", {}, T0).stored
    assert count_events(store) == 1
    store.close()


def test_postgres_unreachable_is_a_clear_store_unavailable_error() -> None:

    with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
        open_store("postgresql://postgres@127.0.0.1:1/test", connect_timeout=1)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_a_full_disk_answers_503_keeps_the_process_up_and_recovers(tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    open_store(db).close()
    probe = sqlite3.connect(db)
    pages = probe.execute("PRAGMA page_count").fetchone()[0]
    probe.close()
    filler = sqlite3.connect(db)
    with SlackEmulator(bot_token="xoxb-full") as emu:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": "xoxb-full",
            "SLACK_SIGNING_SECRET": "s3",
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_DB": str(db),
            "WAKEFUL_SQLITE_MAX_PAGES": str(pages + 40),
            "WAKEFUL_HOST": "127.0.0.1",
            "WAKEFUL_PORT": "0",
        }
        app = subprocess.Popen(
            [sys.executable, "-m", "wakeful.bot.commands.cli", "serve"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = app.stdout.readline() if app.stdout else ""
            assert "listening on" in line, line
            url = line.split("listening on ", 1)[1].strip()
            base = url.rsplit("/slack/events", 1)[0]
            sender = EventSender(url, "s3", team_id="T1")
            assert sender.message("U1", "before", channel="D1").status == 200
            # Another writer fills the disk up to (and past) the cap.
            filler.execute("CREATE TABLE ballast (b BLOB)")
            filler.execute("INSERT INTO ballast VALUES (zeroblob(4000000))")
            filler.commit()
            full = sender.message("U2", "x" * 20_000, channel="D2")
            assert full.status == 503
            assert app.poll() is None, "the process died on a full disk"
            assert _get(base + "/healthz") in (200, 503)
            store = open_store(db)
            assert store.event_by_key("slack", full.event_id) is None  # nothing acknowledged
            # Space returns; Slack's retry of the same event is stored once.
            filler.execute("DROP TABLE ballast")
            filler.commit()
            retry = sender.message(
                "U2",
                "x" * 20_000,
                channel="D2",
                event_id=full.event_id,
                retry_num=1,
                retry_reason="http_error",
            )
            assert retry.status == 200
            ev = store.event_by_key("slack", full.event_id)
            assert ev is not None and ev.payload["text"] == "x" * 20_000
            assert _get(base + "/healthz") == 200
            store.close()
        finally:
            filler.close()
            app.terminate()
            app.communicate(timeout=15)
        assert app.returncode == 0


# -- real file-system faults under a running `wakeful serve` ----------------------------------


@contextmanager
def serving(db: Path, workdir: Path) -> Iterator[tuple[EventSender, subprocess.Popen[str]]]:
    """`wakeful serve` on `db` against the emulator; stderr goes to workdir/serve.log."""
    log = open(workdir / "serve.log", "w")  # noqa: SIM115
    with SlackEmulator(bot_token="xoxb-fault") as emu:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": "xoxb-fault",
            "SLACK_SIGNING_SECRET": "s4",
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_DB": str(db),
            "WAKEFUL_HOST": "127.0.0.1",
            "WAKEFUL_PORT": "0",
        }
        app = subprocess.Popen(
            [sys.executable, "-m", "wakeful.bot.commands.cli", "serve"],
            env=env,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        try:
            line = app.stdout.readline() if app.stdout else ""
            assert "listening on" in line, (workdir / "serve.log").read_text()[-2000:]
            url = line.split("listening on ", 1)[1].strip()
            yield EventSender(url, "s4", team_id="T1"), app
        finally:
            app.terminate()
            app.communicate(timeout=15)
            log.close()


def _deliver_all(sender: EventSender, prefix: str, n: int) -> dict[str, int]:
    """Send `n` DMs; their event ids and the status each got."""
    got = {}
    for i in range(n):
        reply = sender.message(f"U{i % 5}", f"{prefix} {i} " + "x" * 3000, channel=f"D{i % 5}")
        got[reply.event_id] = reply.status
    return got


def _assert_fault_then_recovery(
    db: Path, workdir: Path, sender: EventSender, during: dict[str, int], hint: str
) -> None:
    """During the fault: only 200 or 503, some 503; every 200 stored. Fixed: Slack's retries
    of the 503s are stored once, new deliveries too, without a restart."""
    assert set(during.values()) <= {200, 503}, during
    refused = [eid for eid, status in during.items() if status == 503]
    assert refused, "the fault never reached the store"
    for eid in refused:
        retry = sender.message("U9", "retried", channel="D9", event_id=eid, retry_num=1)
        assert retry.status == 200
    after = _deliver_all(sender, "after", 5)
    assert set(after.values()) == {200}
    store = open_store(db)
    try:
        for eid in [*during, *after]:
            assert store.event_by_key("slack", eid) is not None, f"{eid} acknowledged, not stored"
        assert count_events(store) == 5 + len(during) + len(after)  # 5 sent before the fault
    finally:
        store.close()
    text = (workdir / "serve.log").read_text()
    lines = [ln for ln in text.splitlines() if "store unavailable; answering 503" in ln]
    assert lines and hint in lines[0], text[-2000:]
    assert len(lines) < len(refused) or len(refused) == 1, "one line per request is a flood"


def test_the_disk_holding_the_store_filling_up_answers_503_and_recovers(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True)
    try:
        db = disk / "w.db"
        with serving(db, tmp_path) as (sender, app):
            assert set(_deliver_all(sender, "before", 5).values()) == {200}
            ballast = disk / "ballast"
            with open(ballast, "wb") as f:  # take every free byte of the file system
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            during = _deliver_all(sender, "full", 40)
            assert app.poll() is None, "the process died on a full disk"
            ballast.unlink()  # space returns
            _assert_fault_then_recovery(db, tmp_path, sender, during, "disk")
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_store_made_read_only_under_the_running_process_answers_503_and_recovers(
    tmp_path: Path,
) -> None:
    db = tmp_path / "w.db"
    with serving(db, tmp_path) as (sender, app):
        assert set(_deliver_all(sender, "before", 5).values()) == {200}
        files = [db, Path(f"{db}-wal")]
        subprocess.run(["chattr", "+i", *map(str, files)], check=True)  # root too cannot write
        try:
            during = _deliver_all(sender, "read-only", 20)
            assert app.poll() is None, "the process died on a read-only store"
        finally:
            subprocess.run(["chattr", "-i", *map(str, files)], check=True)
        _assert_fault_then_recovery(db, tmp_path, sender, during, "cannot be written")
