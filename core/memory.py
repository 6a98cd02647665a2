"""Memory: what an agent may remember about a person, kept durably and fenced like every other
effect (Anthropic's guide: store only what cannot be looked up again).

Documents live under paths (`/memories/...`) of an owner: an inbox (a person's DMs share one, a
channel's mentions the channel's), or a workspace's shared store (`workspace:<team>`, which runs
read and do not write). Every write is a new version; the previous is kept for
WAKEFUL_RETENTION and can be restored. A run's changes are effects: its fenced finish writes
them with everything else, once, or not at all (a run killed, failed, fenced or interrupted
writes no memory), and within the run its reads see its own earlier writes.

Memory text is data, never an instruction to the engine: it passes the checks every entry
does (no NUL, a size cap in UTF-8 bytes), and a write whose text would hold a secret (a Slack
token, a Stripe key, anything the log redaction knows) is refused whole, naming the kind of
secret, never its value.
"""

from __future__ import annotations

import builtins
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from wakeful.core.errors import InvalidInput
from wakeful.core.logs import secret_kind

ROOT = "/memories"
MAX_PATH = 512
"""Characters of a document's path."""
DOC_BYTES = 102_400
"""WAKEFUL_MEMORY_DOC_BYTES: a document's most UTF-8 bytes."""
DOCS = 200
"""WAKEFUL_MEMORY_DOCS: the most documents one inbox keeps."""
_SEGMENT = re.compile(r"[^\x00-\x1f/\\]+")


class MemoryRefused(InvalidInput):
    """A memory command that did not succeed, in one sentence saying why; nothing written."""


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """One write of a run: `text` None deletes the document (a version without text)."""

    owner: str
    path: str
    text: str | None


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    doc_bytes: int = DOC_BYTES
    docs: int = DOCS


def check_path(path: object, *, folder: bool = False) -> str:
    """`path` as stored: under /memories, normalised, no `..`, no control characters. A
    folder (a listing's prefix) may be /memories itself."""
    if not isinstance(path, str) or not path.strip():
        raise MemoryRefused("A memory path is a text such as /memories/preferences.md.")
    if len(path) > MAX_PATH:
        raise MemoryRefused(f"A memory path is at most {MAX_PATH} characters.")
    clean = posixpath.normpath(path.strip())
    inside = clean.startswith(ROOT + "/") or (folder and clean == ROOT)
    parts = clean.split("/")[1:]
    if not inside or ".." in path.split("/") or not all(_SEGMENT.fullmatch(p) for p in parts):
        raise MemoryRefused(f"The path {path[:80]!r} is outside {ROOT}: memory lives there alone.")
    return clean


def check_text(text: object, limits: MemoryLimits) -> str:
    """A document's text, or MemoryRefused: no NUL, within the size cap, no secret in it."""
    if not isinstance(text, str):
        raise MemoryRefused("A memory document's content is text.")
    if "\x00" in text:
        raise MemoryRefused("A memory document may not contain NUL characters.")
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.doc_bytes:
        raise MemoryRefused(
            f"The document would be {size} bytes, over the {limits.doc_bytes} bytes a memory "
            "document may hold: keep it short."
        )
    kind = secret_kind(text)
    if kind is not None:
        raise MemoryRefused(f"Refused: the text holds {kind}; secrets are never kept in memory.")
    return text


Reader = Callable[[str, str], str | None]
"""(owner, path) -> the document's current text, or None."""
Lister = Callable[[str, str], list[str]]
"""(owner, folder) -> the paths the owner keeps under `folder`, sorted."""


@dataclass
class Memory:
    """`run.memory`: the inbox's documents, read and written by the run (its writes go with
    its finish), and `shared`, the workspace's, read only."""

    owner: str
    read_stored: Reader
    list_stored: Lister
    limits: MemoryLimits = field(default_factory=MemoryLimits)
    shared_owner: str | None = None
    shared_writes: bool = False
    """The agent's `shared_memory = "write"`: `shared` is a Memory the run writes too."""
    changes: dict[str, str | None] = field(default_factory=dict)
    """This run's writes by path (None: deleted), in the order made; what the finish writes."""
    _shared: Memory | None = field(default=None, repr=False)

    def read(self, path: str) -> str | None:
        """The document's text (this run's own write first), or None when there is none."""
        clean = check_path(path)
        if clean in self.changes:
            return self.changes[clean]
        return self.read_stored(self.owner, clean)

    def list(self, prefix: str = ROOT) -> list[str]:
        """The paths kept under `prefix` (this run's writes and deletes included), sorted."""
        folder = check_path(prefix, folder=True)
        kept = set(self.list_stored(self.owner, folder))
        for path, text in self.changes.items():
            if _under(path, folder):
                (kept.add if text is not None else kept.discard)(path)
        return sorted(kept)

    def write(self, path: str, text: str) -> None:
        """Create the document, or overwrite it (a new version)."""
        clean = check_path(path)
        body = check_text(text, self.limits)
        if self.read(clean) is None and len(self.list()) >= self.limits.docs:
            raise MemoryRefused(
                f"This memory already keeps {self.limits.docs} documents, the most it may; "
                "delete or merge one first."
            )
        self.changes[clean] = body

    def edit(self, path: str, old: str, new: str) -> None:
        """Replace `old`, which must appear exactly once, with `new`."""
        clean = check_path(path)
        current = self.read(clean)
        if current is None:
            raise MemoryRefused(f"There is no document at {clean}.")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise MemoryRefused("An edit needs the text to replace and the text to put instead.")
        found = current.count(old)
        if found != 1:
            times = "not found" if found == 0 else f"found {found} times"
            raise MemoryRefused(
                f"The text to replace was {times} in {clean}; it must be there once."
            )
        self.changes[clean] = check_text(current.replace(old, new, 1), self.limits)

    def insert(self, path: str, line: int, text: str) -> None:
        """Insert `text` before line `line` (0: at the start; the line count: at the end)."""
        clean = check_path(path)
        current = self.read(clean)
        if current is None:
            raise MemoryRefused(f"There is no document at {clean}.")
        lines = current.split("\n")
        if not isinstance(line, int) or isinstance(line, bool) or not 0 <= line <= len(lines):
            raise MemoryRefused(f"{clean} has {len(lines)} lines; insert at 0 to {len(lines)}.")
        if not isinstance(text, str):
            raise MemoryRefused("What to insert is text.")
        lines[line:line] = text.split("\n")
        self.changes[clean] = check_text("\n".join(lines), self.limits)

    def delete(self, path: str) -> None:
        """Delete the document (its versions stay for the retention, restorable)."""
        clean = check_path(path)
        if self.read(clean) is None:
            raise MemoryRefused(f"There is no document at {clean}.")
        self.changes[clean] = None

    def rename(self, old: str, new: str) -> None:
        """Move a document to a new path (a delete and a write, in this run's finish)."""
        source, target = check_path(old), check_path(new)
        text = self.read(source)
        if text is None:
            raise MemoryRefused(f"There is no document at {source}.")
        if self.read(target) is not None:
            raise MemoryRefused(f"There is a document at {target} already.")
        self.changes[source] = None
        self.changes[target] = text

    @property
    def shared(self) -> SharedMemory | Memory:
        """The workspace's store: read only, unless the agent's `shared_memory = "write"`
        (then its writes go with the run's finish, as this store's do)."""
        if not self.shared_writes or self.shared_owner is None:
            return SharedMemory(self.shared_owner, self.read_stored, self.list_stored)
        if self._shared is None:
            self._shared = Memory(
                self.shared_owner, self.read_stored, self.list_stored, self.limits
            )
        return self._shared

    def pending(self) -> builtins.list[MemoryChange]:
        """What the run's finish writes (the shared store's changes too)."""
        mine = [MemoryChange(self.owner, p, t) for p, t in self.changes.items()]
        return mine + ([] if self._shared is None else self._shared.pending())


@dataclass(frozen=True)
class SharedMemory:
    owner: str | None
    read_stored: Reader
    list_stored: Lister

    def read(self, path: str) -> str | None:
        return None if self.owner is None else self.read_stored(self.owner, check_path(path))

    def list(self, prefix: str = ROOT) -> list[str]:
        if self.owner is None:
            return []
        return self.list_stored(self.owner, check_path(prefix, folder=True))


def workspace_owner(team: str | None) -> str | None:
    """The owner name of a workspace's shared store."""
    return None if not team else f"workspace:{team}"


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
