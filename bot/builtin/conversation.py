"""The conversation with the model, as saved in an inbox's session: turns, their size, where
the history may be cut, and how text from outside is labelled so the model can tell data from
orders."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from html import escape
from typing import Any, cast

from wakeful.bot.builtin.common import fresh_stats, unusable_session

NO_REPLY = "NO_REPLY"
"""The whole answer the system prompt asks for when a run has nothing worth saying."""
TEXT_CAP = 4000
"""Characters of one incoming message or payload given to the model; the rest is cut."""
_OUR_TAGS = re.compile(r"<(\s*/?\s*(?:untrusted|wakeful)_)", re.IGNORECASE)
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
_THINKING = ("thinking", "redacted_thinking")

Block = dict[str, Any]
Turn = dict[str, Any]


def approx_tokens(turn: Turn) -> int:
    """Characters / 4 of the turn's JSON: rough, cheap, and the same on every host."""
    return len(json.dumps(turn, ensure_ascii=False)) // 4 + 1


def _blocks(turn: Turn) -> list[Block]:
    content = turn.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def is_clean_user_turn(turn: Turn) -> bool:
    """A user turn that answers no tool_use: the only place the history may start."""
    return turn.get("role") == "user" and not any(
        b.get("type") == "tool_result" for b in _blocks(turn)
    )


def trim_history(turns: list[Turn], budget: int, down_to: int | None = None) -> list[Turn]:
    """Past `budget` tokens, drop the oldest turns until the rest fits `down_to` (default: the
    budget itself). Cutting well below the cap at once keeps the history's start, hence the
    prompt cache's prefix, the same for the turns that follow.

    The history may only start at a user turn without tool_result blocks, so an assistant
    tool_use is never separated from the user turn that carries its result. When even the
    latest such start does not fit, that start is kept: the current exchange always stays.
    """
    sizes = [approx_tokens(t) for t in turns]
    total = sum(sizes)
    if total <= budget:
        return turns
    target = budget if down_to is None else min(budget, down_to)
    dropped, start = 0, 0
    for i in range(1, len(turns)):
        dropped += sizes[i - 1]
        if is_clean_user_turn(turns[i]):
            start = i
            if total - dropped <= target:
                break
    return turns[start:]


def strip_old_thinking(turns: list[Turn]) -> list[Turn]:
    """Thinking blocks are needed only to continue a tool call; elsewhere they only cost
    budget, and a later model may not accept another model's thinking."""
    out: list[Turn] = []
    for i, turn in enumerate(turns):
        open_call = i == len(turns) - 1 and any(b.get("type") == "tool_use" for b in _blocks(turn))
        if turn.get("role") == "assistant" and not open_call:
            kept = [b for b in _blocks(turn) if b.get("type") not in _THINKING]
            turn = {"role": "assistant", "content": kept or [text_block(NO_REPLY)]}
        out.append(turn)
    return out


def text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def tool_result(tool_use_id: str, text: str, error: bool = False) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if error:
        block["is_error"] = True
    return block


def assistant_content(content: Sequence[Any]) -> list[Block]:
    """The response's blocks as plain JSON for the session: text, tool_use and the thinking
    that must accompany a tool_use when the call continues."""
    out: list[Block] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text" and str(getattr(block, "text", "")).strip():  # blank text is refused
            out.append(text_block(str(block.text)))
        elif kind == "tool_use":
            out.append(
                {
                    "type": "tool_use",
                    "id": str(block.id),
                    "name": str(block.name),
                    "input": block.input if isinstance(block.input, dict) else {},
                }
            )
        elif kind in _THINKING:
            out.append(cast(Block, block.model_dump(mode="json", exclude_none=True)))
    return out


def final_text(content: list[Block]) -> str:
    return "\n".join(str(b["text"]) for b in content if b.get("type") == "text").strip()


# -- labelling what came from outside --------------------------------------------------------


def neutralise(text: str) -> str:
    """Outside text cannot open or close one of our labels: their `<` becomes `&lt;`."""
    if len(text) > TEXT_CAP:
        text = text[:TEXT_CAP] + " [cut]"
    return _OUR_TAGS.sub(r"&lt;\1", text)


_GITHUB_NOISE = frozenset({"url", "node_id", "gravatar_id"})


def webhook_view(source: str, body: Any) -> Any:
    """A webhook body as the model is shown it: in the sender's order, without empty values
    and, for GitHub, without the API links that make up most of a payload (`*_url` other than
    `html_url`, `node_id`), so what matters fits the TEXT_CAP characters the model sees."""
    if isinstance(body, dict):
        return {
            k: webhook_view(source, v)
            for k, v in body.items()
            if v not in (None, "", [], {})
            and not (
                source == "github"
                and (k in _GITHUB_NOISE or (k.endswith("_url") and k != "html_url"))
            )
        }
    if isinstance(body, list):
        return [webhook_view(source, v) for v in body]
    return body


def label_attrs(**values: Any) -> str:
    return "".join(
        f' {k}="{escape(str(v)[:200], quote=True)}"'
        for k, v in values.items()
        if v not in (None, "")
    )


def safe_id(raw: str) -> str:
    return _UNSAFE_ID.sub("", raw)[:80] or "x"


def load_session(session: Any, now: int) -> dict[str, Any]:
    """The saved conversation, checked: a shape the Claude agent did not write is an unusable
    session (the engine retries, then sets it aside and the next run starts fresh)."""
    if session is None:
        session = {"v": 1, "messages": []}
    if not isinstance(session, dict) or session.get("v") != 1:
        version = session.get("v") if isinstance(session, dict) else type(session).__name__
        raise unusable_session(f"the saved conversation has an unknown format ({version})")
    if not isinstance(session.get("messages"), list) or not all(
        isinstance(t, dict) for t in session["messages"]
    ):
        raise unusable_session("the saved conversation's turns are not a list of turns")
    state: dict[str, Any] = dict(session)
    state.setdefault("pending", {})
    stats = state.setdefault("stats", fresh_stats())
    stats.setdefault("feedback_positive", 0)
    stats.setdefault("feedback_negative", 0)
    state.setdefault("since", now)
    state.setdefault("open", None)
    state.setdefault("feedback", [])
    return state
