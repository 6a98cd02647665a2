"""What a Slack body must look like before Bolt reads it.

Bolt trusts Slack's shapes: a field of the wrong type makes it fail with a 500, which Slack
retries. So every body is checked first: a JSON object (or a form holding one), not nested
absurdly deep, whose fields the handlers read have Slack's types. A ValueError says what is
wrong; the HTTP front answers it with 400 and Socket Mode acknowledges and drops it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from wakeful.bot import blocks

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
            return {**{k: v[-1] for k, v in form.items()}, "type": "command"}
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
        ours = (blocks.APPROVE, blocks.DENY, REQUEUE, FEEDBACK)
        return any(a["action_id"] in ours for a in body["actions"])
    if kind == "command":
        return body.get("command") == COMMAND
    return False


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
    """The fields Bolt and the handlers read must have Slack's types, or Bolt fails with a 500."""
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
