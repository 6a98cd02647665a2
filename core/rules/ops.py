"""The one post of the operators' channel: every ops line a batch holds, listed (the lines
are written by core/store/ops.py). Pure, so the outbox's merge (core/kinds.py) can call it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wakeful.core.records import OutboxRow

MAX_LINES = 20
"""Lines one ops post lists; the others are counted ("…and 30 more"). 20 lines of at most a
few hundred characters stay far below Slack's 40,000."""


def render(rows: Sequence[OutboxRow]) -> str:
    """The one post of the ops rows a batch holds, oldest first: a heading, a line each (its
    time, UTC), at most MAX_LINES of them and a count of the rest."""
    count = len(rows)
    noun = "problem" if count == 1 else "problems"
    out = [f"wakeful: {count} {noun} since the last report (times UTC)"]
    for row in rows[:MAX_LINES]:
        out.append(f"- {time.strftime('%H:%M:%S', time.gmtime(row.created_at))} {row.text}")
    if count > MAX_LINES:
        out.append(
            f"…and {count - MAX_LINES} more: `wakeful inspect` and `wakeful dead-letters` list them"
        )
    return "\n".join(out)
