"""The outbox's kinds are the registry the store was built with (core/kinds.py `Kinds`): a post
of a kind it does not know, or one its kind or its destination's limits refuse, is refused
before anything is stored, whether it comes through `post`, a run or a finish."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from wakeful.core.clock import ManualClock
from wakeful.core.effects import Effects, Post
from wakeful.core.errors import InvalidInput
from wakeful.core.kinds import ENGINE_KINDS
from wakeful.core.run import Run
from wakeful.core.worker import Worker

INBOX = "T1:U8"
ENGINE_KNOWN = "digest, ephemeral, ops, post, stream, update"
HOME = Post("U8", "Home", blocks=[{"type": "header"}], kind="home", user="U8", priority="urgent")


def section(i: int) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": f"line {i}"}}


class Says:
    """Answers every batch with the posts it is given (as the engine's test agents do)."""

    def __init__(self, *posts: Post) -> None:
        self.posts = posts

    def run(self, run: Run) -> Effects:
        return Effects(messages=list(self.posts))


def test_a_store_refuses_a_post_of_a_kind_it_does_not_know_and_stores_nothing(
    make_store: MakeStore,
) -> None:
    engine_only = make_store(kinds=ENGINE_KINDS)
    unknown = rf"unknown message kind 'home' \(known: {ENGINE_KNOWN}\)"
    with pytest.raises(InvalidInput, match=unknown):
        engine_only.post(INBOX, [Post("C1", "said first"), HOME], T0)
    assert engine_only.outbox(inbox=INBOX) == [], "nothing of the call was stored"

    slack = make_store()  # Slack's kinds, as every wakeful process's store
    with pytest.raises(InvalidInput, match=r"unknown message kind 'fax' \(known: .*home.*\)"):
        slack.post(INBOX, [Post("C1", "by fax", kind="fax")], T0)
    with pytest.raises(InvalidInput, match="a status message needs its thread's ts"):
        slack.post(INBOX, [Post("C1", "", kind="status")], T0)
    slack.post(INBOX, [HOME], T0)
    assert [r.kind for r in slack.outbox(inbox=INBOX)] == ["home"]


@pytest.mark.parametrize(
    ("post", "error"),
    [
        (Post("D1", "by fax", kind="fax"), "unknown message kind 'fax'"),
        (Post("D1", "long", blocks=[section(i) for i in range(51)]), "at most 50 blocks"),
        (Post("D1", "only you", kind="ephemeral"), "ephemeral message needs a user"),
    ],
    ids=["unknown kind", "over Slack's blocks", "kind's own rule"],
)
def test_a_run_that_asks_for_a_post_its_store_refuses_fails_and_stores_none(
    make_store: MakeStore, post: Post, error: str
) -> None:
    store = make_store()
    store.ingest(INBOX, "slack", "E1", {"text": "hi"}, T0)
    Worker(store=store, clock=ManualClock(T0), agent=Says(Post("D1", "fine"), post)).tick(T0)
    [event] = store.events(INBOX)
    assert event.status == "pending" and event.error is not None
    assert event.error.startswith("InvalidInput: ") and error in event.error
    assert store.outbox(inbox=INBOX) == [], "not even the run's valid post"


def test_the_limits_are_the_registry_s_not_the_engine_s(make_store: MakeStore) -> None:
    """The engine alone sets no limit on blocks: Slack's 50 is the edge's."""
    store = make_store(kinds=ENGINE_KINDS)
    store.ingest(INBOX, "slack", "E1", {"text": "hi"}, T0)
    many = Post("D1", "long", blocks=[section(i) for i in range(51)], priority="urgent")
    Worker(store=store, clock=ManualClock(T0), agent=Says(many)).tick(T0)
    assert [e.status for e in store.events(INBOX)] == ["done"]
    assert [len(r.blocks or []) for r in store.outbox(inbox=INBOX)] == [51]


def test_a_finish_refuses_what_its_store_does_not_know_before_writing(
    make_store: MakeStore,
) -> None:
    """The store's own gate, for effects that never went through a runner."""
    store = make_store(kinds=ENGINE_KINDS)
    store.ingest(INBOX, "slack", "E1", {"text": "hi"}, T0)
    gen = store.acquire(INBOX, "A", T0)
    assert gen is not None
    claim = store.claim(INBOX, "A", gen, T0)
    with pytest.raises(
        InvalidInput, match=rf"unknown message kind 'home' \(known: {ENGINE_KNOWN}\)"
    ):
        store.finish(claim, Effects(messages=[Post("D1", "fine"), HOME]), T0)
    assert store.outbox(inbox=INBOX) == []
    assert [e.status for e in store.events(INBOX)] == ["running"]
    assert store.finish(claim, Effects(messages=[Post("D1", "fine")]), T0)
