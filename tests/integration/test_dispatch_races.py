"""Issue 21, item 3: dispatchers racing on one store never post a part twice.

Two or three running dispatchers (each with a store connection, a SlackSender and a pace of its
own, as separate processes have) share a 200-part batch, against the emulator: two on SQLite,
three on PostgreSQL (the claim's fence itself is tested on both stores below). Every 80th post
is answered past the send timeout, so its sender truly stops past its deadline (twice a batch)
and another dispatcher really takes the batch over and has to look at what Slack already shows;
the second time, the dispatcher that lost it first may take it back.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from tests.support.outbox_rig import Rig, statuses
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Post
from wakeful.core.rules.outbox import Part
from wakeful.core.store import Store, open_store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.emulator import Call, SlackEmulator

TOKEN = "xoxb-races"
INBOX = "T1:U8"
"""The inbox test_outbox's Rig posts for."""
CHANNEL = "D21"
PARTS = 200
PACE = 0.01
"""Seconds between two posts to one channel: Slack's second, sped up a hundred times (the
takeovers' waits for a lapsed claim, not the pace, are what the batch waits on)."""
SEND_TIMEOUT = 4
"""A dispatcher's claim on its batch, renewed before each post: room for a post a loaded
machine slows (at 2 s, one run of these tests failed with both cores busy with other work),
while the STALL still outlasts it (issue 36)."""
STALL_EVERY = 80
STALL = SEND_TIMEOUT + 2.0
"""How late every STALL_EVERY-th post is answered: its dispatcher's claim lapses meanwhile."""


def rows(n: int) -> list[Post]:
    """Text and block posts alternate, so no two merge: n rows, n posts."""
    out = []
    for i in range(n):
        if i % 2:
            block = {"type": "section", "text": {"type": "mrkdwn", "text": f"part {i}"}}
            out.append(Post(CHANNEL, f"part {i}", blocks=[block], priority="urgent"))
        else:
            out.append(Post(CHANNEL, f"part {i}", priority="urgent"))
    return out


def another_connection(store: Store) -> Store:
    """The same store as another process would open it."""
    if isinstance(store.db, SQLiteConnector):
        return open_store(store.db.path, store.settings, kinds=store.kinds)
    from wakeful.core.store.postgres import PostgresConnector

    db: Any = store.db
    return Store(PostgresConnector(db.dsn, schema=db.schema), store.settings, store.kinds)


def part_id(call: Call) -> str:
    meta = call.params.get("metadata")
    assert isinstance(meta, dict), call.params
    return str(meta["event_payload"]["part_id"])


class Stalls:
    """The emulator's hook: every STALL_EVERY-th post is applied, then answered STALL late, or
    at `release()`: once every part is sent, the batch was taken over from each stalled
    sender, and the rest of a stall would only keep its dispatcher's thread from stopping."""

    def __init__(self) -> None:
        self.posts = 0
        self.lock = threading.Lock()
        self.released = threading.Event()

    def __call__(self, call: Call) -> None:
        if call.method != "chat.postMessage":
            return
        with self.lock:
            self.posts += 1
            stall = self.posts % STALL_EVERY == 0
        if stall:
            self.released.wait(STALL)

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def stalls() -> Stalls:
    return Stalls()


@pytest.fixture
def emu(stalls: Stalls) -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN, on_call=stalls) as e:
        yield e


@pytest.mark.parametrize(
    ("make_store", "dispatchers"), [("sqlite", 2), ("postgres", 3)], indirect=["make_store"]
)
def test_racing_dispatchers_post_every_part_of_a_200_part_batch_once(
    make_store: MakeStore, emu: SlackEmulator, stalls: Stalls, dispatchers: int
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
        stalls.release()
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


# -- the claim's fence, in the store ------------------------------------------------------------


def test_only_the_holder_of_a_claim_can_renew_or_defer_it(make_store: MakeStore) -> None:
    store = make_store(send_timeout=60)
    store.post(INBOX, [Post("C1", "one")], T0)
    (first,) = store.claim_batches(T0)
    assert first.until == T0 + 60
    assert store.renew_batch(first.dispatch_id, T0 + 60, T0 + 70)  # its sender, before a part
    assert not store.renew_batch(first.dispatch_id, T0 + 60, T0 + 80)  # not the deadline now
    assert store.claim_batches(T0 + 69) == []
    (taken,) = store.claim_batches(T0 + 70)  # it stalled past its deadline: taken over
    assert taken.retry and taken.dispatch_id == first.dispatch_id and taken.until == T0 + 130
    # The stalled sender wakes up: it can neither renew nor move the new holder's deadline.
    assert not store.renew_batch(first.dispatch_id, T0 + 70, T0 + 75)
    store.defer_batch(first.dispatch_id, T0 + 72, "ratelimited", T0 + 71, held=T0 + 70)
    assert store.claim_batches(T0 + 129) == []
    # The holder releases it (a stopping dispatcher): claimable at once, as a retry.
    assert store.renew_batch(first.dispatch_id, T0 + 130, T0 + 100)
    (again,) = store.claim_batches(T0 + 100)
    assert again.retry and again.dispatch_id == first.dispatch_id


# -- a batch's parts, one by one ---------------------------------------------------------------


def post_parts(rig: Rig, n: int, at: int = T0) -> None:
    """n rows to C1 that do not merge (text and blocks alternate): n parts."""
    for i in range(n):
        block = {"type": "section", "text": {"type": "mrkdwn", "text": f"part {i}"}}
        rig.post(f"part {i}", at, **({"blocks": [block]} if i % 2 else {}))


def test_each_part_is_recorded_as_soon_as_it_is_sent(store: Store) -> None:
    rig = Rig(store)
    post_parts(rig, 3)
    seen: list[list[str]] = []
    rig.sender.during = lambda part: seen.append(statuses(store))
    assert rig.tick(T0) == 3
    assert seen == [
        ["sending", "sending", "sending"],
        ["sent", "sending", "sending"],
        ["sent", "sent", "sending"],
    ]
    assert statuses(store) == ["sent"] * 3


def test_a_dispatcher_whose_batch_was_taken_over_posts_nothing_more_of_it(store: Store) -> None:
    # Dispatcher A posts part 0 and stalls past the claim's deadline before it can go on;
    # dispatcher B takes the batch over, finds part 0 in Slack and posts the rest. When A
    # wakes up it must stop: posting parts 1-3 again would show them twice.
    rig = Rig(store)
    post_parts(rig, 4)
    other = Dispatcher(store=store, clock=rig.clock, sender=rig.sender)  # the same Slack
    stalled: list[bool] = []
    sent_by_other: list[int] = []

    def stall_after(part: Part) -> None:
        if not stalled:  # A's first post (B's own posts come through here too)
            stalled.append(True)
            rig.clock.now = T0 + store.settings.send_timeout
            sent_by_other.append(other.tick(rig.clock.now))
        return None

    rig.sender.after = stall_after
    assert rig.tick(T0) == 1
    assert sent_by_other == [4]
    assert rig.sender.duplicates == []
    assert rig.sender.texts == [f"part {i}" for i in range(4)]
    assert [c.retry for c in rig.sender.calls] == [False, True, True, True, True]
    assert statuses(store) == ["sent"] * 4


def test_a_stopped_dispatcher_hands_its_unfinished_batch_over_at_once(
    store: Store, emu: SlackEmulator
) -> None:
    # Without the release, the rest of the batch would wait out the send timeout (60 s).
    rig = Rig(store, now=int(time.time()))
    post_parts(rig, 20, at=rig.clock.now)
    sender = SlackSender(make_client(TOKEN, emu.api_url), interval=0.5)
    loop = Dispatcher(store=store, sender=sender, poll=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert emu.wait_for(lambda e: len(e.messages("C1")) >= 2, 10)
    finally:
        stop.set()
        loop.wakeup.kick()
        thread.join(10)
    assert not thread.is_alive()
    left = statuses(store).count("sending")
    assert 0 < left < 20 and statuses(store).count("pending") == 0
    (batch,) = store.claim_batches(int(time.time()))
    assert batch.retry and len(batch.parts) == left
