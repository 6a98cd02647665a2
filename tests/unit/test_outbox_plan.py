"""Pacing (`ready`) and merging/cutting (`plan_parts`) of outbound rows, without a store."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from wakeful.bot.slack.kinds import SLACK_BLOCK_LIMIT, SLACK_KINDS, SLACK_TEXT_LIMIT
from wakeful.core.records import OutboxRow
from wakeful.core.rules.outbox import SEPARATOR, plan_parts, ready

GAP = 3600


def row(
    id: int,
    text: str = "",
    *,
    kind: str = "post",
    priority: str = "normal",
    blocks: list[dict[str, Any]] | None = None,
    channel: str = "C1",
    thread_ts: str = "",
    ref: str | None = None,
    user: str | None = None,
) -> OutboxRow:
    return OutboxRow(
        id=id,
        inbox="T1:U1",
        kind=kind,
        channel=channel,
        thread_ts=thread_ts,
        text=text if text or blocks else f"row {id}",
        blocks=blocks,
        priority=priority,
        status="sending",
        ref=ref,
        user=user,
        attempts=1,
        error=None,
        created_at=T0,
        dispatch_id="d1",
    )


def blocks(n: int, tag: str) -> list[dict[str, Any]]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": f"{tag}-{i}"}} for i in range(n)]


# -- ready -------------------------------------------------------------------------------------


def test_nothing_to_send_is_never_ready() -> None:
    assert not ready([], None, T0, GAP, kinds=SLACK_KINDS)
    assert not ready([], T0 - 10 * GAP, T0, GAP, kinds=SLACK_KINDS)


def test_first_send_with_no_history_goes() -> None:
    assert ready([row(1)], None, T0, GAP, kinds=SLACK_KINDS)


def test_normal_rows_wait_for_the_gap() -> None:
    rows = [row(1), row(2)]
    assert not ready(rows, T0, T0, GAP, kinds=SLACK_KINDS)
    assert not ready(rows, T0 - GAP + 1, T0, GAP, kinds=SLACK_KINDS)
    assert ready(rows, T0 - GAP, T0, GAP, kinds=SLACK_KINDS)
    assert ready(rows, T0 - 5 * GAP, T0, GAP, kinds=SLACK_KINDS)


@pytest.mark.parametrize(
    "special",
    [
        row(3, priority="urgent"),
        row(3, kind="update", ref="req-1"),
        row(3, kind="ephemeral", user="U1"),
    ],
    ids=["urgent", "update", "ephemeral"],
)
def test_urgent_update_and_ephemeral_go_at_once_and_take_held_rows(special: OutboxRow) -> None:
    assert ready([special], T0, T0, GAP, kinds=SLACK_KINDS)
    assert ready([row(1), row(2), special], T0 - 1, T0, GAP, kinds=SLACK_KINDS)
    assert ready([special, row(4)], T0, T0, GAP, kinds=SLACK_KINDS)


def test_zero_gap_never_holds() -> None:
    assert ready([row(1)], T0, T0, 0, kinds=SLACK_KINDS)


# -- plan_parts: merging -----------------------------------------------------------------------


def test_consecutive_text_posts_merge_in_order_with_the_separator() -> None:
    rows = [row(1, "first"), row(2, "second"), row(3, "third")]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert len(parts) == 1
    (p,) = parts
    assert p.text == SEPARATOR.join(["first", "second", "third"])
    assert p.row_ids == (1, 2, 3)
    assert p.kind == "post" and p.channel == "C1" and p.thread_ts == ""
    assert p.blocks is None and p.final
    assert p.dispatch_id == "d1" and not p.retry


def test_retry_flag_is_carried_to_every_part() -> None:
    rows = [row(1, "a"), row(2, kind="update", ref="r"), row(3, "x" * 50_000)]
    assert all(p.retry for p in plan_parts("d1", rows, retry=True, kinds=SLACK_KINDS))
    assert not any(p.retry for p in plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS))


def test_a_100k_row_without_newlines_is_cut_without_loss() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(100_000))
    parts = plan_parts("d1", [row(7, text)], retry=False, kinds=SLACK_KINDS)
    assert len(parts) == 3
    assert all(len(p.text) <= SLACK_TEXT_LIMIT for p in parts)
    assert "".join(p.text for p in parts) == text
    assert [p.final for p in parts] == [False, False, True]
    assert all(p.row_ids == (7,) for p in parts)
    assert len({p.part_id for p in parts}) == 3


def test_a_100k_row_of_lines_is_cut_at_line_ends_without_loss() -> None:
    lines = [f"line {i:05d} " + "x" * (i % 90) for i in range(2_000)]
    text = "\n".join(lines)
    while len(text) < 100_000:
        text += "\nmore " + "y" * 50
    assert len(text) >= 100_000
    parts = plan_parts("d1", [row(7, text)], retry=False, kinds=SLACK_KINDS)
    assert len(parts) >= 3
    assert all(len(p.text) <= SLACK_TEXT_LIMIT for p in parts)
    assert "\n".join(p.text for p in parts) == text  # exactly one newline dropped per cut
    assert [p.final for p in parts] == [False] * (len(parts) - 1) + [True]
    # cuts land on line ends: no line is split between two posts
    cut_lines = [line for p in parts for line in p.text.split("\n")]
    assert cut_lines == text.split("\n")


def test_merged_text_over_the_limit_is_cut_in_order_without_loss() -> None:
    texts = [c * 15_000 for c in "abc"]
    rows = [row(i + 1, t) for i, t in enumerate(texts)]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert len(parts) >= 2
    assert all(len(p.text) <= SLACK_TEXT_LIMIT for p in parts)
    # the cut falls on the separator's second newline, which becomes the boundary
    assert "\n".join(p.text for p in parts) == SEPARATOR.join(texts)
    assert all(p.row_ids == (1, 2, 3) for p in parts)
    assert [p.final for p in parts] == [False] * (len(parts) - 1) + [True]


segment = st.tuples(st.integers(1, 25_000), st.sampled_from("abc"), st.booleans())


@given(rows_spec=st.lists(st.lists(segment, min_size=1, max_size=4), min_size=1, max_size=4))
@settings(max_examples=50, deadline=None)
def test_cut_parts_never_exceed_the_limit_and_lose_nothing(
    rows_spec: list[list[tuple[int, str, bool]]],
) -> None:
    texts = ["".join(c * n + ("\n" if nl else "") for n, c, nl in spec) for spec in rows_spec]
    rows = [row(i + 1, t) for i, t in enumerate(texts)]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert all(len(p.text) <= SLACK_TEXT_LIMIT for p in parts)
    merged = SEPARATOR.join(texts)
    # every cut drops at most one newline, at the boundary: the characters that are not
    # newlines all survive in order, and the total loss is at most one per cut
    assert "".join(p.text for p in parts).replace("\n", "") == merged.replace("\n", "")
    lost = len(merged) - sum(len(p.text) for p in parts)
    assert 0 <= lost <= len(parts) - 1
    assert [p.final for p in parts] == [False] * (len(parts) - 1) + [True]


def test_blocks_rows_merge_up_to_50_blocks_then_start_a_new_part() -> None:
    rows = [row(1, "one", blocks=blocks(20, "a")), row(2, "two", blocks=blocks(20, "b"))]
    rows.append(row(3, "three", blocks=blocks(20, "c")))
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert [p.row_ids for p in parts] == [(1, 2), (3,)]
    assert parts[0].blocks == blocks(20, "a") + blocks(20, "b")
    assert parts[1].blocks == blocks(20, "c")
    assert all(p.blocks is not None and len(p.blocks) <= SLACK_BLOCK_LIMIT for p in parts)
    assert parts[0].text == SEPARATOR.join(["one", "two"])


def test_blocks_rows_filling_exactly_50_blocks_share_one_part() -> None:
    rows = [row(1, blocks=blocks(25, "a")), row(2, blocks=blocks(25, "b"))]
    rows.append(row(3, blocks=blocks(1, "c")))
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert [p.row_ids for p in parts] == [(1, 2), (3,)]
    assert parts[0].blocks is not None and len(parts[0].blocks) == SLACK_BLOCK_LIMIT


def test_a_text_row_after_a_blocks_row_starts_a_new_part_and_vice_versa() -> None:
    rows = [
        row(1, "t1"),
        row(2, "b1", blocks=blocks(2, "x")),
        row(3, "t2"),
        row(4, "t3"),
        row(5, "b2", blocks=blocks(1, "y")),
    ]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert [p.row_ids for p in parts] == [(1,), (2,), (3, 4), (5,)]
    assert [p.blocks is None for p in parts] == [True, False, True, False]
    assert parts[2].text == "t2" + SEPARATOR + "t3"


def test_update_and_ephemeral_rows_are_their_own_part_and_keep_order() -> None:
    rows = [
        row(1, "a"),
        row(2, "b"),
        row(3, "rewritten", kind="update", ref="req-1"),
        row(4, "only you", kind="ephemeral", user="U9"),
        row(5, "again", kind="update", ref="req-2"),
        row(6, "c"),
        row(7, "d"),
    ]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert [p.row_ids for p in parts] == [(1, 2), (3,), (4,), (5,), (6, 7)]
    assert [p.kind for p in parts] == ["post", "update", "ephemeral", "update", "post"]
    assert (parts[1].ref, parts[1].text) == ("req-1", "rewritten")
    assert (parts[2].user, parts[2].text) == ("U9", "only you")
    assert parts[3].ref == "req-2"


def test_part_ids_are_deterministic_for_the_same_rows_and_dispatch() -> None:
    rows = [
        row(1, "a"),
        row(2, "b"),
        row(3, kind="update", ref="r"),
        row(4, "z" * 90_000),
        row(5, blocks=blocks(3, "q")),
    ]
    first = plan_parts("dispatch-42", rows, retry=False, kinds=SLACK_KINDS)
    again = plan_parts("dispatch-42", list(rows), retry=True, kinds=SLACK_KINDS)
    assert [p.part_id for p in first] == [p.part_id for p in again]
    assert [(p.text, p.row_ids, p.final) for p in first] == [
        (p.text, p.row_ids, p.final) for p in again
    ]
    assert len({p.part_id for p in first}) == len(first)
    assert all(p.part_id.startswith("dispatch-42") for p in first)
    other = plan_parts("dispatch-43", rows, retry=False, kinds=SLACK_KINDS)
    assert not {p.part_id for p in first} & {p.part_id for p in other}


def test_part_ids_of_the_remaining_rows_survive_a_partial_send() -> None:
    # a retried batch only holds the rows not yet marked sent; their parts keep their ids
    rows = [row(1, "a"), row(2, kind="update", ref="r"), row(3, "b"), row(4, "c")]
    whole = plan_parts("d", rows, retry=False, kinds=SLACK_KINDS)
    rest = plan_parts("d", rows[2:], retry=True, kinds=SLACK_KINDS)
    assert [p.part_id for p in rest] == [p.part_id for p in whole[2:]]


def test_final_is_false_only_for_leading_chunks_of_a_cut_row() -> None:
    rows = [row(1, "short"), row(2, kind="update", ref="r"), row(3, "y" * 85_000)]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert [(p.row_ids, p.final) for p in parts] == [
        ((1,), True),
        ((2,), True),
        ((3,), False),
        ((3,), False),
        ((3,), True),
    ]


def test_normal_flag_marks_parts_carrying_normal_posts() -> None:
    rows = [
        row(1, "n", priority="normal"),
        row(2, "u", priority="urgent"),
        row(3, kind="update", ref="r", priority="normal"),
        row(4, "u2", priority="urgent"),
        row(5, "u3", priority="urgent"),
        row(6, kind="ephemeral", user="U1"),
    ]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert [(p.row_ids, p.normal) for p in parts] == [
        ((1, 2), True),  # an urgent row took a held normal row along: the gap restarts
        ((3,), False),  # updates and ephemerals answer a click: they never touch the gap
        ((4, 5), False),  # urgent only: does not restart the gap
        ((6,), False),
    ]


def test_plan_of_nothing_is_nothing() -> None:
    assert plan_parts("d1", [], retry=False, kinds=SLACK_KINDS) == ()


def test_held_digests_and_posts_of_one_gap_go_out_as_one_post_with_one_digest() -> None:
    # One merged Slack post per gap per conversation: two digests held by the gap become ONE
    # digest (counts summed), and it joins the other posts of the batch instead of standing
    # apart (a second post would wait out Slack's one-post-a-second pacing).
    from dataclasses import replace

    from wakeful.core.rules import digest

    def held(id: int, since: int, handled: int) -> OutboxRow:
        lines = [digest.line("handled", "{n} messages handled", {"n": handled})]
        return replace(row(id, "one period", kind="digest"), facts=digest.facts(since, lines))

    rows = [row(1, "first"), held(2, T0, 3), row(3, "second"), held(4, T0 + 60, 4)]
    parts = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    assert len(parts) == 1
    (part,) = parts
    assert part.row_ids == (1, 2, 3, 4)
    assert part.text.count("Digest since") == 1
    assert "This digest covers 2 periods." in part.text
    assert "- 7 messages handled" in part.text
    assert part.text.index("first") < part.text.index("second") < part.text.index("Digest")
