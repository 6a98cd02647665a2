"""Issue 34, item 6 (e): a requester approving their own request is allowed (the default, and
documented); `WAKEFUL_SELF_APPROVAL=off` makes a second person answer: only another
approver's click counts, and the prompt says who may answer. Both stores.

The rule lives in the store's `answer` (core/rules/approvals.py `judge_answer` with the
store's settings), so it holds whoever calls it; here through the store itself, and end to
end: a DM over real HTTP to the front, a run of the refund desk behind the runner `wakeful
serve` builds from the environment, the prompt it posts, and the clicks on it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import T0, MakeStore
from tests.support.approvals import ApprovalRequest
from tests.support.webhook_front import start_server
from wakeful.bot.builtin.refund_desk import RefundDesk
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import EVENTS_PATH, SlackFront
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.core.effects import Effects
from wakeful.core.records import Answered
from wakeful.core.store import Store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender

SECRET = "self-approval-signing-secret"
TEAM, ASKER, BOSS = "T1", "U0ASKER", "U0BOSS"
INBOX = f"{TEAM}:{ASKER}"
SECOND_PERSON = f"only a configured approver other than <@{ASKER}> can answer"


def ask(store: Store, request_id: str = "r1") -> None:
    """An open approval of ASKER's, written as a run writes it."""
    store.ingest(INBOX, "setup", f"setup-{request_id}", {}, T0)
    claim = store.acquire_and_claim(INBOX, "setup", T0)
    assert claim is not None
    request = ApprovalRequest(request_id, "refund_order", {"order_id": "7"}, ASKER, T0 + 3600)
    assert store.finish(claim, Effects(approvals=[request]), T0, release=True)


def test_by_default_a_requester_may_approve_their_own_request(make_store: MakeStore) -> None:
    store = make_store()
    ask(store)
    assert store.answer("r1", "yes", ASKER, T0 + 1, approvers=(BOSS,)) == Answered("yes", True)


@pytest.mark.parametrize("approvers", [(BOSS,), (ASKER, BOSS), None], ids=str)
def test_with_self_approval_off_the_store_takes_only_another_approvers_answer(
    make_store: MakeStore, approvers: tuple[str, ...] | None
) -> None:
    """Whatever approvers the caller passes (the asker among them, or none: the list stored
    with the request), the asker's own answer is refused and stores nothing."""
    store = make_store(self_approval=False)
    ask(store)
    events = count_events(store)
    for answer in ("yes", "no"):
        refused = store.answer("r1", answer, ASKER, T0 + 1, approvers=approvers)
        assert refused == Answered("forbidden", False)
    state = store.approval("r1")
    assert state is not None and state.answer is None and count_events(store) == events
    assert store.answer("r1", "yes", BOSS, T0 + 2, approvers=(BOSS,)) == Answered("yes", True)
    state = store.approval("r1")
    assert state is not None and (state.answer, state.answered_by) == ("yes", BOSS)


# -- end to end ------------------------------------------------------------------------------


class App:
    """The HTTP front and the runner `wakeful serve` builds, from `env`, over one store."""

    def __init__(self, make_store: MakeStore, env: dict[str, str]) -> None:
        self.config = Config.from_env({"WAKEFUL_APPROVERS": BOSS, **env})
        self.store = make_store(self_approval=self.config.settings.self_approval)
        front = SlackFront(
            Listeners(
                self.store,
                SECRET,
                bot_user_id="UBOT",
                clock=lambda: T0,
                approvers=self.config.approvers,
            )
        )
        self.port, self.stop = start_server(front)
        self.slack = EventSender(f"http://127.0.0.1:{self.port}{EVENTS_PATH}", SECRET, team_id=TEAM)
        self.runner = build_runner(
            self.config, self.store, None, factory=RefundDesk, env={}, clock=lambda: T0
        )

    def run(self) -> None:
        """One run of the asker's inbox, as the worker runs it."""
        claim = self.store.acquire_and_claim(INBOX, "worker", T0)
        assert claim is not None
        effects = self.runner.run(claim, lambda: self.store.session(INBOX), T0, lambda: None)
        assert self.store.finish(claim, effects, T0, release=True)

    def prompt(self) -> tuple[str, str]:
        """The approval prompt's text and the text of its blocks."""
        [row] = [r for r in self.store.outbox() if r.priority == "urgent" and r.blocks]
        return row.text, json.dumps(row.blocks)

    def notes_to(self, user: str) -> list[str]:
        return [
            r.text + json.dumps(r.blocks)
            for r in self.store.outbox()
            if r.kind == "ephemeral" and r.user == user
        ]

    def click(self, user: str, request_id: str) -> None:
        reply = self.slack.block_action(user, "approve", request_id, "D0ASKER", "1.1")
        assert reply.status == 200, reply


@pytest.fixture
def app(make_store: MakeStore, request: pytest.FixtureRequest) -> Iterator[App]:
    made = App(make_store, request.param)
    yield made
    made.stop()


def _request_id(app: App) -> str:
    [state] = app.store.approvals(INBOX)
    return state.id


@pytest.mark.parametrize("app", [{"WAKEFUL_SELF_APPROVAL": "off"}], indirect=True, ids=["off"])
def test_off_the_prompt_says_who_may_answer_and_only_another_approvers_click_counts(
    app: App,
) -> None:
    assert app.slack.message(ASKER, "refund order 7", channel="D0ASKER").status == 200
    app.run()
    text, shown = app.prompt()
    assert SECOND_PERSON in text and SECOND_PERSON in shown, (text, shown)
    assert "Needs a second person" in shown
    request_id = _request_id(app)
    app.click(ASKER, request_id)
    state = app.store.approval(request_id)
    assert state is not None and state.answer is None
    [note] = app.notes_to(ASKER)  # told, to them alone, why nothing happened
    assert "not yours to answer" in note and SECOND_PERSON in note, note
    app.click(BOSS, request_id)
    state = app.store.approval(request_id)
    assert state is not None and (state.answer, state.answered_by) == ("yes", BOSS)


@pytest.mark.parametrize("app", [{}], indirect=True, ids=["default"])
def test_by_default_the_requesters_own_click_approves(app: App) -> None:
    assert app.slack.message(ASKER, "refund order 7", channel="D0ASKER").status == 200
    app.run()
    text, shown = app.prompt()
    assert "Needs a second person" not in shown and "other than" not in text
    request_id = _request_id(app)
    app.click(ASKER, request_id)
    state = app.store.approval(request_id)
    assert state is not None and (state.answer, state.answered_by) == ("yes", ASKER)
    assert app.notes_to(ASKER) == []


@pytest.mark.parametrize("self_approval", [False, True], ids=["off", "default"])
def test_the_home_tab_shows_the_prompt_as_the_conversation_does(
    make_store: MakeStore, self_approval: bool
) -> None:
    """The requester's Home tab lists their open approval with the prompt's own blocks: with
    self-approval off they say a second person must answer, as the posted prompt does."""
    from wakeful.bot.slack.home import build_view

    store = make_store(self_approval=self_approval)
    ask(store)
    view = build_view(store, INBOX, (BOSS,), T0 + 1, Effects())
    assert view is not None
    shown = json.dumps(view.approval_blocks())
    assert ("Needs a second person" in shown) is not self_approval, shown
