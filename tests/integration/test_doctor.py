"""`wakeful doctor` against the Slack emulator and real stores, with good and bad settings."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_slack_app import child_env, pg_schema_url, wakeful_cmd
from wakeful.bot.doctor import Check, run_checks
from wakeful.bot.scopes import required_scopes
from wakeful.core.store import open_store
from wakeful.devtools.emulator import SlackEmulator


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token="xoxb-doctor") as emulator:
        yield emulator


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "store.db")
    open_store(path).close()
    return path


def env_for(emu: SlackEmulator, db: str, **more: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": emu.bot_token,
        "SLACK_SIGNING_SECRET": "doctor-signing-secret",
        "SLACK_API_URL": emu.api_url,
        "WAKEFUL_DB": db,
        **more,
    }


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_healthy_setup_passes_every_check(emu: SlackEmulator, db: str) -> None:
    checks = by_name(run_checks(env_for(emu, db), integrity=True))
    failed = [c.line() for c in checks.values() if c.ok is False]
    assert not failed
    assert set(checks) == {
        "settings",
        "store",
        "migrations",
        "journal",
        "durability",
        "integrity",
        "slack token",
        "slack scopes",
        "slack clock",
        "signing secret",
        "agent",
    }
    assert checks["signing secret"].detail == (
        "set (cannot check it against Slack; a wrong one shows as refused requests in the log)"
    )
    assert checks["agent"].detail == "refund-desk loads"
    assert checks["durability"].detail == "synchronous=FULL"
    assert checks["journal"].detail == "journal_mode=wal"
    assert checks["slack token"].detail == "bot UBOT in team T1"
    assert checks["slack scopes"].detail.startswith(f"all {len(required_scopes() or [])} in ")
    assert checks["integrity"].ok is True


def test_each_bad_slack_setting_fails_its_own_check(emu: SlackEmulator, db: str) -> None:
    bad_token = by_name(run_checks(env_for(emu, db, SLACK_BOT_TOKEN="xoxb-wrong")))
    assert bad_token["slack token"].ok is False
    assert bad_token["slack token"].detail == "rejected by Slack (invalid_auth)"
    wanted = required_scopes() or []
    emu.scopes = [s for s in wanted if s != "users:read"] + ["files:write"]
    scopes = by_name(run_checks(env_for(emu, db)))["slack scopes"]
    assert scopes.ok is False
    assert scopes.detail.startswith("missing users:read (asked for by ")
    emu.scopes = [*wanted, "files:write"]
    assert by_name(run_checks(env_for(emu, db)))["slack scopes"].detail.endswith(
        "; also granted files:write"
    )
    no_secret = by_name(run_checks(env_for(emu, db, SLACK_SIGNING_SECRET="")))
    assert no_secret["signing secret"].ok is False
    socket = by_name(
        run_checks(env_for(emu, db, SLACK_SIGNING_SECRET="", SLACK_APP_TOKEN="xapp-1"))
    )
    assert socket["signing secret"].ok is None
    no_token = by_name(run_checks(env_for(emu, db, SLACK_BOT_TOKEN="")))
    assert no_token["slack token"].detail == "SLACK_BOT_TOKEN is not set"


def test_an_unreachable_slack_and_a_wrong_clock_fail(emu: SlackEmulator, db: str) -> None:
    env = env_for(emu, db)
    skewed = by_name(run_checks(env, clock=lambda: time.time() - 60))["slack clock"]
    assert skewed.ok is False
    assert re.fullmatch(
        r"Slack is (59|60)\.\d s ahead of this host \(more than 5 s\): fix NTP", skewed.detail
    )
    emu.stop()
    down = by_name(run_checks(env))["slack token"]
    assert down.ok is False
    assert down.detail.startswith(f"cannot reach {emu_url(env)}")


def emu_url(env: dict[str, str]) -> str:
    return env["SLACK_API_URL"]


def test_the_claude_agent_needs_its_key(emu: SlackEmulator, db: str) -> None:
    env = env_for(emu, db, WAKEFUL_AGENT="claude")
    assert by_name(run_checks(env))["anthropic key"].ok is False
    with_key = by_name(run_checks({**env, "ANTHROPIC_API_KEY": "sk-ant-doctor"}))
    assert with_key["anthropic key"].ok is True


def test_store_problems_fail_their_checks_and_the_doctor_changes_nothing(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere.db"
    store = by_name(run_checks(env_for(emu, str(missing))))["store"]
    assert store.ok is False
    assert (
        store.line()
        == f"FAIL store           no store at {missing} (`wakeful serve` creates a new one)"
    )
    assert not missing.exists()
    behind = tmp_path / "behind.db"
    open_store(behind).close()
    conn = sqlite3.connect(behind)
    conn.execute(
        "DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)"
    )
    conn.commit()
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    checks = by_name(run_checks(env_for(emu, str(behind))))
    assert checks["migrations"].ok is False
    assert "1 migration(s) pending" in checks["migrations"].detail
    assert checks["journal"].ok is False
    assert checks["journal"].detail == "journal_mode=delete"
    assert checks["durability"].ok is None  # not opened: it would have been migrated
    conn = sqlite3.connect(behind)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # still
    conn.close()


def test_a_damaged_store_fails_the_integrity_check_on_request(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    path = tmp_path / "damaged.db"
    store = open_store(path)
    for i in range(500):
        store.ingest("T1:U1", "slack", f"Ev{i}", {"text": "x" * 100}, 1)
    store.close()
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size // 2)
        f.write(b"\xff" * 8192)
    quick = by_name(run_checks(env_for(emu, str(path))))
    assert quick["integrity"].ok is None
    full = by_name(run_checks(env_for(emu, str(path)), integrity=True))
    assert full["integrity"].ok is False


def test_a_malformed_setting_is_one_failed_line(emu: SlackEmulator, db: str) -> None:
    (only,) = run_checks(env_for(emu, db, WAKEFUL_LEASE_TTL="soon"))
    assert only.line() == (
        "FAIL settings        WAKEFUL_LEASE_TTL must be a duration: 90 (seconds), 90s, 15m, 1h "
        "or 30d, got 'soon'"
    )


def test_postgresql_reachable_current_durable_and_on_time(emu: SlackEmulator) -> None:
    with pg_schema_url() as dsn:
        open_store(dsn).close()
        checks = by_name(run_checks(env_for(emu, dsn), integrity=True))
    assert [c.line() for c in checks.values() if c.ok is False] == []
    assert checks["durability"].detail == "synchronous_commit=on"
    assert checks["db clock"].ok is True
    assert checks["integrity"].ok is None
    assert "journal" not in checks
    unreachable = "postgresql://postgres:doctor-pw@127.0.0.1:1/test"
    down = by_name(run_checks(env_for(emu, unreachable)))["store"]
    assert down.ok is False and down.detail.startswith("unreachable:")


def test_the_command_prints_one_line_per_check_and_exits_non_zero_on_a_failure(
    emu: SlackEmulator, db: str, tmp_path: Path
) -> None:
    def doctor(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            wakeful_cmd("doctor"),
            env=child_env(**env),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    manifest = str(Path(__file__).resolve().parents[2] / "manifest.yml")
    good = doctor(**env_for(emu, db))
    assert good.returncode == 0, good.stdout + good.stderr
    lines = good.stdout.splitlines()
    assert lines[-1] == "all checks passed"
    assert all(line[:5] in ("ok   ", "skip ") for line in lines[:-1])
    assert manifest in good.stdout
    bad = doctor(**env_for(emu, db, SLACK_BOT_TOKEN="xoxb-not-this-one"))
    assert bad.returncode == 1
    assert "FAIL slack token     rejected by Slack (invalid_auth)" in bad.stdout
    assert bad.stdout.splitlines()[-1] == "1 check(s) failed"
    assert "xoxb-not-this-one" not in bad.stdout + bad.stderr
