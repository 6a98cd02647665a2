"""Hostile bodies that are signed: forms and clicks, text that must round-trip, bodies of the
wrong shape and forged Slack ids (tests/acceptance/hostile/conftest.py has the rules)."""

from __future__ import annotations

import json
import logging
import urllib.parse
import uuid
from typing import Any

import pytest

from tests.support.hostile import (
    APPROVER,
    DM_CHANNEL,
    DM_USER,
    FORM_CT,
    INTRUDER,
    JSON_CT,
    OWNER,
    STANDING,
    TEAM,
    Live,
    as_form,
    as_json,
    assert_nothing_stored,
    assert_only_ephemerals_for,
    click,
    envelope,
    make_approval,
    mention_event,
    message_event,
    send,
    signed,
    snapshot,
)
from wakeful.bot.front import payloads
from wakeful.bot.slack import blocks

# -- form bodies and clicks ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"payload=not-json",
        b"payload=%7B%22type%22%3A",
        b"payload=%5B1%2C2%5D",
        b"payload=%22block_actions%22",
        b"payload=null",
        b"payload=42",
        b"payload=%7B%7D",
        b"payload=%7B%22type%22%3A5%7D",
        b"payload=",
        b"payload=%FF%FE",
        b"foo=bar",
        b"",
        b"a&b",
        b"payload",
        b"ssl_check=1&token=x",
    ],
)
def test_form_with_broken_payload_is_400(live: Live, body: bytes) -> None:
    before = snapshot(live)
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status == 400, answer
    assert_nothing_stored(live, before, answer)


@pytest.mark.parametrize("action", [blocks.APPROVE, blocks.DENY])
def test_click_on_another_users_approval_changes_nothing(live: Live, action: str) -> None:
    request_id = f"hx-{uuid.uuid4().hex[:12]}"
    owner = f"U0OWN{uuid.uuid4().hex[:6].upper()}"
    make_approval(live.store, request_id, owner, (APPROVER,))
    before = snapshot(live)
    body = as_form(click(INTRUDER, request_id, action))
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status == 200, answer
    state = live.store.approval(request_id)
    assert state is not None and state.answer is None, state
    assert live.store.event_by_key("approval", request_id) is None
    assert_only_ephemerals_for(live, before, INTRUDER, answer)
    # Control: the same click by the owner does answer, so the refusal above was a refusal.
    body = as_form(click(owner, request_id, action))
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status == 200, answer
    state = live.store.approval(request_id)
    expected = "yes" if action == blocks.APPROVE else "no"
    assert state is not None and (state.answer, state.answered_by) == (expected, owner), state
    assert live.store.event_by_key("approval", request_id) is not None


ODD_VALUES = {
    "unknown": lambda rid: f"hx-unknown-{uuid.uuid4().hex[:8]}",
    "empty": lambda rid: "",
    "10000-chars": lambda rid: "x" * 10_000,
    "10000-chars-prefixed": lambda rid: rid + "x" * 10_000,
    "sql-drop": lambda rid: "Robert'); DROP TABLE approvals;--",
    "sql-or": lambda rid: rid + "' OR '1'='1",
    "sql-like-wildcard": lambda rid: "%",
    "nul-suffix": lambda rid: rid + "\x00",
    "space-suffix": lambda rid: rid + " ",
    "upper-case": lambda rid: rid.upper(),
    "lone-surrogate": lambda rid: "\ud800",
    "rid-plus-surrogate": lambda rid: rid + "\udfff",
}


@pytest.mark.parametrize("odd", list(ODD_VALUES))
def test_click_with_odd_value_answers_nothing(live: Live, odd: str) -> None:
    """The clicker is the approval's own requester: only the value stands between the click
    and an answer, so any answer here means the value matched something it must not."""
    request_id = f"hx-{uuid.uuid4().hex[:12]}"
    owner = f"U0OWN{uuid.uuid4().hex[:6].upper()}"
    make_approval(live.store, request_id, owner, ())
    before = snapshot(live)
    body = as_form(click(owner, ODD_VALUES[odd](request_id)))
    answer = send(live, body, signed(body, FORM_CT))
    assert answer.status in (200, 400), answer
    state = live.store.approval(request_id)
    assert state is not None and state.answer is None, state
    assert_only_ephemerals_for(live, before, owner, answer)


# -- text round trip -----------------------------------------------------------------------

ROUND_TRIP = {
    "sql": "Robert'); DROP TABLE events;--",
    "sql-2": "1; DELETE FROM approvals WHERE 1=1; -- ' OR '1'='1",
    "emoji": "👍🏽 👨‍👩‍👧‍👦 🇩🇪 😀",
    "rtl": "שלום \u202eevil\u202c مرحبا",
    "nul": "before\x00after",
    "controls": "line1\nline2\r\n\ttab\x07\x1b[31m",
    "zero-width": "\ufeff\u200b\u200d",
    "combining": "e\u0301 n\u0303",
    "quotes-backslashes": '\\"\\u0000 "quoted" \\\\ \\ud800',
    "format-strings": "%s %d {0} ${x} {{x}} %(name)s",
    "edges": "\uffff\U0010ffff\x7f\x80",
}


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "utf8"])
@pytest.mark.parametrize("name", list(ROUND_TRIP))
def test_dm_text_round_trips_verbatim(live: Live, name: str, ensure_ascii: bool) -> None:
    text = ROUND_TRIP[name]
    doc = envelope(message_event(text))
    body = json.dumps(doc, ensure_ascii=ensure_ascii).encode("utf-8")
    before = snapshot(live)
    answer = send(live, body, signed(body))
    assert answer.status == 200, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    assert stored is not None, "the DM was not stored"
    kept = text.replace("\x00", "\ufffd")  # the one character PostgreSQL cannot hold
    assert stored.payload["text"] == kept, (stored.payload["text"], kept)
    after = snapshot(live)  # every table is still there to count
    assert after.events == before.events + 1


@pytest.mark.parametrize("text", ["\ud800", "x\udfffy", "\ud83d", "ok \udc00\ud800 ok"])
def test_dm_with_lone_surrogate_is_stored_with_fffd_in_its_place(live: Live, text: str) -> None:
    """A lone surrogate (escaped, so the body is valid UTF-8 and valid JSON) cannot be stored as
    UTF-8 text on either store: the message is kept, each surrogate stored as U+FFFD."""
    doc = envelope(message_event(text))
    body = as_json(doc)
    assert b"\\ud" in body
    answer = send(live, body, signed(body))
    assert answer.status == 200, answer
    stored = live.store.event_by_key("slack", doc["event_id"])
    assert stored is not None, "the DM was not stored"
    kept = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    assert stored.payload["text"] == kept


# -- signed bodies of the wrong shape ------------------------------------------------------


def _envelope_with(**changes: Any) -> bytes:
    doc = envelope(message_event("shape"))
    for path, value in changes.items():
        parent = doc
        keys = path.split("__")
        for key in keys[:-1]:
            parent = parent[key]
        parent[keys[-1]] = value
    return as_json(doc)


def _click_with(**changes: Any) -> bytes:
    doc = click(INTRUDER, STANDING)
    doc.update(changes)
    return as_form(doc)


WRONG_SHAPES: dict[str, tuple[bytes, str]] = {
    "event-null": (_envelope_with(event=None), JSON_CT),
    "event-string": (_envelope_with(event="message"), JSON_CT),
    "event-list": (_envelope_with(event=[1]), JSON_CT),
    "event-user-int": (_envelope_with(event__user=5), JSON_CT),
    "event-user-list": (_envelope_with(event__user=["U1"]), JSON_CT),
    "event-subtype-list": (_envelope_with(event__subtype=["x"]), JSON_CT),
    "event-text-int": (_envelope_with(event__text=5), JSON_CT),
    "event-thread_ts-object": (_envelope_with(event__thread_ts={"a": 1}), JSON_CT),
    "authorizations-string": (_envelope_with(authorizations="x"), JSON_CT),
    "authorizations-list-of-strings": (_envelope_with(authorizations=["x"]), JSON_CT),
    "click-user-string": (_click_with(user=INTRUDER), FORM_CT),
    "click-team-string": (_click_with(team=TEAM), FORM_CT),
    "click-channel-string": (_click_with(channel=DM_CHANNEL), FORM_CT),
    "click-actions-string": (_click_with(actions="approve"), FORM_CT),
    "click-actions-empty": (_click_with(actions=[]), FORM_CT),
    "click-actions-list-of-strings": (_click_with(actions=["approve"]), FORM_CT),
    "unhandled-type-user-int": (as_json({"type": "view_submission", "user": 5}), JSON_CT),
    "duplicate-payload-fields": (
        b"payload=" + urllib.parse.quote(json.dumps({"type": "shortcut"})).encode() + b"&payload=5",
        FORM_CT,
    ),
}


@pytest.mark.parametrize("shape", list(WRONG_SHAPES))
def test_signed_body_of_the_wrong_shape_is_refused_not_5xx(live: Live, shape: str) -> None:
    """Each of these is a JSON object with a string `type`, so it passes the front's first check;
    a field the app (or Bolt) reads has the wrong type. Rule: 400 (or 200, ignored), never a 5xx,
    and nothing stored but an ephemeral note to a clicker."""
    body, content_type = WRONG_SHAPES[shape]
    before = snapshot(live)
    answer = send(live, body, signed(body, content_type))
    assert answer.status in (200, 400), answer
    if content_type == FORM_CT:
        assert_only_ephemerals_for(live, before, INTRUDER, answer)
    else:
        assert_nothing_stored(live, before, answer)


# -- forged ids (issue 34, item 6 a) -------------------------------------------------------

FORGED_IDS = {
    "newline-log-line": "U0DM\n2026-01-01 00:00:00,000 INFO wakeful: \x1b[2Jall clear",
    "trailing-newline": "U0DM\n",
    "esc": "U0DM\x1b[31m",
    "carriage-return": "U0DM\rU0OWNER",
    "line-separator": "U0DM\u2028x",
    "nul": "U0DM\x00",
    "lower-case": "u0dm",
    "colon": "U0DM:U0OWNER",
    "slash": "U0DM/../x",
    "space": "U0 DM",
    "33-chars": "U" + "0" * 32,
    "fullwidth-digit": "U\uff10DM",
    "empty": "",
}
"""What a signed body once carried in `user` (a newline and an escape forged a log line and
became an inbox name), and the other ways a string can fail to be a Slack id."""


def _command_form(**changes: str) -> bytes:
    form = {
        "token": "verification-token",
        "team_id": TEAM,
        "team_domain": "hx",
        "channel_id": DM_CHANNEL,
        "channel_name": "directmessage",
        "user_id": DM_USER,
        "user_name": "dm",
        "command": "/wakeful",
        "text": "status",
        "api_app_id": "A0HX",
        "response_url": "https://hooks.slack.com/commands/T0HX/1/x",
        "trigger_id": "1.2.3",
        **changes,
    }
    return urllib.parse.urlencode(form).encode()


def _home_event(**changes: Any) -> dict[str, Any]:
    event = {"type": "app_home_opened", "user": DM_USER, "channel": DM_CHANNEL, "tab": "home"}
    return envelope({**event, "event_ts": "1700000000.000500", **changes})


def _thread_started(user: str = DM_USER, channel: str = DM_CHANNEL) -> dict[str, Any]:
    thread = {"user_id": user, "channel_id": channel, "thread_ts": "1700000000.000600"}
    return envelope({"type": "assistant_thread_started", "assistant_thread": thread})


def _owner_click(path: str, value: Any) -> dict[str, Any]:
    """OWNER's own Approve on the standing approval (it would answer it), one id forged."""
    doc = click(OWNER, STANDING)
    node = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return doc


def _at(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node: Any = doc
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[keys[-1]] = value
    return doc


FORGED_FIELDS: dict[str, Any] = {
    "message.event.user": lambda v: (as_json(envelope(message_event(user=v))), JSON_CT),
    "message.event.channel": lambda v: (as_json(envelope(message_event(channel=v))), JSON_CT),
    "message.event.team": lambda v: (
        as_json(_at(envelope(message_event()), "event.team", v)),
        JSON_CT,
    ),
    "message.team_id": lambda v: (as_json(_at(envelope(message_event()), "team_id", v)), JSON_CT),
    "message.enterprise_id": lambda v: (
        as_json({**envelope(message_event()), "enterprise_id": v}),
        JSON_CT,
    ),
    "message.authorizations.team_id": lambda v: (
        as_json(_at(envelope(message_event()), "authorizations.0.team_id", v)),
        JSON_CT,
    ),
    "message.authorizations.enterprise_id": lambda v: (
        as_json(_at(envelope(message_event()), "authorizations.0.enterprise_id", v)),
        JSON_CT,
    ),
    "mention.event.user": lambda v: (as_json(envelope(mention_event(user=v))), JSON_CT),
    "home-opened.event.user": lambda v: (as_json(_home_event(user=v)), JSON_CT),
    "assistant-thread.user_id": lambda v: (as_json(_thread_started(user=v)), JSON_CT),
    "assistant-thread.channel_id": lambda v: (as_json(_thread_started(channel=v)), JSON_CT),
    "tokens-revoked.bot": lambda v: (
        as_json(envelope({"type": "tokens_revoked", "tokens": {"oauth": [], "bot": [v]}})),
        JSON_CT,
    ),
    "rate-limited.team_id": lambda v: (
        as_json({"type": "app_rate_limited", "team_id": v, "minute_rate_limited": 1}),
        JSON_CT,
    ),
    "click.user.id": lambda v: (as_form(_owner_click("user.id", v)), FORM_CT),
    "click.user.team_id": lambda v: (
        as_form({**_owner_click("user.team_id", v), "team": None}),
        FORM_CT,
    ),
    "click.team.id": lambda v: (as_form(_owner_click("team.id", v)), FORM_CT),
    "click.enterprise.id": lambda v: (
        as_form(_owner_click("enterprise", {"id": v, "name": "hx"})),
        FORM_CT,
    ),
    "click.channel.id": lambda v: (as_form(_owner_click("channel.id", v)), FORM_CT),
    "click.container.channel_id": lambda v: (
        as_form(_owner_click("container.channel_id", v)),
        FORM_CT,
    ),
    "home-requeue.user.id": lambda v: (
        as_form(
            {
                **click(v, "event:1", payloads.REQUEUE),
                "container": {"type": "view", "view_id": "V0HOME"},
            }
        ),
        FORM_CT,
    ),
    "command.user_id": lambda v: (_command_form(user_id=v), FORM_CT),
    "command.team_id": lambda v: (_command_form(team_id=v), FORM_CT),
    "command.channel_id": lambda v: (_command_form(channel_id=v), FORM_CT),
    "command.enterprise_id": lambda v: (_command_form(enterprise_id=v), FORM_CT),
}
"""Every place a handled body (and the one logged unhandled body) names a Slack id."""


class _Lines(logging.Handler):
    """Every log record's text, as written while a request is served."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage() + (record.exc_text or ""))


FORGED_CASES = [
    (field, forged)
    for field in FORGED_FIELDS
    for forged in FORGED_IDS
    # An empty org id is no org: Slack's own bodies outside Enterprise Grid may carry one.
    if not (forged == "empty" and field.endswith("enterprise_id"))
]


@pytest.mark.parametrize(("field", "forged"), FORGED_CASES)
def test_a_forged_slack_id_is_400_stored_nowhere_and_logged_nowhere(
    live: Live, field: str, forged: str
) -> None:
    """A signed body whose id is not `[A-Z0-9]{1,32}` is refused before anything reads it:
    400, nothing stored (no event, no inbox named after it, no note to a clicker, no answer
    to the standing approval OWNER's click would give), and no log line quotes it."""
    value = FORGED_IDS[forged]
    body, ctype = FORGED_FIELDS[field](value)
    lines = _Lines()
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(n) for n in ("wakeful", "wakeful.bolt", "waitress"))]
    levels = [logger.level for logger in loggers]
    root.addHandler(lines)
    for logger in loggers:  # every level: DEBUG lines quote requests too
        logger.setLevel(logging.DEBUG)
    before = snapshot(live)
    try:
        answer = send(live, body, signed(body, ctype))
    finally:
        root.removeHandler(lines)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    assert answer.status == 400, f"{field} = {value!r}: {answer}"
    assert b"not a Slack id" in answer.body, answer
    assert not value or value.encode() not in answer.body, answer
    assert_nothing_stored(live, before, answer)
    state = live.store.approval(STANDING)
    assert state is not None and state.answer is None, state
    if value:
        assert not [t for t in lines.texts if value in t], lines.texts


@pytest.mark.parametrize(
    "field", ["message.event.user", "command.user_id", "click.user.id", "message.team_id"]
)
def test_the_same_body_with_a_real_id_is_served(live: Live, field: str) -> None:
    """The control: the bodies above are served when their id is one (32 characters, the
    cap, included), so what refuses them is the id alone."""
    value = "T" + "0" * 31 if field.endswith("team_id") else "W" + "0" * 31
    body, ctype = FORGED_FIELDS[field](value)
    before = snapshot(live)
    answer = send(live, body, signed(body, ctype))
    assert answer.status == 200, f"{field} = {value!r}: {answer}"
    after = snapshot(live)
    assert after.events + after.outbox > before.events + before.outbox, answer
