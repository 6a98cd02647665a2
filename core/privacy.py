"""`/wakeful memory` and `/wakeful forget`: a person sees what is kept about them, and has it
erased, whatever the agent. The engine answers these before the agent runs (the agent never
sees them) so every agent honours them alike.

`/wakeful forget` only asks (an ephemeral prompt with Forget and Cancel buttons). Pressing
Forget stores a `ForgetAnswer` in the person's own inbox; its run asks for the erasure as an
effect (`Effects.forget`), so the fenced finish of that run erases, once, in one transaction
(core/store/forget.py): a run that does not finish erases nothing, and a retry erases again
what is left. Everything else in that batch is the person's text too: it is erased unrun.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from wakeful.core import effects as fx
from wakeful.core.events import Command, Event, ForgetAnswer
from wakeful.core.privacy_text import FORGOTTEN, Kept, first_lines
from wakeful.core.views import PrivacyView

MEMORY_WORDS = frozenset({"memory"})
FORGET_WORDS = frozenset({"forget"})


def is_privacy(event: Event) -> bool:
    """Whether the engine answers `event` itself: `/wakeful memory`, `/wakeful forget`, or an
    answer to the forget prompt."""
    if isinstance(event, ForgetAnswer):
        return True
    return isinstance(event, Command) and _word(event) in MEMORY_WORDS | FORGET_WORDS


def answer_privacy(
    events: Sequence[Event], kept: Callable[[], list[Kept]], view: PrivacyView
) -> tuple[list[Event], fx.Effects | None]:
    """The events left for the agent, and the engine's answers to the rest (None: none of
    them was for the engine). A pressed Forget leaves nothing for the agent: the effects ask
    the finish to erase the inbox, and the prompt becomes `Forgotten.`"""
    mine = [e for e in events if is_privacy(e)]
    if not mine:
        return list(events), None
    effects = fx.Effects()
    pressed = [e for e in mine if isinstance(e, ForgetAnswer) and e.answer == "forget"]
    if pressed:
        effects.forget = pressed[-1].user
        effects.messages.append(_replacing(pressed[-1], FORGOTTEN))
        return [], effects
    for e in mine:
        if isinstance(e, ForgetAnswer):
            effects.messages.append(_replacing(e, view.cancelled()))
        elif isinstance(e, Command) and _word(e) in MEMORY_WORDS:
            text, blocks = view.listing(kept())
            effects.messages.append(to_caller(e, text, blocks))
        elif isinstance(e, Command):
            text, blocks = view.forget_prompt(e.user)
            effects.messages.append(to_caller(e, text, blocks))
    return [e for e in events if not is_privacy(e)], effects


def kept_docs(
    docs: Callable[[str], Sequence[tuple[str, int]]],
    read: Callable[[str, str], str | None],
    owner: str,
) -> list[Kept]:
    """What `/wakeful memory` lists: each current document's path, size and first lines."""
    listed = []
    for path, size in docs(owner):
        text = read(owner, path)
        if text is not None:
            listed.append(Kept(path, size, first_lines(text)))
    return listed


def _word(command: Command) -> str:
    return command.text.strip().lower()


def to_caller(
    e: Command | ForgetAnswer,
    text: str,
    blocks: list[dict[str, Any]] | None = None,
    facts: dict[str, Any] | None = None,
) -> fx.Post:
    """An answer to the person who ran a slash command or clicked, to them alone: through
    the event's response_url first (the sender's `ephemeral` with a ref)."""
    return fx.Post(
        e.channel,
        text,
        blocks=blocks,
        kind="ephemeral",
        ref=e.response_url,
        user=e.user,
        priority="urgent",
        facts=facts,
    )


def _replacing(e: ForgetAnswer, text: str) -> fx.Post:
    """The forget prompt rewritten (through the click's response_url, `replace_original`)."""
    return to_caller(e, text, facts={"replace_original": True})
