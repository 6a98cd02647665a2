"""Issue 34, item 6 (a): a Slack id from a request (`user`, `team`, `channel`, `enterprise_id`)
must be `[A-Z0-9]{1,32}`, checked before anything is stored or logged.

A signed event once carried `user` = a newline, a forged log line and ESC: it was stored under
an inbox named after it and its text reached the log as lines of their own. Here the same
bodies, over real HTTP to the front and as Socket Mode envelopes, on both stores: a 400 (Socket
Mode: acknowledged and dropped), no event, no inbox, no outbox row, no answer, and no log
record quoting the forged id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from slack_sdk.socket_mode.request import SocketModeRequest

from tests.conftest import T0, MakeStore
from tests.support.approvals import ApprovalRequest
from tests.support.webhook_front import start_server
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, SlackFront
from wakeful.core.effects import Effects
from wakeful.core.store import Store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender
from wakeful.devtools.emulator.sender import Reply

SECRET = "forged-ids-signing-secret"
TEAM = "T1"
FORGED = "U1\n2026-01-01 00:00:00,000 INFO wakeful: \x1b[2Jall clear"
"""The issue's `user`: a newline, what reads as a log line of its own, ESC clearing a screen."""
REQUEST = "forged-ids-approval"


class Lines(logging.Handler):
    """Every record any logger writes while it is installed, at every level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())

    def __enter__(self) -> Lines:
        self.loggers = [logging.getLogger(n) for n in ("", "wakeful", "wakeful.bolt")]
        self.levels = [logger.level for logger in self.loggers]
        for logger in self.loggers:
            logger.setLevel(logging.DEBUG)
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)
        for logger, level in zip(self.loggers, self.levels, strict=True):
            logger.setLevel(level)

    def quoting(self, value: str) -> list[str]:
        return [t for t in self.texts if value in t]


def stored(store: Store) -> tuple[int, int, bool]:
    """Events, outbox rows, and whether the open approval is still unanswered."""
    state = store.approval(REQUEST)
    return count_events(store), len(store.outbox()), state is not None and state.answer is None


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    """A store holding one open approval of U1 (its requester may answer it)."""
    s = make_store()
    s.ingest(f"{TEAM}:U1", "setup", "setup", {}, T0)
    claim = s.acquire_and_claim(f"{TEAM}:U1", "setup", T0)
    assert claim is not None
    request = ApprovalRequest(REQUEST, "refund_order", {"order_id": "7"}, "U1", T0 + 10**9)
    assert s.finish(claim, Effects(approvals=[request]), T0, release=True)
    return s


@pytest.fixture
def url(store: Store) -> Iterator[str]:
    """The real HTTP front over `store`, served on a free loopback port."""
    port, stop = start_server(
        SlackFront(Listeners(store, SECRET, bot_user_id="UBOT", clock=lambda: T0))
    )
    try:
        yield f"http://127.0.0.1:{port}{EVENTS_PATH}"
    finally:
        stop()


SENDS: dict[str, Callable[[EventSender], Reply]] = {
    "dm user": lambda s: s.message(FORGED, "hello", channel="D1"),
    "dm channel": lambda s: s.message("U1", "hello", channel=FORGED),
    "mention user": lambda s: s.mention(FORGED, "hello"),
    "slash command user": lambda s: s.command(FORGED, "status", channel="D1"),
    "requester's Approve, user": lambda s: s.block_action(FORGED, "approve", REQUEST, "D1", "1.1"),
    "requester's Approve, channel": lambda s: s.block_action(
        "U1", "approve", REQUEST, FORGED, "1.1"
    ),
    "Home tab opened": lambda s: s.event(
        {"type": "app_home_opened", "user": FORGED, "channel": "D1", "tab": "home"}
    ),
    "Home tab Requeue": lambda s: s.home_action(FORGED, "wakeful_requeue", "event:1"),
}


@pytest.mark.parametrize("what", list(SENDS))
def test_a_forged_id_over_http_is_400_and_nothing_is_stored_or_logged(
    store: Store, url: str, what: str
) -> None:
    sender = EventSender(url, SECRET, team_id=TEAM)
    before = stored(store)
    with Lines() as lines:
        reply = SENDS[what](sender)
    assert reply.status == 400 and "not a Slack id" in reply.body, reply
    assert stored(store) == before == (1, 1, True)
    assert lines.quoting(FORGED) == [] and lines.quoting("\x1b") == []


@pytest.mark.parametrize("team", [FORGED, "t1", "T1:U2", "T1\n"])
def test_a_forged_team_over_http_is_400(store: Store, url: str, team: str) -> None:
    """The team is half of every inbox name (`<team>:<user>`): `T1:U2` would be another's."""
    sender = EventSender(url, SECRET, team_id=team)
    before = stored(store)
    with Lines() as lines:
        replies = [sender.message("U1", "hello", channel="D1"), sender.command("U1", "status")]
        replies.append(sender.block_action("U1", "approve", REQUEST, "D1", "1.1"))
    assert [r.status for r in replies] == [400, 400, 400], replies
    assert stored(store) == before
    assert lines.quoting(team) == []


class Client:
    """A Socket Mode client that records the envelopes acknowledged."""

    def __init__(self) -> None:
        self.acks: list[str] = []

    def send_socket_mode_response(self, response: Any) -> None:
        self.acks.append(response.envelope_id)


ENVELOPES: dict[str, tuple[str, dict[str, Any]]] = {
    "dm user": (
        "events_api",
        {
            "type": "event_callback",
            "team_id": TEAM,
            "event_id": "Ev1",
            "event": {"type": "message", "channel_type": "im", "channel": "D1", "user": FORGED},
        },
    ),
    "slash command user": (
        "slash_commands",
        {
            "command": "/wakeful",
            "text": "status",
            "team_id": TEAM,
            "user_id": FORGED,
            "channel_id": "D1",
        },
    ),
    "requester's Approve, team": (
        "interactive",
        {
            "type": "block_actions",
            "user": {"id": "U1", "team_id": FORGED},
            "team": {"id": FORGED},
            "channel": {"id": "D1"},
            "actions": [{"action_id": "approve", "value": REQUEST}],
        },
    ),
}


@pytest.mark.parametrize("what", list(ENVELOPES))
def test_a_forged_id_in_socket_mode_is_acknowledged_and_dropped(store: Store, what: str) -> None:
    listeners = Listeners(store, SECRET, bot_user_id="UBOT", clock=lambda: T0)
    client = Client()
    kind, payload = ENVELOPES[what]
    before = stored(store)
    with Lines() as lines:
        listeners.on_socket_request(
            client, SocketModeRequest(type=kind, envelope_id="e1", payload=payload)
        )
    assert client.acks == ["e1"]  # Slack stops resending it
    assert stored(store) == before == (1, 1, True)
    assert lines.quoting(FORGED) == [] and lines.quoting("\x1b") == []
    assert any("not a Slack id" in t for t in lines.texts), lines.texts
