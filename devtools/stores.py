"""Throwaway stores for tests, scenarios and benchmarks: never used by the engine itself."""

from __future__ import annotations

import uuid
from contextlib import suppress

from wakeful.core.settings import Settings
from wakeful.core.store import Store


def fresh_postgres(dsn: str, settings: Settings | None = None, pool_size: int = 4) -> Store:
    """A store in a new, empty PostgreSQL schema of its own, dropped again by `close()`."""
    import psycopg
    from psycopg import sql

    from wakeful.core.store.postgres import PostgresConnector

    schema = f"wakeful_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))

    class ThrowawaySchema(PostgresConnector):
        def close(self) -> None:
            with suppress(psycopg.Error), psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
            super().close()

    return Store(ThrowawaySchema(dsn, schema=schema, pool_size=pool_size), settings)
