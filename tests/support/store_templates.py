"""Fresh, empty stores for the tests without migrating each one.

Migrating a new store is most of what a store test used to cost (a SQLite file: a dozen
durable transactions; a PostgreSQL schema: a dozen DDL transactions, then a DROP SCHEMA).
What a test gets here is indistinguishable from a newly migrated store:

- SQLite: a copy of one file migrated once per session (closed, so its WAL is checkpointed
  into it; copied with its owner-only mode).
- PostgreSQL: a schema migrated once, then handed back after each test: emptied (every table
  but `schema_migrations`, identities restarted) and handed out again only if its shape (its
  tables, columns, indexes, constraints and recorded migrations) is still the one its
  migration left; a test that changed it (dropped an index, altered a table) leaves a schema
  that is dropped instead.

A SQLite copy is opened as any store is (its migrations find everything applied, in
milliseconds); a PostgreSQL schema handed out again is opened without that check (a dozen
round trips), since its shape was just checked.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

from wakeful.core.kinds import ENGINE_KINDS, Kinds
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store

SHAPE = """
SELECT md5(coalesce(string_agg(item, ',' ORDER BY item), '')) FROM (
  SELECT 'c' || c.oid || ':' || c.xmin AS item FROM pg_class c
   WHERE c.relnamespace = %(s)s::regnamespace
  UNION ALL
  SELECT 'a' || a.attrelid || '.' || a.attnum || ':' || a.xmin FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid WHERE c.relnamespace = %(s)s::regnamespace
  UNION ALL
  SELECT 'd' || d.oid || ':' || d.xmin FROM pg_attrdef d
    JOIN pg_class c ON c.oid = d.adrelid WHERE c.relnamespace = %(s)s::regnamespace
  UNION ALL
  SELECT 'k' || k.oid || ':' || k.xmin FROM pg_constraint k
   WHERE k.connamespace = %(s)s::regnamespace
  UNION ALL
  SELECT 't' || t.oid || ':' || t.xmin FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = %(s)s::regnamespace
  UNION ALL
  SELECT 'p' || p.oid || ':' || p.xmin FROM pg_proc p
   WHERE p.pronamespace = %(s)s::regnamespace
) AS shape
"""
"""A schema's catalog fingerprint: every relation, column, default, constraint, trigger and
function in it, each with the transaction that last wrote its catalog row. Any DDL (an index
dropped, a table altered) writes a new row version; emptying tables and ANALYZE do not. A
few milliseconds, where rebuilding each definition's text took 50 ms of the server's CPU per
test."""


class SqliteTemplate:
    """Copies of one migrated SQLite file."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._path: Path | None = None
        self._lock = threading.Lock()

    def store(self, path: Path, settings: Settings, kinds: Kinds = ENGINE_KINDS) -> Store:
        """A store on a new file at `path`, as if `open_store(path)` had migrated it."""
        with self._lock:
            if self._path is None:
                template = self._folder / "template.db"
                open_store(template).close()
                self._path = template
        shutil.copy(self._path, path)  # content and mode (owner only)
        return open_store(path, settings, kinds=kinds)


class PgSchemas:
    """Migrated PostgreSQL schemas, each handed to one store at a time."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._free: list[str] = []
        self._made: set[str] = set()
        self._shapes: dict[str, str] = {}
        """Each schema's fingerprint as its migration left it."""
        self._admin: Any = None
        """One connection for creating, emptying and checking schemas (a new server process
        per test cost more CPU than the test's own statements)."""
        self._lock = threading.Lock()

    def _conn(self) -> Any:
        """The admin connection (call with the lock held), opened again if it broke."""
        import psycopg

        if self._admin is None or self._admin.closed or self._admin.broken:
            self._admin = psycopg.connect(self.dsn, autocommit=True)
            self._admin.execute("SET lock_timeout = '5s'")
        return self._admin

    def store(self, settings: Settings, pool_size: int = 4, kinds: Kinds = ENGINE_KINDS) -> Store:
        """A store on an empty, migrated schema of its own; `close()` hands the schema back."""
        from psycopg import sql

        from wakeful.core.store.postgres import PostgresConnector

        with self._lock:
            schema = self._free.pop() if self._free else None
        new = schema is None
        if schema is None:
            schema = f"wakeful_t_{uuid.uuid4().hex[:12]}"
            with self._lock:
                self._conn().execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                self._made.add(schema)
        schemas = self

        class HandedBack(PostgresConnector):
            handed_back = False

            def close(self) -> None:
                super().close()
                if not self.handed_back:
                    self.handed_back = True
                    schemas.give_back(schema)

        connector = HandedBack(self.dsn, schema=schema, pool_size=pool_size, migrate=new)
        store = Store(connector, settings, kinds)
        if new:
            with self._lock:
                self._shapes[schema] = _shape(self._conn(), schema)
        return store

    def give_back(self, schema: str) -> None:
        """Empty `schema` and keep it for the next store, or drop it if its shape changed."""
        import psycopg

        try:
            with self._lock:
                conn = self._conn()
                tables = conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s "
                    "AND tablename <> 'schema_migrations'",
                    (schema,),
                ).fetchall()
                with conn.transaction():
                    for (table,) in tables:
                        conn.execute(f'DELETE FROM "{schema}"."{table}"')
                    # Identities start again, as RESTART would, without changing the catalog.
                    conn.execute(
                        "SELECT setval(format('%%I.%%I', schemaname, sequencename), "
                        "start_value, false) FROM pg_sequences WHERE schemaname = %s",
                        (schema,),
                    )
                if _shape(conn, schema) == self._shapes.get(schema):
                    self._free.append(schema)
                    return
        except psycopg.Error:
            pass
        self._drop(schema)

    def drop_all(self) -> None:
        """Drop every schema made here (the end of the session)."""
        with self._lock:
            made, self._made, self._free = set(self._made), set(), []
        for schema in made:
            self._drop(schema)
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None

    def _drop(self, schema: str) -> None:
        import psycopg
        from psycopg import sql

        with self._lock:
            self._made.discard(schema)
            self._shapes.pop(schema, None)
            with suppress(ValueError):
                self._free.remove(schema)
            with suppress(psycopg.Error):
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                self._conn().execute(drop)


def _shape(conn: Any, schema: str) -> str:
    """The schema's shape and its recorded migrations, as one hash."""
    row = conn.execute(SHAPE, {"s": schema}).fetchone()
    table = f'"{schema}".schema_migrations'
    migrations = conn.execute(
        f"SELECT string_agg(version::text, ',' ORDER BY version) FROM {table}"
    ).fetchone()
    return f"{row[0]}:{migrations[0]}"
