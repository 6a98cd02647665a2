"""Issue 21, item 1: no text a person (or another system, or the model) writes can page a
channel, mention anyone or show a disguised link through the bot.

Generated texts mix Slack's control sequences (`<!channel>`, `<!here>`, `<!everyone>`,
`<!subteam^…>`, `<@…>`, `<#…>`, `<url|label>`) with ordinary words, `&`, `<`, `>` and Slack's
own entities, and each is pushed through every agent output path that echoes it: the refund
desk's reply lines, slash-command answers, reminders, approval outcomes and digests, the Home
tab, the status text, the webhook report line, and the Claude agent's reply and approval prompt.
Every text that would reach Slack must hold no active control sequence but the bot's own
(`<@requester>` in a prompt, `<!date^…>` tokens), and the person's words must still read as
they typed them.

Issue 34, item 6 (b): the texts mix in bidirectional controls (U+202A–U+202E, U+2066–U+2069),
which reorder what Slack shows after them; none may reach Slack, each shown as its code point.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import T0
from tests.support import fake_anthropic as api
from tests.support.fake_anthropic import FakeAnthropic
from wakeful.agents import Conversation, Setup
from wakeful.bot.builtin.claude import ClaudeAgent
from wakeful.bot.builtin.common import DIGEST, status_text
from wakeful.bot.builtin.refund_desk import MENTION, RefundDesk
from wakeful.bot.builtin.webhook_report import TITLE_CAP, report_line
from wakeful.bot.process.config import Config
from wakeful.bot.process.loading import build_runner
from wakeful.bot.slack.home import build_view, default_home
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.bot.slack.surfaces import SlackApprovals
from wakeful.bot.slack.text import addressed, inert
from wakeful.core import events as ev
from wakeful.core.effects import ApprovalRequest, Effects, Post, Timer
from wakeful.core.query import Query
from wakeful.core.runner import Runner
from wakeful.core.store import Store, open_store

USER = "U0PERSON"
BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
"""The bidirectional embedding, override and isolate controls."""
CONTROL = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<!here|here>",
    "<!subteam^S0ADMINS|@admins>",
    "<!subteam^S0ADMINS>",
    "<@U0BOSS>",
    "<@U0BOSS|boss>",
    "<#C0GENERAL>",
    "<#C0GENERAL|general>",
    "<https://evil.example/login|https://slack.com/signin>",
    "<http://evil.example>",
    "<mailto:boss@evil.example|boss>",
    "<!date^1700000000^{date_short}|today>",
    *BIDI,
]
ORDINARY = ["payroll", "moved,", "sign in at", "a", "b", "&", "<", ">", "&amp;", "&lt;", "&gt;"]
piece = st.sampled_from(CONTROL) | st.sampled_from(ORDINARY)
hostile = st.builds(
    lambda parts, glue: glue.join(parts).strip(),
    st.lists(piece, min_size=1, max_size=8),
    st.sampled_from(["", " "]),
).filter(bool)

ACTIVE = re.compile(r"<(?:[!@#]|[A-Za-z][A-Za-z0-9+.-]*:)[^>]*>")
"""What Slack parses in a message: `<!…>`, `<@…>`, `<#…>` and `<scheme:…>` links (labelled
or not)."""
OWN = re.compile(rf"<@{USER}>|<!date\^\d+\^\{{date_short_pretty\}} at \{{time\}}\|[^<>]*>")
"""The bot's own sequences: the requester named in an approval prompt, and date tokens."""
_ENTITY = re.compile(r"&(amp|lt|gt);")


def shown(text: str) -> str:
    """What Slack displays for `text` once its control sequences are inert: the entities as
    their characters, a bidirectional control as its code point."""
    text = "".join(f"[U+{ord(c):04X}]" if c in BIDI else c for c in text)
    return _ENTITY.sub(lambda m: {"amp": "&", "lt": "<", "gt": ">"}[m.group(1)], text)


def slack_texts(value: Any) -> Iterator[str]:
    """Every string Slack renders in a message, a block list or a view."""
    if isinstance(value, Post):
        yield value.text
        yield from slack_texts(value.blocks)
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key == "text" and isinstance(inner, str):
                yield inner
            elif key not in ("value", "action_id", "block_id", "type", "style"):
                yield from slack_texts(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from slack_texts(inner)


def assert_inert(out: Any, words: str | None = None) -> None:
    texts = list(slack_texts(out))
    assert texts, "the path produced nothing to check"
    for text in texts:
        left = OWN.sub("", text)
        assert ACTIVE.search(left) is None, f"active control sequence in {text!r}"
        assert "<" not in left and ">" not in left, f"raw angle bracket in {text!r}"
        assert not any(c in BIDI for c in text), f"bidirectional control in {text!r}"
    if words is not None:
        assert any(shown(words) in shown(t) for t in texts), f"{words!r} unreadable in {texts!r}"


# -- the function itself ---------------------------------------------------------------------


@given(hostile)
def test_inert_shows_what_was_typed_and_activates_nothing(text: str) -> None:
    out = inert(text)
    assert ACTIVE.search(out) is None and "<" not in out and ">" not in out
    assert shown(out) == shown(text)
    assert inert(out) == out  # a text escaped twice reads the same


def test_the_issue_text_is_shown_never_obeyed() -> None:
    text = (
        "<!channel> <!here> <!subteam^S0ADMINS|@admins> payroll moved, sign in at "
        "<https://evil.example/login|https://slack.com/signin>"
    )
    assert inert(text) == (
        "&lt;!channel&gt; &lt;!here&gt; &lt;!subteam^S0ADMINS|@admins&gt; payroll moved, "
        "sign in at &lt;https://evil.example/login|https://slack.com/signin&gt;"
    )


def test_a_bare_link_stays_as_typed_so_slack_links_it_under_its_own_address() -> None:
    """A bare `https://…` has no `<…>` to escape: inert leaves it as typed (its `&` written
    as Slack's entity, which Slack reads back as `&`), and Slack shows it as a live link whose
    text is the address itself. Only `<url|label>`, a link under another text, is defused."""
    text = "logs at https://ci.example/run?id=7&tab=log, and <https://ci.example|the CI>"
    out = inert(text)
    assert out == (
        "logs at https://ci.example/run?id=7&amp;tab=log, and &lt;https://ci.example|the CI&gt;"
    )
    assert shown(out) == text


def test_addressed_removes_the_leading_mention_of_the_bot_alone() -> None:
    """What a person wrote to the agent: `<@BOT>` (or `<@BOT|name>`) first, and the spaces
    after it, removed; another person's mention, or the bot's later in the text, kept."""
    assert addressed("<@U0BOT> restart web", "U0BOT") == "restart web"
    assert addressed("  <@U0BOT|ops>   status?", "U0BOT") == "status?"
    assert addressed("<@U0BOT>", "U0BOT") == ""
    assert addressed("<@U0BOB> <@U0BOT> hi", "U0BOT") == "<@U0BOB> <@U0BOT> hi"
    assert addressed("hi <@U0BOT>", "U0BOT") == "hi <@U0BOT>"
    assert addressed("<@U0BOTTOM> hi", "U0BOT") == "<@U0BOTTOM> hi"
    assert addressed("<@U0BOT> hi", None) == "<@U0BOT> hi", "no bot id known: left whole"


def test_bidirectional_controls_are_shown_as_code_points_never_applied() -> None:
    """U+202E (right-to-left override) shows the digits after it backwards, so an order id
    reads as another; U+202A to U+202D embed or override a run, U+2066 to U+2069 isolate one.
    inert writes each as its code point, and leaves other text alone (right-to-left letters and
    the U+200F mark, which reorder nothing by themselves, included)."""
    for c in BIDI:
        out = inert(f"refund order 7{c}0001 <!here>")
        assert out == f"refund order 7[U+{ord(c):04X}]0001 &lt;!here&gt;"
        assert inert(out) == out
    assert inert("שלום \u200f مرحبا") == "שלום \u200f مرحبا"


# -- every path that echoes it ---------------------------------------------------------------

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = open_store(tmp_path_factory.mktemp("inert") / "inert.db", kinds=SLACK_KINDS)
    yield s
    s.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()


CONFIG = Config(approvers=(USER,), quiet_digests=False)
"""The person is an approver (so the Home tab shows the operator's lists too); every digest
is posted, quiet or not."""


def runner_for(store: Store, factory: Any) -> tuple[Any, Runner]:
    """The agent a factory makes, behind the runner `wakeful serve` builds (Slack prompts, the
    surfaces' hooks)."""
    made: list[Any] = []

    def build(setup: Setup) -> Any:
        made.append(factory(setup))
        return made[-1]

    runner = build_runner(CONFIG, store, None, factory=build, env={}, clock=lambda: T0)
    return made[0], runner


def through(store: Store, runner: Runner, inbox: str, *events: tuple[str, ev.Event]) -> Effects:
    """Store typed events (source, event) as the front does, run them as one claim, finish it;
    what the run asked for."""
    for source, event in events:
        key = event.request_id if isinstance(event, ev.ApprovalAnswer) else None
        store.ingest(inbox, source, key or f"{source}-{next(_ids)}", event.to_wire(), T0)
    claim = store.acquire_and_claim(inbox, "fuzz", T0)
    assert claim is not None and len(claim.events) == len(events)
    effects = runner.run(claim, lambda: store.session(inbox), T0, lambda: None)
    assert not effects.failed, effects.failed
    assert store.finish(claim, effects, T0, release=True)
    return effects


def chat(text: str) -> tuple[str, ev.Message]:
    n = next(_ids)
    return "slack", ev.Message(text=text, user=USER, team="T1", channel="D0PERSON", ts=f"{T0}.{n}")


def command(text: str) -> tuple[str, ev.Command]:
    return "slack", ev.Command(
        command="/wakeful",
        text=text,
        user=USER,
        team="T1",
        channel="D0PERSON",
        response_url="https://hooks.example/x",
    )


def fresh_inbox() -> str:
    return f"T1:{USER}-{next(_ids)}"


def words(text: str) -> str:
    """The text as the refund desk reads a command: mentions of the bot taken out."""
    return MENTION.sub("", text).strip()


@given(hostile)
@FUZZ
def test_refund_desk_replies_reminders_and_slash_answers(store: Store, text: str) -> None:
    _, runner = runner_for(store, RefundDesk)
    inbox = fresh_inbox()
    asked = f"remind me in 5 seconds to {text}"
    fx = through(store, runner, inbox, chat(asked))
    assert_inert(fx.messages, words(text))
    fx = through(store, runner, inbox, command(asked))
    [answer] = fx.messages
    assert (answer.kind, answer.user) == ("ephemeral", USER)  # to the person who ran it
    assert_inert(answer, words(text))
    due = ev.TimerTick(
        name=f"remind-{next(_ids)}",
        scheduled_for=T0,
        data={"kind": "reminder", "text": text},
        channel="D1",
    )
    fx = through(store, runner, inbox, ("timer", due))
    assert_inert(fx.messages, text)


@given(hostile)
@FUZZ
def test_refund_desk_order_ids_outcomes_and_digest(store: Store, text: str) -> None:
    _, runner = runner_for(store, RefundDesk)
    inbox = fresh_inbox()
    through(store, runner, inbox, chat("status"))  # the conversation a legacy answer goes to
    for answer in ("yes", "no", "expired"):
        # As the store writes an answer now (its conversation and summary with it), and as
        # it wrote one before (neither: the desk answers where the person last wrote).
        for where in ("D1", None):
            answered = ev.ApprovalAnswer(
                request_id=f"gone-{next(_ids)}",
                answer=answer,  # type: ignore[arg-type]
                tool="refund_order",
                args={"order_id": text},
                by=None if answer == "expired" else USER,
                answered_at=T0,
                summary=f"refund order {inert(text)}" if where else "",
                channel=where,
                requester=USER,
            )
            fx = through(store, runner, inbox, ("approval", answered))
            assert_inert(fx.messages, text)
            assert len(fx.messages) == (2 if where else 1)  # with its prompt's rewrite
    digest = ev.TimerTick(name=DIGEST, scheduled_for=T0, data={"kind": DIGEST}, channel="D1")
    fx = through(store, runner, inbox, chat(text), ("timer", digest))
    assert [m.kind for m in fx.messages] == ["post", "digest"]
    assert_inert(fx.messages)


def stored_approval(store: Store, inbox: str, order: str, error: str) -> None:
    """An open approval for `order` (stored before approvals kept a summary: the Home tab
    names it by its order) and a dead event whose error quotes `error`."""
    store.ingest(inbox, "test", f"setup-{next(_ids)}", {}, T0)
    claim = store.acquire_and_claim(inbox, "setup", T0)
    assert claim is not None
    request = ApprovalRequest(
        f"req-{next(_ids)}", "refund_order", {"order_id": order}, USER, T0 + 60
    )
    request = dataclasses.replace(
        request, prompt=SlackApprovals().prompt(request, Conversation("D1"))
    )
    dead = {e.id: error for e in claim.events}
    assert store.finish(claim, Effects(approvals=[request], dead=dead), T0, release=True)


@given(hostile)
@FUZZ
def test_home_tab_and_status(store: Store, text: str) -> None:
    desk, _ = runner_for(store, RefundDesk)
    inbox = fresh_inbox()
    stored_approval(store, inbox, text, f"ValueError: {text}")
    refunded = {"refunded": True, "order_id": text}
    store.record_step(
        f"refund-{next(_ids)}", inbox, "refund_order", {"order_id": text}, refunded, T0
    )
    pending = Effects(
        timers=[Timer.once(f"remind-{next(_ids)}", T0 + 5, {"kind": "reminder", "text": text})],
        approvals=[
            ApprovalRequest(
                f"r-{next(_ids)}",
                "refund_order",
                {"order_id": text},
                USER,
                T0,
                summary=f"refund order {inert(text)}",
            )
        ],
    )
    view = build_view(store, inbox, CONFIG.approvers, T0, pending)
    assert view is not None
    assert_inert(desk.home(view), text)
    assert_inert(default_home(view), text)
    assert_inert(Post("D1", status_text(Query(store), inbox)), text)


@given(hostile, st.sampled_from(["repository", "title", "url"]))
@FUZZ
def test_webhook_report_line(store: Store, text: str, where: str) -> None:
    issue: dict[str, Any] = {"title": "an issue", "html_url": "https://github.example/i/1"}
    body: dict[str, Any] = {"action": "opened", "issue": issue, "repository": {"full_name": "o/r"}}
    if where == "repository":
        body["repository"]["full_name"] = text
    elif where == "title":
        issue["title"] = text
    else:
        issue["html_url"] = text
    delivery = ev.WebhookDelivery(
        source="github", type="issues", delivery_id=f"d-{next(_ids)}", body=body, channel="C1"
    )
    line = report_line(delivery)
    one_line = " ".join(text.split())
    assert_inert(Post("C1", line), one_line if len(one_line) < TITLE_CAP else None)


@given(hostile)
@FUZZ
def test_claude_reply_and_approval_prompt(store: Store, fake: FakeAnthropic, text: str) -> None:
    def claude(setup: Setup) -> ClaudeAgent:
        return ClaudeAgent(setup, api_key="test-key", base_url=fake.base_url, model="claude-test")

    agent, runner = runner_for(store, claude)
    try:
        inbox = fresh_inbox()
        fake.script(api.text(text))
        fx = through(store, runner, inbox, chat("say it"))
        assert_inert(fx.messages, text)
        order = f"A-{next(_ids)}"  # an order of its own: asked for in no other example
        use = api.tool_use("refund_order", {"order_id": order, "reason": text}, "toolu_1", say=text)
        fake.script(use)
        fx = through(store, runner, inbox, chat(f"refund {order}"))
        [request] = fx.approvals
        assert request.prompt is not None
        assert_inert([request.prompt, *fx.messages], " ".join(text.split())[:300])
    finally:
        agent.close()


def test_the_fuzz_would_catch_an_echo_that_skips_inert() -> None:
    """The checks themselves: an unescaped echo fails them."""
    with pytest.raises(AssertionError, match="active control sequence"):
        assert_inert(Post("C1", "Reminder: <!channel> payroll moved"))
    with pytest.raises(AssertionError, match="raw angle bracket"):
        assert_inert(Post("C1", "Reminder: <foo|bar>"))
    assert_inert(Post("C1", f"Approval needed: refund order 7 for <@{USER}>"))
