"""Pacing and merging of outbound rows. Pure: the store decides *which* rows to claim with
`ready`, and `plan_parts` turns a claimed batch into the posts a sender makes, the same way
every time, so a retried batch yields the same part ids and a sender can tell what already went
out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wakeful.core.inbox_id import InboxId
from wakeful.core.kinds import POST, Kind, Kinds
from wakeful.core.records import OutboxRow

SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class Part:
    """One Slack call: a merged post, an update of an approval prompt, or an ephemeral."""

    part_id: str
    dispatch_id: str
    kind: str
    channel: str
    thread_ts: str
    text: str
    blocks: list[dict[str, Any]] | None
    row_ids: tuple[int, ...]
    ref: str | None = None
    user: str | None = None
    retry: bool = False
    """True when an earlier attempt of this batch may have reached Slack: look before posting."""
    normal: bool = False
    """True when the part carries normal-priority rows: sending it restarts the gap."""
    final: bool = True
    """False for all but the last chunk of a cut row: its rows are marked sent with the last."""
    target_ts: str | None = None
    """For an update: the posted prompt's message id, resolved just before sending."""
    inbox: str = ""
    """The inbox of the part's (first) row: whose workspace the call is made in."""
    answers: tuple[str, ...] = ()
    """The events its rows answer, by key: its post's metadata carries them."""
    facts: Any = None
    """The first row's facts, for a kind whose sender reads them (a stream's segment)."""
    look_first: bool = False
    """Some row of it may already be in Slack (written before a restore, or answering events
    from before one): look for a post naming its events before posting."""


@dataclass(frozen=True, slots=True)
class Batch:
    dispatch_id: str
    channel: str
    thread_ts: str
    parts: tuple[Part, ...]
    retry: bool
    until: int = 0
    """The claim's deadline as the claim wrote it: its sender's fence (see `renew_batch`)."""
    traces: Mapping[int, str] = field(default_factory=dict)
    """Row id -> the W3C traceparent it was queued in (core/tracing.py; untraced rows absent):
    the post joins its first row's trace and links to every row's."""


def ready(
    rows: Sequence[OutboxRow], last_sent_at: int | None, now: int, gap: int, *, kinds: Kinds
) -> bool:
    """Whether a destination's pending rows go out now.

    An urgent row, or any kind that is not a paced post (an update, an ephemeral, a Home view,
    an assistant status), goes at once and takes the held rows along;
    normal rows wait until `gap` seconds have passed since the destination's last post.
    """
    if not rows:
        return False
    if any(r.priority == "urgent" or not kinds.paced(r.kind) for r in rows):
        return True
    return last_sent_at is None or now - last_sent_at >= gap


def _chunks(text: str, limit: int) -> list[str]:
    """Split text longer than `limit`, at a line end where there is one (that one newline
    becomes the boundary between posts); no other character is dropped."""
    out: list[str] = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit + 1)
        if cut <= 0:
            out.append(text[:limit])
            text = text[limit:]
        else:
            out.append(text[:cut])
            text = text[cut + 1 :]
    out.append(text)
    return out


def _joined(kind: Kind) -> bool:
    """A paced kind with no merge of its own (a post): consecutive rows join their texts."""
    return kind.paced and kind.merge is None


def _text_limit(kinds: Kinds) -> int:
    return kinds.limits.text or 10**12


def _block_limit(kinds: Kinds) -> int:
    return kinds.limits.blocks or 10**12


def plan_parts(
    dispatch_id: str, rows: Sequence[OutboxRow], retry: bool, *, kinds: Kinds
) -> tuple[Part, ...]:
    """Merge consecutive posts of one destination into as few Slack calls as the limits allow.

    Text posts merge with text posts and block posts with block posts (joining a text row into
    a blocks message would hide it); a switch, an approval prompt, an update or an ephemeral
    starts a new part. A part never exceeds the destination's limits (`kinds.limits`: Slack's
    40,000 characters and 50 blocks); one row longer than that is cut into several posts in
    order. Each part id is `<dispatch id>:<first row id>.<chunk>`. Rows of a kind with a merge
    merge by it (a gathered kind across the whole batch).
    """
    parts: list[Part] = []
    group: list[OutboxRow] = []
    carried: dict[int, tuple[int, ...]] = {}
    """Rows a merged digest stands for, by the id of the post row that carries its text."""

    def flush() -> None:
        if not group:
            return
        start = len(parts)
        _flush()
        answers = tuple(dict.fromkeys(k for r in group for k in r.answers))
        look_first = any(r.look_first for r in group)
        if answers or look_first:
            for i in range(start, len(parts)):
                parts[i] = replace(parts[i], answers=answers, look_first=look_first)
        group.clear()

    def _flush() -> None:
        first = group[0]
        kind = kinds.kind(first.kind)
        ids = tuple(sorted(i for r in group for i in carried.get(r.id, (r.id,))))
        normal = (kind.paced or kind.restarts_gap) and any(r.priority == "normal" for r in group)
        if _joined(kind) and first.blocks is None:
            texts = _chunks(SEPARATOR.join(r.text for r in group), _text_limit(kinds))
            for i, text in enumerate(texts):
                part = _part(dispatch_id, first, i, text, None, ids, retry, normal)
                if i < len(texts) - 1:
                    part = replace(part, final=False)
                parts.append(part)
        elif kind.merge is not None:
            text, blocks = kind.merge(group)
            texts = _chunks(text, _text_limit(kinds)) if kind.paced else [text]
            for i, chunk in enumerate(texts):
                part = _part(dispatch_id, group[-1], i, chunk, blocks, ids, retry, normal)
                part = replace(part, part_id=f"{dispatch_id}:{first.id}.{i}")
                parts.append(part if i == len(texts) - 1 else replace(part, final=False))
        else:
            blocks = None
            if first.blocks is not None:
                blocks = [b for r in group for b in (r.blocks or [])]
            text = SEPARATOR.join(r.text for r in group if r.text)[: _text_limit(kinds)]
            parts.append(_part(dispatch_id, first, 0, text, blocks, ids, retry, normal))

    gathered: dict[str, list[OutboxRow]] = {}
    for row in rows:
        if kinds.kind(row.kind).gathered:
            gathered.setdefault(row.kind, []).append(row)
    for row in rows:
        kind = kinds.kind(row.kind)
        if kind.gathered:
            if row is not gathered[row.kind][-1]:
                continue  # merged into the latest of its kind
            if kind.paced and kind.merge is not None and row.blocks is None:
                # ONE digest for the span, and still one post per gap: its text joins the
                # other posts of the batch (a separate post would wait out the destination's
                # pacing in the same conversation).
                text, _ = kind.merge(gathered[row.kind])
                row = replace(row, kind=POST.name, text=text, facts=None, ref=None)
                carried[row.id] = tuple(r.id for r in gathered[kind.name])
                if group and not _joins(group, row, kinds):
                    flush()
                group.append(row)
                continue
            flush()
            group.extend(gathered[row.kind])
            flush()
            continue
        if group and not _joins(group, row, kinds):
            flush()
        group.append(row)
        if not (_joined(kind) or kind.merge is not None):
            flush()
    flush()
    return tuple(parts)


def _joins(group: list[OutboxRow], row: OutboxRow, kinds: Kinds) -> bool:
    last = group[-1]
    if row.kind != last.kind:
        return False
    if InboxId(row.inbox).is_ops != InboxId(last.inbox).is_ops:
        return False  # the operators' report goes alone: a refusal of it is never reported
    teams = (InboxId(row.inbox).team, InboxId(last.inbox).team)
    if None not in teams and teams[0] != teams[1]:
        return False  # one call is made with one workspace's token (a shared channel)
    kind = kinds.kind(row.kind)
    if kind.merge is not None:
        return row.user == last.user
    if not _joined(kind):
        return False
    if row.ref or last.ref:
        return False  # an approval prompt stands alone, so it can be rewritten on its own
    if row.look_first or last.look_first:
        return False  # alone, so finding its events' post in Slack says it was sent
    if (row.blocks is None) != (last.blocks is None):
        return False
    if row.blocks is not None:
        blocks = sum(len(r.blocks or []) for r in group) + len(row.blocks)
        text = sum(len(r.text) + len(SEPARATOR) for r in group) + len(row.text)
        return blocks <= _block_limit(kinds) and text <= _text_limit(kinds)
    return True


def _part(
    dispatch_id: str,
    first: OutboxRow,
    chunk: int,
    text: str,
    blocks: list[dict[str, Any]] | None,
    ids: tuple[int, ...],
    retry: bool,
    normal: bool,
) -> Part:
    return Part(
        part_id=f"{dispatch_id}:{first.id}.{chunk}",
        dispatch_id=dispatch_id,
        kind=first.kind,
        channel=first.channel,
        thread_ts=first.thread_ts,
        text=text,
        blocks=blocks,
        row_ids=ids,
        normal=normal,
        ref=first.ref,
        user=first.user,
        retry=retry,
        inbox=first.inbox,
        facts=first.facts,
    )
