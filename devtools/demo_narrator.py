"""What the demo prints: each Web API call the emulator receives, as the person in Slack would
see it (a post, a rewritten prompt, a private reply, a reply being streamed then ended)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from wakeful.devtools.emulator import Call
from wakeful.devtools.emulator.streams import streamed_text

DM = "D0ALICE"
ROOM = "C0REFUNDS"
OPS = "C0OPS"
NAMES = {"U0ALICE": "alice", "U0BOB": "bob", "UBOT": "wakeful"}


class Narrator:
    """Prints what each person would see in Slack, as the emulator receives the calls."""

    def __init__(self, out: Callable[[str], None], verbose: bool) -> None:
        self.out = out
        self.verbose = verbose
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.streams: dict[tuple[str, str], str] = {}
        """(channel, ts) of each streamed message -> where its start was (appends name none)."""

    def say(self, text: str) -> None:
        with self.lock:
            self.out(text)

    def on_call(self, call: Call) -> None:
        stamp = f"{time.monotonic() - self.t0:5.1f}s"
        p = call.params
        if self.verbose:
            self.say(f"  {stamp}  [api] {call.method} -> {call.status} {call.response.get('ok')}")
        if not call.response.get("ok"):
            return
        if call.method == "chat.postMessage":
            self.say(f"  {stamp}  Slack {where(p)}  wakeful: {render(p)}")
        elif call.method == "chat.update":
            self.say(f"  {stamp}  Slack {where(p)}  (prompt updated) {render(p)}")
        elif call.method == "chat.postEphemeral":
            who = NAMES.get(str(p.get("user")), p.get("user"))
            self.say(f"  {stamp}  Slack {where(p)}  (only {who} sees) {render(p)}")
        elif call.method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            self.streamed(call, stamp)

    def streamed(self, call: Call, stamp: str) -> None:
        """A streamed reply as it is written: each flush's lines, then its end."""
        p, ts = call.params, str(call.response.get("ts") or call.params.get("ts"))
        key = (str(p.get("channel")), ts)
        place = self.streams.setdefault(key, where(p))
        text = render({"text": streamed_text(p).strip("\n"), "blocks": p.get("blocks")})
        if call.method == "chat.stopStream":
            lines = str((call.response.get("message") or {}).get("text", "")).count("\n") + 1
            ended = f"(stream ended: one message of {lines} lines)"
            self.say(f"  {stamp}  Slack {place}  {ended} {text}".rstrip())
        elif text:
            self.say(f"  {stamp}  Slack {place}  (streaming) wakeful: {text}")


def where(p: dict[str, Any]) -> str:
    channel = str(p.get("channel"))
    place = {DM: "[DM alice]", ROOM: "[#refunds]", OPS: "[#ops]"}.get(channel, f"[{channel}]")
    return place + (" (thread)" if p.get("thread_ts") else "")


def render(p: dict[str, Any]) -> str:
    """Blocks as a person sees them: section text, context lines, buttons in brackets."""
    blocks = p.get("blocks")
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    if not blocks:
        return indent(str(p.get("text", "")))
    parts: list[str] = []
    for block in blocks:
        if block.get("type") == "section":
            parts.append(block["text"]["text"])
        elif block.get("type") == "context":
            parts.extend(e.get("text", "") for e in block.get("elements", []))
        elif block.get("type") == "actions":
            parts.append(" ".join(f"[{e['text']['text']}]" for e in block.get("elements", [])))
    return indent(" | ".join(parts))


def indent(text: str) -> str:
    text = re.sub(r"<!date\^\d+\^[^|>]*\|([^>]*)>", r"\1", text)
    for uid, name in NAMES.items():
        text = text.replace(f"<@{uid}>", f"@{name}")
    return text.replace("\n", "\n" + " " * 31)
