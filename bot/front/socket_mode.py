"""Socket Mode: the same front as HTTP over Slack's WebSocket, acknowledged only after the
store committed (the envelope response is Slack's acknowledgement)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from slack_bolt import App
from slack_bolt.request import BoltRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from wakeful.bot.front import payloads

log = logging.getLogger("wakeful.socket_mode")
ENVELOPE_HEADER = "x-wakeful-envelope-id"
"""The envelope's id, handed to the listeners: a slash command's key in Socket Mode, where
there is no X-Slack-Request-Timestamp (Slack redelivers an unacknowledged envelope as is)."""


def on_request(app: App, client: Any, req: Any) -> None:
    """One envelope: the same checks as HTTP, then Bolt, then the acknowledgement.

    The ack goes only after Bolt returned, so only after the insert committed; a 503 (store
    down) is not acknowledged and Slack redelivers. What this app does not handle, or cannot
    read, is acknowledged at once so Slack stops resending it."""
    payload = req.payload
    if req.type == "slash_commands" and isinstance(payload, dict) and "type" not in payload:
        payload = {**payload, "type": "command"}  # the form fields, as a JSON object
    try:
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            raise ValueError("envelope payload is not a Slack object")
        payloads.check(payload)
        handled = payloads.handled(payload)
    except (ValueError, RecursionError) as exc:
        log.warning("socket mode: unreadable envelope acknowledged and dropped: %s", exc)
        handled = False
    if not handled:
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        return
    try:
        headers = _retry_headers(req) or {}
        headers[ENVELOPE_HEADER] = str(req.envelope_id)
        request = BoltRequest(mode="socket_mode", body=payload, headers=headers)
    except Exception as exc:  # Bolt could not read it: drop it, as HTTP answers 400
        log.warning("socket mode: envelope dropped: %s", type(exc).__name__)
        client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
        return
    response = app.dispatch(request)
    if response.status != 200:
        log.info("socket mode: not acknowledged (status %s): %s", response.status, response.body)
        return
    client.send_socket_mode_response(
        SocketModeResponse(envelope_id=req.envelope_id, payload=_ack_payload(response))
    )


def _retry_headers(req: Any) -> dict[str, str | Sequence[str]] | None:
    """Slack's retry count and reason, as the HTTP headers Bolt knows them by."""
    headers: dict[str, str | Sequence[str]] = {}
    if req.retry_attempt is not None:
        headers["x-slack-retry-num"] = str(req.retry_attempt)
    if req.retry_reason is not None:
        headers["x-slack-retry-reason"] = str(req.retry_reason)
    return headers or None


def _ack_payload(response: Any) -> dict[str, Any] | None:
    """What the listener answered, as the envelope response carries it (JSON or text)."""
    if not response.body:
        return None
    content_type = (response.headers.get("content-type") or [""])[0]
    if content_type.startswith("application/json"):
        body: dict[str, Any] = json.loads(response.body)
        return body
    return {"text": response.body}
