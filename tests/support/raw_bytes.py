"""Where a string sits in a store's raw bytes, as a forensic reader would look (issue 38's
forget): the SQLite file and its WAL read as bytes, PostgreSQL's tables (their TOAST too) read
page by page through `pageinspect`, free space and dead rows included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg


def sqlite_files_holding(db: str | Path, marker: str) -> list[str]:
    """The files of a SQLite store (main, -wal, -journal) whose bytes hold `marker` (UTF-8)."""
    needle = marker.encode("utf-8")
    found = []
    for suffix in ("", "-wal", "-journal"):
        path = Path(f"{db}{suffix}")
        if path.exists() and needle in path.read_bytes():
            found.append(path.name)
    return found


def pg_tables_holding(dsn: str, schema: str, marker: str) -> list[str]:
    """The relations (tables and their TOAST tables) of `schema` with a page holding `marker`:
    every block, read raw (`get_raw_page`), so a dead row or freed space counts."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        rels: list[Any] = conn.execute(
            """
            SELECT c.oid::regclass::text AS rel FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relkind = 'r'
            UNION
            SELECT t.oid::regclass::text FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_class t ON t.oid = c.reltoastrelid
            WHERE n.nspname = %s AND c.relkind = 'r'
            """,
            (schema, schema),
        ).fetchall()
        found = []
        for (rel,) in rels:
            row = conn.execute(
                """
                SELECT count(*) FROM generate_series(0, pg_relation_size(%s::regclass) / 8192 - 1) b
                WHERE position(%s::bytea in get_raw_page(%s, b::int)) > 0
                """,
                (rel, marker.encode("utf-8"), rel),
            ).fetchone()
            if row is not None and row[0]:
                found.append(rel)
        return found
