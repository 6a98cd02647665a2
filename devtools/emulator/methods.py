"""The Web API methods: chat.*, conversations.*, users.info, views.publish, assistant.threads.*."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any

from wakeful.devtools.emulator import checks
from wakeful.devtools.emulator.common import (
    JsonDict,
    _format_ts,
    _json_field,
    _paginate,
    _SlackError,
    _truthy,
    _tz_offset,
    _window,
)
from wakeful.devtools.emulator.oauth import Workspace

MAX_LOADING_MESSAGES = 10
"""Loading messages one `assistant.threads.setStatus` may carry (Slack's method page)."""
MAX_PROMPTS = 4
STATUS_TIMEOUT = 120
"""Seconds after which Slack removes a status no message followed."""


class WebApi:
    """The Web API methods the emulator answers, each called with the state's lock held."""

    _cond: threading.Condition
    _channels: dict[str, list[JsonDict]]
    _removed: set[str]
    _outside: set[str]
    _archived: set[str]
    _members: dict[str, set[str]]
    _ephemerals: list[JsonDict]
    _homes: dict[str, list[JsonDict]]
    _statuses: list[JsonDict]
    _prompts: list[JsonDict]
    _users: dict[str, dict[str, Any]]
    _last_us: int
    _clock: Callable[[], float]
    bot_user_id: str
    bot_id: str
    team_id: str
    auto_channels: bool
    _me: Workspace
    """The workspace (and bot) whose token the call being answered carries."""
    _token: str

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
            "team_id": self._me.team_id,
            "user_id": self._me.bot_user_id,
            "bot_id": self._me.bot_id,
            "enterprise_id": self._me.enterprise_id,
            "is_enterprise_install": self._me.org_wide,
        }

    def _post_message(self, params: JsonDict) -> JsonDict:
        to = params.get("channel")
        if isinstance(to, str) and to[:1] in ("U", "W") and to not in self._channels:
            # Slack: a user's id opens the app's DM with them (U42 -> D42 here, the DM the
            # EventSender writes from), and the answer names that DM.
            params = {**params, "channel": "D" + to[1:]}
        channel, msgs = self._channel(params)
        if channel in self._archived:
            raise _SlackError("is_archived")
        text, blocks = params.get("text"), _json_field(params, "blocks")
        if not text and not blocks and not params.get("attachments"):
            raise _SlackError("no_text")
        metadata = _json_field(params, "metadata")
        ts = self._next_ts()
        msg: JsonDict = {
            "type": "message",
            "user": self._me.bot_user_id,
            "bot_id": self._me.bot_id,
            "team": self._me.team_id,
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

    def _conversation_info(self, params: JsonDict) -> JsonDict:
        """`conversations.info`: the conversation as Slack describes it to the bot, with
        `is_member` and `is_archived`. A channel removed (or, with `auto_channels` off, never
        made) is `channel_not_found`, and so is a private one (`G…`) the bot is not in: Slack
        shows a bot no private channel it is outside of. Nothing is created by asking."""
        channel = params.get("channel")
        if not isinstance(channel, str) or not channel or channel in self._removed:
            raise _SlackError("channel_not_found")
        if channel not in self._channels and not self.auto_channels:
            raise _SlackError("channel_not_found")
        member = channel not in self._outside
        private = channel.startswith("G")
        if private and not member:
            raise _SlackError("channel_not_found")
        info: JsonDict = {
            "id": channel,
            "name": channel.lower(),
            "is_channel": channel.startswith("C"),
            "is_group": private,
            "is_im": channel.startswith("D"),
            "is_private": private or channel.startswith("D"),
            "is_archived": channel in self._archived,
            "is_member": member,
            "context_team_id": self._me.team_id,
        }
        return {"channel": info}

    def _update(self, params: JsonDict) -> JsonDict:
        channel, msgs = self._channel(params)
        msg = next((m for m in msgs if m["ts"] == params.get("ts")), None)
        if msg is None:
            raise _SlackError("message_not_found")
        if msg.get("user") != self._me.bot_user_id:
            raise _SlackError("cant_update_message")
        for name in ("blocks", "metadata", "attachments"):
            if params.get(name) is not None:
                msg[name] = _json_field(params, name)
        if params.get("text") is not None:
            msg["text"] = params["text"]
        msg["edited"] = {"user": self._me.bot_user_id, "ts": self._next_ts()}
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

    def _show_response(self, channel: str, user: str, original: str | None, body: JsonDict) -> None:
        """What a post to a response_url shows `user` in `channel` (SlackEmulator
        `response_url_for`): the original message rewritten or removed, or a new one."""
        text, blocks = str(body.get("text") or ""), body.get("blocks") or None
        if original is not None and (
            _truthy(body.get("replace_original")) or _truthy(body.get("delete_original"))
        ):
            mine = [e for e in self._ephemerals if e["channel"] == channel and e["user"] == user]
            for where in (mine, self._channels.get(channel, [])):
                for message in [m for m in where if m.get("message_ts", m.get("ts")) == original]:
                    if _truthy(body.get("delete_original")):
                        (self._ephemerals if where is mine else where).remove(message)
                        continue
                    message["text"] = text
                    message.pop("blocks", None)
                    if blocks or where is mine:
                        message["blocks"] = blocks
            return
        ts = self._next_ts()
        if body.get("response_type") == "in_channel":
            post: JsonDict = {"type": "message", "user": self._me.bot_user_id, "text": text}
            post.update({"bot_id": self._me.bot_id, "ts": ts})
            self._channels.setdefault(channel, []).append(
                {**post, "blocks": blocks} if blocks else post
            )
            return
        self._ephemerals.append(
            {
                "channel": channel,
                "user": user,
                "text": text,
                "blocks": blocks,
                "thread_ts": None,
                "message_ts": ts,
            }
        )

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

    def _set_status(self, params: JsonDict) -> JsonDict:
        """`assistant.threads.setStatus`: in any conversation the app may post in (the Agent
        messaging experience, with `chat:write`), under a thread; at most 10 loading
        messages. An empty status clears it; Slack also clears it when the app posts in that
        thread, or after 2 minutes (see `shown_status`)."""
        thread = params.get("thread_ts")
        if not isinstance(thread, str) or not thread or params.get("status") is None:
            raise _SlackError("invalid_arguments")
        channel, _ = self._channel({"channel": params.get("channel_id")})
        loading = _json_field(params, "loading_messages")
        if loading is not None and (
            not isinstance(loading, list)
            or len(loading) > MAX_LOADING_MESSAGES
            or not all(isinstance(m, str) and m for m in loading)
        ):
            raise _SlackError("invalid_arguments")
        self._statuses.append(
            {
                "channel_id": channel,
                "thread_ts": thread,
                "status": params.get("status"),
                "loading_messages": loading,
                "at": self._clock(),
            }
        )
        return {}

    def _set_prompts(self, params: JsonDict) -> JsonDict:
        """`assistant.threads.setSuggestedPrompts`: pinned to the app's Messages tab (no
        thread_ts, the Agent messaging experience) or to an assistant thread; only in the
        app's DM."""
        channel, thread = params.get("channel_id"), params.get("thread_ts")
        if not isinstance(channel, str) or not channel or not isinstance(thread, str | None):
            raise _SlackError("invalid_arguments")
        if not channel.startswith("D"):
            raise _SlackError("not_allowed")  # prompts live in the app's DM
        prompts = _json_field(params, "prompts")
        if not isinstance(prompts, list) or not prompts or len(prompts) > MAX_PROMPTS:
            raise _SlackError("invalid_arguments")
        title = params.get("title")
        self._prompts.append(
            {"channel_id": channel, "thread_ts": thread, "title": title, "prompts": prompts}
        )
        return {}

    def shown_status(self, channel: str, thread: str) -> str:
        """What a person sees under the thread now: the latest status set, unless it was
        cleared, the app posted in the thread since, or 2 minutes passed."""
        with self._cond:
            found = [
                s for s in self._statuses if s["channel_id"] == channel and s["thread_ts"] == thread
            ]
            if not found or not found[-1]["status"]:
                return ""
            latest = found[-1]
            if self._clock() - latest["at"] > STATUS_TIMEOUT:
                return ""
            posted = any(
                m.get("user") == self.bot_user_id
                and m.get("thread_ts") == thread
                and float(m["ts"]) > latest["at"]
                for m in self._channels.get(channel, [])
            )
            return "" if posted else str(latest["status"])

    def _users_info(self, params: JsonDict) -> JsonDict:
        uid = str(params.get("user") or "")
        info = self._users.get(uid)
        if info is None and uid == self._me.bot_user_id:
            info = {"is_bot": True, "name": "wakeful"}
        if info is None:
            raise _SlackError("user_not_found")
        tz = str(info.get("tz", "UTC"))
        user: JsonDict = {
            "id": uid,
            "team_id": self._me.team_id,
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
