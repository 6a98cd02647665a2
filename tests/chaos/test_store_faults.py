"""Store faults: a locked database is retried within a bound, then a clear error; a full disk
makes the endpoint answer 503 (Slack retries), acknowledges nothing unstored, and recovers."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import T0
from wakeful.core.errors import StoreUnavailable
from wakeful.core.store import open_store
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
    assert store.count_events() == 1
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
            [sys.executable, "-m", "wakeful.bot.cli", "serve"],
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
