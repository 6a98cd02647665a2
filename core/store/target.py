"""What names a store: a `postgresql://` URL or a SQLite file path, and nothing else.

One rule for every door that opens a store (`open_store`, the read-only probe, backup and
restore, and the command line's check of WAKEFUL_DB / `--db` before anything starts). Anything
else is refused without being repeated: the value may hold a password, and a libpq key=value
string (`host=db password=...`) taken as a path became a SQLite file named after it, password
included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, NamedTuple

from wakeful.core.errors import InvalidInput

ACCEPTED = "a file path or a postgresql:// URL (postgresql://user@host:5432/dbname)"
"""What a store setting may be, as every refusal says it."""
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite:///"
_KEYWORD = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
"""How a libpq key=value connection string starts (`host=`, `dbname =`, ...); a file whose
name starts so is `./name`."""
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
"""How a URL starts (`postgresql:`, `mysql:`); a file whose name holds one is `./name`."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Target(NamedTuple):
    """A store setting understood: the backend and what it opens (the URL, or the path)."""

    backend: Literal["postgres", "sqlite"]
    where: str


def store_target(target: str | Path, name: str = "the store") -> Target:
    """The backend `target` names and what to open, or InvalidInput naming `name` (the
    setting it came from), why it is refused and what is accepted, never what it holds."""
    if isinstance(target, Path):
        text = str(target)
    elif isinstance(target, str):
        text = target
    else:
        raise InvalidInput(f"{name} must be {ACCEPTED}, not a {type(target).__name__}")
    if text.startswith(POSTGRES_SCHEMES):
        return Target("postgres", text)
    path = text.removeprefix(SQLITE_SCHEME)
    if path == text and ("://" in text or _SCHEME.match(text)):
        why = "a URL of another kind"
    elif not path.strip():
        why = "an empty path"
    elif _KEYWORD.match(path):
        why = "a key=value connection string"
    elif _CONTROL.search(path):
        why = "a path with a control character"
    else:
        return Target("sqlite", path)
    raise InvalidInput(f"{name} must be {ACCEPTED}, not {why} (its value is not shown)")
