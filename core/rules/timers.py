"""How many timers an inbox may have set at once. Pure: a run takes from a `TimerBudget` read
when it starts, and the store's finish applies the same cap to whatever a run returned, so an
agent that ignores the budget still sets no more.

A timer of a name the inbox has already is replaced, and counts once; an approval's expiry
(`approval:<id>`) is not counted (the approval caps bound those)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CAP_SETTING = "WAKEFUL_MAX_TIMERS_PER_INBOX"


def not_set(skipped: int, cap: int) -> str:
    """What the person is told, once, when timers went unset because of the cap."""
    were = "was" if skipped == 1 else "were"
    timers = "timer" if skipped == 1 else "timers"
    return (
        f"{skipped} {timers} {were} not set: at most {cap} reminders and timers at once "
        f"({CAP_SETTING})."
    )


@dataclass(slots=True)
class TimerBudget:
    """What a run may still set: the names the inbox has (replacing one takes nothing) and room
    for new ones up to `cap`. Like `ApprovalBudget`, it only lets the refusal be the agent's
    own words: the finish enforces the cap on what a run returns."""

    cap: int
    names: set[str] = field(default_factory=set)
    """The inbox's timers (approval expiries aside) when the run started, with this run's."""
    skipped: int = 0
    untold: int = 0
    """Refused since the person was last told (`told`)."""
    where: Any = None
    """Where the first refused timer would have answered: where the person is told."""

    def take(self, name: str, where: Any = None) -> bool:
        """True: set (or replace) the timer `name`. False: a new one over the cap, counted as
        not set (and `where` kept, for the line that says so)."""
        if name in self.names or len(self.names) < self.cap:
            self.names.add(name)
            return True
        self.skipped += 1
        self.untold += 1
        self.where = self.where or where
        return False

    def told(self) -> str | None:
        """The line for the timers refused since this was last asked (None: none)."""
        n, self.untold = self.untold, 0
        return self.note(n)

    def drop(self, name: str) -> None:
        """The run cancelled `name`: its place is free."""
        self.names.discard(name)

    def note(self, skipped: int | None = None) -> str | None:
        """The line telling the person how many were not set (None: all were); `skipped`
        narrows it to the ones not set since a count the caller kept."""
        n = self.skipped if skipped is None else skipped
        return not_set(n, self.cap) if n else None
