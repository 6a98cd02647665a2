"""`wakeful doctor` against the Slack emulator and real stores, with good and bad settings."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.slack_app import child_env, pg_schema_url, wakeful_cmd
from wakeful.bot.commands.doctor import Check, report, run_checks
from wakeful.bot.slack.scopes import required_scopes
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


OPS = "C0PS"


def test_the_ops_channel_is_asked_of_slack_and_nothing_is_posted(
    emu: SlackEmulator, db: str
) -> None:
    """WAKEFUL_OPS_CHANNEL (issue 33): conversations.info says the channel exists, is not
    archived and has the bot in it; each way it cannot take the ops posts fails, saying what
    to do. Unset, there is no such check (see the healthy setup above)."""
    env = env_for(emu, db, WAKEFUL_OPS_CHANNEL=OPS)

    def ops_check() -> Check:
        return by_name(run_checks(env))["ops channel"]

    assert ops_check() == Check("ops channel", True, "#c0ps (C0PS): the bot is in it, not archived")
    emu.leave_channel(OPS)
    assert ops_check() == Check(
        "ops channel", False, "the bot is not in C0PS: `/invite @wakeful` there"
    )
    emu.add_channel(OPS)
    emu.archive_channel(OPS)
    assert ops_check() == Check(
        "ops channel", False, "C0PS is archived: unarchive it, or set another WAKEFUL_OPS_CHANNEL"
    )
    emu.remove_channel(OPS)
    not_found = "C0PS not found: no such channel, or a private one the bot is not in (invite it)"
    assert ops_check() == Check("ops channel", False, not_found)
    emu.add_channel(OPS)
    emu.scopes = [s for s in emu.scopes if s not in ("channels:read", "groups:read")]
    assert ops_check() == Check(
        "ops channel",
        False,
        "cannot look at C0PS: the token lacks channels:read and groups:read (asked for by "
        "manifest.yml); add them and reinstall the app",
    )
    assert [c.params.get("channel") for c in emu.calls("conversations.info")] == [OPS] * 5
    assert emu.calls("chat.postMessage") == []  # the doctor changes nothing
    text, code = report(run_checks(env))
    assert code == 1 and "FAIL ops channel     cannot look at C0PS" in text


def test_a_private_ops_channel_the_bot_is_not_in_is_not_found(emu: SlackEmulator, db: str) -> None:
    emu.add_channel("G0PS")
    ok = by_name(run_checks(env_for(emu, db, WAKEFUL_OPS_CHANNEL="G0PS")))["ops channel"]
    assert ok.ok is True
    emu.leave_channel("G0PS")  # Slack shows a bot no private channel it is outside of
    gone = by_name(run_checks(env_for(emu, db, WAKEFUL_OPS_CHANNEL="G0PS")))["ops channel"]
    assert gone.ok is False and gone.detail.startswith("G0PS not found")


def test_an_archived_channel_refuses_posts_as_slack_does(emu: SlackEmulator) -> None:
    from slack_sdk.errors import SlackApiError

    from wakeful.bot.slack.sender import make_client

    emu.archive_channel(OPS)
    client = make_client(emu.bot_token, emu.api_url)
    with pytest.raises(SlackApiError) as refused:
        client.chat_postMessage(channel=OPS, text="hello")
    assert refused.value.response["error"] == "is_archived"
    assert client.conversations_info(channel=OPS)["channel"]["is_archived"] is True
    assert client.conversations_history(channel=OPS)["messages"] == []  # still readable


def test_in_distribution_mode_the_ops_channel_is_asked_with_its_workspaces_token(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    from tests.integration.test_installations import doctor_env, install

    db = str(tmp_path / "doctor.db")
    store = open_store(db)
    try:
        install(emu, store, "TOPS")
    finally:
        store.close()
    env = doctor_env(emu, db)
    named = by_name(run_checks({**env, "WAKEFUL_OPS_CHANNEL": f"TOPS:{OPS}"}))["ops channel"]
    assert named.ok is True
    [asked] = emu.calls("conversations.info")
    assert asked.team == "TOPS"
    alone = by_name(run_checks({**env, "WAKEFUL_OPS_CHANNEL": OPS}))
    assert alone["settings"].ok is False and "WAKEFUL_OPS_CHANNEL" in alone["settings"].detail
    with_team = {**env, "WAKEFUL_OPS_CHANNEL": OPS, "WAKEFUL_WEBHOOK_TEAM": "TOPS"}
    assert by_name(run_checks(with_team))["ops channel"].ok is True
    elsewhere = by_name(run_checks({**env, "WAKEFUL_OPS_CHANNEL": f"TZZ:{OPS}"}))["ops channel"]
    assert elsewhere == Check(
        "ops channel", False, "workspace TZZ (WAKEFUL_OPS_CHANNEL) has no active installation"
    )
