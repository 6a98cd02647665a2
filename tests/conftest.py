"""Shared fixtures: every store test runs against each backend that can be reached."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store
from wakeful.devtools.stores import fresh_postgres

T0 = 1_700_000_000
PG_DSN = os.environ.get("WAKEFUL_TEST_PG_DSN", "")
BACKENDS = ["sqlite", "postgres"]

MakeStore = Callable[..., Store]


def _pg_store(settings: Settings) -> Store:
    if not PG_DSN:
        # The only skip: no server named. With a DSN set, a missing driver or an unreachable
        # server is a failure, never a skip (CI always sets the DSN).
        pytest.skip("WAKEFUL_TEST_PG_DSN is not set: PostgreSQL store tests skipped")

    return fresh_postgres(PG_DSN, settings)


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    """A factory of fresh, empty stores of one backend; all are closed after the test."""
    made: list[Store] = []
    counter = iter(range(1000))

    def make(**overrides: int) -> Store:
        settings = Settings(**overrides)
        if request.param == "sqlite":
            store: Store = open_store(tmp_path / f"store-{next(counter)}.db", settings)
        else:
            store = _pg_store(settings)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    return make_store()
