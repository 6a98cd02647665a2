"""What a Slack body must look like before Bolt reads it.

Bolt trusts Slack's shapes: a field of the wrong type makes it fail with a 500, which Slack
retries. So every body is checked first: a JSON object (or a form holding one), not nested
absurdly deep, whose fields the handlers read have Slack's types. A ValueError says what is
wrong; the HTTP front answers it with 400 and Socket Mode acknowledges and drops it.

Every Slack id a body carries (users, teams, orgs, conversations) must be one: `SLACK_ID`, checked
here, before anything is stored or logged. An id becomes an inbox name (`<team>:<user>`) and
appears in log lines, so a signed body with a newline or an escape in `user` would otherwise
forge a log line and name an inbox of its own. The error names the field, never its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

from wakeful.bot.slack import blocks, privacy
from wakeful.bot.slack.text import addressed
from wakeful.core.errors import InvalidInput
from wakeful.core.events import Message

MAX_DEPTH = 64
"""Deepest JSON nesting accepted; Slack's payloads stay in single digits."""
HANDLED_EVENTS = (
    "message",
    "app_mention",
    "app_home_opened",
    "assistant_thread_started",
    "tokens_revoked",
    "app_uninstalled",
)
COMMAND = "/wakeful"
REQUEUE = "wakeful_requeue"
"""The Home tab's Requeue button (approvers only)."""
FEEDBACK = blocks.FEEDBACK
"""The action_id of the feedback buttons under a reply (Block Kit `feedback_buttons`, whose
positive and negative buttons carry the values `positive` and `negative`)."""
FORGET = privacy.FORGET
FORGET_CANCEL = privacy.FORGET_CANCEL
"""The forget prompt's buttons (`/wakeful forget`): their value is the user id it asked."""
_OBJECT_FIELDS = ("user", "team", "channel", "container", "enterprise", "message", "event")
_TEXT_FIELDS = (
    "type",
    "subtype",
    "user",
    "text",
    "channel",
    "channel_type",
    "ts",
    "thread_ts",
    "bot_id",
    "team",
)


SLACK_ID = re.compile(r"[A-Z0-9]{1,32}")
"""What a Slack id is (U…, W…, T…, E…, C…, D…, G…), matched whole (`fullmatch`: `$` would let
a trailing newline through)."""
_ID_FIELDS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    ((), ("team_id", "enterprise_id", "user_id", "channel_id", "team")),
    ((), ("context_team_id", "context_enterprise_id")),
    (("user",), ("id", "team_id")),
    (("team",), ("id", "enterprise_id")),
    (("enterprise",), ("id",)),
    (("channel",), ("id",)),
    (("container",), ("channel_id",)),
    (("view",), ("team_id", "app_installed_team_id")),
    (("event",), ("user", "team", "channel", "user_team", "source_team")),
    (("event", "assistant_thread"), ("user_id", "channel_id")),
    (("event", "assistant_thread", "context"), ("team_id", "enterprise_id", "channel_id")),
)
"""Where a body names a Slack id: (path of objects, fields there). A field holding an object
(`team` in an interaction) is checked by its own path; `authorizations` and the user ids of
`tokens_revoked` are lists, checked in `_ids`."""


def parse(text: str, content_type: str) -> dict[str, Any]:
    """The body as Slack sends it: a JSON object, or a form with exactly one `payload` field
    holding one (or a slash-command form), whose fields have the types the handlers read.
    Parsed once: the front hands this very dict to Bolt. Raises ValueError with what is
    wrong."""
    if "application/x-www-form-urlencoded" in content_type:
        form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
        if "payload" in form:
            if len(form["payload"]) != 1 or len(form) != 1:
                raise ValueError("form body must hold exactly one 'payload' field")
            text = form["payload"][0]
            value = json.loads(text)
        elif "command" in form:
            # A slash command: its form fields as Bolt reads them (the last of a repeated
            # field), marked as a command so the handlers tell it from other bodies.
            command = {**{k: v[-1] for k, v in form.items()}, "type": "command"}
            check_ids(command)
            return command
        else:
            raise ValueError("form body has no 'payload' field")
    else:
        value = json.loads(text)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError("body is not a Slack event or interaction object")
    if text.count("{") + text.count("[") > MAX_DEPTH:
        check_depth(value)  # fewer brackets than that cannot nest deeper: no walk needed
    check_shape(value)
    return value


def check(body: dict[str, Any]) -> None:
    """Depth and shape of a parsed body (HTTP or a Socket Mode envelope); ValueError if off."""
    check_depth(body)
    check_shape(body)


def handled(body: dict[str, Any]) -> bool:
    """Requests this app has listeners for; everything else is acknowledged and dropped."""
    kind = body["type"]
    if kind == "url_verification":
        return True
    if kind == "event_callback":
        return body["event"]["type"] in HANDLED_EVENTS
    if kind == "block_actions":
        ours = (blocks.APPROVE, blocks.DENY, REQUEUE, FEEDBACK, FORGET, FORGET_CANCEL)
        return any(a["action_id"] in ours for a in body["actions"])
    if kind == "command":
        return body.get("command") == COMMAND
    return False


def check_ids(body: dict[str, Any]) -> None:
    """Every Slack id the body names is one (`SLACK_ID`); a null or absent one is no id, and an
    empty org id is none either. ValueError names the field, not what it held."""
    for where, value in _ids(body):
        if value is None or (value == "" and where.endswith("enterprise_id")):
            continue
        if not (isinstance(value, str) and SLACK_ID.fullmatch(value)):
            raise ValueError(f"field {where!r} is not a Slack id (A-Z and 0-9, 1 to 32)")


def _ids(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(field path, value) of every id field present in `body`; objects are walked elsewhere."""
    for path, names in _ID_FIELDS:
        node: Any = body
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        for name in names:
            if name in node and not isinstance(node[name], dict):
                yield ".".join((*path, name)), node[name]
    auths = body.get("authorizations")
    for i, auth in enumerate(auths if isinstance(auths, list) else ()):
        if isinstance(auth, dict):
            for name in ("team_id", "user_id", "enterprise_id"):
                if name in auth:
                    yield f"authorizations.{i}.{name}", auth[name]
    event = body.get("event")
    tokens = event.get("tokens") if isinstance(event, dict) else None
    if isinstance(tokens, dict):
        for kind in ("bot", "oauth"):
            users = tokens.get(kind)
            for i, user in enumerate(users if isinstance(users, list) else ()):
                yield f"event.tokens.{kind}.{i}", user


def check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def check_shape(body: dict[str, Any]) -> None:
    """The fields Bolt and the handlers read must have Slack's types, or Bolt fails with a 500;
    the ids among them must be Slack ids (`check_ids`)."""
    for name in _OBJECT_FIELDS:
        if name in body and not isinstance(body[name], dict):
            if name in ("enterprise", "team") and body[name] is None:
                # Slack sends "enterprise": null outside Enterprise Grid, and "team": null in
                # interactions from an org-wide install (the team is then user.team_id).
                continue
            if name == "team" and isinstance(body[name], str) and body["type"] == "event_callback":
                continue  # events carry team as an id; interactions carry an object
            raise ValueError(f"field {name!r} must be an object")
    auths = body.get("authorizations")
    if auths is not None and not (
        isinstance(auths, list) and all(isinstance(a, dict) for a in auths)
    ):
        raise ValueError("field 'authorizations' must be a list of objects")
    for name in ("event_id", "team_id", "api_app_id", "challenge", "token"):
        if name in body and body[name] is not None and not isinstance(body[name], str):
            raise ValueError(f"field {name!r} must be a string")
    if body["type"] == "event_callback":
        event = body.get("event")
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ValueError("an event_callback needs an 'event' object with a type")
        for name in _TEXT_FIELDS:
            if name in event and event[name] is not None and not isinstance(event[name], str):
                raise ValueError(f"event field {name!r} must be a string")
    if body["type"] == "url_verification" and not isinstance(body.get("challenge"), str):
        raise ValueError("url_verification needs a challenge string")
    if body["type"] == "block_actions":
        actions = body.get("actions")
        if not (
            isinstance(actions, list)
            and actions
            and all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions)
        ):
            raise ValueError("block_actions needs a non-empty list of actions with action_id")
        user = body.get("user")
        if not isinstance(user, dict) or not isinstance(user.get("id"), str):
            raise ValueError("block_actions needs a user with an id")
        if body.get("team") is None and not isinstance(user.get("team_id"), str):
            raise ValueError("block_actions needs a team, or a user with a team_id")
    check_ids(body)


def said(
    body: dict[str, Any], event: dict[str, Any], mention: bool, me: str | None
) -> tuple[str, Message]:
    """(Slack's event id, the `Message`) of a person's message or @mention event, `me` being
    the bot's user id: `text` is what they wrote to the agent (the leading `<@ME>` of a
    mention removed), `raw_text` the whole text. InvalidInput when the event lacks a part."""
    team = str(body.get("team_id") or event.get("team") or "")
    event_id = body.get("event_id")
    if not team or not isinstance(event_id, str):
        raise InvalidInput("event envelope lacks team_id or event_id")
    channel, user, ts = event.get("channel"), event.get("user"), event.get("ts")
    if not isinstance(channel, str):
        raise InvalidInput("message event has no channel")
    if not isinstance(user, str):
        raise InvalidInput("event has no user")
    raw = str(event.get("text") or "")
    return event_id, Message(
        text=addressed(raw, me),
        raw_text=raw,
        user=user,
        team=team,
        channel=channel,
        ts=str(ts or ""),
        thread_ts=event.get("thread_ts") or None,
        channel_type=str(event.get("channel_type") or ("channel" if mention else "im")),
        mention=mention,
    )
