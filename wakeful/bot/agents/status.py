"""The `status` answer both built-in agents give: one text, one place."""

from __future__ import annotations

from collections.abc import Sequence

from ...core.records import Event
from ...core.store.contract import Store
from .. import blocks


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def ids_note(events: Sequence[Event]) -> str:
    return f" (ids {', '.join(str(e.id) for e in events)})" if events else ""


def status_text(store: Store, inbox: str, digest_name: str = "digest") -> str:
    """Pending and dead events (with ids), open approvals and the next digest of an inbox."""
    pending = [e for e in store.open_events(inbox) if e.status == "pending"]
    dead = store.dead_events(inbox)
    lines = [
        f"Status: {plural(len(pending), 'pending event')}{ids_note(pending)}, "
        f"{len(dead)} dead{ids_note(dead)}"
    ]
    open_approvals = [a for a in store.approvals(inbox) if a.answer is None]
    if open_approvals:
        described = "; ".join(
            f"{a.id} ({a.tool} {a.args.get('order_id', '')}, expires {blocks.utc(a.deadline)})"
            for a in open_approvals
        )
        lines.append(f"Open approvals: {described}")
    else:
        lines.append("Open approvals: none")
    digest = next((t for t in store.timers(inbox) if t.id.endswith(f"/{digest_name}")), None)
    lines.append(
        "Next digest: none scheduled"
        if digest is None
        else f"Next digest: {blocks.utc(digest.next_at)}"
    )
    return "\n".join(lines)
