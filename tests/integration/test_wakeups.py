"""Aimed wake-ups: a stored event wakes the worker, a queued reply the dispatcher, and a
worker waiting out a batch window is not woken again by every message that arrives meanwhile.
A loop woken for nothing still costs a thread switch and a look at the store."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from slack_sdk.socket_mode.request import SocketModeRequest

from tests.conftest import T0
from tests.support.agents import refund_desk
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.process.config import Config
from wakeful.bot.process.runtime import Runtime
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.loops import Wakeup
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store, open_store
from wakeful.core.worker import Worker
from wakeful.devtools.audit import count_events


class Client:
    def __init__(self) -> None:
        self.acks: list[str] = []
        self.logger = logging.getLogger("test.wakeups")

    def send_socket_mode_response(self, response: Any) -> None:
        self.acks.append(response.envelope_id)


def test_a_stored_event_wakes_the_worker_and_a_queued_note_the_dispatcher(store: Store) -> None:
    work, send = Wakeup(), Wakeup()
    listeners = Listeners(store, "s", bot_user_id="UBOT", wake_worker=work, wake_dispatcher=send)
    client = Client()
    dm = {"type": "message", "channel_type": "im", "channel": "D1", "user": "U1", "text": "hi"}
    body = {"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": dm}
    listeners.on_socket_request(client, SocketModeRequest("events_api", "e1", body))
    assert client.acks == ["e1"] and count_events(store) == 1
    assert work.wait(0) and not send.wait(0)

    click = {
        "type": "block_actions",
        "team": {"id": "T1"},
        "user": {"id": "U1", "team_id": "T1"},
        "channel": {"id": "D1"},
        "actions": [{"type": "button", "action_id": "approve", "block_id": "b", "value": "nope"}],
    }
    listeners.on_socket_request(client, SocketModeRequest("interactive", "e2", click))
    assert client.acks[-1] == "e2"
    (note,) = store.outbox(inbox="T1:U1")
    assert note.kind == "ephemeral" and "unknown" in note.text
    assert send.wait(0) and not work.wait(0)


def test_a_worker_in_a_batch_window_still_wakes_for_a_kick_but_lets_kicks_pile_up(
    store: Store,
) -> None:
    # A new inbox's window starts when a tick first sees it, so a kick must still wake the
    # worker (sleeping through it until the older inbox is due would make the new one wait two
    # windows). Under load, though, kicks come hundreds a second: after one it waits a tenth
    # of a window, and the kicks of that moment cost one tick between them.
    store.ingest("T1:U1", "slack", "E1", {"text": "first"}, T0)
    worker = Worker(store=store, agent=refund_desk(store), clock=ManualClock(T0), batch_window=1.0)
    assert worker.tick(T0) == 0  # seen, not yet settled: due in a second
    wakeup, stop = Wakeup(), threading.Event()
    wakeup.kick()  # another message arrived
    started = time.monotonic()
    worker.sleep(wakeup, stop)
    slept = time.monotonic() - started
    assert not wakeup.wait(0), "the kick was left for later"
    assert 0.09 <= slept < 0.6, f"slept {slept:.3f} s: not a tenth of the window"


def test_each_kick_wakes_the_loop_it_is_news_for(tmp_path: Path) -> None:
    config = Config(bot_token="xoxb-t", db=str(tmp_path / "w.db"))
    store = open_store(config.db)
    runtime = Runtime(config, store, ("worker", "scheduler", "dispatcher"))
    worker, scheduler, dispatcher = runtime.build_loops()
    assert isinstance(worker, Worker) and isinstance(scheduler, Scheduler)
    assert isinstance(dispatcher, Dispatcher)
    # New events wake the worker (from the front, the scheduler, or another host's NOTIFY);
    # replies it queues wake the dispatcher; timers it adds wake the scheduler.
    assert worker.wakeup is runtime.wake_worker and scheduler.wake_worker is runtime.wake_worker
    assert worker.wake_dispatcher is runtime.wake_dispatcher
    assert dispatcher.wakeup is runtime.wake_dispatcher
    assert worker.wake_scheduler is runtime.wake_scheduler
    assert scheduler.wakeup is runtime.wake_scheduler
    store.close()


def test_a_batch_window_counts_from_the_kick_not_from_the_tick_that_saw_it(
    store: Store,
) -> None:
    # The worker may look a while after the event was stored (it was busy, or its kicks were
    # piling up): the window is the person's, so it runs from the store's kick.
    work = Wakeup()
    worker = Worker(store=store, agent=refund_desk(store), wakeup=work, batch_window=0.5)
    store.ingest("T1:U1", "slack", "E1", {"text": "hi"}, T0)
    work.kick()
    time.sleep(0.3)  # the worker is elsewhere for 300 ms
    assert worker.tick(T0) == 0  # seen now, but its window opened 300 ms ago
    assert worker.idle_wait() < 0.25


def test_a_batch_window_runs_on_the_worker_s_clock_from_the_kick(store: Store) -> None:
    # A worker driven by a test's clock times the kick on that clock too: the window is over
    # once the clock has moved past it, however little real time went by.
    clock, work = ManualClock(T0), Wakeup()
    worker = Worker(
        store=store, agent=refund_desk(store), wakeup=work, clock=clock, batch_window=5.0
    )
    store.ingest("T1:U1", "slack", "E1", {"text": "hi"}, T0)
    work.kick()
    clock.now += 6  # the worker looks 6 s of its clock after the kick
    assert worker.tick(clock()) == 1
    store.close()


def test_an_inbox_past_the_ready_lists_cut_keeps_the_window_of_its_kick(store: Store) -> None:
    # Under load more inboxes are ready than one look lists (50 per inbox the worker runs at
    # a time). One past the cut was already stored at that look: when a later look first sees
    # it, its window counts from the kick of the look that cut it, or it would wait a second
    # window. One stored after that look is not dated by it: its window is whole.
    clock = [1000.0]
    work = Wakeup()
    worker = Worker(
        store=store,
        agent=refund_desk(store),
        wakeup=work,
        batch_window=0.5,
        batch_inboxes=1,
        monotonic=lambda: clock[0],
    )

    def say(user: str) -> None:
        payload = {"type": "message", "channel": f"D{user}", "user": user, "text": "hi"}
        assert store.ingest(f"T1:{user}", "slack", f"E{user}", payload, T0).stored

    for i in range(51):
        say(f"U{i:03d}")
    work.kick()
    assert worker.tick(T0) == 0  # 50 seen, U050 past the cut; none settled yet
    say("ULATE")  # stored after that look
    clock[0] += 0.6  # the window of the first 50 is over
    runs = 0
    while runs < 50:
        runs += worker.tick(T0)
    assert [i for i, _ in store.ready_list(T0).inboxes] == ["T1:U050", "T1:ULATE"]
    assert worker.tick(T0) == 1, "the inbox past the cut waits a second window"
    assert worker.tick(T0) == 0, "an inbox stored after the cut was dated by it"
    assert 0.4 < worker.idle_wait() <= 0.5
    clock[0] += 0.5
    assert worker.tick(T0) == 1
