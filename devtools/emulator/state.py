"""SlackEmulator: the state of a local Slack (channels, messages, calls, faults), its scripting
and its records."""

from __future__ import annotations

import copy
import itertools
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from wakeful.devtools.emulator import checks
from wakeful.devtools.emulator.common import (
    RESPONSE_URL_METHOD,
    Call,
    JsonDict,
    _Fault,
    _manifest_scopes,
    _SlackError,
    log,
)
from wakeful.devtools.emulator.methods import WebApi
from wakeful.devtools.emulator.oauth import Grant, OAuthApi, OAuthState, Workspace
from wakeful.devtools.emulator.server import _Server
from wakeful.devtools.emulator.streams import STREAM_MAX_CHARS, STREAM_TTL, StreamApi


class SlackEmulator(StreamApi, WebApi, OAuthApi):
    """An in-process Slack Web API on ``127.0.0.1`` that records calls and injects faults.

    All state sits behind one re-entrant condition so :meth:`wait_for` predicates can call
    the read methods while the server threads keep writing.
    """

    def __init__(
        self,
        bot_token: str = "xoxb-emulator",
        bot_user_id: str = "UBOT",
        team_id: str = "T1",
        users: dict[str, dict[str, Any]] | None = None,
        *,
        bot_id: str = "BBOT",
        auto_channels: bool = True,
        channels: tuple[str, ...] = (),
        port: int = 0,
        on_call: Callable[[Call], None] | None = None,
        clock: Callable[[], float] = time.time,
        scopes: Sequence[str] | None = None,
        client_id: str = "CEMULATOR.1",
        client_secret: str = "emulator-client-secret",
        rotation: bool = False,
        token_ttl: int = 43_200,
        stream_ttl: float = STREAM_TTL,
        stream_max_chars: int = STREAM_MAX_CHARS,
    ) -> None:
        self.bot_token = bot_token
        self.client_id = client_id
        self.client_secret = client_secret
        self.rotation = rotation
        """Token rotation on: tokens from oauth.v2.access expire after `token_ttl` seconds
        and come with a single-use refresh token."""
        self.token_ttl = token_ttl
        self.stream_ttl = stream_ttl
        self.stream_max_chars = stream_max_chars
        self._streams: dict[tuple[str, str], JsonDict] = {}
        self.scopes: list[str] = list(_manifest_scopes() if scopes is None else scopes)
        """What the token was granted, sent as `x-oauth-scopes` on every Web API answer as
        Slack does (default: the scopes manifest.yml asks for)."""
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.auto_channels = auto_channels
        self.on_call = on_call
        self._users = copy.deepcopy(users or {})
        self._requested_port = port
        self._clock = clock
        self._cond = threading.Condition(threading.RLock())
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._last_us = 0
        self._calls: list[Call] = []
        self._channels: dict[str, list[JsonDict]] = {ch: [] for ch in channels}
        self._removed: set[str] = set()
        self._ephemerals: list[JsonDict] = []
        self._responses: dict[str, list[Any]] = {}
        self._targets: dict[str, tuple[str, str, str | None]] = {}
        """response_url key -> (channel, user, original ts) it shows to (`response_url_for`)."""
        self._faults: dict[str, deque[_Fault]] = {}
        default = Workspace(team_id, bot_user_id, bot_id, name="Emulator", installed=True)
        self._workspaces: dict[str, Workspace] = {team_id: default}
        self._oauth = OAuthState()
        self._oauth.grants[bot_token] = Grant(default, "bot")
        self._serial = itertools.count(1)
        self._me = default
        self._token = ""
        self._methods: dict[str, Callable[[JsonDict], JsonDict]] = {
            "auth.test": self._auth_test,
            "oauth.v2.access": lambda p: p,  # answered by _oauth_v2_access (client auth)
            "auth.revoke": lambda p: self._auth_revoke(p, self._token),
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "chat.delete": self._delete,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "conversations.info": self._conversation_info,
            "users.info": self._users_info,
            "views.publish": self._views_publish,
            "assistant.threads.setStatus": self._set_status,
            "assistant.threads.setSuggestedPrompts": self._set_prompts,
        }
        self._homes: dict[str, list[JsonDict]] = {}
        self._statuses: list[JsonDict] = []
        self._prompts: list[JsonDict] = []
        self._members: dict[str, set[str]] = {}
        self._outside: set[str] = set()
        self._archived: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> SlackEmulator:
        if self._server is not None:
            raise RuntimeError("emulator already started")
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", self._requested_port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"slack-emulator-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; delayed (faulted) answers are woken so no thread lingers."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> SlackEmulator:
        return self.start()

    def __exit__(
        self, exc: type[BaseException] | None, val: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("emulator not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def api_url(self) -> str:
        """Trailing slash matters: slack_sdk ``urljoin``s the method name onto it."""
        return f"{self.base_url}api/"

    def response_url_for(
        self,
        key: str,
        *,
        user: str | None = None,
        channel: str | None = None,
        original: str | None = None,
    ) -> str:
        """A `response_url` whose posts are kept under `key` (:meth:`responses`). Named for
        the person (`user`) in `channel` a slash command or a click came from, what is posted
        there also shows as Slack shows it (:meth:`ephemerals`): a new ephemeral to them (or,
        `in_channel`, a message); with `replace_original` the message the click came from
        (`original`: its ts, an ephemeral's `message_ts`) rewritten in place, its text and
        blocks replaced (posted without blocks: its buttons gone); `delete_original` removes
        it. Without `original` there is nothing to replace: the post shows as a new one."""
        if user is not None and channel is not None:
            with self._cond:
                self._targets[key] = (channel, user, original)
        return f"{self.base_url}response/{urllib.parse.quote(key, safe='')}"

    # -- scripting -------------------------------------------------------------------------

    def fault(
        self,
        method: str,
        *,
        status: int | None = None,
        error: str | None = None,
        retry_after: int | None = None,
        delay: float | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail or answer slowly.

        A fault with ``status`` or ``error`` is recorded but has no effect. A ``delay`` alone
        applies the call and then holds the answer back: Slack did the work but the client
        may time out, which is exactly the ambiguity retry logic must survive.
        """
        if status is None and error is None and delay is None:
            raise ValueError("a fault needs status, error or delay")
        if times < 1:
            raise ValueError("times must be >= 1")
        with self._cond:
            queue = self._faults.setdefault(method, deque())
            queue.extend(_Fault(status, error, retry_after, delay) for _ in range(times))

    def clear_faults(self) -> None:
        with self._cond:
            self._faults.clear()

    def add_channel(self, channel: str) -> None:
        """``channel`` exists and the bot is in it (again)."""
        with self._cond:
            self._removed.discard(channel)
            self._outside.discard(channel)
            self._archived.discard(channel)
            self._channels.setdefault(channel, [])

    def remove_channel(self, channel: str) -> None:
        """Later API calls naming ``channel`` answer ``channel_not_found``; records stay."""
        with self._cond:
            self._removed.add(channel)

    def archive_channel(self, channel: str) -> None:
        """``channel`` is archived: posting there answers ``is_archived``; its history and
        ``conversations.info`` (``is_archived``: true) still answer."""
        with self._cond:
            self._channels.setdefault(channel, [])
            self._archived.add(channel)

    def leave_channel(self, channel: str) -> None:
        """The bot is no longer in ``channel``: posting there answers ``not_in_channel``."""
        with self._cond:
            self._outside.add(channel)

    def set_members(self, channel: str, users: Sequence[str]) -> None:
        """Who is in ``channel``: an ephemeral to anyone else answers ``user_not_in_channel``
        (a channel with no list set takes any user)."""
        with self._cond:
            self._members[channel] = set(users)

    def add_message(self, channel: str, user: str, text: str) -> str:
        """A message someone else posted (the bot cannot update it); returns its ts."""
        with self._cond:
            ts = self._next_ts()
            msg = {"type": "message", "user": user, "text": text, "ts": ts}
            self._channels.setdefault(channel, []).append(msg)
            return ts

    def homes(self, user: str) -> list[JsonDict]:
        """Every view published to ``user``'s Home tab, oldest first."""
        with self._cond:
            return copy.deepcopy(self._homes.get(user, []))

    def statuses(self, channel: str | None = None) -> list[JsonDict]:
        """assistant.threads.setStatus calls: channel_id, thread_ts, status."""
        with self._cond:
            found = [s for s in self._statuses if channel is None or s["channel_id"] == channel]
            return copy.deepcopy(found)

    def suggested_prompts(self, channel: str | None = None) -> list[JsonDict]:
        with self._cond:
            found = [p for p in self._prompts if channel is None or p["channel_id"] == channel]
            return copy.deepcopy(found)

    def add_user(self, user_id: str, **fields: Any) -> None:
        with self._cond:
            self._users[user_id] = fields

    # -- records ---------------------------------------------------------------------------

    def calls(self, method: str | None = None) -> list[Call]:
        with self._cond:
            return [c for c in self._calls if method is None or c.method == method]

    def messages(self, channel: str) -> list[JsonDict]:
        """Current state (after updates) of every message in ``channel``, oldest first."""
        with self._cond:
            self._expire_streams()
            return copy.deepcopy(self._channels.get(channel, []))

    def ephemerals(self, channel: str | None = None, user: str | None = None) -> list[JsonDict]:
        with self._cond:
            return copy.deepcopy(
                [
                    e
                    for e in self._ephemerals
                    if (channel is None or e["channel"] == channel)
                    and (user is None or e["user"] == user)
                ]
            )

    def responses(self, key: str) -> list[Any]:
        """Bodies POSTed to :meth:`response_url_for` ``(key)``, in arrival order."""
        with self._cond:
            return copy.deepcopy(self._responses.get(key, []))

    def clear(self) -> None:
        """Forget calls, messages (and their streams), ephemerals and responses; faults and
        channels stay."""
        with self._cond:
            self._calls.clear()
            self._ephemerals.clear()
            self._responses.clear()
            self._streams.clear()
            for msgs in self._channels.values():
                msgs.clear()
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[SlackEmulator], bool], timeout: float = 5.0) -> bool:
        """Block until ``predicate(self)`` holds; re-checked on every recorded call."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    # -- request handling (server threads) -------------------------------------------------

    def _dispatch(
        self,
        method: str,
        params: JsonDict,
        headers: dict[str, str],
        auth: str | None,
        body_ok: bool = True,
    ) -> tuple[int, JsonDict, dict[str, str], float | None]:
        at = time.time()
        status, delay = 200, None
        extra: dict[str, str] = {}
        handler = self._methods.get(method)
        bearer = auth if auth and not auth.startswith("Basic ") else ""
        token = bearer.removeprefix("Bearer ").strip() or str(params.get("token") or "")
        team: str | None = None
        with self._cond:
            self._expire_streams()  # what a call reads or writes sees the clock's streams
            caller = self._caller(token) if method != "oauth.v2.access" else self._me
            if handler is None:
                response: JsonDict = {"ok": False, "error": "unknown_method"}
            elif isinstance(caller, str):
                response = {"ok": False, "error": caller}
            elif not body_ok:
                response = {"ok": False, "error": "invalid_json"}
            elif (refusal := checks.missing_scope(method, self.scopes)) is not None:
                response = refusal
            elif (code := checks.content_error(method, params)) is not None:
                response = {"ok": False, "error": code}
            else:
                team = caller.key if method != "oauth.v2.access" else None
                queue = self._faults.get(method)
                fault = queue.popleft() if queue else None
                if fault is not None and fault.fails:
                    status, response, extra = fault.answer()
                else:
                    self._me, self._token = caller, token
                    try:
                        if method == "oauth.v2.access":
                            response = {"ok": True, **self._oauth_v2_access(params, auth)}
                        else:
                            response = {"ok": True, **handler(params)}
                    except _SlackError as e:
                        response = {"ok": False, "error": e.code}
                delay = fault.delay if fault is not None else None
        self._record(Call(method, params, headers, at, response, status, team))
        return status, response, extra, delay

    def _response_url(
        self, key: str, body: Any, headers: dict[str, str]
    ) -> tuple[int, str, dict[str, str], float | None]:
        at = time.time()
        with self._cond:
            queue = self._faults.get(RESPONSE_URL_METHOD)
            fault = queue.popleft() if queue else None
            if fault is not None and fault.fails:
                status, answer, extra = fault.answer()
                text = str(answer["error"])
            else:
                status, text, extra = 200, "ok", {}
                self._responses.setdefault(key, []).append(body)
                target = self._targets.get(key)
                if target is not None and isinstance(body, dict):
                    self._show_response(*target, body)
        params = {"key": key, "body": body}
        response = {"ok": status == 200, "text": text}
        self._record(Call(RESPONSE_URL_METHOD, params, headers, at, response, status))
        return status, text, extra, fault.delay if fault is not None else None

    def _record(self, call: Call) -> None:
        with self._cond:
            self._calls.append(call)
            self._cond.notify_all()
        hook = self.on_call
        if hook is not None:
            try:
                hook(call)
            except Exception:
                log.exception("on_call hook failed")

    def _pause(self, delay: float | None) -> None:
        if delay:
            self._stopping.wait(delay)
