"""One duration syntax for every duration setting (`90`, `90s`, `15m`, `1h`, `30d`), read by
one parser, and a bad one named with what was given and the syntax."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wakeful.bot.process.config import DURATIONS, Config, ConfigError
from wakeful.core.errors import InvalidInput
from wakeful.core.settings import parse_duration

BASE = {"SLACK_BOT_TOKEN": "xoxb-1"}
READ = {
    "WAKEFUL_OUTBOX_GAP": lambda c: c.settings.outbox_gap,
    "WAKEFUL_LEASE_TTL": lambda c: c.settings.lease_ttl,
    "WAKEFUL_HEARTBEAT": lambda c: c.settings.heartbeat,
    "WAKEFUL_APPROVAL_TTL": lambda c: c.settings.approval_ttl,
    "WAKEFUL_SEND_TIMEOUT": lambda c: c.settings.send_timeout,
    "WAKEFUL_BACKOFF_BASE": lambda c: c.settings.backoff_base,
    "WAKEFUL_BACKOFF_CAP": lambda c: c.settings.backoff_cap,
    "WAKEFUL_TOOL_RETRY_FOR": lambda c: c.settings.tool_retry_for,
    "WAKEFUL_STREAM_SEGMENT": lambda c: c.settings.stream_segment,
    "WAKEFUL_RETENTION": lambda c: c.settings.retention,
    "WAKEFUL_STARTUP_WAIT": lambda c: c.startup_wait,
    "WAKEFUL_BATCH_WINDOW": lambda c: c.batch_window,
    "WAKEFUL_TOKEN_REFRESH_BEFORE": lambda c: c.token_refresh_before,
}


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("1h", 3600), ("30d", 2_592_000), (" 2H ", 7200)],
)
def test_the_syntax(raw: str, seconds: int) -> None:
    assert parse_duration("X", raw) == seconds


def test_every_duration_setting_takes_the_same_syntax() -> None:
    assert set(READ) == set(DURATIONS)
    small = {
        "WAKEFUL_BATCH_WINDOW": ("30s", 30),
        "WAKEFUL_STARTUP_WAIT": ("2m", 120),
        "WAKEFUL_TOKEN_REFRESH_BEFORE": ("2h", 7200),
        "WAKEFUL_HEARTBEAT": ("1m", 60),
    }
    for name, read in READ.items():
        raw, want = small.get(name, ("5d", 5 * 86_400))
        assert read(Config.from_env({**BASE, name: raw})) == want, name
    # the case: refused before, while WAKEFUL_RETENTION=30d was accepted
    assert Config.from_env({**BASE, "WAKEFUL_OUTBOX_GAP": "1h"}).settings.outbox_gap == 3600


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        (
            "WAKEFUL_OUTBOX_GAP",
            "1 hour",
            "WAKEFUL_OUTBOX_GAP must be a duration: 90 (seconds), 90s, 15m, 1h or 30d, got "
            "'1 hour'",
        ),
        (
            "WAKEFUL_RETENTION",
            "30days",
            "WAKEFUL_RETENTION must be a duration: 90 (seconds), 90s, 15m, 1h or 30d, got '30days'",
        ),
        (
            "WAKEFUL_LEASE_TTL",
            "1.5",
            "WAKEFUL_LEASE_TTL must be a whole number of seconds (90 (seconds), 90s, 15m, 1h or "
            "30d), got '1.5'",
        ),
        ("WAKEFUL_LEASE_TTL", "0", "WAKEFUL_LEASE_TTL must be at least 1 s, got '0'"),
        (
            "WAKEFUL_STARTUP_WAIT",
            "2h",
            "WAKEFUL_STARTUP_WAIT must be between 0 and 3600 s, got '2h'",
        ),
        ("WAKEFUL_BATCH_WINDOW", "2m", "WAKEFUL_BATCH_WINDOW must be between 0 and 60 s, got '2m'"),
        ("WAKEFUL_HEARTBEAT", "0", "WAKEFUL_HEARTBEAT must be between 1 and 60 s, got '0'"),
        ("WAKEFUL_HEARTBEAT", "2m", "WAKEFUL_HEARTBEAT must be between 1 and 60 s, got '2m'"),
    ],
)
def test_a_bad_duration_says_which_setting_what_was_given_and_the_syntax(
    name: str, raw: str, said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Config.from_env({**BASE, name: raw})
    assert str(refused.value) == said


def test_fractions_only_where_a_setting_takes_them() -> None:
    assert Config.from_env({**BASE, "WAKEFUL_BATCH_WINDOW": "0.5"}).batch_window == 0.5
    assert Config.from_env({**BASE, "WAKEFUL_STARTUP_WAIT": "2.5s"}).startup_wait == 2.5
    with pytest.raises(InvalidInput):
        parse_duration("X", "0.5")


def test_no_setting_reads_a_duration_its_own_way() -> None:
    # one parser: config.py has no second unit table or duration pattern of its own
    source = (Path(__file__).resolve().parents[2] / "bot" / "process" / "config.py").read_text()
    assert not re.search(r"[\"']d[\"']\s*:\s*(DAY|86)", source)
    assert "parse_duration" in source
