"""The agent protocol: what a run is given and what it may return.

An agent is a pure-ish function from (inbox, claimed events, saved session) to Effects. It never
sends anything and never sees a Slack token; side effects happen only through tools, and a tool
that an unattended run may repeat must take an idempotency key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .effects import Effects
from .records import Event

Policy = Literal["allow", "deny", "ask"]


@dataclass(frozen=True, slots=True)
class Tool:
    """A capability an agent may use, with the permission that governs it.

    `allow` runs at once; `deny` is refused without running; `ask` becomes an approval request
    and runs only after a yes, with the request id as its idempotency key.
    """

    name: str
    policy: Policy
    fn: Callable[[Mapping[str, Any], str], Any]
    description: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    """One run: a claimed batch of one inbox and what the agent may read."""

    inbox: str
    events: tuple[Event, ...]
    session: Any
    now: int
    heartbeat: Callable[[], None]
    """Renew the lease between long steps; raises LeaseLost when the run has been fenced off."""
    tools: Mapping[str, Tool] = field(default_factory=dict)


class Agent(Protocol):
    """Anything that turns a run into effects."""

    def run(self, run: Run) -> Effects: ...
