"""The kinds of outbox rows, and how each is held, merged and checked: a registry, so the engine
knows its own kinds (replies, digests, prompt rewrites, private replies, ops lines) and the Slack
edge adds its surfaces (bot/slack/kinds.py) without the engine naming them or the schema checking
them.

A kind says whether its rows are paced (held by the gap, merged into one post per conversation)
or go at once, how held rows of it become one call (`merge`), and what a row of it must carry.
The destination's limits (the longest text and the most blocks one call may carry) are set by
the edge that sends, not by the engine.

The registry is a value (`Kinds`), never a module's state: `ENGINE_KINDS` is the engine's own,
the edge builds its own from it (`SLACK_KINDS`), and whoever assembles a process hands one to the
store and the runs, so what a post may be never depends on which modules were imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from wakeful.core.errors import InvalidInput

if TYPE_CHECKING:
    from wakeful.core.effects import Post
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
    restarts_gap: bool = False
    """Sent at once, yet it is the conversation's post: a normal one restarts the gap."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one call to the destination may carry; 0: no limit."""

    text: int = 0
    blocks: int = 0


@dataclass(frozen=True, slots=True)
class Kinds:
    """The kinds a process's outbox carries and its destination's limits: immutable; extended
    into a new value (`with_kinds`, `with_limits`), never changed in place."""

    kinds: tuple[Kind, ...] = ()
    limits: Limits = Limits()
    _by_name: Mapping[str, Kind] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", MappingProxyType({k.name: k for k in self.kinds}))

    def with_kinds(self, *kinds: Kind) -> Kinds:
        """These kinds too (one of the same name replaces the earlier)."""
        return Kinds(_merged(self.kinds, kinds), self.limits)

    def with_limits(self, limits: Limits) -> Kinds:
        """The same kinds, for a destination with these limits."""
        return Kinds(self.kinds, limits)

    def get(self, name: str) -> Kind | None:
        return self._by_name.get(name)

    def kind(self, name: str) -> Kind:
        """The kind of a stored row: one this registry lacks (written by a process that knew
        it) stands alone, sent at once."""
        return self._by_name.get(name) or Kind(name)

    def known(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_name))

    def paced(self, name: str) -> bool:
        found = self._by_name.get(name)
        return found is not None and found.paced

    def check(self, post: Post) -> None:
        """What the post's kind asks of it, and the destination's limits: InvalidInput unless
        met. The store checks every post it takes (and the runner what an agent asked for, so
        it fails as the agent's run), so a post of a kind this process does not know is
        refused before anything is stored."""
        kind = self._by_name.get(post.kind)
        if kind is None:
            known = ", ".join(self.known())
            raise InvalidInput(f"unknown message kind {post.kind!r} (known: {known})")
        if not post.text and not post.blocks and not kind.may_be_empty:
            raise InvalidInput("message needs text or blocks")
        if kind.needs_ref and not post.ref:
            raise InvalidInput(f"a {post.kind} message needs the ref of what it rewrites")
        if kind.needs_user and not post.user:
            raise InvalidInput(f"a {post.kind} message needs a user")
        if kind.needs_thread and not post.thread_ts:
            raise InvalidInput(f"a {post.kind} message needs its thread's ts")
        if kind.needs_facts and not isinstance(post.facts, dict):
            raise InvalidInput(f"a {post.kind} message needs its facts")
        most = self.limits.blocks
        if most and post.blocks is not None and len(post.blocks) > most:
            raise InvalidInput(f"a message may carry at most {most} blocks")


def _merged(old: Iterable[Kind], new: Iterable[Kind]) -> tuple[Kind, ...]:
    by_name = {k.name: k for k in old}
    by_name.update((k.name, k) for k in new)
    return tuple(by_name.values())


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

POST = Kind("post", paced=True)
"""A reply in a conversation: held by the gap, merged with the conversation's others."""
DIGEST = Kind("digest", paced=True, merge=_merge_digests, gathered=True, needs_facts=True)
"""A paced post whose facts let held digests merge into ONE covering the span."""
UPDATE = Kind("update", needs_ref=True)
"""A rewrite of an approval's prompt (`ref`: the request id) with the answer that stands."""
EPHEMERAL = Kind("ephemeral", needs_user=True)
"""A reply only `user` sees, at once (`ref`, when set: where a command's answer goes)."""
OPS = Kind("ops", paced=True, merge=_merge_ops, gathered=True)
"""A line for the operators' channel (WAKEFUL_OPS_CHANNEL): held by the gap, and every one a
batch holds merged into ONE post listing them (core/store/ops.py)."""

STREAM = Kind("stream", needs_ref=True, may_be_empty=True, restarts_gap=True)
"""The end of a streamed reply's segment (`ref`: its message's ts; core/streams.py): sent
after the finish, with the blocks shown under the text; the conversation's post for the gap."""

ENGINE_KINDS = Kinds((POST, DIGEST, UPDATE, EPHEMERAL, OPS, STREAM))
"""The engine's own kinds, with no destination limits: what a store built without another
registry knows (the Slack edge's is bot/slack/kinds.py `SLACK_KINDS`)."""
