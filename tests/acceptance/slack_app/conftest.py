"""`wakeful serve` driven the way Slack meets it (tests/support/slack_app.py).

Every assertion is on something observable from outside: HTTP statuses, what the emulator
received, and the store read from the test process while the app runs. One app process per
backend and module is shared by most tests; each test uses its own users and channels. Tests
that need other processes (config errors, loops split over four processes) start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# -- fixtures ----------------------------------------------------------------------------------
from tests.support.slack_app import (
    BOT_USER,
    QUICK_SETTINGS,
    TEAM,
    TOKEN,
    Wakeful,
    launch,
    pg_schema_url,
    serving,
    shut_down,
)
from wakeful.devtools.emulator import SlackEmulator


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """The shared `wakeful serve` on a SQLite file, with the quick batch window (bursts have
    `burst_app`)."""
    tmp = tmp_path_factory.mktemp("serve-sqlite")
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        # Digests every second (test_digest_every_and_off), as the demo allows.
        settings = {**QUICK_SETTINGS, "WAKEFUL_MIN_DIGEST_PERIOD": "1"}
        running = launch(tmp, emu, str(tmp / "wakeful.db"), settings)
        try:
            yield running
        finally:
            shut_down(running)


@pytest.fixture(scope="module")
def pg_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """The same, on a fresh PostgreSQL schema."""
    tmp = tmp_path_factory.mktemp("serve-pg")
    with (
        pg_schema_url() as url,
        SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu,
    ):
        running = launch(tmp, emu, url, QUICK_SETTINGS, backend="postgres")
        try:
            yield running
        finally:
            shut_down(running)


@pytest.fixture(scope="module")
def burst_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """A `wakeful serve` with the default batch window (BATCH_WINDOW), for the bursts: three
    quick messages must land in it however slow a loaded machine makes each request."""
    with serving("sqlite", tmp_path_factory.mktemp("serve-burst")) as running:
        yield running


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def core_app(request: pytest.FixtureRequest) -> Wakeful:
    """The core subset runs on both backends."""
    name = "app" if request.param == "sqlite" else "pg_app"
    running: Wakeful = request.getfixturevalue(name)
    return running
