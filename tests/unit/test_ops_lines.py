"""The operators' channel (issue 33, item 5) without a store: WAKEFUL_OPS_CHANNEL as read, the
lines as written (what and where, the error's first line, redacted, inert for Slack) and the
one post a batch of them makes (capped, so a flood never makes a post Slack refuses)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cryptography.fernet import Fernet

from wakeful.bot.process.config import Config, ConfigError
from wakeful.bot.slack.kinds import SLACK_KINDS, SLACK_TEXT_LIMIT
from wakeful.core.errors import InvalidInput
from wakeful.core.inbox_id import InboxId
from wakeful.core.kinds import OPS
from wakeful.core.records import OutboxRow
from wakeful.core.rules import ops as rules_ops
from wakeful.core.rules.outbox import plan_parts
from wakeful.core.settings import Settings
from wakeful.core.store import ops

T0 = 1_700_000_000
DISTRIBUTION = {
    "SLACK_CLIENT_ID": "1.2",
    "SLACK_CLIENT_SECRET": "client-secret",
    "WAKEFUL_TOKEN_KEY": Fernet.generate_key().decode(),
}


def test_the_setting_is_a_channel_id_with_its_workspace_where_it_needs_one() -> None:
    assert Config.from_env({}).settings.ops_channel == ""
    assert Config.from_env({"WAKEFUL_OPS_CHANNEL": " C0PS "}).settings.ops_channel == "C0PS"
    named = {"WAKEFUL_OPS_CHANNEL": "T0PS:C0PS"}
    assert Config.from_env(named).settings.ops_channel == "T0PS:C0PS"
    assert Config.from_env({**DISTRIBUTION, **named}).settings.ops_channel == "T0PS:C0PS"
    for bad in ("#ops", "ops", "U0PS", "C0PS:T0PS"):
        with pytest.raises(ConfigError, match=r"^WAKEFUL_OPS_CHANNEL must be a channel id"):
            Config.from_env({"WAKEFUL_OPS_CHANNEL": bad})
    alone = {**DISTRIBUTION, "WAKEFUL_OPS_CHANNEL": "C0PS"}
    with pytest.raises(ConfigError, match=r"^WAKEFUL_OPS_CHANNEL names no workspace"):
        Config.from_env(alone)
    webhook_team = {**alone, "WAKEFUL_WEBHOOK_TEAM": "T0WH"}
    assert Config.from_env(webhook_team).settings.ops_channel == "T0WH:C0PS"
    with pytest.raises(InvalidInput, match="ops_channel"):
        Settings(ops_channel="#ops")


def test_the_rows_inbox_is_reserved_and_carries_the_workspace() -> None:
    assert ops.destination(Settings()) is None
    assert ops.destination(Settings(ops_channel="C0PS")) == ("ops", "C0PS")
    assert ops.destination(Settings(ops_channel="T0PS:C0PS")) == ("ops:T0PS", "C0PS")
    assert InboxId("ops").is_ops and InboxId("ops:T0PS").is_ops
    assert InboxId("ops:T0PS").team == "T0PS" and InboxId("ops").team is None
    assert InboxId("ops:T0PS").user is None  # never told to a person
    assert not InboxId("T1:U1").is_ops and not InboxId("channel:C1").is_ops


def test_a_line_quotes_the_first_line_of_outside_text_redacted_and_inert() -> None:
    error = "KeyError: '<!channel> & <@U1>' xoxb-12-SECRETVALUE\nTraceback line\n"
    assert ops.dead("T1:U1", 7, "slack", error) == (
        "inbox T1:U1: event 7 from slack is dead: KeyError: '&lt;!channel&gt; &amp; "
        "&lt;@U1&gt;' [redacted]"
    )
    assert ops.dead("T1:U1", 8, "timer", None).endswith("is dead: (no error text)")
    long = ops.reported("T1:U1", "x" * 1000)
    assert long == f"inbox T1:U1: {'x' * (ops.MAX_TEXT - 1)}…"
    assert ops.parked("T1:U1", "notice", "U1", [4], "channel_not_found") == (
        "inbox T1:U1: a notice to U1 was parked for good (outbox 4): channel_not_found"
    )
    many = ops.parked("channel:C2", "post", "C2", list(range(1, 9)), "is_archived")
    assert "(outbox 1, 2, 3, 4, 5 and 3 more)" in many and "<#C2>" in many
    assert ops.paused("", 30, "rate limited (ratelimited)") == (
        "Slack sends paused for 30 s: rate limited (ratelimited)"
    )
    assert ops.paused("T9", 60, "x").startswith("workspace T9: Slack sends paused for 60 s")


def row(i: int, text: str, inbox: str = "ops") -> OutboxRow:
    return OutboxRow(
        id=i,
        inbox=inbox,
        kind=OPS.name,
        channel="C0PS",
        thread_ts="",
        text=text,
        blocks=None,
        priority="normal",
        status="sending",
        ref=None,
        user=None,
        attempts=0,
        error=None,
        created_at=T0 + i,
    )


def test_every_ops_row_of_a_batch_is_one_post_capped_far_below_slacks_limit() -> None:
    rows = [row(i, ops.reported("T1:U1", "y" * 5000)) for i in range(1, 201)]
    [part] = plan_parts("d1", rows, retry=False, kinds=SLACK_KINDS)
    lines = part.text.splitlines()
    assert lines[0] == "wakeful: 200 problems since the last report (times UTC)"
    assert lines[1].startswith("- 22:13:21 inbox T1:U1: yyy")
    assert len(lines) == 1 + rules_ops.MAX_LINES + 1
    assert lines[-1].startswith(f"…and {200 - rules_ops.MAX_LINES} more")
    assert len(part.text) < SLACK_TEXT_LIMIT / 4
    assert part.row_ids == tuple(range(1, 201)) and part.normal and part.inbox == "ops"


def test_an_ops_row_never_shares_a_post_with_another_inboxs() -> None:
    """A refused ops post is parked without a report: it must hold nothing but ops lines."""
    report = replace(row(1, "webhook report"), inbox="channel:C0PS", kind="post")
    parts = plan_parts(
        "d2", [report, row(2, "a line"), row(3, "another")], retry=False, kinds=SLACK_KINDS
    )
    assert [(p.inbox, p.row_ids) for p in parts] == [("channel:C0PS", (1,)), ("ops", (2, 3))]
