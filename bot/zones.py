"""A person's time zone from Slack (users.info), read off the worker's path.

The worker runs one agent at a time, so a look-up that waits for Slack holds every other
inbox's reply behind it (a 9 s users.info held other people's replies for 9 s and more). Here
a look-up runs on a thread of its own; the agent waits for it at most `wait` (a quarter of a
second), once per person: a slower answer is not waited for again, a failed one is tried again
on a later run (after `retry_after`), and an answer is kept for `ttl`. Until an answer arrives
the agent is told "" (not known yet) and says which zone it used instead.

Handed to agents as a capability: they get a zone, never the token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slack_sdk import WebClient

log = logging.getLogger("wakeful")
WAIT = 0.25
"""Seconds a run waits for a zone it has never read: Slack answers users.info well inside it."""
RETRY_AFTER = 30.0
"""Seconds after a failed look-up before a run asks Slack again."""
TTL = 12 * 3600.0
"""Seconds a zone read from Slack is used before it is read again (people travel)."""
IN_FLIGHT = 4
"""Look-ups waiting on Slack at once, at most; past it a run is answered "" at once."""


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
    ) -> None:
        self._client = client
        self.wait = wait
        self.retry_after = retry_after
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, tuple[str, float]] = {}
        self._failed: dict[str, float] = {}
        self._pending: dict[str, threading.Event] = {}

    def __call__(self, user: str) -> str:
        if self._client is None or not user:
            return "UTC"
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

    def _read(self, user: str, done: threading.Event) -> None:
        assert self._client is not None
        try:
            info = self._client.users_info(user=user)
            tz = str((info.get("user") or {}).get("tz") or "UTC")
            with self._lock:
                self._known[user] = (tz, self._clock())
                self._failed.pop(user, None)
        except Exception as exc:  # any failure: UTC stands in, and a later run asks again
            log.warning(
                "users.info failed for %s: %s; UTC stands in for their zone until a later "
                "run reads it",
                user,
                exc,
            )
            with self._lock:
                self._failed[user] = self._clock()
        finally:
            with self._lock:
                self._pending.pop(user, None)
            done.set()
