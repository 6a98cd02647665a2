"""The words of `/wakeful memory` and `/wakeful forget` that every view shares: what a person
is told is kept about them, and what the forget prompt asks. Apart from core/privacy.py so the
views (core/views.py, bot/slack/privacy.py) can use them without the flow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FORGOTTEN = "Forgotten."
"""What the forget prompt becomes once Forget was pressed and the erasure written."""
CANCELLED = "Nothing was forgotten."
FORGET_QUESTION = (
    "Forget what I keep about you? This erases your memory documents with all their "
    "versions, our saved conversation, and the text of your messages and my replies here. "
    "It cannot be undone."
)
NOTHING_KEPT = "I keep no memory documents about you."
FIRST_LINES = 2
"""Lines of each document `/wakeful memory` shows."""
LINE_CHARS = 160


@dataclass(frozen=True, slots=True)
class Kept:
    """One memory document as `/wakeful memory` shows it: its path, size and first lines."""

    path: str
    bytes: int
    first_lines: str


def first_lines(text: str) -> str:
    """The first lines of a document, each cut to LINE_CHARS, blank lines skipped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()][:FIRST_LINES]
    return "\n".join(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + "…" for line in lines)


def plain_listing(kept: Sequence[Kept]) -> str:
    """The listing as text: a heading line, then each document and its first lines."""
    if not kept:
        return NOTHING_KEPT + " To erase everything else I keep, `/wakeful forget`."
    head = f"What I remember about you ({len(kept)} document{'s' if len(kept) != 1 else ''}):"
    parts = [head]
    for doc in kept:
        parts.append(f"• {doc.path} ({doc.bytes} bytes)")
        parts.extend(f"    {line}" for line in doc.first_lines.splitlines())
    parts.append("To erase it all, `/wakeful forget`.")
    return "\n".join(parts)
