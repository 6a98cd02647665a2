"""Fair between workspaces (issue 26): one workspace's flood of events and of posts does not
push another workspace's work behind it, and its rate limit pauses only its own sends."""

from __future__ import annotations

from tests.conftest import T0
from wakeful.core.dispatcher import Dispatcher, Sender
from wakeful.core.effects import Post
from wakeful.core.errors import TransientSendError
from wakeful.core.inbox_id import InboxId
from wakeful.core.rules.outbox import Part
from wakeful.core.store import Store


def test_a_flooded_workspace_does_not_push_anothers_inboxes_past_the_ready_limit(
    store: Store,
) -> None:
    for i in range(30):  # workspace A's flood: 30 people, all older than B's one message
        store.ingest(f"TA:U{i:03d}", "slack", f"EvA{i}", {"text": "flood"}, T0)
    store.ingest("TB:U001", "slack", "EvB1", {"text": "hello"}, T0 + 1)
    ready = [i for i, _ in store.ready_list(T0 + 2, limit=5).inboxes]
    assert "TB:U001" in ready[:2]  # the workspaces take turns: B's inbox is in the first turn
    assert ready[0] == "TA:U000"  # the oldest work still goes first


def test_a_flooded_workspace_does_not_push_anothers_replies_past_the_claim_limit(
    store: Store,
) -> None:
    for i in range(30):
        store.post(f"TA:U{i:03d}", [Post(f"DA{i:03d}", "flood")], T0)
    store.post("TB:U001", [Post("DB001", "reply")], T0 + 1)
    batches = store.claim_batches(T0 + 2, limit=5)
    channels = [b.channel for b in batches]
    assert "DB001" in channels[:2]
    assert len(channels) == 5


class _Limited(Sender):
    """A sender whose calls in workspace A answer 429 for a minute; B's go through."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def workspace_of(self, part: Part) -> str:
        return InboxId(part.inbox).team or "-"

    def send(self, part: Part) -> str | None:
        if InboxId(part.inbox).team == "TA":
            raise TransientSendError("rate limited (ratelimited)", retry_after=60)
        self.sent.append(part.channel)
        return "1.0"


def test_a_rate_limit_pauses_only_its_own_workspaces_sends(store: Store) -> None:
    sender = _Limited()
    dispatcher = Dispatcher(store=store, clock=lambda: T0, sender=sender, concurrency=1)
    store.post("TA:U1", [Post("DA1", "first in A")], T0)
    dispatcher.tick(T0)  # A answers 429: A is paused for a minute
    store.post("TA:U2", [Post("DA2", "second in A")], T0)
    store.post("TB:U1", [Post("DB1", "in B")], T0)
    dispatcher.tick(T0)
    assert sender.sent == ["DB1"]  # B's reply went out while A waits out its Retry-After
    assert {r.channel for r in store.outbox("sent")} == {"DB1"}  # A's rows wait their turn


def test_with_one_workspace_a_rate_limit_still_pauses_every_send(store: Store) -> None:
    class OneWorkspace(_Limited):
        def workspace_of(self, part: Part) -> str:
            return ""

    sender = OneWorkspace()
    dispatcher = Dispatcher(store=store, clock=lambda: T0, sender=sender, concurrency=1)
    store.post("TA:U1", [Post("DA1", "first")], T0)
    dispatcher.tick(T0)
    store.post("TB:U1", [Post("DB1", "other")], T0)
    dispatcher.tick(T0)
    assert sender.sent == []  # as before issue 26: Slack's one app limit, one pause
