"""The agent is visibly working: while a run is in flight for a DM in an assistant thread
(Agents & AI Apps), the thread shows "is thinking…" (assistant.threads.setStatus), cleared
when the reply is posted. Elsewhere (a plain DM, a channel) nothing is shown.

The status goes through the outbox like every other call: `before` queues it at once (urgent,
so it skips the gap), `after` adds the clearing row behind the run's reply in the same thread.
A workspace or app without the feature answers the call with an error; the sender then logs it
once and carries on (see SlackSender), so nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from wakeful.core.agent import Run
from wakeful.core.effects import Effects, Message
from wakeful.core.store import Store

THINKING = "is thinking…"


def assistant_threads(run: Run) -> list[tuple[str, str]]:
    """(channel, thread) of each DM thread this run answers: where a status can show."""
    found: list[tuple[str, str]] = []
    for e in run.events:
        p = e.payload if isinstance(e.payload, dict) else {}
        thread, channel = p.get("thread_ts"), p.get("channel")
        if e.source != "slack" or p.get("channel_type") != "im" or p.get("kind") != "message":
            continue
        where = (channel, thread)
        if isinstance(thread, str) and thread and isinstance(channel, str) and where not in found:
            found.append((channel, thread))
    return found


@dataclass
class StatusHook:
    """Shows "is thinking…" in the assistant thread while its run is in flight."""

    store: Store

    def before(self, run: Run) -> None:
        rows = [
            Message(channel, THINKING, thread_ts=thread, kind="status", priority="urgent")
            for channel, thread in assistant_threads(run)
        ]
        if rows:
            self.store.post(run.inbox, rows, run.now)

    def after(self, run: Run, effects: Effects) -> None:
        for channel, thread in assistant_threads(run):
            effects.messages.append(
                Message(channel, "", thread_ts=thread, kind="status", priority="urgent")
            )
