"""A local stand-in for Slack: a loopback Web API server plus a sender of signed events.

Tests, chaos runs and ``wakeful demo`` point a real ``slack_sdk.WebClient`` at
:class:`SlackEmulator`, so every call crosses real HTTP exactly as it would in production,
and drive the app with :class:`EventSender`, which signs requests the way Slack does.
Failures are scripted per call with :meth:`SlackEmulator.fault` rather than triggered by
magic values, so each test reads as the story it checks.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import hmac
import json
import logging
import signal
import socketserver
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wakeful.devtools import emulator_checks as checks

__all__ = ["Call", "EventSender", "RemoteEmulator", "Reply", "SlackEmulator"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
RESPONSE_URL_METHOD = "response_url"
"""Pseudo method name under which response-URL posts are recorded and can be faulted."""


@dataclass(frozen=True)
class Call:
    """One request the emulator answered, kept so tests can assert on what the app sent."""

    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    at: float
    response: dict[str, Any]
    status: int


@dataclass(frozen=True)
class _Fault:
    status: int | None
    error: str | None
    retry_after: int | None
    delay: float | None

    @property
    def fails(self) -> bool:
        """A delay-only fault is a slow success; anything else replaces the answer."""
        return self.status is not None or self.error is not None

    def answer(self) -> tuple[int, JsonDict, dict[str, str]]:
        status = self.status if self.status is not None else 200
        default = "ratelimited" if status == 429 else "internal_error"
        headers = {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}
        return status, {"ok": False, "error": self.error or default}, headers


class _SlackError(Exception):
    """Raised inside a method handler to answer ``{"ok": false, "error": code}``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def _ts_us(ts: str) -> int:
    """Order Slack ``ts`` strings exactly; floats lose the last microsecond digits."""
    sec, _, frac = ts.partition(".")
    return int(sec) * 1_000_000 + int((frac + "000000")[:6])


def _format_ts(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _json_field(params: Mapping[str, Any], name: str) -> Any:
    """Form bodies carry blocks/metadata as JSON strings, JSON bodies as objects."""
    value = params.get(name)
    if isinstance(value, str):
        try:
            return json.loads(value) if value else None
        except ValueError:
            raise _SlackError(f"invalid_{name}") from None
    return value


def _tz_offset(tz: str) -> int:
    try:
        offset = datetime.now(ZoneInfo(tz)).utcoffset()
    except (ZoneInfoNotFoundError, ValueError):
        return 0
    return int(offset.total_seconds()) if offset is not None else 0


def _cursor(ts: str) -> str:
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _paginate(items: list[JsonDict], params: Mapping[str, Any], newest_first: bool) -> JsonDict:
    """Slack-style cursor paging: the cursor names the first ts of the next page."""
    cursor = params.get("cursor")
    if cursor:
        try:
            start = _ts_us(base64.b64decode(str(cursor)).decode().removeprefix("next_ts:"))
        except ValueError:
            raise _SlackError("invalid_cursor") from None
        if newest_first:
            items = [m for m in items if _ts_us(m["ts"]) <= start]
        else:
            items = [m for m in items if _ts_us(m["ts"]) >= start]
    try:
        limit = int(params.get("limit") or 100)
    except (TypeError, ValueError):
        raise _SlackError("invalid_limit") from None
    limit = min(max(limit, 1), 999)
    page, more = items[:limit], len(items) > limit
    out: JsonDict = {"messages": page, "has_more": more}
    if more:
        out["response_metadata"] = {"next_cursor": _cursor(items[limit]["ts"])}
    return out


def _window(items: list[JsonDict], params: Mapping[str, Any]) -> list[JsonDict]:
    """Apply ``oldest``/``latest`` (exclusive unless ``inclusive``), as Slack does."""
    inclusive = _truthy(params.get("inclusive"))
    lo = _ts_us(str(params["oldest"])) if params.get("oldest") else None
    hi = _ts_us(str(params["latest"])) if params.get("latest") else None

    def keep(m: JsonDict) -> bool:
        ts = _ts_us(m["ts"])
        if lo is not None and (ts < lo or (ts == lo and not inclusive)):
            return False
        return not (hi is not None and (ts > hi or (ts == hi and not inclusive)))

    return [m for m in items if keep(m)]


class SlackEmulator:
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
    ) -> None:
        self.bot_token = bot_token
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
        self._faults: dict[str, deque[_Fault]] = {}
        self._methods: dict[str, Callable[[JsonDict], JsonDict]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
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

    def response_url_for(self, key: str) -> str:
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
            self._channels.setdefault(channel, [])

    def remove_channel(self, channel: str) -> None:
        """Later API calls naming ``channel`` answer ``channel_not_found``; records stay."""
        with self._cond:
            self._removed.add(channel)

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
        """Forget calls, messages, ephemerals and responses; faults and channels stay."""
        with self._cond:
            self._calls.clear()
            self._ephemerals.clear()
            self._responses.clear()
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
        token = (auth or "").removeprefix("Bearer ").strip() or str(params.get("token") or "")
        if handler is None:
            response: JsonDict = {"ok": False, "error": "unknown_method"}
        elif token != self.bot_token:
            response = {"ok": False, "error": "invalid_auth"}
        elif not body_ok:
            response = {"ok": False, "error": "invalid_json"}
        elif (refusal := checks.missing_scope(method, self.scopes)) is not None:
            response = refusal
        elif (code := checks.content_error(method, params)) is not None:
            response = {"ok": False, "error": code}
        else:
            with self._cond:
                queue = self._faults.get(method)
                fault = queue.popleft() if queue else None
                if fault is not None and fault.fails:
                    status, response, extra = fault.answer()
                else:
                    try:
                        response = {"ok": True, **handler(params)}
                    except _SlackError as e:
                        response = {"ok": False, "error": e.code}
            delay = fault.delay if fault is not None else None
        self._record(Call(method, params, headers, at, response, status))
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

    # -- Web API methods (called with the lock held) ---------------------------------------

    def _next_ts(self) -> str:
        self._last_us = max(int(self._clock() * 1_000_000), self._last_us + 1)
        return _format_ts(self._last_us)

    def _channel(self, params: Mapping[str, Any]) -> tuple[str, list[JsonDict]]:
        channel = params.get("channel")
        if not isinstance(channel, str) or not channel or channel in self._removed:
            raise _SlackError("channel_not_found")
        if channel in self._outside:
            raise _SlackError("not_in_channel")
        if channel not in self._channels:
            if not self.auto_channels:
                raise _SlackError("channel_not_found")
            self._channels[channel] = []
        return channel, self._channels[channel]

    def _auth_test(self, params: JsonDict) -> JsonDict:
        return {
            "url": "https://emulator.slack.test/",
            "team": "Emulator",
            "user": "wakeful",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _post_message(self, params: JsonDict) -> JsonDict:
        channel, msgs = self._channel(params)
        text, blocks = params.get("text"), _json_field(params, "blocks")
        if not text and not blocks and not params.get("attachments"):
            raise _SlackError("no_text")
        metadata = _json_field(params, "metadata")
        ts = self._next_ts()
        msg: JsonDict = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "team": self.team_id,
            "text": text or "",
            "ts": ts,
        }
        if blocks:
            msg["blocks"] = blocks
        if params.get("attachments"):
            msg["attachments"] = _json_field(params, "attachments")
        thread_ts = str(params.get("thread_ts") or "")
        if thread_ts:
            msg["thread_ts"] = thread_ts
            if _truthy(params.get("reply_broadcast")):
                msg["subtype"] = "thread_broadcast"
            for parent in msgs:
                if parent["ts"] == thread_ts:
                    parent["thread_ts"] = parent["ts"]
                    parent["reply_count"] = parent.get("reply_count", 0) + 1
                    parent["latest_reply"] = ts
        if metadata:
            msg["metadata"] = metadata
        msgs.append(msg)
        return {"channel": channel, "ts": ts, "message": copy.deepcopy(msg)}

    def _update(self, params: JsonDict) -> JsonDict:
        channel, msgs = self._channel(params)
        msg = next((m for m in msgs if m["ts"] == params.get("ts")), None)
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.get("user") != self.bot_user_id:
            raise _SlackError("cant_update_message")
        for name in ("blocks", "metadata", "attachments"):
            if params.get(name) is not None:
                msg[name] = _json_field(params, name)
        if params.get("text") is not None:
            msg["text"] = params["text"]
        msg["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        return {
            "channel": channel,
            "ts": msg["ts"],
            "text": msg["text"],
            "message": copy.deepcopy(msg),
        }

    def _post_ephemeral(self, params: JsonDict) -> JsonDict:
        channel, _ = self._channel(params)
        if not params.get("user"):
            raise _SlackError("user_not_found")
        members = self._members.get(channel)
        if members is not None and params["user"] not in members:
            raise _SlackError("user_not_in_channel")
        ts = self._next_ts()
        self._ephemerals.append(
            {
                "channel": channel,
                "user": params["user"],
                "text": params.get("text") or "",
                "blocks": _json_field(params, "blocks"),
                "thread_ts": params.get("thread_ts"),
                "message_ts": ts,
            }
        )
        return {"message_ts": ts}

    @staticmethod
    def _render(msgs: list[JsonDict], params: Mapping[str, Any]) -> list[JsonDict]:
        """Slack only returns ``metadata`` when asked with ``include_all_metadata``."""
        with_meta = _truthy(params.get("include_all_metadata"))
        out = copy.deepcopy(msgs)
        if not with_meta:
            for m in out:
                m.pop("metadata", None)
        return out

    def _history(self, params: JsonDict) -> JsonDict:
        """Newest first and, like Slack, without thread replies (unless broadcast)."""
        _, msgs = self._channel(params)
        top = [
            m
            for m in msgs
            if m.get("thread_ts", m["ts"]) == m["ts"] or m.get("subtype") == "thread_broadcast"
        ]
        page = _paginate(list(reversed(_window(top, params))), params, newest_first=True)
        page["messages"] = self._render(page["messages"], params)
        return page

    def _replies(self, params: JsonDict) -> JsonDict:
        _, msgs = self._channel(params)
        ts = params.get("ts")
        thread = [m for m in msgs if m["ts"] == ts or (ts and m.get("thread_ts") == ts)]
        if not thread:
            raise _SlackError("thread_not_found")
        page = _paginate(_window(thread, params), params, newest_first=False)
        page["messages"] = self._render(page["messages"], params)
        return page

    def _views_publish(self, params: JsonDict) -> JsonDict:
        user, view = str(params.get("user_id") or ""), _json_field(params, "view")
        if not user:
            raise _SlackError("invalid_arguments")
        if not isinstance(view, dict) or view.get("type") != "home":
            raise _SlackError("invalid_arguments")
        if checks.blocks_error(view.get("blocks")) is not None:
            raise _SlackError("invalid_blocks")
        self._homes.setdefault(user, []).append(view)
        return {"view": {"id": f"V{len(self._homes[user]):08d}", **view}}

    def _assistant_thread(self, params: JsonDict) -> tuple[str, str]:
        channel, thread = params.get("channel_id"), params.get("thread_ts")
        if not isinstance(channel, str) or not channel or not isinstance(thread, str):
            raise _SlackError("invalid_arguments")
        if not channel.startswith("D"):
            raise _SlackError("not_allowed")  # assistant threads live in the app's DM
        return channel, thread

    def _set_status(self, params: JsonDict) -> JsonDict:
        channel, thread = self._assistant_thread(params)
        status = {"channel_id": channel, "thread_ts": thread, "status": params.get("status")}
        self._statuses.append(status)
        return {}

    def _set_prompts(self, params: JsonDict) -> JsonDict:
        channel, thread = self._assistant_thread(params)
        prompts = _json_field(params, "prompts")
        if not isinstance(prompts, list) or not prompts:
            raise _SlackError("invalid_arguments")
        title = params.get("title")
        self._prompts.append(
            {"channel_id": channel, "thread_ts": thread, "title": title, "prompts": prompts}
        )
        return {}

    def _users_info(self, params: JsonDict) -> JsonDict:
        uid = str(params.get("user") or "")
        info = self._users.get(uid)
        if info is None and uid == self.bot_user_id:
            info = {"is_bot": True, "name": "wakeful"}
        if info is None:
            raise _SlackError("user_not_found")
        tz = str(info.get("tz", "UTC"))
        user: JsonDict = {
            "id": uid,
            "team_id": self.team_id,
            "name": uid.lower(),
            "deleted": False,
            "tz": tz,
            "tz_label": tz,
            "tz_offset": _tz_offset(tz),
            "is_bot": False,
        }
        user.update(copy.deepcopy(info))
        user["id"] = uid
        return {"user": user}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], emulator: SlackEmulator) -> None:
        self.emulator = emulator
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a needless (and slow) DNS lookup.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is an expected, scripted outcome, not a bug.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Slack's Web API
    # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
    # back until the client's delayed ACK of the headers, 40 ms on every kept-alive call.
    disable_nagle_algorithm = True
    server: _Server
    server_version = "SlackEmulator/1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _body(self) -> tuple[bytes, JsonDict, bool]:
        """Read the body as Slack would: JSON, form fields, or query string all at once."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        query = urllib.parse.urlsplit(self.path).query
        params: JsonDict = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        ctype = (self.headers.get("Content-Type") or "").lower()
        if not raw.strip():
            return raw, params, True
        if "json" in ctype or (not ctype and raw.lstrip().startswith(b"{")):
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                return raw, params, False
            return raw, {**params, **parsed}, True
        form = urllib.parse.parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
        return raw, {**params, **dict(form)}, True

    def _serve(self) -> None:
        emu = self.server.emulator
        path = urllib.parse.urlsplit(self.path).path
        raw, params, body_ok = self._body()
        headers = {k: str(v) for k, v in self.headers.items()}
        if path.startswith("/api/"):
            status, answer, extra, delay = emu._dispatch(
                path[len("/api/") :], params, headers, self.headers.get("Authorization"), body_ok
            )
            extra = {**extra, "x-oauth-scopes": ",".join(emu.scopes)}
            emu._pause(delay)
            self._send(
                status, json.dumps(answer).encode(), "application/json; charset=utf-8", extra
            )
        elif path.startswith("/response/"):
            key = urllib.parse.unquote(path[len("/response/") :])
            try:
                body: Any = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            status, text, extra, delay = emu._response_url(key, body, headers)
            emu._pause(delay)
            self._send(status, text.encode(), "text/plain; charset=utf-8", extra)
        elif path.startswith("/_emulator/"):
            self._admin(path[len("/_emulator/") :], params)
        else:
            self._send(404, b"not found", "text/plain; charset=utf-8")

    def _admin(self, action: str, p: JsonDict) -> None:
        """Let another process (chaos tests) read records and script faults over HTTP."""
        emu = self.server.emulator
        result: Any = {"ok": True}
        try:
            if action == "messages":
                result = emu.messages(str(p["channel"]))
            elif action == "calls":
                result = [asdict(c) for c in emu.calls(p.get("method"))]
            elif action == "ephemerals":
                result = emu.ephemerals(p.get("channel"), p.get("user"))
            elif action == "responses":
                result = emu.responses(str(p["key"]))
            elif action == "fault":
                opts = {
                    k: p[k] for k in ("status", "error", "retry_after", "delay", "times") if k in p
                }
                emu.fault(str(p["method"]), **opts)
            elif action == "clear_faults":
                emu.clear_faults()
            elif action == "remove_channel":
                emu.remove_channel(str(p["channel"]))
            elif action == "add_channel":
                emu.add_channel(str(p["channel"]))
            elif action == "clear":
                emu.clear()
            else:
                self._send(
                    404, b'{"ok": false, "error": "unknown_admin_action"}', "application/json"
                )
                return
        except (KeyError, TypeError, ValueError) as e:
            err = json.dumps({"ok": False, "error": f"bad_request: {e!r}"}).encode()
            self._send(400, err, "application/json")
            return
        self._send(200, json.dumps(result).encode(), "application/json; charset=utf-8")

    def _send(
        self, status: int, body: bytes, ctype: str, extra: Mapping[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def _manifest_scopes() -> list[str]:
    from wakeful.bot.scopes import required_scopes

    return required_scopes() or []


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    """Loopback traffic must never be routed through an ``http_proxy`` from the env."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RemoteEmulator:
    """Client for the ``/_emulator/`` admin endpoints of an emulator in another process."""

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout = timeout
        self._opener = _no_proxy_opener()

    def _get(self, action: str, **query: str | None) -> Any:
        q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        url = f"{self.base_url}_emulator/{action}?{q}"
        with self._opener.open(url, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def _post(self, action: str, body: JsonDict) -> None:
        req = urllib.request.Request(
            f"{self.base_url}_emulator/{action}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with self._opener.open(req, timeout=self.timeout) as resp:
            resp.read()

    def messages(self, channel: str) -> list[JsonDict]:
        return list(self._get("messages", channel=channel))

    def calls(self, method: str | None = None) -> list[Call]:
        return [Call(**c) for c in self._get("calls", method=method)]

    def ephemerals(self, channel: str | None = None, user: str | None = None) -> list[JsonDict]:
        return list(self._get("ephemerals", channel=channel, user=user))

    def responses(self, key: str) -> list[Any]:
        return list(self._get("responses", key=key))

    def fault(self, method: str, **opts: Any) -> None:
        self._post("fault", {"method": method, **opts})

    def clear_faults(self) -> None:
        self._post("clear_faults", {})

    def remove_channel(self, channel: str) -> None:
        self._post("remove_channel", {"channel": channel})

    def add_channel(self, channel: str) -> None:
        self._post("add_channel", {"channel": channel})

    def clear(self) -> None:
        self._post("clear", {})


# -- the other direction: Slack calling the app ---------------------------------------------


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
    """Sends Events API and interactivity requests to an app, signed as Slack signs them."""

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
    ) -> None:
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
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }
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
        org_install: bool = False,
        thread_ts: str | None = None,
    ) -> Reply:
        """A button click. Pass ``message`` (e.g. from the emulator) to echo its blocks, and
        ``thread_ts`` for a message in a thread (Slack then names it in ``container`` and in
        ``message``).

        ``org_install`` sends it as Slack does from an org-wide (Enterprise Grid) install:
        ``"team": null``, the team only in ``user.team_id``."""
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
            "enterprise": {"id": "E0EMULATOR", "name": "emulator"} if org_install else None,
            "is_enterprise_install": org_install,
            "channel": {"id": channel, "name": channel.lower()},
            "message": {"type": "message", **(message or {}), "ts": message_ts},
            "state": {"values": {}},
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block_id,
                    "value": value,
                    "type": "button",
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
            "is_enterprise_install": "false",
            "response_url": response_url or "https://hooks.slack.com/commands/T1/1/x",
            "trigger_id": f"{int(self.clock())}.{uuid.uuid4().int % 10**12}.x",
        }
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

    def url_verification(self, challenge: str) -> Reply:
        body = {
            "token": "emulator-verification-token",
            "challenge": challenge,
            "type": "url_verification",
        }
        return self.raw(json.dumps(body).encode(), {"Content-Type": "application/json"})


# -- process mode (chaos tests) ---------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; the api_url goes on the first stdout line for the parent."""
    parser = argparse.ArgumentParser(prog="python -m wakeful.devtools.emulator")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="xoxb-emulator")
    parser.add_argument("--bot-user-id", default="UBOT")
    parser.add_argument("--team-id", default="T1")
    parser.add_argument("--users", default="{}", help='JSON: {"U1": {"tz": "Europe/Paris"}}')
    parser.add_argument("--no-auto-channels", action="store_true")
    parser.add_argument("--scopes", help="granted scopes, comma-separated (default: manifest's)")
    args = parser.parse_args(argv)
    done = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    emu = SlackEmulator(
        args.token,
        args.bot_user_id,
        args.team_id,
        json.loads(args.users),
        auto_channels=not args.no_auto_channels,
        port=args.port,
        scopes=None if args.scopes is None else [x for x in args.scopes.split(",") if x],
    )
    with emu:
        print(emu.api_url, flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
