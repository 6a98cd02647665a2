"""Store backends behind one contract; `open_store` picks one from a URL or a path."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidInput
from ..settings import Settings
from .contract import Store


def open_store(target: str | Path, settings: Settings | None = None) -> Store:
    """`postgresql://...` opens PostgreSQL (needs the `postgres` extra); `sqlite:///path` or a
    plain path opens a SQLite file."""
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresStore
        except ImportError as exc:
            raise InvalidInput(
                "WAKEFUL_DB is a PostgreSQL URL but psycopg is not installed: "
                "pip install 'wakeful[postgres]'"
            ) from exc
        return PostgresStore(text, settings)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :]
    elif "://" in text:
        raise InvalidInput(f"unsupported store URL {text!r}: use a file path or postgresql://")
    if not text:
        raise InvalidInput("the store path is empty")
    from .sqlite import SQLiteStore

    return SQLiteStore(text, settings)


__all__ = ["Store", "open_store"]
