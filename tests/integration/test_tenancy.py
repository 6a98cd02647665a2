"""Issue 34, items 1 and 2: one workspace never sees another's records or approvers.

Workspace A refunded order 1001; then workspace B's `refund order 1001` was refused with A's
date and request id, and B's open approval for order 2002 made A's request fail with B's id:
the refund record's key and the open approvals a refund checks spanned every inbox. And an
approver of A saw B's open approvals on the Home tab. Order numbers are per customer; so are
approvers.

Here both built-in agents serve people of two workspaces from one store and one worker, on a
simulated clock, through the runner `wakeful serve` builds; the Home tab, `/wakeful` and the
approver's clicks and Requeue through the real HTTP front. Each test names the rule it checks
and fails when it is broken. On both stores.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import T0
from tests.support import fake_anthropic as api
from tests.support.approvals import ApprovalRequest
from tests.support.claude_world import fake
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.recording_sender import RecordingSender
from tests.support.refund_world import utc
from tests.support.webhook_front import start_server
from wakeful.agents import Agent, Command, Message, Run, Setup, Tool
from wakeful.bot.builtin.claude import ClaudeAgent
from wakeful.bot.builtin.refund_desk import ONLY_APPROVERS, RefundDesk
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, SlackFront
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.bot.slack.events import HomeOpened
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Effects
from wakeful.core.inbox_id import InboxId
from wakeful.core.records import OutboxRow
from wakeful.core.scheduler import Scheduler
from wakeful.core.store import Store
from wakeful.core.store.installations import InstallationRow
from wakeful.core.worker import Worker
from wakeful.devtools.emulator import EventSender

__all__ = ["fake"]  # the fixture of tests/support/claude_world.py, used here too

A, B = "TA", "TB"
ALICE, BOB = InboxId.person(A, "UA1"), InboxId.person(B, "UB1")
"""A person of each workspace."""
AMY = InboxId.person(A, "UA2")
"""Another person of workspace A."""
BY_TEAM = ("TA:UA9", "TB:UB9")
"""WAKEFUL_APPROVERS naming each approver with their workspace."""
BARE = ("UA9", "UB9")
"""WAKEFUL_APPROVERS as single-workspace mode writes them: user ids alone."""
TTL = 3600
SECRET = "tenancy-signing-secret"
_ids = itertools.count(1)


class World:
    """One worker serving both workspaces: an agent behind production's runner, the three
    loops, a clock, and what each person was shown (their inbox's outbox rows). In
    distribution mode unless told otherwise."""

    def __init__(
        self,
        store: Store,
        approvers: tuple[str, ...] = BARE,
        factory: Callable[[Setup], Any] = RefundDesk,
        distribution: bool = True,
    ) -> None:
        self.store = store
        self.approvers = approvers
        self.clock = ManualClock(T0)
        settings = replace(store.settings, approval_ttl=TTL)
        oauth = {"client_id": "1.2", "client_secret": "s"} if distribution else {}
        self.config = Config(approvers=approvers, settings=settings, **oauth)
        assert self.config.distribution == distribution
        self.runner = build_runner(
            self.config, store, None, factory=factory, env={}, clock=self.clock
        )
        self.agent = self.runner.agent
        self.worker = Worker(store=store, clock=self.clock, runner=self.runner)
        self.scheduler = Scheduler(store=store, clock=self.clock)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=RecordingSender())

    def say(self, inbox: InboxId, text: str) -> None:
        n = next(_ids)
        assert inbox.team is not None and inbox.user is not None
        message = Message(
            text=text,
            user=inbox.user,
            team=inbox.team,
            channel=f"D{inbox.user}",
            ts=f"{self.clock.now}.{n:06d}",
        )
        self.store.ingest(inbox, "slack", f"Ev-tenancy-{n}", message.to_wire(), self.clock.now)

    def command(self, inbox: InboxId, text: str) -> None:
        n = next(_ids)
        assert inbox.team is not None and inbox.user is not None
        command = Command(
            command="/wakeful", text=text, user=inbox.user, team=inbox.team, channel="C0GEN"
        )
        self.store.ingest(inbox, "slack", f"cmd-tenancy-{n}", command.to_wire(), self.clock.now)

    def open_home(self, inbox: InboxId) -> None:
        assert inbox.team is not None and inbox.user is not None
        self.store.note_home_opened(inbox, self.clock.now)
        opened = HomeOpened(user=inbox.user, team=inbox.team)
        self.store.ingest(inbox, "slack", f"home-{next(_ids)}", opened.to_wire(), self.clock.now)

    def settle(self, at: int | None = None) -> None:
        """Tick until no event of any inbox waits (a bounded number of rounds)."""
        if at is not None:
            self.clock.now = at
        for _ in range(20):
            self.scheduler.tick(self.clock.now)
            self.worker.tick(self.clock.now)
            self.dispatcher.tick(self.clock.now)
            if self.store.ready_list(self.clock.now).inboxes == []:
                return
        raise AssertionError("events still open")

    def open_approval(self, inbox: InboxId, order: str) -> str:
        [found] = [
            a
            for a in self.store.approvals(inbox)
            if a.answer is None and a.args.get("order_id") == order
        ]
        return found.id

    def approve(self, inbox: InboxId, request_id: str) -> None:
        """The workspace's approver says yes (as configured), and the answer's run runs."""
        approver = {A: "UA9", B: "UB9"}[str(inbox.team)]
        answered = self.store.answer(request_id, "yes", approver, self.clock.now, self.approvers)
        assert answered.outcome == "yes", answered
        self.settle(self.clock.now + 1)

    def approve_as(self, approver: str, request_id: str) -> None:
        answered = self.store.answer(request_id, "yes", approver, self.clock.now, (approver,))
        assert answered.outcome == "yes", answered
        self.settle(self.clock.now + 1)

    def rows(self, inbox: InboxId, kind: str | None = None) -> list[OutboxRow]:
        return [r for r in self.store.outbox(inbox=inbox) if kind is None or r.kind == kind]

    def shown(self, inbox: InboxId) -> str:
        """Everything the person was sent, text and blocks: prompts, replies, the Home tab."""
        return "\n".join(f"{r.text}\n{json.dumps(r.blocks)}" for r in self.rows(inbox))

    def texts(self, inbox: InboxId) -> list[str]:
        return [r.text for r in self.rows(inbox, "post")]


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


def ask(world: World, inbox: InboxId, order: str) -> str:
    """`refund order <order>` from `inbox`; its request id (the person's own prompt)."""
    world.say(inbox, f"refund order {order}")
    world.settle()
    request_id = world.open_approval(inbox, order)
    [prompt] = [r for r in world.rows(inbox) if r.ref == request_id and r.kind == "post"]
    assert f"refund order {order}" in prompt.text
    return request_id


# -- item 1: refunds and open approvals are the workspace's ------------------------------------


def test_two_workspaces_refund_the_same_order_number_independently(world: World) -> None:
    """The issue's first reproduction: B's `refund order 1001` after A's refund of 1001 gets
    B's own approval prompt; nothing B is sent names A's request, or says the order was
    refunded or when, until B's own approval; then B's refund is done, once."""
    alices = ask(world, ALICE, "1001")
    world.approve(ALICE, alices)
    assert "Refunded order 1001." in world.texts(ALICE)

    world.clock.now = T0 + 600
    bobs = ask(world, BOB, "1001")  # B's own prompt: the refund desk asks, it does not refuse
    assert bobs != alices
    before_yes = world.shown(BOB)
    for leak in (alices, "already", utc(T0 + 1)):
        assert leak not in before_yes, before_yes
    world.approve(BOB, bobs)
    assert world.texts(BOB)[-1] == "Refunded order 1001."
    assert alices not in world.shown(BOB) and bobs not in world.shown(ALICE)
    # One record per workspace, each naming its own request.
    for team, request_id in ((A, alices), (B, bobs)):
        record = world.store.recorded_step(f"{team}:refund_order:1001")
        assert record is not None and record.result["request"] == request_id
    assert world.store.recorded_step("refund_order:1001") is None


def test_an_open_approval_in_one_workspace_does_not_hold_back_the_others(world: World) -> None:
    """The issue's second reproduction: B's open approval for 2002 does not make A's
    `refund order 2002` fail with B's request id; both are asked and both refund."""
    bobs = ask(world, BOB, "2002")
    alices = ask(world, ALICE, "2002")
    assert bobs not in world.shown(ALICE) and "already" not in world.shown(ALICE)
    world.approve(ALICE, alices)
    world.approve(BOB, bobs)
    assert world.texts(ALICE)[-1] == world.texts(BOB)[-1] == "Refunded order 2002."
    assert bobs not in world.shown(ALICE) and alices not in world.shown(BOB)


def test_within_a_workspace_an_order_is_still_asked_and_refunded_once(world: World) -> None:
    """The scope is the workspace, not the inbox: two people of A share A's order numbers."""
    alices = ask(world, ALICE, "3003")
    world.say(AMY, "refund order 3003")
    world.settle()
    waiting = f"Order 3003 is already waiting for approval (request {alices}); I did not ask again."
    assert world.texts(AMY) == [f"Handled 1 message.\n{waiting}"]
    world.approve(ALICE, alices)
    world.say(AMY, "refund order 3003")
    world.settle(T0 + 60)
    done = f"Order 3003 was already refunded on {utc(T0 + 1)} (request {alices})."
    assert world.texts(AMY)[-1] == f"Handled 1 message.\n{done}"
    assert [a.id for a in world.store.approvals(AMY)] == []


def test_a_refund_recorded_before_the_upgrade_still_counts(store: Store) -> None:
    """A record under the old key (`refund_order:<order>`, no workspace) was made when one
    record spanned every inbox; in single-workspace mode it is that workspace's: the order is
    answered as refunded, never asked for or refunded again."""
    world = World(store, distribution=False)
    old = {"order_id": "4004", "request": "refund-order-7-0-0ld"}
    world.store.record_step("refund_order:4004", None, "refund_order:once", None, old, T0 - 99)
    world.say(ALICE, "refund order 4004")
    world.settle()
    line = f"Order 4004 was already refunded on {utc(T0 - 99)} (request refund-order-7-0-0ld)."
    assert world.texts(ALICE) == [f"Handled 1 message.\n{line}"]
    assert world.store.approvals(ALICE) == []


def test_an_old_record_of_another_workspaces_request_counts_but_names_nothing_of_it(
    world: World,
) -> None:
    """Distribution mode before the upgrade: A's refund of 5005 was recorded under the old
    key. It still counts (nothing is refunded twice), but B is not told A's request or date."""
    alices = ask(world, ALICE, "5005")
    old = {"order_id": "5005", "request": alices}
    world.store.record_step("refund_order:5005", None, "refund_order:once", None, old, T0 + 5)
    world.say(BOB, "refund order 5005")
    world.settle(T0 + 60)
    [said] = world.texts(BOB)
    assert "before refunds were kept per workspace" in said, said
    assert alices not in said and utc(T0 + 5) not in said


class ClaudeWorld(World):
    def __init__(self, store: Store, fake: FakeAnthropic) -> None:
        self.made: list[ClaudeAgent] = []

        def factory(setup: Setup) -> ClaudeAgent:
            agent = ClaudeAgent(
                setup, api_key="test-key", base_url=fake.base_url, model="claude-test", timeout=10
            )
            self.made.append(agent)
            return agent

        super().__init__(store, factory=factory)
        self.fake = fake

    def tool_ask(self, inbox: InboxId, order: str, uid: str) -> None:
        """The person asks; the model calls `refund_order` (an `ask` tool): the run ends at
        the approval."""
        self.say(inbox, f"refund {order} please")
        self.fake.script(api.tool_use("refund_order", {"order_id": order, "reason": "x"}, uid))
        self.settle()

    def yes(self, inbox: InboxId, request_id: str) -> dict[str, Any]:
        """The approver says yes; the resumed run tells the model; what it was told."""
        self.fake.script(api.text("Done."))
        self.approve(inbox, request_id)
        [result] = [
            b
            for b in self.fake.requests[-1]["messages"][-1]["content"]
            if b["type"] == "tool_result"
        ]
        return dict(result)


@pytest.fixture
def claude(store: Store, fake: FakeAnthropic) -> Iterator[ClaudeWorld]:
    made = ClaudeWorld(store, fake)
    yield made
    for agent in made.made:
        agent.close()


def test_claude_refunds_the_same_order_number_in_two_workspaces(claude: ClaudeWorld) -> None:
    """The Claude agent's `refund_order` goes through the same rules: A's refund of 1001
    does not refuse B's call (B gets its own approval, the model is told nothing of A's), and
    B's open approval for 2002 does not refuse A's."""
    claude.tool_ask(ALICE, "1001", "toolu_a1")
    alices = claude.open_approval(ALICE, "1001")
    told = claude.yes(ALICE, alices)
    assert told["content"] == "Approved by <@UA9>. Refunded order 1001."

    asked_for_alice = len(claude.fake.requests)
    claude.tool_ask(BOB, "1001", "toolu_b1")  # nothing scripted for a refusal: it would fail
    bobs = claude.open_approval(BOB, "1001")
    told = claude.yes(BOB, bobs)
    assert told["content"] == "Approved by <@UB9>. Refunded order 1001.", told
    told_the_model_for_bob = json.dumps(claude.fake.requests[asked_for_alice:])
    assert alices not in told_the_model_for_bob and alices not in claude.shown(BOB)

    claude.tool_ask(BOB, "2002", "toolu_b2")
    claude.tool_ask(ALICE, "2002", "toolu_a2")
    assert claude.open_approval(ALICE, "2002") != claude.open_approval(BOB, "2002")
    assert claude.open_approval(BOB, "2002") not in claude.shown(ALICE)


def test_the_workspaces_of_an_org_wide_install_share_its_order_numbers(store: Store) -> None:
    """Enterprise Grid: one org-wide installation is one customer; an order refunded in one
    of its workspaces is refunded for all of them, and a standalone workspace is apart."""
    org = InstallationRow("E1", "E1", None, True, "{}", "sealed", None)
    store.save_installation(org, T0)
    for team in ("TE1", "TE2"):
        store.note_team(team, "E1")
    world = World(store, distribution=True)
    one, two = InboxId.person("TE1", "WE1"), InboxId.person("TE2", "WE2")
    firsts = ask(world, one, "1001")
    world.approve_as("WE9", firsts)
    world.say(two, "refund order 1001")
    world.settle(T0 + 60)
    done = f"Order 1001 was already refunded on {utc(T0 + 1)} (request {firsts})."
    assert [r.text for r in world.rows(two, "post")] == [f"Handled 1 message.\n{done}"]
    assert store.recorded_step("E1:refund_order:1001") is not None
    ask(world, ALICE, "1001")  # a workspace of its own: its order 1001 is another


# -- the agent's contract: queries and `once` keys are the run's workspace ---------------------


class Looker(Agent):
    """Asks for approval when told `ask`, records a step of its own when told `once`, and
    says what its queries answer when told `look`."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.tools = [Tool("act", lambda args, key: {"done": key})]
        self.seen: list[dict[str, Any]] = []

    def run(self, run: Run) -> None:
        q, steps = self.setup.query, self.setup.steps
        for e in run.events:
            if not isinstance(e, Message):
                continue
            if e.text == "ask":
                run.ask("act", {"n": 1}, summary="act", to=e)
            elif e.text == "once":
                steps.once("order:1", lambda _k: {"by": str(run.inbox)}, name="mine")
                steps.once("global:1", lambda _k: {"by": str(run.inbox)}, name="g", everywhere=True)
            elif e.text == "look":
                other = BOB if run.inbox.team == A else ALICE
                self.seen.append(
                    {
                        "open": sorted(a.inbox for a in q.open_approvals()),
                        "open everywhere": sorted(
                            a.inbox for a in q.open_approvals(everywhere=True)
                        ),
                        "other inbox": q.open_approvals(other),
                        "other's timers": q.timers(other),
                        "other's approval": [
                            a.id
                            for a in q.open_approvals(other, everywhere=True)
                            if q.approval(a.id) is not None
                        ],
                        "once": q.step("order:1"),
                        "global": q.step("global:1"),
                    }
                )


def test_an_agents_queries_and_once_keys_are_its_workspaces_unless_it_asks_for_every_one(
    store: Store,
) -> None:
    world = World(store, factory=Looker)
    looker = world.agent
    assert isinstance(looker, Looker)
    for inbox in (ALICE, BOB):
        world.say(inbox, "ask")
    world.settle()
    world.say(ALICE, "once")
    world.settle()
    world.say(BOB, "once")
    world.settle()
    world.say(ALICE, "look")
    world.settle()
    seen = looker.seen[-1]
    assert seen["open"] == [ALICE]  # only A's
    assert seen["open everywhere"] == sorted([ALICE, BOB])
    assert seen["other inbox"] == [] and seen["other's timers"] == []
    assert seen["other's approval"] == []  # B's approval is not found from A
    # `once` ran in each workspace: A's step is A's; the global one is the first caller's.
    assert seen["once"] is not None and seen["once"].result == {"by": ALICE}
    assert seen["global"] is not None and seen["global"].result == {"by": ALICE}
    mine = store.recorded_step(f"{B}:order:1")
    assert mine is not None and mine.result == {"by": BOB} and mine.inbox == BOB
    assert store.recorded_step("order:1") is None
    glob = store.recorded_step("global:1")
    assert glob is not None and glob.inbox is None
    # Outside a run no workspace is known: every workspace is seen, as the operator sees it.
    assert sorted(a.inbox for a in looker.setup.query.open_approvals()) == sorted([ALICE, BOB])


# -- item 2: approvers are per workspace --------------------------------------------------------


def dead_event(store: Store, inbox: InboxId, key: str) -> int:
    """An event of `inbox` whose attempts ran out."""
    stored = store.ingest(inbox, "poison", key, {}, T0)
    assert stored.event_id is not None
    claim = store.acquire_and_claim(inbox, "w-poison", T0)
    assert claim is not None
    assert store.finish(claim, Effects(dead={stored.event_id: "boom"}), T0, release=True)
    return stored.event_id


@pytest.mark.parametrize("approvers", [BY_TEAM, BARE], ids=["T:U", "U"])
def test_an_approvers_home_tab_lists_only_its_workspaces_approvals_and_dead_letters(
    store: Store, approvers: tuple[str, ...]
) -> None:
    """An approver of A opening the Home tab in A sees A's open approvals and dead letters,
    never B's (the issue: B's approval for 2002 was listed with its request id)."""
    world = World(store, approvers)
    alices, bobs = ask(world, ALICE, "7007"), ask(world, BOB, "2002")
    dead_a, dead_b = dead_event(store, ALICE, "poison-a"), dead_event(store, BOB, "poison-b")
    boss = InboxId.person(A, "UA9")
    world.open_home(boss)
    world.settle()
    [home] = world.rows(boss, "home")
    drawn = json.dumps(home.blocks)
    assert alices in drawn and f"event {dead_a} in {ALICE}" in drawn, drawn
    assert bobs not in drawn and BOB not in drawn and f"event {dead_b}" not in drawn, drawn


@pytest.mark.parametrize("distribution", [True, False], ids=["distribution", "one workspace"])
def test_the_dead_letters_of_no_workspace_are_shown_in_single_workspace_mode_only(
    store: Store, distribution: bool
) -> None:
    """A webhook report's dead event names no workspace: with one workspace it is that one's
    (its approvers see it, as before workspaces were kept apart); in distribution mode it is
    the operators' alone (`wakeful dead-letters`)."""
    world = World(store, BY_TEAM, distribution=distribution)
    hooks = dead_event(store, InboxId.conversation("C0HOOKS"), "poison-hooks")
    boss = InboxId.person(A, "UA9")
    world.open_home(boss)
    world.command(boss, "dead-letters")
    world.settle()
    [home] = world.rows(boss, "home")
    [said] = [r.text for r in world.rows(boss, "ephemeral")]
    shown = f"event {hooks} in channel:C0HOOKS" in json.dumps(home.blocks)
    assert (shown, f"event {hooks} (channel:C0HOOKS)" in said) == (not distribution,) * 2


def test_dead_letters_over_wakeful_are_the_approvers_workspaces_only(store: Store) -> None:
    world = World(store, BY_TEAM)
    dead_a, dead_b = dead_event(store, ALICE, "poison-a"), dead_event(store, BOB, "poison-b")
    boss, stranger = InboxId.person(A, "UA9"), InboxId.person(A, "UB9")
    world.command(boss, "dead-letters")
    world.command(stranger, "dead-letters")  # B's approver, but in A: not an approver here
    world.settle()
    [said] = [r.text for r in world.rows(boss, "ephemeral")]
    assert f"event {dead_a} ({ALICE})" in said and f"event {dead_b}" not in said, said
    assert [r.text for r in world.rows(stranger, "ephemeral")] == [ONLY_APPROVERS]


def test_an_approver_answers_only_their_own_workspaces_approvals(store: Store) -> None:
    """`T…:U…`: that person in that workspace. A's approver answers A's; B's approver cannot,
    even with the same user id arriving as A's (the front refuses another team's click too)."""
    world = World(store, BY_TEAM)
    alices = ask(world, ALICE, "8008")
    assert store.answer(alices, "yes", "UB9", T0, BY_TEAM).outcome == "forbidden"
    assert store.answer(alices, "yes", "UA9", T0, BY_TEAM).outcome == "yes"


@pytest.fixture
def front(store: Store) -> Iterator[tuple[Store, str]]:
    """The real HTTP front over `store`, WAKEFUL_APPROVERS=UA9 (single-workspace mode)."""
    served = SlackFront(
        Listeners(store, SECRET, bot_user_id="UBOT", clock=lambda: T0, approvers=("UA9",))
    )
    port, stop = start_server(served)
    try:
        yield store, f"http://127.0.0.1:{port}{EVENTS_PATH}"
    finally:
        stop()


def test_requeue_from_the_home_tab_covers_the_approvers_workspace_only(
    front: tuple[Store, str],
) -> None:
    """An approver's Requeue in A gives A's dead event a fresh start; B's stays dead."""
    store, url = front
    dead_a, dead_b = dead_event(store, ALICE, "poison-a"), dead_event(store, BOB, "poison-b")
    press = EventSender(url, SECRET, team_id=A)
    for event_id in (dead_b, dead_a):
        assert press.home_action("UA9", "wakeful_requeue", f"event:{event_id}").status == 200
    assert [e.status for e in (store.event(dead_a), store.event(dead_b))] == ["pending", "dead"]


def test_an_approvers_click_answers_their_workspaces_approval_over_http(store: Store) -> None:
    """A click from the approver named `TA:UA9`, from A, answers A's approval."""
    store.ingest(ALICE, "setup", "setup", {}, T0)
    claim = store.acquire_and_claim(ALICE, "setup", T0)
    assert claim is not None
    request = ApprovalRequest("refund-9009", "refund_order", {"order_id": "9009"}, "UA1", T0 + 99)
    assert store.finish(claim, Effects(approvals=[request]), T0, release=True)
    served = SlackFront(
        Listeners(store, SECRET, bot_user_id="UBOT", clock=lambda: T0, approvers=BY_TEAM)
    )
    port, stop = start_server(served)
    try:
        url = f"http://127.0.0.1:{port}{EVENTS_PATH}"
        other = EventSender(url, SECRET, team_id=B)
        assert other.block_action("UB9", "approve", "refund-9009", "DUA1", "1.1").status == 200
        still = store.approval("refund-9009")
        assert still is not None and still.answer is None
        mine = EventSender(url, SECRET, team_id=A)
        assert mine.block_action("UA9", "approve", "refund-9009", "DUA1", "1.1").status == 200
    finally:
        stop()
    answered = store.approval("refund-9009")
    assert answered is not None and (answered.answer, answered.answered_by) == ("yes", "UA9")
