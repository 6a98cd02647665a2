"""Shared fixtures: every store test runs against each backend that can be reached."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import wakeful.bot.kinds  # noqa: F401 (the Slack edge's outbox kinds, as every wakeful process has them)
from tests.support.store_templates import PgSchemas, SqliteTemplate
from wakeful.core.settings import Settings
from wakeful.core.store import Store

T0 = 1_700_000_000
PG_DSN = os.environ.get("WAKEFUL_TEST_PG_DSN", "")
BACKENDS = ["sqlite", "postgres"]

MakeStore = Callable[..., Store]


def need_pg(what: str = "PostgreSQL store tests") -> str:
    """The PostgreSQL DSN of the tests. The only skip: no server named, on a developer's
    machine. Where WAKEFUL_TEST_REQUIRE_PG is set (`.ci/run` sets it), a missing DSN fails the
    test instead, so a CI run can never pass with the PostgreSQL half skipped; with a DSN set,
    a missing driver or an unreachable server is a failure too."""
    if not PG_DSN:
        message = f"WAKEFUL_TEST_PG_DSN is not set: {what} skipped"
        if os.environ.get("WAKEFUL_TEST_REQUIRE_PG"):
            pytest.fail(message + ", but WAKEFUL_TEST_REQUIRE_PG asks for them")
        pytest.skip(message)
    return PG_DSN


@pytest.fixture
def pg_required() -> str:
    """For a module whose every test needs PostgreSQL: `need_pg` as a fixture."""
    return need_pg()


PG_SCHEMAS = PgSchemas(PG_DSN)
"""Migrated schemas, emptied and reused from test to test (tests/support/store_templates.py)."""


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """One migrated SQLite file per session; each new store is a copy of it."""
    return SqliteTemplate(tmp_path_factory.mktemp("template"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    PG_SCHEMAS.drop_all()


@pytest.fixture(params=BACKENDS)
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: SqliteTemplate
) -> Iterator[MakeStore]:
    """A factory of fresh, empty, migrated stores of one backend; all are closed after the
    test. Each is as a first `open_store` leaves it, without migrating each one."""
    made: list[Store] = []
    counter = iter(range(1000))

    def make(**overrides: int) -> Store:
        settings = Settings(**overrides)
        if request.param == "sqlite":
            path = tmp_path / f"store-{next(counter)}.db"
            store: Store = sqlite_template.store(path, settings)
        else:
            need_pg()
            store = PG_SCHEMAS.store(settings)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    return make_store()
