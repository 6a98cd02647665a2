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
    QUICK_SETTINGS,
    Wakeful,
    serving,
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """The shared `wakeful serve` on a SQLite file, with the quick batch window (bursts have
    `burst_app`)."""
    # Digests every second (test_digest_every_and_off), as the demo allows.
    settings = {**QUICK_SETTINGS, "WAKEFUL_MIN_DIGEST_PERIOD": "1"}
    with serving("sqlite", tmp_path_factory.mktemp("serve-sqlite"), settings) as running:
        yield running


@pytest.fixture(scope="module")
def pg_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wakeful]:
    """The same, on a fresh PostgreSQL schema."""
    with serving("postgres", tmp_path_factory.mktemp("serve-pg"), QUICK_SETTINGS) as running:
        yield running


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
