"""Memory's documents in the store (core/memory.py): what an owner keeps now, every version,
and the writes a run's fenced finish makes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wakeful.core.memory import MemoryChange
from wakeful.core.store.base import StoreBase
from wakeful.core.store.sql import Tx


@dataclass(frozen=True, slots=True)
class MemoryDoc:
    """A document as `wakeful inspect --memory` lists it: never its text."""

    path: str
    bytes: int
    version: int
    written_at: int


class MemoryRows(StoreBase):
    def memory_read(self, owner: str, path: str) -> str | None:
        """The document's current text; None when there is none (or it was deleted)."""
        with self._tx(write=False) as tx:
            row = tx.one("memory_doc", {"owner": owner, "path": path})
        return None if row is None or row["text"] is None else str(row["text"])

    def memory_paths(self, owner: str, folder: str) -> list[str]:
        """The paths `owner` keeps under `folder`, sorted."""
        prefix = _like(folder.rstrip("/") + "/") + "%"
        params = {"owner": owner, "folder": folder, "prefix": prefix}
        with self._tx(write=False) as tx:
            return [str(r["path"]) for r in tx.all("memory_paths", params)]

    def memory_docs(self, owner: str) -> list[MemoryDoc]:
        """What `owner` keeps now: each document's path, size, version and last write."""
        with self._tx(write=False) as tx:
            rows = tx.all("memory_docs", {"owner": owner})
        return [
            MemoryDoc(str(r["path"]), int(r["bytes"]), int(r["version"]), int(r["written_at"]))
            for r in rows
        ]

    def memory_sizes(self, owner: str) -> list[tuple[str, int]]:
        """(path, bytes) of each document `owner` keeps now (what `/wakeful memory` lists)."""
        return [(d.path, d.bytes) for d in self.memory_docs(owner)]

    def memory_versions(self, owner: str, path: str) -> list[tuple[int, str | None, int]]:
        """Every version kept of one document, oldest first: (version, text, written_at)."""
        with self._tx(write=False) as tx:
            rows = tx.all("memory_versions", {"owner": owner, "path": path})
        return [(int(r["version"]), r["text"], int(r["written_at"])) for r in rows]

    def restore_memory(self, owner: str, path: str, version: int, now: int) -> bool:
        """Make a kept version the document's newest (a new version with its text)."""
        with self._tx() as tx:
            row = tx.one("memory_version", {"owner": owner, "path": path, "version": version})
            if row is None:
                return False
            write_memory(tx, [MemoryChange(owner, path, row["text"])], now, None)
            return True


def write_memory(tx: Tx, changes: Sequence[MemoryChange], now: int, run_id: str | None) -> None:
    """A run's memory writes, inside its finish: each a new version of its document."""
    for change in changes:
        key = {"owner": change.owner, "path": change.path}
        row = tx.one("memory_latest", key)
        version = 1 if row is None else int(row["version"]) + 1
        tx.run("memory_unmark_latest", key)
        text = change.text
        size = 0 if text is None else len(text.encode("utf-8", "surrogatepass"))
        params = {**key, "version": version, "text": text, "bytes": size, "now": now}
        tx.run("insert_memory", {**params, "run_id": run_id})


def _like(text: str) -> str:
    """`text` matched literally by LIKE ... ESCAPE '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
