"""Socket Mode: the same listeners as HTTP, acknowledged only after the store committed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.socket_mode.request import SocketModeRequest

from wakeful.bot.front.listeners import Listeners
from wakeful.core.errors import StoreUnavailable
from wakeful.core.events import Command
from wakeful.core.runner import typed
from wakeful.core.store import Store, open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import SlackEmulator

ROOT = Path(__file__).resolve().parents[2]


class Client:
    """Records the envelope acknowledgements, and what the store held at that moment."""

    def __init__(self, store: Store) -> None:
        import logging

        self.store = store
        self.acks: list[tuple[str, int]] = []
        self.logger = logging.getLogger("test.socket")

    def send_socket_mode_response(self, response: Any) -> None:
        self.acks.append((response.envelope_id, count_events(self.store)))


def envelope(event: dict[str, Any], envelope_id: str, event_id: str) -> SocketModeRequest:
    body = {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}
    return SocketModeRequest(type="events_api", envelope_id=envelope_id, payload=body)


def dm(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "channel_type": "im",
        "channel": "D1",
        "user": "U1",
        "text": text,
        "ts": "1.0",
    }


def test_a_dm_is_stored_before_its_envelope_is_acknowledged(store: Store) -> None:
    listeners = Listeners(store, "unused-in-socket-mode", bot_user_id="UBOT")
    client = Client(store)
    listeners.on_socket_request(client, envelope(dm("hello"), "env-1", "Ev1"))
    assert client.acks == [("env-1", 1)]
    (event,) = store.events("T1:U1")
    assert (event.source_id, event.payload["text"]) == ("Ev1", "hello")
    listeners.on_socket_request(client, envelope(dm("hello"), "env-2", "Ev1"))  # redelivery
    assert client.acks[-1] == ("env-2", 1)


def test_unhandled_and_unreadable_envelopes_are_acknowledged_and_dropped(store: Store) -> None:
    listeners = Listeners(store, "s", bot_user_id="UBOT")
    client = Client(store)
    listeners.on_socket_request(
        client, envelope({"type": "reaction_added", "user": "U1"}, "e1", "A")
    )
    listeners.on_socket_request(client, envelope({"type": "message", "text": ["x"]}, "e2", "B"))
    shortcut = SocketModeRequest(
        type="interactive", envelope_id="e3", payload={"type": "shortcut", "callback_id": "x"}
    )
    listeners.on_socket_request(client, shortcut)
    assert [a[0] for a in client.acks] == ["e1", "e2", "e3"]
    assert count_events(store) == 0


def test_an_envelope_the_store_cannot_take_is_not_acknowledged(store: Store) -> None:
    listeners = Listeners(store, "s", bot_user_id="UBOT")
    client = Client(store)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("disk full")

    listeners.store.ingest = down  # type: ignore[method-assign]
    listeners.on_socket_request(client, envelope(dm("hello"), "env-9", "Ev9"))
    assert client.acks == []  # Slack redelivers it


def test_serve_reports_a_socket_mode_connection_failure_in_one_line(tmp_path: Path) -> None:
    with SlackEmulator(bot_token="xoxb-s") as emu:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": "xoxb-s",
            "SLACK_APP_TOKEN": "xapp-1-A-1-x",
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_DB": str(tmp_path / "w.db"),
        }
        env.pop("SLACK_SIGNING_SECRET", None)
        out = subprocess.run(
            [sys.executable, "-m", "wakeful.bot.commands.cli", "--log-level", "ERROR", "serve"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("wakeful:")]
    assert len(lines) == 1 and "SLACK_APP_TOKEN" in lines[0], out.stderr
    assert any(c.method == "apps.connections.open" for c in emu.calls())


@pytest.fixture
def store(tmp_path: Path) -> Store:

    return open_store(tmp_path / "socket.db")


def test_a_slash_command_envelope_is_stored_once_before_its_acknowledgement(store: Store) -> None:
    listeners = Listeners(store, "unused-in-socket-mode", bot_user_id="UBOT")
    client = Client(store)
    form = {
        "team_id": "T1",
        "user_id": "U1",
        "channel_id": "D1",
        "command": "/wakeful",
        "text": "status",
        "response_url": "https://hooks.slack.com/commands/T1/1/x",
        "trigger_id": "1.2.x",
    }
    request = SocketModeRequest(type="slash_commands", envelope_id="env-c", payload=form)
    listeners.on_socket_request(client, request)
    assert client.acks == [("env-c", 1)]
    (event,) = store.events("T1:U1")
    assert event.source_id.startswith("command:T1:U1:env-c:")
    command = typed(event)
    assert isinstance(command, Command) and command.text == "status"
    listeners.on_socket_request(client, request)  # redelivered as is
    assert client.acks[-1] == ("env-c", 1)
