"""`gateway_get`: the Claude agent's read-only call to a service through the credential
gateway. The model names a destination and a path; the request goes to the gateway and only
there, which answers what its allowlist permits and refuses the rest (403), another host and
an endpoint outside the list alike. A refusal is told to the model as an error result, so it
tells the person; nothing else is sent anywhere. Written on the public agent API alone."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from wakeful.agents import Gateway, inert

GATEWAY_TOOL = "gateway_get"
ANSWER_CAP = 4000
"""Characters of an answer the model is shown."""
GATEWAY_TOOL_SPEC: dict[str, Any] = {
    "description": (
        "Read from a service through wakeful's credential gateway: GET <path> on <destination> "
        "(e.g. destination 'stripe', path '/v1/refunds/re_123'). The gateway holds the "
        "credentials and allows only the paths its operator listed; anything else is refused."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "destination": {"type": "string", "description": "The gateway's name for it."},
            "path": {"type": "string", "description": "The path, starting with /."},
        },
        "required": ["destination", "path"],
    },
}


def gateway_get(gateway: Gateway | None, args: Mapping[str, Any], error: type[Exception]) -> str:
    """The answer's text, or `error(...)` saying why there is none (refused, unreachable)."""
    if gateway is None:
        raise error("There is no gateway here; nothing was sent.")
    destination = str(args.get("destination") or "").strip()
    path = str(args.get("path") or "").strip()
    if not destination or not path:
        raise error("gateway_get needs a destination and a path; nothing was sent.")
    # Whatever the model wrote goes in the path on the gateway, which alone decides: a host in
    # `destination` is a destination name it does not have; a URL in `path` is no plain path.
    target = "/" + path.lstrip("/") if not path.startswith("/") else path
    try:
        got = gateway.request("GET", _segment(destination), target, timeout=20)
    except OSError as exc:
        raise error(f"The gateway could not be reached ({exc}); nothing was done.") from exc
    if got.refused:
        message = _message(got.body)
        raise error(f"Refused by the gateway ({got.refused}): {message}; nothing was sent on.")
    text = got.body.decode("utf-8", "replace")
    if len(text) > ANSWER_CAP:
        text = text[:ANSWER_CAP] + "\n[cut]"
    return f"{got.status}: {text}" if got.status >= 400 else text


def _segment(name: str) -> str:
    """The destination as one path segment: anything but a name's characters is escaped, so
    the gateway sees exactly what was asked for and refuses it."""
    return quote(name, safe="")


def _message(body: bytes) -> str:
    try:
        return inert(str(json.loads(body)["error"]["message"]))
    except (ValueError, KeyError, TypeError):
        return "no reason given"
