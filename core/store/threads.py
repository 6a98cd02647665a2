"""Threads the bot takes part in, so a reply there reaches the agent without a new @mention,
and the people who opened its Home tab (whose view is kept fresh).

A thread is remembered when the bot is mentioned in it (or under a mention that starts one),
when one of its posts lands in it, and when it makes a top-level post (a reminder in a channel):
the thread under that post is one it takes part in. The listener asks about every channel
message, by key.
"""

from __future__ import annotations

from typing import Literal

from wakeful.core.storable import is_storable
from wakeful.core.store.base import StoreBase
from wakeful.core.store.codec import require
from wakeful.core.store.sql import Tx

ThreadWhy = Literal["posted", "mentioned"]


def remember(tx: Tx, channel: str, thread_ts: str, why: ThreadWhy, now: int) -> None:
    """Within an open write: the bot takes part in this thread from now on."""
    tx.run("touch_thread", {"channel": channel, "thread_ts": thread_ts, "why": why, "now": now})


class Threads(StoreBase):
    def remember_thread(self, channel: str, thread_ts: str, why: ThreadWhy, now: int) -> None:
        """The bot was mentioned in (or posted in) this thread: its replies are for the agent."""
        require(channel=channel, thread_ts=thread_ts)
        with self._tx() as tx:
            remember(tx, channel, thread_ts, why, now)

    def takes_part(self, channel: str, thread_ts: str) -> bool:
        """Whether the bot posted in or was mentioned in this thread: one read by primary key,
        no write lock, so the listener can drop the channel's other messages for free. A name
        no store can hold names no thread the bot is in (and is not sent to the store)."""
        if not (is_storable(channel) and is_storable(thread_ts)):
            return False
        with self._tx(write=False) as tx:
            return tx.one("known_thread", {"channel": channel, "thread_ts": thread_ts}) is not None

    def note_home_opened(self, inbox: str, now: int) -> None:
        """A person opened their App Home tab: their view is refreshed after each run."""
        require(inbox=inbox)
        with self._tx() as tx:
            tx.run("note_home_opened", {"inbox": inbox, "now": now})

    def has_opened_home(self, inbox: str) -> bool:
        """Whether this person ever opened their Home tab (one read by key)."""
        with self._tx(write=False) as tx:
            return tx.one("has_opened_home", {"inbox": inbox}) is not None
