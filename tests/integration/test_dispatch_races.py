"""Issue 21, item 3: dispatchers racing on one store never post a part twice.

Two or three running dispatchers (each with a store connection, a SlackSender and a pace of its
own, as separate processes have) share a 200-part batch on SQLite and PostgreSQL, against the
emulator. The send timeout is short (2 s) and the batch takes about 10 s at the test's pace, so
a dispatcher that did not keep its claim alive would have it reclaimed while still sending; and
every 50th post is answered 4 s late, so its sender truly stops past its deadline and another
dispatcher really takes the batch over and has to look at what Slack already shows.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import MakeStore
from wakeful.bot.sender import SlackSender, make_client
from wakeful.core.effects import Message
from wakeful.core.loops import Dispatcher
from wakeful.core.store import Store, open_store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.emulator import Call, SlackEmulator

TOKEN = "xoxb-races"
INBOX = "T1:U21"
CHANNEL = "D21"
PARTS = 200
PACE = 0.05
"""Seconds between two posts to one channel: Slack's second, sped up twenty times."""
SEND_TIMEOUT = 2
STALL_EVERY = 50
STALL = SEND_TIMEOUT + 2.0
"""How late every STALL_EVERY-th post is answered: its dispatcher's claim lapses meanwhile."""


def rows(n: int) -> list[Message]:
    """Text and block posts alternate, so no two merge: n rows, n posts."""
    out = []
    for i in range(n):
        if i % 2:
            block = {"type": "section", "text": {"type": "mrkdwn", "text": f"part {i}"}}
            out.append(Message(CHANNEL, f"part {i}", blocks=[block], priority="urgent"))
        else:
            out.append(Message(CHANNEL, f"part {i}", priority="urgent"))
    return out


def another_connection(store: Store) -> Store:
    """The same store as another process would open it."""
    if isinstance(store.db, SQLiteConnector):
        return open_store(store.db.path, store.settings)
    from wakeful.core.store.postgres import PostgresConnector

    db: Any = store.db
    return Store(PostgresConnector(db.dsn, schema=db.schema), store.settings)


def part_id(call: Call) -> str:
    meta = call.params.get("metadata")
    assert isinstance(meta, dict), call.params
    return str(meta["event_payload"]["part_id"])


class Stalls:
    """The emulator's hook: every STALL_EVERY-th post is applied, then answered STALL late."""

    def __init__(self) -> None:
        self.posts = 0
        self.lock = threading.Lock()

    def __call__(self, call: Call) -> None:
        if call.method != "chat.postMessage":
            return
        with self.lock:
            self.posts += 1
            stall = self.posts % STALL_EVERY == 0
        if stall:
            time.sleep(STALL)


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN, on_call=Stalls()) as e:
        yield e


@pytest.mark.parametrize("dispatchers", [2, 3])
def test_racing_dispatchers_post_every_part_of_a_200_part_batch_once(
    make_store: MakeStore, emu: SlackEmulator, dispatchers: int
) -> None:
    store = make_store(send_timeout=SEND_TIMEOUT)
    store.post(INBOX, rows(PARTS), int(time.time()))
    stores = [another_connection(store) for _ in range(dispatchers)]
    loops = [
        Dispatcher(
            store=s,
            sender=SlackSender(make_client(TOKEN, emu.api_url), interval=PACE),
            poll=0.05,
        )
        for s in stores
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=d.run, args=(stop,), daemon=True) for d in loops]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all(r.status == "sent" for r in store.outbox(inbox=INBOX)):
                break
            time.sleep(0.1)
    finally:
        stop.set()
        for d in loops:
            d.wakeup.kick()
        for t in threads:
            t.join(30)
        for s in stores:
            s.close()

    assert [r.status for r in store.outbox(inbox=INBOX)] == ["sent"] * PARTS
    posted = Counter(part_id(c) for c in emu.calls("chat.postMessage") if c.response.get("ok"))
    duplicates = {pid: n for pid, n in posted.items() if n > 1}
    assert duplicates == {}, f"{sum(duplicates.values()) - len(duplicates)} duplicate posts"
    assert len(posted) == PARTS
    assert sorted(m["text"] for m in emu.messages(CHANNEL)) == sorted(
        f"part {i}" for i in range(PARTS)
    )
    # The batch really changed hands: a dispatcher took it over and looked before posting.
    assert emu.calls("conversations.history")
    assert not any(t.is_alive() for t in threads)
