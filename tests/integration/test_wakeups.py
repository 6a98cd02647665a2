"""Aimed wake-ups: a stored event wakes the worker, a queued reply the dispatcher, and a
worker waiting out a batch window is not woken again by every message that arrives meanwhile.
A loop woken for nothing still costs a thread switch and a look at the store."""

from __future__ import annotations

import logging
import threading
from typing import Any

from slack_sdk.socket_mode.request import SocketModeRequest

from tests.conftest import T0
from wakeful.bot.app import SlackFront
from wakeful.core.loops import ManualClock, Wakeup, Worker
from wakeful.core.store import Store


class Client:
    def __init__(self) -> None:
        self.acks: list[str] = []
        self.logger = logging.getLogger("test.wakeups")

    def send_socket_mode_response(self, response: Any) -> None:
        self.acks.append(response.envelope_id)


def test_a_stored_event_wakes_the_worker_and_a_queued_note_the_dispatcher(store: Store) -> None:
    work, send = Wakeup(), Wakeup()
    front = SlackFront(store, "s", bot_user_id="UBOT", wakeup=work, outbox_wakeup=send)
    client = Client()
    dm = {"type": "message", "channel_type": "im", "channel": "D1", "user": "U1", "text": "hi"}
    body = {"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": dm}
    front.on_socket_request(client, SocketModeRequest("events_api", "e1", body))
    assert client.acks == ["e1"] and store.count_events() == 1
    assert work.wait(0) and not send.wait(0)

    click = {
        "type": "block_actions",
        "team": {"id": "T1"},
        "user": {"id": "U1", "team_id": "T1"},
        "channel": {"id": "D1"},
        "actions": [{"type": "button", "action_id": "approve", "block_id": "b", "value": "nope"}],
    }
    front.on_socket_request(client, SocketModeRequest("interactive", "e2", click))
    assert client.acks[-1] == "e2"
    (note,) = store.outbox(inbox="T1:U1")
    assert note.kind == "ephemeral" and "unknown" in note.text
    assert send.wait(0) and not work.wait(0)


def test_a_worker_in_a_batch_window_sleeps_through_kicks(store: Store) -> None:
    store.ingest("T1:U1", "slack", "E1", {"text": "first"}, T0)
    worker = Worker(store=store, clock=ManualClock(T0), settle=60.0)
    assert worker.tick(T0) == 0  # seen, not yet settled
    wakeup, stop = Wakeup(), threading.Event()
    wakeup.kick()  # another message arrived
    stop.set()  # (so the sleep below returns at once instead of after the window)
    worker.sleep(wakeup, stop)
    assert wakeup.wait(0), "the kick was taken: the worker woke before its window was over"

    idle = Worker(store=store, clock=ManualClock(T0), settle=60.0)
    # Nothing seen yet: a kick must wake it.
    wakeup.kick()
    idle.sleep(wakeup, stop)
    assert not wakeup.wait(0)
