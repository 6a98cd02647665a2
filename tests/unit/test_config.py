"""Every setting is read exactly as documented; a bad one is one clear line naming it."""

from __future__ import annotations

import pytest

from wakeful.bot.commands import cli
from wakeful.bot.process.config import Config, ConfigError, log_level

BASE = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}


def test_defaults_match_the_documented_contract() -> None:
    c = Config.from_env(BASE, need={"token", "secret"})
    assert (
        c.db,
        c.port,
        c.settings.outbox_gap,
        c.settings.lease_ttl,
        c.settings.max_attempts,
        c.settings.approval_ttl,
    ) == (
        "wakeful.db",
        3000,
        3600,
        120,
        3,
        14400,
    )
    assert c.agent == "refund-desk" and c.approvers == () and not c.socket_mode
    assert c.api_url == "https://slack.com/api/"


def test_every_setting_is_read() -> None:
    env = {
        **BASE,
        "SLACK_APP_TOKEN": "xapp-1",
        "SLACK_API_URL": "http://127.0.0.1:9/api",
        "WAKEFUL_DB": "postgresql://x@y/z",
        "WAKEFUL_PORT": "8080",
        "WAKEFUL_OUTBOX_GAP": "60",
        "WAKEFUL_LEASE_TTL": "30",
        "WAKEFUL_MAX_ATTEMPTS": "5",
        "WAKEFUL_APPROVAL_TTL": "600",
        "WAKEFUL_MAX_APPROVALS_PER_RUN": "3",
        "WAKEFUL_MAX_OPEN_APPROVALS": "9",
        "WAKEFUL_APPROVERS": "U01ABC, W02DEF",
        "WAKEFUL_AGENT": "refund-desk",
    }
    c = Config.from_env(env)
    assert c.socket_mode and c.api_url == "http://127.0.0.1:9/api/"
    assert (
        c.db,
        c.port,
        c.settings.outbox_gap,
        c.settings.lease_ttl,
        c.settings.max_attempts,
        c.settings.approval_ttl,
    ) == (
        "postgresql://x@y/z",
        8080,
        60,
        30,
        5,
        600,
    )
    assert c.approvers == ("U01ABC", "W02DEF")
    s = c.settings
    assert (s.lease_ttl, s.max_attempts, s.outbox_gap) == (30, 5, 60)
    assert (s.max_approvals_per_run, s.max_open_approvals) == (3, 9)


def test_the_approval_caps_default_to_5_per_run_and_20_open() -> None:
    s = Config.from_env(BASE).settings
    assert (s.max_approvals_per_run, s.max_open_approvals) == (5, 20)


def test_self_approval_is_on_by_default_and_off_takes_a_second_person() -> None:
    """Issue 34, item 6 (e): WAKEFUL_SELF_APPROVAL, on unless set off."""
    assert Config.from_env(BASE).settings.self_approval is True
    for off in ("off", "OFF", "0", "false", "no"):
        env = {**BASE, "WAKEFUL_SELF_APPROVAL": off}
        assert Config.from_env(env).settings.self_approval is False
    assert Config.from_env({**BASE, "WAKEFUL_SELF_APPROVAL": "on"}).settings.self_approval


@pytest.mark.parametrize(
    ("env", "need", "named"),
    [
        ({}, {"token"}, "SLACK_BOT_TOKEN"),
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, {"token", "secret"}, "SLACK_SIGNING_SECRET"),
        ({**BASE, "SLACK_BOT_TOKEN": "nope"}, (), "SLACK_BOT_TOKEN"),
        ({**BASE, "SLACK_APP_TOKEN": "xoxb-2"}, (), "SLACK_APP_TOKEN"),
        ({**BASE, "SLACK_API_URL": "ftp://x"}, (), "SLACK_API_URL"),
        ({**BASE, "WAKEFUL_PORT": "eighty"}, (), "WAKEFUL_PORT"),
        ({**BASE, "WAKEFUL_PORT": "70000"}, (), "WAKEFUL_PORT"),
        ({**BASE, "WAKEFUL_OUTBOX_GAP": "-1"}, (), "WAKEFUL_OUTBOX_GAP"),
        ({**BASE, "WAKEFUL_LEASE_TTL": "0"}, (), "WAKEFUL_LEASE_TTL"),
        ({**BASE, "WAKEFUL_MAX_ATTEMPTS": "1.5"}, (), "WAKEFUL_MAX_ATTEMPTS"),
        ({**BASE, "WAKEFUL_APPROVAL_TTL": ""}, (), None),
        ({**BASE, "WAKEFUL_MAX_APPROVALS_PER_RUN": "0"}, (), "WAKEFUL_MAX_APPROVALS_PER_RUN"),
        ({**BASE, "WAKEFUL_MAX_OPEN_APPROVALS": "many"}, (), "WAKEFUL_MAX_OPEN_APPROVALS"),
        ({**BASE, "WAKEFUL_APPROVERS": "U1,bob"}, (), "WAKEFUL_APPROVERS"),
        ({**BASE, "WAKEFUL_AGENT": "gpt"}, (), "WAKEFUL_AGENT"),
        ({**BASE, "WAKEFUL_BATCH_WINDOW": "soon"}, (), "WAKEFUL_BATCH_WINDOW"),
        ({**BASE, "WAKEFUL_STARTUP_WAIT": "a minute"}, (), "WAKEFUL_STARTUP_WAIT"),
        ({**BASE, "WAKEFUL_STARTUP_WAIT": "-1"}, (), "WAKEFUL_STARTUP_WAIT"),
        ({**BASE, "WAKEFUL_PG_POOL": "0"}, (), "WAKEFUL_PG_POOL"),
        ({**BASE, "WAKEFUL_PG_POOL": "101"}, (), "WAKEFUL_PG_POOL"),
        ({**BASE, "WAKEFUL_PG_POOL": "four"}, (), "WAKEFUL_PG_POOL"),
        ({**BASE, "WAKEFUL_SELF_APPROVAL": "never"}, (), "WAKEFUL_SELF_APPROVAL"),
    ],
)
def test_a_bad_setting_is_named_in_one_line(
    env: dict[str, str], need: set[str], named: str | None
) -> None:
    if named is None:
        Config.from_env(env, need=need)  # empty means default, not an error
        return
    with pytest.raises(ConfigError) as info:
        Config.from_env(env, need=need)
    message = str(info.value)
    assert named in message and "\n" not in message


def test_socket_mode_does_not_need_a_signing_secret() -> None:
    c = Config.from_env(
        {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}, need={"token", "secret"}
    )
    assert c.socket_mode


@pytest.mark.parametrize(
    ("env", "argv", "named"),
    [
        ({"WAKEFUL_LOG_LEVEL": "verbose"}, ["doctor"], "WAKEFUL_LOG_LEVEL"),
        ({}, ["--log-level", "loud", "doctor"], "--log-level"),
        ({"WAKEFUL_LOG_FORMAT": "xml"}, ["doctor"], "WAKEFUL_LOG_FORMAT"),
    ],
)
def test_a_bad_log_setting_stops_the_command_with_one_line(
    env: dict[str, str],
    argv: list[str],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A typo in the log level must not quietly log at INFO: like every other setting, it
    # stops the command before anything runs, naming what is wrong.
    for name in ("WAKEFUL_LOG_LEVEL", "WAKEFUL_LOG_FORMAT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and "\n" not in err, err


def test_a_log_level_is_read_in_any_case() -> None:
    assert log_level(" warning ") == "WARNING"
    assert log_level("Debug") == "DEBUG"


def test_the_start_up_wait_defaults_to_a_minute_and_zero_means_at_once() -> None:
    assert Config.from_env(BASE).startup_wait == 60.0
    assert Config.from_env({**BASE, "WAKEFUL_STARTUP_WAIT": "0"}).startup_wait == 0.0
    assert Config.from_env({**BASE, "WAKEFUL_STARTUP_WAIT": "2.5"}).startup_wait == 2.5


def test_the_postgres_pool_defaults_to_eight_connections() -> None:
    assert Config.from_env(BASE).pg_pool == 8
    assert Config.from_env({**BASE, "WAKEFUL_PG_POOL": " 3 "}).pg_pool == 3


# -- WAKEFUL_APPROVERS names each approver's workspace (issue 34, item 2) -----------------------


def _distribution(approvers: str) -> dict[str, str]:
    from cryptography.fernet import Fernet

    return {
        "SLACK_CLIENT_ID": "1.2",
        "SLACK_CLIENT_SECRET": "s",
        "SLACK_SIGNING_SECRET": "s",
        "WAKEFUL_TOKEN_KEY": Fernet.generate_key().decode(),
        "WAKEFUL_APPROVERS": approvers,
    }


def test_an_approver_is_named_with_their_workspace_or_alone_in_one_workspace() -> None:
    env = {**BASE, "WAKEFUL_APPROVERS": "T01ABC:U01ABC, U02DEF,TE1:W03GHI"}
    assert Config.from_env(env).approvers == ("T01ABC:U01ABC", "U02DEF", "TE1:W03GHI")
    both = Config.from_env(_distribution("T01ABC:U01ABC,T02XYZ:W02DEF"), need={"secret"})
    assert both.approvers == ("T01ABC:U01ABC", "T02XYZ:W02DEF")


def test_distribution_mode_refuses_an_approver_without_a_workspace_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_env(_distribution("T01ABC:U01ABC,U02DEF"), need={"secret"})
    said = str(caught.value)
    assert "\n" not in said and said.startswith("WAKEFUL_APPROVERS:") and "U02DEF" in said


@pytest.mark.parametrize("entry", ["t1:U1", "T1:bob", "T1:", ":U1", "T1:U1:U2", "E01:U1"])
def test_a_malformed_approver_is_named_in_one_line(entry: str) -> None:
    with pytest.raises(ConfigError, match="WAKEFUL_APPROVERS") as caught:
        Config.from_env({**BASE, "WAKEFUL_APPROVERS": entry})
    assert entry in str(caught.value)
