"""What `wakeful dev` prints of the bot: every Web API call the emulator answers, as one plain
line a person would read (`[bot] …`, `[bot edited] …`, `[bot, only to alice] …`), buttons
numbered across the session so `/press 2` names one. A streamed reply shows as it streams: a
`[bot streaming …]` line per flush, then a `[bot done streaming …]` line."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from wakeful.devtools.client import Button, blocks_of, buttons_of
from wakeful.devtools.emulator import RESPONSE_URL_METHOD, Call
from wakeful.devtools.emulator.streams import streamed_text

DATE = re.compile(r"<!date\^\d+\^[^|>]*\|([^>]*)>")
LINK = re.compile(r"<(https?://[^|>]+)\|([^>]*)>")
BOLD = re.compile(r"\*\*([^*\n]+)\*\*")  # markdown's, in streamed text
STREAMING = ("chat.startStream", "chat.appendStream", "chat.stopStream")


class People:
    """Names and ids: `alice` is U0ALICE, her DM D0ALICE; `#ops` is C0OPS."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {"UBOT": "wakeful"}

    @staticmethod
    def user(name: str) -> str:
        return "U0" + name.upper()

    @staticmethod
    def dm(name: str) -> str:
        return "D0" + name.upper()

    @staticmethod
    def channel(name: str) -> str:
        return "C0" + name.upper()

    def add(self, name: str) -> None:
        self.names[self.user(name)] = name

    def place(self, channel: str) -> str:
        if channel.startswith("D0"):
            return f"DM {channel[2:].lower()}"
        if channel.startswith("C0"):
            return "#" + channel[2:].lower()
        return channel

    def plain(self, text: str) -> str:
        """Slack's markup as a person reads it: @names, dates, link labels."""
        text = DATE.sub(r"\1", LINK.sub(r"\2 (\1)", text))
        text = re.sub(r"(?<!\w)\*([^*\n]+)\*(?!\w)", r"\1", text)  # bold
        text = re.sub(r"<@(\w+)>", lambda m: "@" + self.names.get(m.group(1), m.group(1)), text)
        return re.sub(r"<#(\w+)(\|[^>]*)?>", lambda m: self.place(m.group(1)), text)


class Chat:
    """Turns the emulator's calls into lines; `here` is the DM of the person typing (a post
    there needs no place named)."""

    def __init__(self, people: People, out: Callable[[str], None]) -> None:
        self.people = people
        self.out = out
        self.here = ""
        self.lock = threading.Lock()
        self.numbers: dict[tuple[str, str, str, str], int] = {}
        self.buttons: dict[int, Button] = {}
        self.streaming: dict[tuple[str, str], str] = {}
        """(channel, ts) of each stream going on -> the place its start was shown in."""

    def on_call(self, call: Call) -> None:
        if not call.response.get("ok"):
            return
        p = call.params
        channel = str(p.get("channel", ""))
        if call.method == "chat.postMessage":
            self.say("bot", channel, p, str(call.response.get("ts", "")))
        elif call.method == "chat.update":
            self.say("bot edited", channel, p, str(p.get("ts", "")))
        elif call.method == "chat.postEphemeral":
            who = self.people.names.get(str(p.get("user")), str(p.get("user")))
            self.say(f"bot, only to {who}", channel, p, "")
        elif call.method == RESPONSE_URL_METHOD and isinstance(p.get("body"), dict):
            self.say("bot, answering the command", "", p["body"], "")
        elif call.method == "views.publish":
            who = self.people.names.get(str(p.get("user_id")), str(p.get("user_id")))
            self.line(f"[bot updated the Home tab of {who}]")
        elif call.method in STREAMING:
            self.stream(call.method, channel, p, call.response)
        elif call.method == "chat.delete":
            self.line(f"[bot deleted a message{self.where(channel, p)}]")

    def where(self, channel: str, p: dict[str, Any]) -> str:
        """` in #ops, thread`; nothing for a post in the typing person's DM."""
        where = ""
        if channel and (channel != self.here or p.get("thread_ts")):
            where = " in " + self.people.place(channel)
            where += ", thread" if p.get("thread_ts") else ""
        return where

    def say(self, who: str, channel: str, p: dict[str, Any], ts: str) -> None:
        self.line(f"[{who}{self.where(channel, p)}] {self.render(channel, p, ts)}")

    def stream(self, method: str, channel: str, p: dict[str, Any], answer: dict[str, Any]) -> None:
        """A line per flush with the text it adds, placed where the stream started (appends
        name no thread); the stop's line ends it, with its buttons numbered."""
        ts = str(answer.get("ts") or p.get("ts") or "")
        with self.lock:
            if method == "chat.startStream":
                self.streaming[(channel, ts)] = self.where(channel, p)
            where = self.streaming.get((channel, ts), "")
            if method == "chat.stopStream":
                self.streaming.pop((channel, ts), None)
        text = BOLD.sub(r"\1", streamed_text(p))
        if method != "chat.stopStream":
            if text:
                self.line(f"[bot streaming{where}] {self.render(channel, {'text': text}, '')}")
            return
        actions = [b for b in blocks_of(p) if b.get("type") == "actions"]
        thread = (answer.get("message") or {}).get("thread_ts")
        shown = self.render(channel, {"text": text, "blocks": actions, "thread_ts": thread}, ts)
        self.line(f"[bot done streaming{where}] {shown}".rstrip())

    def render(self, channel: str, p: dict[str, Any], ts: str) -> str:
        """Section and context text, then the buttons with their numbers."""
        blocks = blocks_of(p)
        parts: list[str] = []
        for block in blocks:
            if block.get("type") == "section" and isinstance(block.get("text"), dict):
                parts.append(str(block["text"].get("text", "")))
            elif block.get("type") == "context":
                parts.extend(str(e.get("text", "")) for e in block.get("elements", []))
        text = self.people.plain(" | ".join(parts) if parts else str(p.get("text", "")))
        buttons = buttons_of(channel, {**p, "ts": ts}) if ts else []
        if not buttons:  # a long answer keeps its lines, indented under the first
            first, *rest = text.splitlines() or [""]
            return "\n".join([first, *("    " + r if r.strip() else "" for r in rest)])
        labels = "  ".join(f"[{self.number(b)}] {b.label}" for b in buttons)
        return " ".join(text.split("\n")) + "  " + labels  # a prompt is one line

    def number(self, button: Button) -> int:
        key = (button.channel, button.message_ts, button.action_id, button.value)
        with self.lock:
            if key not in self.numbers:
                self.numbers[key] = len(self.numbers) + 1
            n = self.numbers[key]
            self.buttons[n] = button
            return n

    def line(self, text: str) -> None:
        with self.lock:
            self.out(text)

    def sibling(self, n: int | None, word: str) -> Button:
        """The button labelled `word` (Approve, Deny) on the message of button `n`; without
        `n`, on the latest message that has one. KeyError saying what is missing."""
        with self.lock:
            numbered = sorted(self.buttons.items())
        if n is not None and n not in self.buttons:
            raise KeyError(f"there is no button {n}")
        anchor = self.buttons[n] if n is not None else None
        for _, b in reversed(numbered):
            same = anchor is None or (b.channel, b.message_ts) == (
                anchor.channel,
                anchor.message_ts,
            )
            if same and word in (b.label.lower() + " " + b.action_id.lower()):
                return b
        raise KeyError(f"no {word} button" + (f" beside button {n}" if n is not None else ""))
