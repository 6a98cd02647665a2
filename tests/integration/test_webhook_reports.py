"""What Slack shows for webhook deliveries: the built-in agent's one normal line per delivery,
merged by the outbox into one post per gap, and digests counting deliveries by source.

Deliveries arrive through the real HTTP front; the engine's loops (Scheduler, Worker,
Dispatcher) run tick by tick on the same simulated clock, and a recording sender stands in for
Slack. Both stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import T0, MakeStore
from tests.support.agents import refund_desk
from tests.support.recording_sender import RecordingSender
from tests.support.webhook_front import (
    CI_SECRET,
    GITHUB_SECRET,
    OPS,
    STRIPE_SECRET,
    serve,
)
from wakeful.bot.process.config import WebhookSource
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.inbox_id import InboxId
from wakeful.core.rules.outbox import SEPARATOR
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker
from wakeful.devtools.webhooks import Sent, WebhookSender, stripe_event

GAP = 3600
HOUR = 3600
TEAM, USER = "T1", "U1"
ALL_TO_OPS = (
    WebhookSource("github", "github", GITHUB_SECRET, OPS),
    WebhookSource("stripe", "stripe", STRIPE_SECRET, OPS),
    WebhookSource("ci", "generic", CI_SECRET, OPS),
)
ISSUE_LINE = (
    "GitHub issues.opened Codertocat/Hello-World: Spelling error in the README file "
    "https://github.com/Codertocat/Hello-World/issues/1"
)


class Ops:
    """A webhook front, the loops with refund-desk, and Slack as a recording sender."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.front = serve(store, ALL_TO_OPS, self.clock)
        self.slack = RecordingSender()
        agent = refund_desk(store)
        self.worker = Worker(store=store, agent=agent, clock=self.clock, holder="w")
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.slack)

    @property
    def send(self) -> WebhookSender:
        return self.front.sender

    def tick(self, at: int) -> None:
        self.clock.now = at
        self.scheduler.tick(at)
        self.worker.tick(at)
        self.dispatcher.tick(at)

    def posts(self, channel: str = OPS) -> list[str]:
        return [p.text for p in self.slack.parts if p.channel == channel]

    def mention(self, text: str, event_id: str, channel: str = OPS, user: str = USER) -> None:
        """A person's message, stored as the Slack front stores a mention."""
        payload = {
            "kind": "mention",
            "text": text,
            "channel": channel,
            "ts": f"{self.clock.now}.000100",
            "thread_ts": None,
            "user": user,
            "team": TEAM,
            "channel_type": "channel",
        }
        assert self.store.ingest(f"{TEAM}:{user}", "slack", event_id, payload, self.clock.now)


@pytest.fixture
def ops(make_store: MakeStore) -> Iterator[Ops]:
    world = Ops(make_store(outbox_gap=GAP))
    yield world
    world.front.close()


def ok(sent: Sent) -> Sent:
    assert sent.status == 200, sent
    return sent


def test_each_delivery_is_one_line_and_a_burst_is_one_post_per_gap(ops: Ops) -> None:
    first = ok(ops.send.github_example("issues.opened"))
    ops.tick(T0 + 1)
    assert ops.posts() == [ISSUE_LINE]
    [row] = ops.store.outbox(inbox=InboxId.conversation(OPS))
    assert (row.priority, row.kind, row.status) == ("normal", "post", "sent")

    # Inside the gap: GitHub redelivers the issue, then three Stripe events arrive.
    ok(ops.send.github_example("issues.opened", delivery=first.delivery_id))
    events = [stripe_event(t) for t in ("charge.succeeded", "charge.dispute.created")]
    events.append(stripe_event("invoice.payment_failed"))
    for event in events:
        ok(ops.send.stripe(event))
    ops.tick(T0 + 10)
    ops.tick(T0 + 20)
    assert ops.posts() == [ISSUE_LINE], "normal lines inside the gap must wait"
    held = [r for r in ops.store.outbox(inbox=InboxId.conversation(OPS)) if r.status == "pending"]
    assert [r.priority for r in held] == ["normal"] * 3

    ops.tick(T0 + 1 + GAP)
    lines = [
        "Stripe charge.succeeded ch_1PgafuB7WZ01zgkWXYmPNZs8 1.00 USD",
        "Stripe charge.dispute.created dp_1Pgc71B7WZ01zgkWMevJiAUx 10.00 USD",
        "Stripe invoice.payment_failed in_1Pgc6tB7WZ01zgkWu9fdqL6I 10.00 USD",
    ]
    assert ops.posts() == [ISSUE_LINE, SEPARATOR.join(lines)]
    ops.tick(T0 + 3 * GAP)
    assert len(ops.posts()) == 2, "nothing was posted twice"


def test_a_generic_delivery_is_reported_by_name_and_id(ops: Ops) -> None:
    ok(ops.send.generic("ci", json.dumps({"build": 9}).encode(), delivery="build-9"))
    ops.tick(T0 + 1)
    assert ops.posts() == ["ci delivery build-9"]


def test_a_digest_in_the_webhook_channel_counts_deliveries_by_source(ops: Ops) -> None:
    ops.mention("<@UBOT> digest every 1 hour", "Ev1")  # someone in #ops asks for a digest
    ops.mention("<@UBOT> digest every 1 hour", "Ev2", channel="D2", user="U2")  # another, in a DM
    ops.tick(T0)
    ok(ops.send.github_example("push"))
    ok(ops.send.github_example("ping"))
    for event_type in ("charge.succeeded", "payment_intent.succeeded", "invoice.payment_failed"):
        ok(ops.send.stripe(stripe_event(event_type)))
    ok(ops.send.generic("ci", b"{}"))
    retried = ok(ops.send.github_example("ping"))
    ok(ops.send.github_example("ping", delivery=retried.delivery_id))  # a repeat is not counted
    # wakeful's own events in that inbox (a timer an agent set there) are not deliveries
    ops.store.ingest(
        InboxId.conversation(OPS), "timer", "t@1", {"timer": "t", "payload": {}}, T0 + 2
    )
    ops.tick(T0 + 5)
    ops.tick(T0 + HOUR)
    [digest] = [t for t in ops.posts() if t.startswith("Digest since")]
    assert "- webhook deliveries: 7 (ci 1, github 3, stripe 3)" in digest.splitlines()
    [dm_digest] = [t for t in ops.posts("D2") if t.startswith("Digest since")]
    assert "webhook" not in dm_digest, "deliveries reported elsewhere are not this digest's"

    # The next periods had no deliveries and nothing else new: the counts did not stick, so
    # a quiet digest says nothing at all.
    ops.tick(T0 + 2 * HOUR)
    ops.tick(T0 + 3 * HOUR)
    later = [t for t in ops.posts() if t.startswith("Digest since")]
    assert len(later) == 1
