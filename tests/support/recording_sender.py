"""What stands in for Slack's Web API when a test drives the engine's loops in-process."""

from __future__ import annotations

from wakeful.core.dispatcher import Sender
from wakeful.core.rules.outbox import Part


class RecordingSender(Sender):
    """Keeps every part the dispatcher hands it and answers each with a fresh message ts, kept
    by part id. `statuses=False`: the "is thinking…" status around each run is answered but
    not kept (tests that read what the agent said)."""

    def __init__(self, statuses: bool = True) -> None:
        self.statuses = statuses
        self.parts: list[Part] = []
        self.ts: dict[str, str] = {}
        self._sent = 0

    def send(self, part: Part) -> str:
        self._sent += 1
        if self.statuses or part.kind != "status":
            self.parts.append(part)
        ts = f"1.000{self._sent}"
        self.ts[part.part_id] = ts
        return ts
