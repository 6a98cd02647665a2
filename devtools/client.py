"""Talking to a running `wakeful serve` from a test or a script, as Slack, GitHub and Stripe do.

`Slack` signs and sends what a person does (a DM, a mention, a thread reply, a button click, a
slash command) and what a webhook source delivers, to the app's real HTTP endpoints, and reads
what the app sent back from the Slack emulator it posts to (`SLACK_API_URL`): in this process
(`SlackEmulator`) or another (`python -m wakeful.devtools.emulator`, read over its admin API).
`wakeful dev` is built on it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wakeful.devtools.emulator import EventSender, RemoteEmulator, Reply, SlackEmulator
from wakeful.devtools.webhooks import Sent, WebhookSender

EVENTS_PATH = "/slack/events"
"""Where `serve` takes Slack's events, clicks and commands (bot/front/wsgi.py's EVENTS_PATH)."""

__all__ = ["AppRefused", "Button", "Slack"]


class AppRefused(Exception):
    """The app answered a delivery with an error status: it did not store it."""


@dataclass(frozen=True)
class Button:
    """A button on a message the app posted, as the message stands now."""

    channel: str
    message_ts: str
    action_id: str
    value: str
    label: str
    thread_ts: str | None = None


def blocks_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A message's Block Kit blocks (the emulator keeps what was sent: a list or its JSON)."""
    blocks = message.get("blocks") or []
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    return [b for b in blocks if isinstance(b, dict)]


def buttons_of(channel: str, message: Mapping[str, Any]) -> list[Button]:
    """The buttons of `message` (its `actions` blocks), in the order a person sees them."""
    found = []
    for block in blocks_of(message):
        if block.get("type") != "actions":
            continue
        for element in block.get("elements", []):
            if element.get("type") == "button":
                found.append(
                    Button(
                        channel,
                        str(message.get("ts")),
                        str(element.get("action_id")),
                        str(element.get("value", "")),
                        str(element.get("text", {}).get("text", "")),
                        message.get("thread_ts"),
                    )
                )
    return found


class Slack:
    """Slack (and webhook sources) in front of a running app at `app_url`
    (`http://127.0.0.1:3000`), signing with the app's secrets; `emulator` is the emulator the
    app posts to, or its URL. Every send raises `AppRefused` unless the app answered 2xx.

    Users and channels are Slack ids (`U0ALICE`, `C0OPS`); a user's DM is `D` + the id
    without its `U` (`D0ALICE`), as the emulator names it."""

    def __init__(
        self,
        app_url: str,
        signing_secret: str,
        emulator: SlackEmulator | RemoteEmulator | str,
        *,
        team_id: str = "T1",
        bot_user_id: str = "UBOT",
        github_secret: str = "",
        stripe_secret: str = "",
        webhook_secrets: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        base = app_url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"app_url must be the app's http(s) URL, got {app_url!r}")
        self.events = EventSender(
            base + EVENTS_PATH, signing_secret, team_id, clock, bot_user_id=bot_user_id
        )
        self.hooks = WebhookSender(
            base,
            github_secret=github_secret,
            stripe_secret=stripe_secret,
            secrets=webhook_secrets,
            clock=clock,
        )
        self.emulator = RemoteEmulator(emulator) if isinstance(emulator, str) else emulator

    # -- what a person does -----------------------------------------------------------------

    def dm(self, user: str, text: str, *, thread: str | None = None) -> str:
        """`user` writes `text` in their DM with the app (in `thread` if given); its ts."""
        ts = self.events.next_ts()
        _check(self.events.message(user, text, ts=ts, thread_ts=thread))
        return ts

    def mention(self, user: str, text: str, channel: str, *, thread: str | None = None) -> str:
        """`user` mentions the app in `channel` (the `<@bot>` tag is added); its ts."""
        ts = self.events.next_ts()
        _check(self.events.mention(user, text, channel, ts=ts, thread_ts=thread))
        return ts

    def say(self, user: str, text: str, channel: str, *, thread: str | None = None) -> str:
        """A channel message without a mention (a follow-up in `thread`); its ts."""
        ts = self.events.next_ts()
        reply = self.events.message(
            user, text, channel, ts=ts, thread_ts=thread, channel_type="channel"
        )
        _check(reply)
        return ts

    def command(
        self,
        user: str,
        text: str,
        channel: str | None = None,
        command: str = "/wakeful",
        response_url: str | None = None,
    ) -> Reply:
        """`user` types `/wakeful text` (in their DM unless `channel`): the app's answer. The
        app's later answers go to `response_url` (the emulator's `response_url_for(key)`)."""
        return _check(self.events.command(user, text, channel, command, response_url))

    def click(self, user: str, button: Button) -> Reply:
        """`user` presses `button` (from `buttons`)."""
        return _check(
            self.events.block_action(
                user,
                button.action_id,
                button.value,
                button.channel,
                button.message_ts,
                thread_ts=button.thread_ts,
            )
        )

    # -- what webhook sources deliver -------------------------------------------------------

    def github(self, event: str, payload: bytes, delivery: str | None = None) -> Sent:
        """A GitHub delivery of `event` (`workflow_run`, `issues`, ...) with `payload`."""
        return _checked(self.hooks.github(event, payload, delivery))

    def stripe(self, event: Mapping[str, Any]) -> Sent:
        """A Stripe delivery of `event` (a dict with its `id` and `type`)."""
        return _checked(self.hooks.stripe(event))

    def webhook(self, name: str, payload: bytes, delivery: str | None = None) -> Sent:
        """A delivery to `/webhooks/<name>` in wakeful's generic scheme."""
        return _checked(self.hooks.generic(name, payload, delivery))

    # -- what the app sent ------------------------------------------------------------------

    def posts(self, channel: str) -> list[dict[str, Any]]:
        """The app's messages in `channel` as they stand (edits applied), oldest first."""
        return self.emulator.messages(channel)

    def buttons(self, channel: str) -> list[Button]:
        """Every button on the app's messages in `channel`, as they stand."""
        return [b for m in self.posts(channel) for b in buttons_of(channel, m)]

    def wait_for_post(self, channel: str, containing: str, timeout: float = 10.0) -> dict[str, Any]:
        """The first message in `channel` whose text holds `containing`, once the app has
        sent it; TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for message in self.posts(channel):
                if containing in str(message.get("text", "")):
                    return message
            if time.monotonic() > deadline:
                raise TimeoutError(f"no message holding {containing!r} in {channel}")
            time.sleep(0.05)


def _check(reply: Reply) -> Reply:
    if not 200 <= reply.status < 300:
        raise AppRefused(f"the app answered HTTP {reply.status}: {reply.body[:200]}")
    return reply


def _checked(sent: Sent) -> Sent:
    if not 200 <= sent.status < 300:
        raise AppRefused(f"the app answered HTTP {sent.status}: {sent.text[:200]}")
    return sent
