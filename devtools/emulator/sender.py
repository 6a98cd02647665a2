"""Slack delivering events, clicks, commands and Home-tab actions to an app, signed as Slack
signs them."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wakeful.devtools.emulator.common import (
    JsonDict,
    _format_ts,
    _no_proxy_opener,
)


@dataclass(frozen=True)
class Reply:
    """What the app answered; ``event_id`` is the one sent, so a test can replay it."""

    status: int
    body: str
    headers: dict[str, str]
    event_id: str | None = None

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class EventSender:
    """Sends Events API and interactivity requests to an app, signed as Slack signs them.

    ``enterprise_id`` names the Enterprise Grid org of ``team_id``; with ``org_install`` the
    app is installed org-wide there, and requests carry what Slack sends such an install:
    the event's ``authorizations`` name the org with ``"team_id": null`` and
    ``"is_enterprise_install": true`` (the workspace only in the envelope's ``team_id``),
    clicks ``"team": null`` and the org in ``enterprise``."""

    def __init__(
        self,
        app_url: str,
        signing_secret: str,
        team_id: str = "T1",
        clock: Callable[[], float] = time.time,
        *,
        bot_user_id: str = "UBOT",
        api_app_id: str = "AEMULATOR",
        timeout: float = 10.0,
        enterprise_id: str | None = None,
        org_install: bool = False,
    ) -> None:
        if org_install and not enterprise_id:
            raise ValueError("an org-wide install needs the org's enterprise_id")
        self.enterprise_id = enterprise_id
        self.org_install = org_install
        self.app_url = app_url
        self.signing_secret = signing_secret
        self.team_id = team_id
        self.clock = clock
        self.bot_user_id = bot_user_id
        self.api_app_id = api_app_id
        self.timeout = timeout
        self._opener = _no_proxy_opener()
        self._lock = threading.Lock()
        self._last_us = 0

    def sign(self, body: bytes, timestamp: int, secret: str | None = None) -> str:
        """``v0=`` HMAC-SHA256 of ``v0:{timestamp}:{body}``, Slack's request signature."""
        key = (secret if secret is not None else self.signing_secret).encode()
        base = b"v0:" + str(timestamp).encode() + b":" + body
        return "v0=" + hmac.new(key, base, hashlib.sha256).hexdigest()

    def next_ts(self) -> str:
        """A fresh message ts from the clock, strictly increasing per sender."""
        with self._lock:
            self._last_us = max(int(self.clock() * 1_000_000), self._last_us + 1)
            return _format_ts(self._last_us)

    def raw(
        self,
        body: bytes,
        headers: Mapping[str, str],
        sign: bool = True,
        timestamp: int | None = None,
        secret: str | None = None,
        *,
        event_id: str | None = None,
    ) -> Reply:
        """Send anything; caller headers override the computed signature headers."""
        final: dict[str, str] = {}
        if sign:
            ts = int(self.clock()) if timestamp is None else timestamp
            final["X-Slack-Request-Timestamp"] = str(ts)
            final["X-Slack-Signature"] = self.sign(body, ts, secret)
        final.update(headers)
        req = urllib.request.Request(self.app_url, data=body, headers=final, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8", "replace")
                return Reply(resp.status, text, dict(resp.headers.items()), event_id)
        except urllib.error.HTTPError as e:
            try:
                text = e.read().decode("utf-8", "replace")
                return Reply(e.code, text, dict(e.headers.items()), event_id)
            finally:
                e.close()

    def event(
        self,
        event: JsonDict,
        event_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
    ) -> Reply:
        """Wrap any event in an ``event_callback`` envelope; reuse ``event_id`` to retry."""
        event_id = event_id or f"Ev{uuid.uuid4().hex[:16].upper()}"
        envelope = {
            "token": "emulator-verification-token",
            "team_id": self.team_id,
            "api_app_id": self.api_app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(self.clock()),
            "authorizations": [
                {
                    "enterprise_id": self.enterprise_id,
                    "team_id": None if self.org_install else self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": self.org_install,
                }
            ],
            "is_ext_shared_channel": False,
        }
        if self.enterprise_id is not None:
            envelope["enterprise_id"] = self.enterprise_id
            envelope["context_team_id"] = self.team_id
            envelope["context_enterprise_id"] = self.enterprise_id
        headers = {"Content-Type": "application/json"}
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
        return self.raw(json.dumps(envelope).encode(), headers, event_id=event_id)

    def message(
        self,
        user: str,
        text: str,
        channel: str | None = None,
        event_id: str | None = None,
        ts: str | None = None,
        thread_ts: str | None = None,
        channel_type: str = "im",
        subtype: str | None = None,
        bot_id: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
    ) -> Reply:
        """A ``message`` event; the default channel is the user's own DM (``U42`` → ``D42``)."""
        ts = ts or self.next_ts()
        event: JsonDict = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "channel": channel or "D" + user.removeprefix("U"),
            "channel_type": channel_type,
            "event_ts": ts,
            "team": self.team_id,
        }
        optional = {"thread_ts": thread_ts, "subtype": subtype, "bot_id": bot_id}
        event.update({k: v for k, v in optional.items() if v is not None})
        return self.event(event, event_id, retry_num, retry_reason)

    def mention(
        self,
        user: str,
        text: str,
        channel: str = "C1",
        event_id: str | None = None,
        ts: str | None = None,
        thread_ts: str | None = None,
        retry_num: int | None = None,
        retry_reason: str | None = None,
    ) -> Reply:
        """An ``app_mention``; the bot's ``<@UBOT>`` is prepended if ``text`` lacks it."""
        ts = ts or self.next_ts()
        tag = f"<@{self.bot_user_id}>"
        event: JsonDict = {
            "type": "app_mention",
            "user": user,
            "text": text if tag in text else f"{tag} {text}",
            "ts": ts,
            "channel": channel,
            "event_ts": ts,
            "team": self.team_id,
        }
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        return self.event(event, event_id, retry_num, retry_reason)

    def block_action(
        self,
        user: str,
        action_id: str,
        value: str,
        channel: str,
        message_ts: str,
        response_url: str | None = None,
        trigger_id: str | None = None,
        *,
        block_id: str = "actions",
        message: JsonDict | None = None,
        org_install: bool | None = None,
        thread_ts: str | None = None,
        action_type: str = "button",
        ephemeral: bool = False,
    ) -> Reply:
        """A button click. Pass ``message`` (e.g. from the emulator) to echo its blocks, and
        ``thread_ts`` for a message in a thread (Slack then names it in ``container`` and in
        ``message``). ``action_type`` is the element's type: ``feedback_buttons`` for Slack's
        thumbs up / down (see ``feedback``). ``ephemeral``: a click in an ephemeral message
        (``message_ts`` is its ``message_ts``): Slack says so in ``container`` and sends no
        ``message``.

        ``org_install`` (default: the sender's) sends it as Slack does from an org-wide
        (Enterprise Grid) install: ``"team": null``, the team only in ``user.team_id``."""
        org_install = self.org_install if org_install is None else org_install
        org = self.enterprise_id or "E0EMULATOR"
        now = self.next_ts()
        payload: JsonDict = {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": user.lower(),
                "name": user.lower(),
                "team_id": self.team_id,
            },
            "api_app_id": self.api_app_id,
            "token": "emulator-verification-token",
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "trigger_id": trigger_id or f"{int(self.clock())}.{uuid.uuid4().int % 10**12}",
            "team": None if org_install else {"id": self.team_id, "domain": "emulator"},
            "enterprise": (
                {"id": org, "name": "emulator"} if org_install or self.enterprise_id else None
            ),
            "is_enterprise_install": org_install,
            "channel": {"id": channel, "name": channel.lower()},
            "message": {"type": "message", **(message or {}), "ts": message_ts},
            "state": {"values": {}},
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "value": value,
                    "type": action_type,
                    "action_ts": now,
                    "text": {"type": "plain_text", "text": value},
                }
            ],
        }
        if response_url is not None:
            payload["response_url"] = response_url
        if thread_ts is not None:
            payload["container"]["thread_ts"] = thread_ts
            payload["message"]["thread_ts"] = thread_ts
        if ephemeral:
            payload["container"]["is_ephemeral"] = True
            del payload["message"]
        body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        return self.raw(body, {"Content-Type": "application/x-www-form-urlencoded"})

    def command(
        self,
        user: str,
        text: str,
        channel: str | None = None,
        command: str = "/wakeful",
        response_url: str | None = None,
        timestamp: int | None = None,
    ) -> Reply:
        """A slash command as Slack sends it: a form body (the fields of Slack's slash command
        payload), signed with ``timestamp``; send the same timestamp and text again to retry."""
        form = {
            "token": "emulator-verification-token",
            "team_id": self.team_id,
            "team_domain": "emulator",
            "channel_id": channel or "D" + user.removeprefix("U"),
            "channel_name": "directmessage",
            "user_id": user,
            "user_name": user.lower(),
            "command": command,
            "text": text,
            "api_app_id": self.api_app_id,
            "is_enterprise_install": "true" if self.org_install else "false",
            "response_url": response_url or "https://hooks.slack.com/commands/T1/1/x",
            "trigger_id": f"{int(self.clock())}.{uuid.uuid4().int % 10**12}.x",
        }
        if self.enterprise_id is not None:
            form["enterprise_id"] = self.enterprise_id
        body = urllib.parse.urlencode(form).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        return self.raw(body, headers, timestamp=timestamp)

    def home_opened(self, user: str, event_id: str | None = None) -> Reply:
        """``app_home_opened`` on the Home tab."""
        ts = self.next_ts()
        event = {
            "type": "app_home_opened",
            "user": user,
            "channel": "D" + user.removeprefix("U"),
            "tab": "home",
            "event_ts": ts,
        }
        return self.event(event, event_id)

    def feedback(
        self,
        user: str,
        value: str,
        channel: str,
        message_ts: str,
        thread_ts: str | None = None,
        message: JsonDict | None = None,
    ) -> Reply:
        """A click on a reply's feedback buttons (Block Kit `feedback_buttons` in a
        `context_actions` block): its value is the pressed button's (`positive` / `negative`
        for wakeful's)."""
        return self.block_action(
            user,
            "wakeful_feedback",
            value,
            channel,
            message_ts,
            block_id="feedback",
            message=message,
            thread_ts=thread_ts,
            action_type="feedback_buttons",
        )

    def messages_tab_opened(self, user: str, event_id: str | None = None) -> Reply:
        """``app_home_opened`` on the Messages tab: a person opened the DM with the app (the
        Agent messaging experience's start of a conversation; bolt-python's own fixture)."""
        event = {
            "type": "app_home_opened",
            "user": user,
            "channel": "D" + user.removeprefix("U"),
            "tab": "messages",
            "event_ts": self.next_ts(),
        }
        return self.event(event, event_id)

    def assistant_thread_started(
        self, user: str, thread_ts: str | None = None, event_id: str | None = None
    ) -> Reply:
        """``assistant_thread_started``: a person opened a new assistant thread."""
        channel = "D" + user.removeprefix("U")
        event = {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": user,
                "context": {"channel_id": "C1", "team_id": self.team_id, "enterprise_id": None},
                "channel_id": channel,
                "thread_ts": thread_ts or self.next_ts(),
            },
            "event_ts": self.next_ts(),
        }
        return self.event(event, event_id)

    def home_action(self, user: str, action_id: str, value: str) -> Reply:
        """A button clicked in the Home tab (its container is the view, there is no channel)."""
        payload: JsonDict = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": self.team_id},
            "api_app_id": self.api_app_id,
            "token": "emulator-verification-token",
            "container": {"type": "view", "view_id": "V0HOME"},
            "trigger_id": f"{int(self.clock())}.{uuid.uuid4().int % 10**12}",
            "team": {"id": self.team_id, "domain": "emulator"},
            "enterprise": None,
            "is_enterprise_install": False,
            "view": {"id": "V0HOME", "type": "home", "blocks": []},
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": "home",
                    "value": value,
                    "type": "button",
                    "action_ts": self.next_ts(),
                }
            ],
        }
        body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        return self.raw(body, {"Content-Type": "application/x-www-form-urlencoded"})

    def tokens_revoked(
        self, bot: tuple[str, ...] | None = None, oauth: tuple[str, ...] = (), **kw: Any
    ) -> Reply:
        """``tokens_revoked`` (Slack's Events API reference: ``tokens`` lists the user ids
        whose ``oauth`` (user) and ``bot`` tokens were revoked); by default the bot's."""
        bots = [self.bot_user_id] if bot is None else list(bot)
        event = {"type": "tokens_revoked", "tokens": {"oauth": list(oauth), "bot": bots}}
        return self.event(event, **kw)

    def app_uninstalled(self, **kw: Any) -> Reply:
        """``app_uninstalled``: the workspace removed the app (its tokens are gone too)."""
        return self.event({"type": "app_uninstalled"}, **kw)

    def app_rate_limited(self, minute: int | None = None) -> Reply:
        """``app_rate_limited`` as Slack documents it: not an ``event_callback``, a body of
        its own naming the team and the minute its events began to be held back."""
        now = int(self.clock())
        body = {
            "token": "emulator-verification-token",
            "type": "app_rate_limited",
            "team_id": self.team_id,
            "minute_rate_limited": minute if minute is not None else now - now % 60,
            "api_app_id": self.api_app_id,
        }
        return self.raw(json.dumps(body).encode(), {"Content-Type": "application/json"})

    def url_verification(self, challenge: str) -> Reply:
        body = {
            "token": "emulator-verification-token",
            "challenge": challenge,
            "type": "url_verification",
        }
        return self.raw(json.dumps(body).encode(), {"Content-Type": "application/json"})
