"""The bot scopes the app needs, read from its Slack manifest (manifest.yml), so the doctor and
the emulator always compare against the same list the app is created with.

The manifest is plain YAML; reading one list out of it needs no YAML library: keys are
followed by their indentation, and the items under `oauth_config: scopes: bot:` are collected
(block style `- name`, with or without comments, or flow style `[a, b]`).
"""

from __future__ import annotations

import os
from pathlib import Path

MANIFEST = "manifest.yml"
_HISTORY = ("channels:history", "groups:history", "im:history", "mpim:history")
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "chat.delete": ("chat:write",),
    "chat.startStream": ("chat:write",),
    "chat.appendStream": ("chat:write",),
    "chat.stopStream": ("chat:write",),
    "conversations.history": _HISTORY,
    "conversations.replies": _HISTORY,
    "conversations.info": ("channels:read", "groups:read", "im:read", "mpim:read"),
    "users.info": ("users:read",),
    "views.publish": (),
    "assistant.threads.setStatus": ("chat:write", "assistant:write"),
    "assistant.threads.setSuggestedPrompts": ("assistant:write",),
}
"""The Web API methods wakeful calls and the bot scopes that grant each (any one of them, as
Slack's method pages list them; the history scope that counts depends on the conversation's
type). Empty: no scope needed (an app may always publish its own Home tab). The emulator
answers `missing_scope` from this table; a test keeps it covered by the manifest."""
_SCOPES_AT = ["oauth_config", "scopes", "bot"]


def manifest_scopes(text: str) -> list[str]:
    """The bot scopes listed under `oauth_config.scopes.bot` in a manifest's YAML text."""
    found: list[str] = []
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = _uncomment(raw).rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("---"):
            continue
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("- "):
            while stack and stack[-1][0] > indent:
                stack.pop()
            if [key for _, key in stack] == _SCOPES_AT:
                found.append(_unquote(stripped[2:]))
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, _, value = stripped.partition(":")
        stack.append((indent, key.strip()))
        value = value.strip()
        if [k for _, k in stack] == _SCOPES_AT and value.startswith("["):
            found.extend(_unquote(v) for v in value.strip("[]").split(",") if v.strip())
    return found


def _uncomment(line: str) -> str:
    """The line without a trailing `# comment` (a `#` inside quotes stays)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _unquote(value: str) -> str:
    return value.strip().strip("\"'")


def find_manifest(explicit: str | None = None) -> Path | None:
    """`explicit`, else ./manifest.yml, else the one beside this source tree (a checkout or
    an editable install); None when there is none."""
    if explicit:
        return Path(explicit)
    for candidate in (Path(os.getcwd()) / MANIFEST, Path(__file__).resolve().parents[2] / MANIFEST):
        if candidate.is_file():
            return candidate
    return None


def required_scopes(explicit: str | None = None) -> list[str] | None:
    """The manifest's bot scopes, or None when no manifest can be found."""
    path = find_manifest(explicit)
    if path is None or not path.is_file():
        return None
    return manifest_scopes(path.read_text("utf-8"))
