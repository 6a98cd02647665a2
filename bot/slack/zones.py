"""A person's time zone from Slack (users.info), read off the worker's path.

The worker runs one agent at a time, so a look-up that waits for Slack holds every other
inbox's reply behind it (a 9 s users.info held other people's replies for 9 s and more). Here
a look-up runs on a thread of its own; the agent waits for it at most `wait` (a quarter of a
second), once per person: a slower answer is not waited for again, a failed one is tried again
on a later run (after `retry_after`), and an answer is kept for `ttl`. Until an answer arrives
the agent is told "" (not known yet) and says which zone it used instead.

Handed to agents as a capability: they get a zone, never the token. In distribution mode the
look-up is made with the token of the workspace whose run asks (`RUN_TEAM`, set by
`WorkspaceHook` before each run), and answers are kept per workspace and person.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from slack_sdk import WebClient

from wakeful.core.effects import Effects
from wakeful.core.inbox_id import InboxId
from wakeful.core.run import Run

log = logging.getLogger("wakeful")
WAIT = 0.25
"""Seconds a run waits for a zone it has never read: Slack answers users.info well inside it."""
RETRY_AFTER = 30.0
"""Seconds after a failed look-up before a run asks Slack again."""
TTL = 12 * 3600.0
"""Seconds a zone read from Slack is used before it is read again (people travel)."""
IN_FLIGHT = 4
"""Look-ups waiting on Slack at once, at most; past it a run is answered "" at once."""
RUN_TEAM: ContextVar[str | None] = ContextVar("wakeful_run_team", default=None)
"""The workspace of the run in progress on this thread (distribution mode)."""


@dataclass
class WorkspaceHook:
    """Before each run: its workspace is the one a time-zone look-up asks Slack in."""

    def before(self, run: Run) -> None:
        RUN_TEAM.set(InboxId(run.inbox).team)

    def after(self, run: Run, effects: Effects) -> None:
        return None

    def failed(self, run: Run, effects: Effects) -> None:
        return None


class ZoneLookup:
    """users.info -> the user's IANA zone; "" when it cannot be read now (Slack failed, or has
    not answered yet: a later run gets it); "UTC" without a Slack client, or for a user Slack
    knows no zone for."""

    def __init__(
        self,
        client: WebClient | None,
        wait: float = WAIT,
        retry_after: float = RETRY_AFTER,
        ttl: float = TTL,
        clock: Callable[[], float] = time.monotonic,
        tokens: Callable[[str | None], str] | None = None,
    ) -> None:
        self._client = client
        self._tokens = tokens
        """Distribution mode: the token of a workspace (the run's, RUN_TEAM)."""
        self.wait = wait
        self.retry_after = retry_after
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], tuple[str, float]] = {}
        self._failed: dict[tuple[str, str], float] = {}
        self._pending: dict[tuple[str, str], threading.Event] = {}

    def __call__(self, user_id: str) -> str:
        if self._client is None or not user_id:
            return "UTC"
        team = RUN_TEAM.get() if self._tokens is not None else None
        user = (team or "", user_id)  # a person is looked up in their own workspace
        now = self._clock()
        with self._lock:
            known = self._known.get(user)
            if known is not None and now - known[1] < self.ttl:
                return known[0]
            stale = known[0] if known is not None else ""
            if user in self._pending or len(self._pending) >= IN_FLIGHT:
                return stale  # already asked (and not waited for again), or Slack is backed up
            failed = self._failed.get(user)
            if failed is not None and now - failed < self.retry_after:
                return stale
            done = self._pending[user] = threading.Event()
        threading.Thread(
            target=self._read, args=(user, done), name="wakeful-zone", daemon=True
        ).start()
        if stale:
            return stale  # refreshed in the background; the zone read before serves meanwhile
        done.wait(self.wait)
        with self._lock:
            read = self._known.get(user)
        return read[0] if read is not None else ""

    def _read(self, user: tuple[str, str], done: threading.Event) -> None:
        assert self._client is not None
        team, user_id = user
        try:
            if self._tokens is None:
                info = self._client.users_info(user=user_id)
            else:
                info = self._client.users_info(user=user_id, token=self._tokens(team or None))
            tz = str((info.get("user") or {}).get("tz") or "UTC")
            with self._lock:
                self._known[user] = (tz, self._clock())
                self._failed.pop(user, None)
        except Exception as exc:  # any failure: UTC stands in, and a later run asks again
            log.warning(
                "users.info failed for %s: %s; UTC stands in for their zone until a later "
                "run reads it",
                user_id,
                exc,
            )
            with self._lock:
                self._failed[user] = self._clock()
        finally:
            with self._lock:
                self._pending.pop(user, None)
            done.set()
