"""The tests' fresh stores (tests/support/store_templates.py) are what a first `open_store`
gives: migrated, empty, identities from 1, and never shared. A PostgreSQL schema handed back
is emptied before it is handed out again, and one whose shape a test changed is dropped."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_DSN, T0, need_pg
from tests.support.store_templates import PgSchemas, SqliteTemplate
from wakeful.core.effects import Post
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store


def used(store: Store) -> None:
    """Rows in several tables, identities moved on."""
    for i in range(3):
        store.ingest("T1:U1", "slack", f"Ev{i}", {"text": "hi"}, T0)
    store.post("T1:U1", [Post("D1", "a reply", priority="urgent")], T0)


def assert_fresh(store: Store) -> None:
    assert store.events("T1:U1") == []
    assert store.outbox() == []
    first = store.ingest("T1:U2", "slack", "EvFirst", {}, T0)
    assert first.stored and first.event_id == 1, first


def test_a_sqlite_copy_is_a_migrated_empty_owner_only_file(tmp_path: Path) -> None:
    template = SqliteTemplate(tmp_path / "template")
    (tmp_path / "template").mkdir()
    made = open_store(tmp_path / "made.db")
    first = template.store(tmp_path / "a.db", Settings())
    used(first)
    first.close()
    second = template.store(tmp_path / "b.db", Settings())
    try:
        assert_fresh(second)
        assert stat.S_IMODE(os.stat(tmp_path / "b.db").st_mode) == 0o600
        tables = "SELECT name, sql FROM sqlite_master ORDER BY name"
        assert second.db._connect().execute(tables).fetchall() == (  # type: ignore[attr-defined]
            made.db._connect().execute(tables).fetchall()  # type: ignore[attr-defined]
        )
    finally:
        second.close()
        made.close()


@pytest.fixture(scope="module")
def schemas() -> Iterator[PgSchemas]:
    """One pool for the module (each new schema costs a migration); dropped at its end."""
    need_pg()
    pool = PgSchemas(PG_DSN)
    yield pool
    pool.drop_all()


def schema_of(store: Store) -> str:
    return str(store.db.schema)  # type: ignore[attr-defined]


def test_a_schema_handed_back_is_emptied_and_handed_out_again(schemas: PgSchemas) -> None:
    first = schemas.store(Settings())
    used(first)
    name = schema_of(first)
    first.close()
    second = schemas.store(Settings())
    try:
        assert schema_of(second) == name, "the schema was not reused"
        assert_fresh(second)
    finally:
        second.close()


def test_two_open_stores_never_share_a_schema(schemas: PgSchemas) -> None:
    a, b = schemas.store(Settings()), schemas.store(Settings())
    try:
        assert schema_of(a) != schema_of(b)
        used(a)
        assert b.events("T1:U1") == []
    finally:
        a.close()
        b.close()
    a.close()  # closing twice hands it back once
    c, d = schemas.store(Settings()), schemas.store(Settings())
    try:
        assert schema_of(c) != schema_of(d)
    finally:
        c.close()
        d.close()


@pytest.mark.parametrize(
    "change",
    [
        "DROP INDEX {s}.{index}",
        "ALTER TABLE {s}.events ADD COLUMN extra text",
        "ALTER TABLE {s}.outbox ALTER COLUMN text DROP NOT NULL",
        "DELETE FROM {s}.schema_migrations WHERE version = (SELECT max(version) FROM "
        "{s}.schema_migrations)",
    ],
    ids=["dropped-index", "added-column", "nullable-column", "forgotten-migration"],
)
def test_a_schema_whose_shape_a_test_changed_is_dropped_not_reused(
    schemas: PgSchemas, change: str
) -> None:
    store = schemas.store(Settings())
    name = schema_of(store)
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        index = admin.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint) LIMIT 1",
            (name,),
        ).fetchone()
        assert index is not None
        admin.execute(change.format(s=name, index=index[0]))
    store.close()
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        left = admin.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)
        ).fetchone()
    assert left == (0,), f"{name} was kept after: {change}"
    again = schemas.store(Settings())
    try:
        assert schema_of(again) != name
        assert_fresh(again)
    finally:
        again.close()
