"""Named SQL blocks, one file per backend, and the cursor-like interface the engine runs them on.

Each backend keeps every statement in its own `.sql` file under `-- name: <name>` headers; the
engine refers to statements by name only, so both dialects can be checked to define the same
names and no SQL is built from strings at run time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from typing import Any, Protocol

Row = Mapping[str, Any]
_HEADER = re.compile(r"^--\s*name:\s*([a-z_0-9]+)\s*$", re.MULTILINE)


def load_queries(filename: str) -> dict[str, str]:
    """Read `-- name: x` blocks from a packaged .sql file into {name: statement}."""
    text = resources.files("wakeful.core.store").joinpath(filename).read_text("utf-8")
    pieces = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{filename}: query {name!r} defined twice")
        queries[name] = body.strip().rstrip(";")
    return queries


def load_migrations(dialect: str) -> list[tuple[int, str, str]]:
    """The packaged migrations of a dialect as (version, name, script), in version order."""
    folder = resources.files("wakeful.core.store").joinpath("migrations", dialect)
    found: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        m = re.match(r"^(\d{4})_([a-z0-9_]+)\.sql$", entry.name)
        if m:
            found.append((int(m.group(1)), m.group(2), entry.read_text("utf-8")))
    found.sort()
    return found


class Tx(Protocol):
    """One open write (or read) transaction. Statements are referred to by name."""

    def run(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Execute; return the number of rows changed."""
        ...

    def one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    def all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...
