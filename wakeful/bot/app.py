"""The Slack front: signed HTTP requests (or Socket Mode) in, inbox events out, and an answer to
Slack only after the event is committed.

`SlackFront` owns a Bolt app built with `process_before_response=True`, so a listener finishes
(the insert has committed) before the acknowledgement leaves. The WSGI callable in front of Bolt
enforces what Bolt leaves open: a body cap (413), the signature before anything is parsed (401),
a malformed body (400), 503 when the store cannot take the write, and 200 instead of Bolt's 404
for events this app does not handle (a 404 makes Slack retry and counts toward disabling events).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs

from slack_bolt import Ack, App, BoltResponse
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request import BoltRequest
from slack_sdk.signature import Clock, SignatureVerifier

from ..core.effects import Message
from ..core.errors import InvalidInput, StoreUnavailable
from ..core.loops import Kicker, Wakeup
from ..core.store.contract import Store
from . import blocks

log = logging.getLogger("wakeful.app")
BODY_CAP = 1024 * 1024
"""Largest request body accepted, in bytes (413 above). Slack's payloads are far smaller."""
EVENTS_PATH = "/slack/events"
IGNORED_SUBTYPES = frozenset({"message_changed", "message_deleted", "bot_message"})
ACCEPTED_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})
Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class SlackFront:
    """Slack requests into core: messages and mentions to `ingest`, clicks to `answer`."""

    def __init__(
        self,
        store: Store,
        signing_secret: str,
        bot_user_id: str = "",
        bot_id: str = "",
        wakeup: Kicker | None = None,
        outbox_wakeup: Kicker | None = None,
        clock: Callable[[], int] = lambda: int(time.time()),
        verifier_clock: Clock | None = None,
        body_cap: int = BODY_CAP,
    ) -> None:
        self.store = store
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.wakeup: Kicker = wakeup or Wakeup()
        """Kicked when an event is stored (the worker's)."""
        self.outbox_wakeup: Kicker = outbox_wakeup or self.wakeup
        """Kicked when a reply is queued (the dispatcher's)."""
        self.clock = clock
        self.body_cap = body_cap
        self.verifier = SignatureVerifier(signing_secret, clock=verifier_clock or Clock())

        def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
            # No token here: listeners only write to the store; the dispatcher holds it.
            return AuthorizeResult(
                enterprise_id=enterprise_id,
                team_id=team_id,
                bot_user_id=self.bot_user_id or None,
                bot_id=self.bot_id or None,
            )

        bolt_log = logging.getLogger("wakeful.bolt")
        bolt_log.addFilter(_quiet_token_notice)
        self.app = App(
            signing_secret=signing_secret,
            process_before_response=True,
            authorize=authorize,
            logger=bolt_log,
        )
        self.app.event("message")(self._on_message)
        self.app.event("app_mention")(self._on_mention)
        self.app.action(blocks.APPROVE)(self._on_approve)
        self.app.action(blocks.DENY)(self._on_deny)
        self.app.error(self._on_error)

    # -- Bolt side ----------------------------------------------------------------------------

    def _is_ours_or_noise(self, event: dict[str, Any]) -> bool:
        user = event.get("user")
        return (
            bool(event.get("bot_id"))
            or event.get("subtype") in IGNORED_SUBTYPES
            or event.get("subtype") not in ACCEPTED_SUBTYPES
            or not isinstance(user, str)
            or not user
            or (bool(self.bot_user_id) and user == self.bot_user_id)
        )

    def _ingest(self, body: dict[str, Any], event: dict[str, Any], kind: str) -> None:
        team = str(body.get("team_id") or event.get("team") or "")
        event_id = body.get("event_id")
        if not team or not isinstance(event_id, str):
            raise InvalidInput("event envelope lacks team_id or event_id")
        payload = {
            "kind": kind,
            "text": event.get("text") or "",
            "channel": event.get("channel"),
            "ts": event.get("ts"),
            "thread_ts": event.get("thread_ts"),
            "user": event.get("user"),
            "team": team,
            "channel_type": event.get("channel_type"),
        }
        if not isinstance(payload["channel"], str):
            raise InvalidInput("message event has no channel")
        result = self.store.ingest(
            f"{team}:{event['user']}", "slack", event_id, payload, self.clock()
        )
        if result.stored:
            self.wakeup.kick()

    def _on_message(self, ack: Ack, body: dict[str, Any], event: dict[str, Any]) -> None:
        if event.get("channel_type") == "im" and not self._is_ours_or_noise(event):
            self._ingest(body, event, "message")
        ack()

    def _on_mention(self, ack: Ack, body: dict[str, Any], event: dict[str, Any]) -> None:
        if not self._is_ours_or_noise(event):
            self._ingest(body, event, "mention")
        ack()

    def _on_approve(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        self._on_click(body, action, "yes")
        ack()

    def _on_deny(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        self._on_click(body, action, "no")
        ack()

    def _on_click(self, body: dict[str, Any], action: dict[str, Any], answer: str) -> None:
        user = (body.get("user") or {}).get("id")
        team = (body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id")
        request_id = action.get("value")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        if not isinstance(user, str) or not user:
            raise InvalidInput("click has no user")
        now = self.clock()
        try:
            outcome, stored = self.store.answer_detail(str(request_id or ""), answer, user, now)
        except InvalidInput:
            outcome, stored = "unknown", False  # tampered or malformed id: nothing answered
        if stored:
            self.wakeup.kick()  # the answer event resumes the agent's run
            return
        note = self._click_note(str(request_id), outcome)
        if note is not None and isinstance(channel, str) and channel:
            text, note_blocks = note
            inbox = f"{team or 'T'}:{user}"
            self.store.post(
                inbox,
                [Message(channel, text, blocks=note_blocks, kind="ephemeral", user=user)],
                now,
            )
            self.outbox_wakeup.kick()

    def _click_note(
        self, request_id: str, outcome: str
    ) -> tuple[str, list[dict[str, Any]] | None] | None:
        """What the tapper alone sees when their tap changed nothing."""
        if outcome == "unknown":
            return "This approval request is unknown; nothing was done.", None
        state = self.store.approval(request_id)
        if outcome == "forbidden":
            requester = state.requester if state else "the requester"
            return blocks.NOT_YOURS, blocks.not_yours(requester)
        if state is None or state.answer is None:
            return None
        line = blocks.outcome_line(state.answer, state.answered_by, state.answered_at)
        return f"Already answered: {line}", None

    def _on_error(self, error: Exception, logger: logging.Logger) -> BoltResponse:
        if isinstance(error, StoreUnavailable):
            logger.warning("store unavailable; asking Slack to retry: %s", error)
            return BoltResponse(status=503, body="store unavailable; please retry")
        if isinstance(error, InvalidInput):
            return BoltResponse(status=400, body=f"bad request: {error}")
        logger.exception("listener failed", exc_info=error)
        return BoltResponse(status=500, body="internal error")

    # -- Socket Mode side ---------------------------------------------------------------------

    def on_socket_request(self, client: Any, req: Any) -> None:
        """A Socket Mode envelope: the same filter as HTTP, then Bolt, then the ack.

        The ack (the envelope response) goes only after Bolt returned, so only after the insert
        committed; a 503 (store down) is not acknowledged and Slack redelivers. What this app
        does not handle, or cannot read, is acknowledged at once so Slack stops resending it.
        """
        from slack_bolt.adapter.socket_mode.internals import build_headers, send_response
        from slack_sdk.socket_mode.response import SocketModeResponse

        started = time.time()
        payload = req.payload
        try:
            if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
                raise ValueError("envelope payload is not a Slack object")
            _check_depth(payload)
            _check_shape(payload)
            handled = _handled(payload)
        except (ValueError, RecursionError) as exc:
            log.warning("socket mode: unreadable envelope acknowledged and dropped: %s", exc)
            handled = False
        if not handled:
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        try:
            request = BoltRequest(mode="socket_mode", body=payload, headers=build_headers(req))
        except Exception as exc:  # Bolt could not read it: drop it, as HTTP answers 400
            log.warning("socket mode: envelope dropped: %s", type(exc).__name__)
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        send_response(client, req, self.app.dispatch(request), started)

    # -- HTTP side ----------------------------------------------------------------------------

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        status, headers, body = self.handle(environ)
        start_response(status, headers)
        return [body]

    def handle(self, environ: Environ) -> tuple[str, list[tuple[str, str]], bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/healthz":
            return self._health()
        if path != EVENTS_PATH:
            return _reply(404, "not found")
        if method != "POST":
            return _reply(405, "use POST")
        raw_length = environ.get("CONTENT_LENGTH") or ""
        try:
            length = int(raw_length) if raw_length else -1
        except ValueError:
            return _reply(400, "bad Content-Length")
        if length > self.body_cap:
            return _reply(413, f"body larger than {self.body_cap} bytes")
        stream = environ["wsgi.input"]
        data: bytes = stream.read(length if length >= 0 else self.body_cap + 1)
        if len(data) > self.body_cap:
            return _reply(413, f"body larger than {self.body_cap} bytes")
        timestamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", "")
        signature = environ.get("HTTP_X_SLACK_SIGNATURE", "")
        if not self._signed(data, timestamp, signature):
            return _reply(401, "invalid signature or stale timestamp")
        try:
            text = data.decode("utf-8")
            parsed = _parse(text, environ.get("CONTENT_TYPE", ""))
        except (ValueError, RecursionError) as exc:
            return _reply(400, f"malformed body: {str(exc)[:200]}")
        if not _handled(parsed):
            # Acknowledge what this app does not handle (Slack retries a 404 and counts it
            # toward switching the app's events off) without handing it to Bolt at all.
            return _reply(200, "")
        headers: dict[str, str | Sequence[str]] = {
            key[5:].replace("_", "-").lower(): [str(value)]
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        headers["content-type"] = [environ.get("CONTENT_TYPE", "")]
        try:
            request = BoltRequest(body=text, query=environ.get("QUERY_STRING", ""), headers=headers)
        except Exception as exc:  # Bolt could not read the payload's structure: bad input
            return _reply(400, f"malformed body: {type(exc).__name__}")
        try:
            response = self.app.dispatch(request)
        except StoreUnavailable:
            return _reply(503, "store unavailable; please retry")
        if response.status == 404:
            return _reply(200, "")  # an event type or payload this app does not handle
        out_headers = [
            (k, v)
            for k, values in response.headers.items()
            for v in values
            if k.lower() != "content-length"
        ]
        body = (response.body or "").encode("utf-8")
        return f"{response.status} {_REASONS.get(response.status, 'OK')}", out_headers, body

    def _signed(self, data: bytes, timestamp: str, signature: str) -> bool:
        # A Unix time has 10 digits; anything much longer is an attack on int() or the clock.
        if not signature or not timestamp.isdigit() or len(timestamp) > 12:
            return False
        try:
            return bool(self.verifier.is_valid(data, timestamp, signature))
        except (ValueError, TypeError, UnicodeError, OverflowError):
            return False

    def _health(self) -> tuple[str, list[tuple[str, str]], bytes]:
        ok = self.store.healthy()
        body = json.dumps({"ok": ok, "store": type(self.store).__name__}).encode()
        status = "200 OK" if ok else "503 Service Unavailable"
        return status, [("Content-Type", "application/json")], body


def _quiet_token_notice(record: logging.LogRecord) -> bool:
    """Bolt notes that SLACK_BOT_TOKEN is ignored when `authorize` is given; that is the point."""
    return "will be ignored" not in record.getMessage()


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _reply(status: int, text: str) -> tuple[str, list[tuple[str, str]], bytes]:
    return (
        f"{status} {_REASONS.get(status, 'Error')}",
        [("Content-Type", "text/plain; charset=utf-8")],
        text.encode("utf-8"),
    )


MAX_DEPTH = 64
"""Deepest JSON nesting accepted; Slack's payloads stay in single digits."""
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


def _parse(text: str, content_type: str) -> dict[str, Any]:
    """Check the body is what Slack sends before Bolt reads it: a JSON object, or a form with
    exactly one `payload` field holding one (or a slash-command form), whose fields have the
    types the handlers read. Raises ValueError with what is wrong."""
    if "application/x-www-form-urlencoded" in content_type:
        form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
        if "payload" in form:
            if len(form["payload"]) != 1 or len(form) != 1:
                raise ValueError("form body must hold exactly one 'payload' field")
            value = json.loads(form["payload"][0])
        elif "command" in form:
            return {"type": "command"}
        else:
            raise ValueError("form body has no 'payload' field")
    else:
        value = json.loads(text)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError("body is not a Slack event or interaction object")
    _check_depth(value)
    _check_shape(value)
    return value


def _handled(body: dict[str, Any]) -> bool:
    """Requests this app has listeners for; everything else is acknowledged and dropped."""
    kind = body["type"]
    if kind == "url_verification":
        return True
    if kind == "event_callback":
        return body["event"]["type"] in ("message", "app_mention")
    if kind == "block_actions":
        return any(a["action_id"] in (blocks.APPROVE, blocks.DENY) for a in body["actions"])
    return False


def _check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _check_shape(body: dict[str, Any]) -> None:
    """The fields Bolt and the handlers read must have Slack's types, or Bolt fails with a 500."""
    for name in _OBJECT_FIELDS:
        if name in body and not isinstance(body[name], dict):
            if name == "enterprise" and body[name] is None:
                continue  # Slack sends "enterprise": null outside Enterprise Grid
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
        if not isinstance(body.get("user"), dict) or not isinstance(body["user"].get("id"), str):
            raise ValueError("block_actions needs a user with an id")
