"""What memory adds to the Claude agent's bill (issue 38), against the local fake Messages API.

Every request carries the memory listing (the documents kept when the conversation began or
was last cut) as the system prompt's second block, behind a breakpoint of its own: it is
written once and read back at 0.1x until the next cut. Two figures, on bench/claude.py's
20-turn conversation (a DM a minute, replies of a few hundred words, a tool call every fifth
turn, the conversation growing to its cap and cut there):

1. **A listing of 20 documents**: billed input per turn with 20 documents kept (about 400
   bytes each, seeded before the conversation by a run of their own) against none.
2. **A memory write every fifth turn**: the fifth turns' tool call is a memory `create`
   instead of a `status` look-up. The write is in the conversation (its tool_use and result);
   the listing stays as it was until the cut, so the conversation behind it stays cached:
   billed input per turn against the same conversation with its `status` look-ups.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import Usage

from .claude import TEAM, USER, Conversation, billed, prose, say
from .common import Figure

DOCS = 20
DOC_WORDS = 60
"""Words of a seeded document: about 400 bytes."""


class Remembering(Conversation):
    """bench/claude.py's conversation with `docs` documents kept before it starts, and, when
    `writes`, a memory write where the plain conversation looks its status up."""

    def __init__(self, folder: Path, docs: int, writes: bool) -> None:
        super().__init__(folder, "5m", f"memory-{docs}-{int(writes)}")
        self.writes = writes
        if docs:
            self._seed(docs)

    def _seed(self, docs: int) -> None:
        """The documents, written by a run's finish as the agent's would be."""
        from wakeful.core.events import Message
        from wakeful.core.run import Run
        from wakeful.core.runner import runner_for
        from wakeful.core.worker import Worker

        rng = random.Random(38)

        class Seeder:
            def run(self, run: Run) -> None:
                for i in range(docs):
                    run.memory.write(
                        f"/memories/customers/customer-{i:02d}.md", prose(rng, DOC_WORDS)
                    )

        m = Message(text="seed", user=USER, team=TEAM, channel="D1", ts=f"{self.clock.now}.0")
        self.store.ingest(self.inbox, "slack", "seed", m.to_wire(), self.clock.now)
        Worker(store=self.store, clock=self.clock, runner=runner_for(Seeder(), self.store)).tick(
            self.clock.now
        )
        self.clock.now += 60

    def _answer(self, request: dict[str, Any]) -> api.Scripted:
        last = request["messages"][-1]["content"]
        texts = " ".join(str(b.get("text", "")) for b in last if b.get("type") == "text")
        results = [b for b in last if b.get("type") == "tool_result"]
        if self.writes and "look it up" in texts and not results:
            path = f"/memories/decisions/turn-{self.n:02d}.md"
            args = {"command": "create", "path": path, "file_text": prose(self.rng, 40)}
            return api.tool_use("memory", args, f"toolu_m{self.n}")
        return super()._answer(request)


def talk(folder: Path, docs: int, writes: bool, turns: int) -> tuple[list[Usage], int]:
    """The conversation's usages, and the documents kept at its end."""
    c = Remembering(folder, docs, writes)
    try:
        rng = random.Random(7)  # bench/claude.py's questions
        for turn in range(turns):
            ask = " (look it up)" if turn % 5 == 4 else ""
            c.say(f"Question {turn}{ask}: " + prose(rng, 110))
            c.clock.now += 60
        return list(c.fake.usages), len(c.store.memory_paths(str(c.inbox), "/memories"))
    finally:
        c.close()


def run_claude_memory(quick: bool) -> list[Figure]:
    turns = 10 if quick else 20
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-memory-") as tmp:
        folder = Path(tmp)
        none, _ = talk(folder, 0, False, turns)
        listed, kept = talk(folder, DOCS, False, turns)
        written, wrote = talk(folder, 0, True, turns)
    base = billed(none) / turns
    per_listed, per_written = billed(listed) / turns, billed(written) / turns
    figures = [
        Figure(
            f"Memory: a listing of {DOCS} documents in a {turns}-turn conversation, billed "
            "input per turn",
            per_listed,
            "tokens",
            per_listed / base,
            "no documents",
            "<= 1.05x",
            per_listed / base <= 1.05,
            f"{kept} documents of about 400 bytes listed (path and size) in every request's "
            f"second system block, cached behind its own breakpoint; {base:,.0f} a turn with "
            f"none; caching on (5m); {len(listed)} calls",
        ),
        Figure(
            f"Memory: a write every fifth turn of a {turns}-turn conversation, billed input per "
            "turn",
            per_written,
            "tokens",
            per_written / base,
            "status look-ups instead",
            "",
            None,
            f"{wrote} documents written; the listing stays the conversation's until the cut "
            "(the writes are in the conversation), so the conversation behind it stays cached; "
            f"{len(written)} calls",
        ),
    ]
    for fig in figures:
        say("  " + fig.row())
    return figures


if __name__ == "__main__":
    import sys

    run_claude_memory("--quick" in sys.argv)
