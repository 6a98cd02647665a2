"""Tracing (issue 39, the work inside a run and around it): each model call a `chat <model>`
span (OpenTelemetry's GenAI conventions: tokens, cost, replayed or made), each tool call an
`execute_tool <tool>` span (key, outcome), the Claude agent's and the engine's approved ones;
a retried run links to its failed attempt's run, a timer's tick starts a trace of its own
linked to the run that set it, an approval's answer links to the run that asked. The Claude
agent through the real engine and the fake Messages API, on both stores; the spans collected
with OpenTelemetry's in-memory exporter."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import T0
from tests.integration.test_gateway import _db_of
from tests.integration.test_tracing import (
    attributes_of,
    collector,
    ids,
    named,
    one,
    parent_of,
    traceparent,
)
from tests.support import fake_anthropic as api
from tests.support.claude_world import BOSS, INBOX, TTL, World, _close_agents, fake
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.gateway import GatewayProcess, gateway_in_thread, write_config
from wakeful.bot.builtin.claude_prices import Price
from wakeful.core import tracing
from wakeful.core.store import Store
from wakeful.devtools.fake_stripe import FakeStripe

__all__ = ["_close_agents", "fake"]  # the fixtures, used by name
PRICE = Price.of(3, 15)
SEARCH_PATH = "/v1/payment_intents/search"
QUERY = "?query=metadata%5B%27order_id%27%5D%3A%27A-7%27"
CHAT = "chat claude-test"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from collector()


@pytest.fixture
def world(store: Store, fake: FakeAnthropic) -> World:
    return World(store, fake, price_table={"claude-test": PRICE})


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def linked(span: ReadableSpan) -> set[tuple[int, int]]:
    return {(link.context.trace_id, link.context.span_id) for link in span.links}


def runs(found: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return named(found, "wakeful.run")


def remind(world: World, tool_id: str = "toolu_r1", seconds: int = 120) -> None:
    world.say("remind me in 2 minutes to call the courier")
    world.fake.script(
        api.tool_use("remind_me", {"text": "call the courier", "in_seconds": seconds}, tool_id)
    )


# -- model calls -----------------------------------------------------------------------------


def test_each_model_call_is_a_chat_span_and_a_retry_s_replayed_call_says_so(
    world: World, spans: InMemorySpanExporter
) -> None:
    remind(world)
    world.fake.script(api.error(529))  # the second call fails: the run is retried
    world.tick()
    world.fake.script(api.text("I'll remind you."))
    world.tick(T0 + 600)
    found = spans.get_finished_spans()
    failed, retried = runs(found)
    chats = named(found, CHAT)
    assert len(chats) == 4  # made, failed; replayed, made
    made, broke, replayed, last = chats
    agents = named(found, "wakeful.agent")
    assert [parent_of(c) for c in chats] == [ids(agents[0])[1]] * 2 + [ids(agents[1])[1]] * 2
    a = attrs(made)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == a["gen_ai.system"] == "anthropic"
    assert (a["gen_ai.request.model"], a["gen_ai.response.model"]) == ("claude-test",) * 2
    assert a["gen_ai.conversation.id"] == INBOX
    assert a["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert a["wakeful.replayed"] is False
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert "gen_ai.usage.cache_read.input_tokens" in a
    assert "gen_ai.usage.cache_creation.input_tokens" in a
    given = a["gen_ai.usage.input_tokens"] - a["gen_ai.usage.cache_read.input_tokens"]
    written = a["gen_ai.usage.cache_creation.input_tokens"]
    expected = PRICE.cost(
        given - written,
        a["gen_ai.usage.output_tokens"],
        written,
        0,
        a["gen_ai.usage.cache_read.input_tokens"],
    )
    assert a["wakeful.cost_usd"] == pytest.approx(expected)
    assert broke.status.is_ok is False and attrs(broke)["error.type"] == "ModelUnavailable"
    # The retry got the first answer back: no call, no tokens, nothing paid.
    r = attrs(replayed)
    assert r["wakeful.replayed"] is True and r["wakeful.cost_usd"] == 0.0
    assert not [k for k in r if k.startswith("gen_ai.usage.")]
    assert r["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert attrs(last)["wakeful.replayed"] is False
    assert attrs(last)["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert len(world.fake.requests) == 3  # the replay called nothing
    # The retried run links to the failed attempt's run, whose trace the attempt row keeps.
    assert (attrs(failed)["wakeful.attempt"], attrs(retried)["wakeful.attempt"]) == (1, 2)
    assert ids(failed) in linked(retried)
    [event] = world.store.events(INBOX)
    [attempt] = world.store.event_attempts(event.id)
    with world.store.db.transaction(write=False) as tx:
        [row] = tx.all("event_attempts", {"id": event.id})
    assert attempt.outcome == "failed" and row["trace"] == traceparent(failed)


def test_a_first_attempt_links_to_no_run(world: World, spans: InMemorySpanExporter) -> None:
    world.say("hi")
    world.fake.script(api.text("hello"))
    world.tick()
    [run] = runs(spans.get_finished_spans())
    assert run.links == ()


# -- tool calls ------------------------------------------------------------------------------


def test_each_tool_call_is_an_execute_tool_span_with_its_key_and_outcome(
    world: World, spans: InMemorySpanExporter
) -> None:
    event = world.say("note this, remind me, and refund order 7")
    world.fake.script(
        api.tool_uses(
            ("memory", {"command": "create", "path": "/memories/a.md", "file_text": "x"}, "t1"),
            ("memory", {"command": "explode"}, "t2"),
            ("remind_me", {"text": "call", "in_seconds": 60}, "t3"),
            ("no_such_tool", {}, "t4"),
            ("refund_order", {"order_id": "7", "reason": "broken"}, "t5"),
        )
    )
    world.tick()
    found = spans.get_finished_spans()
    tools = [s for s in found if attrs(s).get("gen_ai.operation.name") == "execute_tool"]
    said = {
        attrs(s)["gen_ai.tool.call.id"]: (
            s.name,
            attrs(s)["gen_ai.tool.name"],
            attrs(s)["wakeful.outcome"],
            attrs(s).get("wakeful.idempotency_key"),
        )
        for s in tools
    }
    [approval] = world.store.approvals(INBOX)
    assert said == {
        "t1": ("execute_tool memory", "memory", "done", None),
        "t2": ("execute_tool memory", "memory", "failed", None),
        "t3": ("execute_tool remind_me", "remind_me", "done", f"remind-{event}-t3"),
        "t4": ("execute_tool", "no_such_tool", "failed", None),
        "t5": ("execute_tool refund_order", "refund_order", "waiting", approval.id),
    }
    agent = one(found, "wakeful.agent")
    assert {parent_of(s) for s in tools} == {ids(agent)[1]}
    # The arguments (what the person asked for) only with WAKEFUL_OTEL_CONTENT=on.
    assert not [s for s in tools if "gen_ai.tool.call.arguments" in attrs(s)]


def ask_for_a_refund(world: World) -> None:
    """A person asks; the model asks for a refund, which waits for a yes: one run."""
    world.say("please refund order 42, it arrived broken")
    world.fake.script(
        api.tool_use("refund_order", {"order_id": "42", "reason": "broken"}, "toolu_a1")
    )
    world.tick()


def test_an_approved_call_is_an_execute_tool_span_and_the_answer_links_to_the_asker(
    world: World, spans: InMemorySpanExporter
) -> None:
    ask_for_a_refund(world)
    [approval] = world.store.approvals(INBOX)
    [asker] = runs(spans.get_finished_spans())
    assert approval.trace == traceparent(asker)  # the approval row keeps the asking run's
    with tracing.span("slack.request"):  # the click, as the front makes it
        assert world.store.answer(approval.id, "yes", BOSS, T0 + 60).outcome == "yes"
    world.fake.script(api.error(529))
    world.tick(T0 + 60)
    world.fake.script(api.text("Refunded."))
    world.tick(T0 + 700)
    found = spans.get_finished_spans()
    click = one(found, "slack.request")
    assert ids(asker) in linked(click)  # the answer links to the run that asked
    assert attrs(click)["wakeful.inbox"] == INBOX and attrs(click)["wakeful.stored"] == "new"
    _, first, second = runs(found)
    assert parent_of(first) == parent_of(second) == ids(click)[1]  # the click's trace
    called, read_back = named(found, "execute_tool refund_order")[-2:]
    for span in (called, read_back):
        assert attrs(span)["gen_ai.tool.name"] == "refund_order"
        assert attrs(span)["wakeful.idempotency_key"] == approval.id
    assert attrs(called)["wakeful.outcome"] == "done"
    assert attrs(read_back)["wakeful.outcome"] == "replayed"  # the retry called nothing
    assert len(world.store.recorded_steps(name="refund_order")) == 1
    assert ids(first) in linked(second)


def test_a_claude_refund_allowed_without_a_yes_keys_its_step_and_replays(
    store: Store, fake: FakeAnthropic, spans: InMemorySpanExporter
) -> None:
    world = World(store, fake, policies={"refund_order": "allow"})
    event = world.say("refund order 9")
    fake.script(api.tool_use("refund_order", {"order_id": "9", "reason": "x"}, "toolu_9"))
    fake.script(api.error(529))
    world.tick()
    fake.script(api.text("Done."))
    world.tick(T0 + 600)
    made, replayed = named(spans.get_finished_spans(), "execute_tool refund_order")
    [step] = store.recorded_steps(name="refund_order:toolu_9")  # the key the refund had
    key = step.key
    assert key.startswith("wk-") and event
    assert [attrs(s)["wakeful.idempotency_key"] for s in (made, replayed)] == [key, key]
    assert [attrs(s)["wakeful.outcome"] for s in (made, replayed)] == ["done", "replayed"]


# -- timers ----------------------------------------------------------------------------------


def test_a_timer_tick_starts_its_own_trace_linked_to_the_run_that_set_it(
    world: World, spans: InMemorySpanExporter
) -> None:
    remind(world)
    world.fake.script(api.text("I'll remind you."))
    world.tick()
    [setter] = runs(spans.get_finished_spans())
    [timer] = world.store.timers(INBOX)
    with world.store.db.transaction(write=False) as tx:
        [row] = tx.all("inbox_timers", {"inbox": INBOX})
    assert row["trace"] == traceparent(setter)
    world.fake.script(api.text("Reminder: call the courier"))
    world.tick(T0 + 120)
    found = spans.get_finished_spans()
    tick = one(found, "wakeful.timer")
    assert tick.parent is None  # a root: a trace of its own
    assert ids(tick)[0] != ids(setter)[0]
    assert linked(tick) == {ids(setter)}
    a = attrs(tick)
    assert (a["wakeful.inbox"], a["wakeful.timer.name"]) == (INBOX, timer.id.split("/", 1)[1])
    assert (a["wakeful.timer.scheduled_for"], a["wakeful.stored"]) == (T0 + 120, "new")
    _, ticked = runs(found)
    assert parent_of(ticked) == ids(tick)[1]  # the tick's run joins the tick's trace
    [stored] = [e for e in world.store.events(INBOX) if e.source == "timer"]
    assert stored.trace == traceparent(tick)


def test_an_expiry_answers_in_a_timer_trace_linked_to_the_asking_run(
    world: World, spans: InMemorySpanExporter
) -> None:
    ask_for_a_refund(world)
    [asker] = runs(spans.get_finished_spans())
    world.fake.script(api.text("It expired."))
    world.tick(T0 + TTL)
    found = spans.get_finished_spans()
    expiry = one(found, "wakeful.timer")
    assert expiry.parent is None and ids(asker) in linked(expiry)
    assert attrs(expiry)["wakeful.timer.action"] == "expire_approval"
    _, answered = runs(found)
    assert parent_of(answered) == ids(expiry)[1]


def test_off_no_trace_is_stored_with_an_attempt_a_timer_or_an_approval(world: World) -> None:
    remind(world, seconds=3600)
    world.fake.script(api.error(529))
    world.tick()
    world.fake.script(api.text("ok"))
    world.tick(T0 + 600)
    world.say("refund order 42")
    world.fake.script(api.tool_use("refund_order", {"order_id": "42", "reason": "x"}, "t"))
    world.tick(T0 + 610)
    [event, _] = world.store.events(INBOX)
    with world.store.db.transaction(write=False) as tx:
        timers = [r["trace"] for r in tx.all("inbox_timers", {"inbox": INBOX})]
        attempts = [r["trace"] for r in tx.all("event_attempts", {"id": event.id})]
    assert timers and attempts and all(t is None for t in timers + attempts)
    assert [a.trace for a in world.store.approvals(INBOX)] == [None]


# -- the gateway's forward -------------------------------------------------------------------


def test_a_forward_is_a_gateway_span_in_the_caller_s_trace_without_a_secret(
    store: Store, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    with FakeStripe() as stripe:
        stripe.add_payment("A-7")
        config = write_config(tmp_path, stripe.url)
        env = {"STRIPE_SECRET_KEY": stripe.api_key}
        with gateway_in_thread(config, env, store) as running:
            gw = running.client()
            with tracing.span("caller"):
                got = gw.request("GET", "stripe", SEARCH_PATH + QUERY)
                refused = gw.request("POST", "stripe", "/v1/customers")
            assert (got.status, refused.status) == (200, 403)
            token = running.token
    found = spans.get_finished_spans()
    caller = one(found, "caller")
    forwarded, refusal = named(found, "gateway.forward")
    assert parent_of(forwarded) == parent_of(refusal) == ids(caller)[1]  # the caller's trace
    assert attrs(forwarded) == {
        "wakeful.gateway.destination": "stripe",
        "http.request.method": "GET",
        "url.path": SEARCH_PATH,  # never the query
        "http.response.status_code": 200,
        "wakeful.gateway.outcome": "forwarded",
    }
    assert attrs(refusal)["http.response.status_code"] == 403
    assert attrs(refusal)["wakeful.gateway.reason"] == "not_allowed"
    said = attributes_of(found)
    assert token and [a for a in said if token in a or stripe.api_key in a] == []


def test_a_gateway_process_makes_its_forward_span_a_child_of_the_caller_s(
    store: Store, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    # `wakeful gateway` sets its own tracing up from OTEL_* (here: the console exporter).
    with FakeStripe() as stripe:
        env = {
            "STRIPE_SECRET_KEY": stripe.api_key,
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        gw = GatewayProcess(write_config(tmp_path, stripe.url), env, _db_of(store), tmp_path / "g")
        try:
            with tracing.span("caller"):
                got = gw.client().request("GET", "stripe", SEARCH_PATH + QUERY)
        finally:
            gw.stop()
    assert got.status == 200
    caller = one(spans.get_finished_spans(), "caller")
    printed = (tmp_path / "g").read_text()
    shown = json.loads(
        printed[printed.index('{\n    "name": "gateway.forward"') :].split("\n}")[0] + "\n}"
    )
    assert shown["context"]["trace_id"] == f"0x{ids(caller)[0]:032x}"
    assert shown["parent_id"] == f"0x{ids(caller)[1]:016x}"
    assert shown["attributes"]["url.path"] == SEARCH_PATH
    assert stripe.api_key not in printed and gw.token not in printed
