"""Fixtures the acceptance modules share: a store of each kind, and the Slack emulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.slack_app import BOT_USER, TEAM, TOKEN, pg_schema_url
from wakeful.devtools.emulator import SlackEmulator


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL: a SQLite file, or a fresh PostgreSQL schema (a module may define its own)."""
    if request.param == "sqlite":
        yield str(tmp_path / "wakeful.db")
    else:
        with pg_schema_url() as url:
            yield url


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    """The Slack emulator with the suite's bot, token and team."""
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as running:
        yield running
