"""Threads the bot takes part in, so a reply there reaches the agent without a new @mention.

A thread is remembered when the bot is mentioned in it (or under a mention that starts one) and
when one of its posts lands in it; the listener asks about every channel message, by key.
"""

from __future__ import annotations

from typing import Literal

from wakeful.core.store.base import StoreBase
from wakeful.core.store.rows import require
from wakeful.core.store.sql import Tx

ThreadWhy = Literal["posted", "mentioned"]


def remember(tx: Tx, channel: str, thread_ts: str, why: ThreadWhy, now: int) -> None:
    """Within an open write: the bot takes part in this thread from now on."""
    tx.run("remember_thread", {"channel": channel, "thread_ts": thread_ts, "why": why, "now": now})


class Threads(StoreBase):
    def remember_thread(self, channel: str, thread_ts: str, why: ThreadWhy, now: int) -> None:
        """The bot was mentioned in (or posted in) this thread: its replies are for the agent."""
        require(channel=channel, thread_ts=thread_ts)
        with self._tx() as tx:
            remember(tx, channel, thread_ts, why, now)

    def takes_part(self, channel: str, thread_ts: str) -> bool:
        """Whether the bot posted in or was mentioned in this thread: one read by primary key,
        no write lock, so the listener can drop the channel's other messages for free."""
        with self._tx(write=False) as tx:
            return tx.one("known_thread", {"channel": channel, "thread_ts": thread_ts}) is not None
