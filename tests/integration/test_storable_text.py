"""Issue 21, item 4(a): text the stores cannot hold (U+0000, which PostgreSQL refuses in any text
value, and lone surrogates, which neither driver can encode) is cleaned or refused at every
entry point before anything is stored, the same on both stores.

Content (payloads, reply text, blocks, facts, timer payloads, approval args, sessions) keeps the
person's other words, with U+FFFD in the character's place; names of rows (inbox, delivery ids,
channels, timer and approval ids) are refused. Through the store API and through the real
HTTP front (a signed Slack event, a slash command, a GitHub delivery titled `crash\\u0000me`),
with the engine's loops running the built-in agent. Both stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import T0, MakeStore
from tests.support.agents import refund_desk
from tests.support.approvals import ApprovalRequest
from tests.support.recording_sender import RecordingSender
from tests.support.webhook_front import (
    GITHUB_SECRET,
    OPS,
    start_server,
)
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, SlackFront
from wakeful.bot.process.config import WebhookSource
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Effects, Post, Timer
from wakeful.core.errors import InvalidInput
from wakeful.core.inbox_id import InboxId
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.worker import Worker
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender
from wakeful.devtools.webhooks import WebhookSender, github_payload

FFFD = "\ufffd"
TEAM = "T1"
SLACK_SECRET = "storable-signing-secret"
UNSTORABLE = {"nul": "\x00", "surrogate": "\ud800", "low-surrogate": "\udfff"}


# -- the store API -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
def test_a_payload_is_stored_with_fffd_in_place(store: Store, bad: str) -> None:
    payload = {"text": f"a{bad}b", "nested": {f"k{bad}": [bad, 1, None]}, "ok": "日本 🎉"}
    assert store.ingest(f"{TEAM}:U1", "slack", "Ev-odd", payload, T0).stored
    [event] = store.events(f"{TEAM}:U1")
    assert event.payload == {
        "text": f"a{FFFD}b",
        "nested": {f"k{FFFD}": [FFFD, 1, None]},
        "ok": "日本 🎉",
    }


@pytest.mark.parametrize("field", ["inbox", "source", "source_id"])
@pytest.mark.parametrize("bad", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
def test_a_key_that_cannot_be_stored_is_refused(store: Store, field: str, bad: str) -> None:
    key = {"inbox": f"{TEAM}:U1", "source": "slack", "source_id": "Ev1"}
    key[field] += bad
    with pytest.raises(InvalidInput, match="NUL or a lone surrogate"):
        store.ingest(key["inbox"], key["source"], key["source_id"], {}, T0)
    assert count_events(store) == 0


def claim_one(store: Store, inbox: str, source_id: str) -> Any:
    store.ingest(inbox, "test", source_id, {"n": source_id}, T0)
    claim = store.acquire_and_claim(inbox, f"holder-{inbox}", T0)
    assert claim is not None and claim.events
    return claim


def nul_effects(tag: str) -> Effects:
    """Every kind of effect, each carrying a NUL in its content."""
    prompt = Post("D1", f"Approve {tag}\x00?", blocks=[{"type": "section", "text": "\x00"}])
    digest = {"since": T0, "periods": 1, "missed": 0, "unit": "period", "lines": []}
    request = ApprovalRequest(
        f"req-{tag}", "refund_order", {"reason": "a\x00b"}, "U1", T0 + 600, prompt=prompt
    )
    fx = Effects(
        messages=[
            Post("D1", f"reply {tag} a\x00b"),
            Post("D1", "digest", kind="digest", facts={**digest, "note": "x\x00"}),
        ],
        timers=[Timer.once(f"remind-{tag}", T0 + 60, {"text": "a\x00b"})],
        approvals=[request],
        cancel_timers=["gone\x00"],
    )
    fx.set_session({"said": f"a\x00b {tag}"})
    return fx


def test_effects_with_nul_finish_with_fffd_in_place(store: Store) -> None:
    inbox = f"{TEAM}:U1"
    claim = claim_one(store, inbox, "e1")
    assert store.finish(claim, nul_effects("one"), T0, release=True)
    texts = sorted(r.text for r in store.outbox(inbox=inbox))
    assert texts == [f"Approve one{FFFD}?", "digest", f"reply one a{FFFD}b"]
    prompt = next(r for r in store.outbox(inbox=inbox) if r.text.startswith("Approve"))
    assert prompt.blocks == [{"type": "section", "text": FFFD}]
    digest = next(r for r in store.outbox(inbox=inbox) if r.kind == "digest")
    assert digest.facts["note"] == f"x{FFFD}"
    [timer] = [t for t in store.timers(inbox) if "/remind-" in t.id]
    assert timer.payload == {"text": f"a{FFFD}b"}
    [approval] = store.approvals(inbox)
    assert approval.args == {"reason": f"a{FFFD}b"}
    assert store.session(inbox) == {"said": f"a{FFFD}b one"}


def test_one_run_with_nul_does_not_fail_the_others_finished_with_it(store: Store) -> None:
    """The shared group finish (several inboxes' runs in one transaction) commits them all."""
    claims = [claim_one(store, f"{TEAM}:U{n}", f"e{n}") for n in range(3)]
    runs = [(c, nul_effects(str(n)) if n == 1 else Effects()) for n, c in enumerate(claims)]
    runs[2][1].failed[claims[2].events[0].id] = "ValueError: bad input a\x00b"
    outcomes = store.finish_and_claim_many(runs, T0)
    assert [finished for finished, _ in outcomes] == [True, True, True]
    replies = [r.text for r in store.outbox(inbox=f"{TEAM}:U1") if r.text.startswith("reply")]
    assert replies == [f"reply 1 a{FFFD}b"]
    [failed] = store.events(f"{TEAM}:U2")
    assert (failed.status, failed.error) == ("pending", f"ValueError: bad input a{FFFD}b")


@pytest.mark.parametrize(
    "build",
    [
        lambda: Post("C1\x00", "hi"),
        lambda: Post("C1", "hi", thread_ts="1.2\ud800"),
        lambda: Post("C1", "hi", kind="ephemeral", user="U1\x00"),
        lambda: Timer.once("remind\x00", T0),
        lambda: ApprovalRequest("req\x00", "refund_order", {}, "U1", T0),
        lambda: ApprovalRequest("req", "refund_order", {}, "U1\udfff", T0),
        lambda: ApprovalRequest("req", "refund_order", {}, "U1", T0, approvers=("U2\x00",)),
    ],
    ids=["channel", "thread", "user", "timer", "approval-id", "requester", "approver"],
)
def test_a_name_that_cannot_be_stored_fails_the_run_that_made_it(build: Callable[[], Any]) -> None:
    with pytest.raises(InvalidInput, match="NUL or a lone surrogate"):
        build()


def test_names_from_outside_are_refused_or_unknown_alike(store: Store) -> None:
    with pytest.raises(InvalidInput):
        store.answer("req\x00", "yes", "U1", T0)
    with pytest.raises(InvalidInput):
        store.answer("req", "yes", "U1\x00", T0)
    assert store.takes_part("C1\x00", "1.2") is False
    with pytest.raises(InvalidInput):
        store.remember_thread("C1", "1.2\x00", "mentioned", T0)
    with pytest.raises(InvalidInput):
        store.record_step("refund-1\x00", f"{TEAM}:U1", "refund_order", {}, True, T0)
    assert store.record_step("refund-1", "T1:U1", "refund_order", {"why": "a\x00"}, True, T0)
    assert [c.args for c in store.recorded_steps()] == [{"why": f"a{FFFD}"}]


# -- through the HTTP front ------------------------------------------------------------------


class Front:
    """The real HTTP front (Slack events, commands, GitHub webhooks) and the engine's loops
    with the built-in agent on a simulated clock; a recording sender stands in for Slack."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        source = WebhookSource("github", "github", GITHUB_SECRET, OPS)
        listeners = Listeners(store, SLACK_SECRET, clock=self.clock, bot_user_id="UBOT")
        front = SlackFront(listeners, webhook_sources=(source,))
        self.port, self.stop = start_server(front)
        url = f"http://127.0.0.1:{self.port}"
        self.slack = EventSender(url + EVENTS_PATH, SLACK_SECRET, team_id=TEAM)
        self.github = WebhookSender(url, github_secret=GITHUB_SECRET)
        self.sent = RecordingSender()
        self.worker = Worker(store=store, agent=refund_desk(store), clock=self.clock, holder="w")
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=self.sent)

    def tick(self, at: int) -> None:
        self.clock.now = at
        self.scheduler.tick(at)
        self.worker.tick(at)
        self.dispatcher.tick(at)

    def texts(self, channel: str) -> list[str]:
        return [p.text for p in self.sent.parts if p.channel == channel]


@pytest.fixture
def front(make_store: MakeStore) -> Iterator[Front]:
    world = Front(make_store())
    yield world
    world.stop()


def test_a_signed_slack_event_with_a_nul_is_answered_and_reminds(front: Front) -> None:
    """The issue's `remind me in 1 seconds to a\\u0000b`, from one person, while another
    person's message is run and finished in the same group."""
    sent = front.slack.message("U1", "remind me in 1 seconds to a\x00b")
    assert sent.status == 200, sent
    assert front.slack.message("U2", "status").status == 200
    [event] = front.store.events(f"{TEAM}:U1")
    assert event.payload["text"] == f"remind me in 1 seconds to a{FFFD}b"
    front.tick(T0)
    assert front.texts("D1") == [f"Handled 1 message.\nI'll remind you in 1 seconds: a{FFFD}b"]
    assert front.texts("D2")[0].startswith("Handled 1 message.\nStatus:")
    front.tick(T0 + 1)
    assert front.texts("D1")[-1] == f"Reminder: a{FFFD}b"
    assert all(e.status == "done" for e in front.store.events(f"{TEAM}:U1"))


def test_a_slash_command_with_a_nul_is_answered(front: Front) -> None:
    sent = front.slack.command("U3", "remind me in 1 seconds to a\x00b")
    assert sent.status == 200, sent
    front.tick(T0)
    [answer] = [p for p in front.sent.parts if p.kind == "ephemeral" and p.ref]
    assert answer.text == f"I'll remind you in 1 seconds: a{FFFD}b"
    front.tick(T0 + 1)
    assert front.texts("D3")[-1] == f"Reminder: a{FFFD}b"


def test_a_github_issue_titled_with_a_nul_is_reported(front: Front) -> None:
    body = json.loads(github_payload("issues.opened"))
    body["issue"]["title"] = "crash\x00me"
    sent = front.github.github("issues", json.dumps(body).encode())
    assert sent.status == 200, sent
    assert front.slack.message("U4", "status").status == 200  # finished in the same group
    front.tick(T0)
    [line] = front.texts(OPS)
    assert f"crash{FFFD}me" in line and "\x00" not in line
    assert front.texts("D4")[0].startswith("Handled 1 message.")
    [event] = front.store.events(InboxId.conversation(OPS))
    assert event.status == "done"


def test_a_lone_surrogate_in_a_webhook_is_stored_like_a_nul(front: Front) -> None:
    body = json.loads(github_payload("issues.opened"))
    raw = json.dumps(body).replace("Spelling error", "Spelling \\ud800 error").encode()
    assert front.github.github("issues", raw).status == 200
    front.tick(T0)
    [line] = front.texts(OPS)
    assert f"Spelling {FFFD} error" in line


def test_a_slack_event_whose_user_cannot_be_stored_is_a_400_on_both_stores(front: Front) -> None:
    sent = front.slack.message("U5\x00", "hello", channel="D5")
    assert sent.status == 400, sent
    assert count_events(front.store) == 0
