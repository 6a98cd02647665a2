"""The kinds of outbox rows, and how each is held, merged and checked: a registry, so the engine
knows its own kinds (replies, digests, prompt rewrites, private replies) and the Slack edge adds
its surfaces (bot/slack/kinds.py) without the engine naming them or the schema checking them.

A kind says whether its rows are paced (held by the gap, merged into one post per conversation)
or go at once, how held rows of it become one call (`merge`), and what a row of it must carry.
The destination's limits (the longest text and the most blocks one call may carry) are set by
the edge that sends, not by the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wakeful.core.records import OutboxRow

Merge = Callable[[Sequence["OutboxRow"]], tuple[str, Any]]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    paced: bool = False
    """Held by the outbox gap and merged with the conversation's other paced rows."""
    merge: Merge | None = None
    """How held rows of this kind become one call; None: each row stands alone (a paced
    kind without it joins its texts)."""
    gathered: bool = False
    """Every row of the kind in a batch merges into one, at the place of the latest."""
    needs_user: bool = False
    needs_thread: bool = False
    needs_ref: bool = False
    needs_facts: bool = False
    may_be_empty: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    """What one call to the destination may carry; 0: no limit."""

    text: int = 0
    blocks: int = 0


_KINDS: dict[str, Kind] = {}
_limits = Limits()


def register(kind: Kind) -> Kind:
    """Add (or replace) a kind. The Slack edge registers its surfaces at import."""
    _KINDS[kind.name] = kind
    return kind


def get(name: str) -> Kind | None:
    return _KINDS.get(name)


def known() -> tuple[str, ...]:
    return tuple(sorted(_KINDS))


def paced(name: str) -> bool:
    found = _KINDS.get(name)
    return found is not None and found.paced


def set_limits(limits: Limits) -> None:
    """The destination's limits (the Slack edge sets Slack's)."""
    global _limits
    _limits = limits


def limits() -> Limits:
    return _limits


def _keep_last(rows: Sequence[OutboxRow]) -> tuple[str, Any]:
    """Only the latest matters: the rest are replaced."""
    return rows[-1].text, rows[-1].blocks


def _merge_digests(rows: Sequence[OutboxRow]) -> tuple[str, Any]:
    """ONE digest covering the span of all of them, counts summed (core/rules/digest.py)."""
    from wakeful.core.rules import digest

    facts = [r.facts for r in rows if isinstance(r.facts, dict)]
    if len(facts) != len(rows):  # a row without facts: say everything rather than lose any
        return "\n\n".join(r.text for r in rows), None
    return digest.render(digest.merge(facts)), None


def _merge_ops(rows: Sequence[OutboxRow]) -> tuple[str, Any]:
    """ONE post listing every ops line held (core/store/ops.py)."""
    from wakeful.core.rules import ops

    return ops.render(rows), None


KEEP_LAST: Merge = _keep_last
"""The merge of a surface where only the latest state counts (a view, a status)."""

POST = register(Kind("post", paced=True))
"""A reply in a conversation: held by the gap, merged with the conversation's others."""
DIGEST = register(Kind("digest", paced=True, merge=_merge_digests, gathered=True, needs_facts=True))
"""A paced post whose facts let held digests merge into ONE covering the span."""
UPDATE = register(Kind("update", needs_ref=True))
"""A rewrite of an approval's prompt (`ref`: the request id) with the answer that stands."""
EPHEMERAL = register(Kind("ephemeral", needs_user=True))
"""A reply only `user` sees, at once (`ref`, when set: where a command's answer goes)."""
OPS = register(Kind("ops", paced=True, merge=_merge_ops, gathered=True))
"""A line for the operators' channel (WAKEFUL_OPS_CHANNEL): held by the gap, and every one a
batch holds merged into ONE post listing them (core/store/ops.py)."""
