"""Tracing (issue 39, the foundation): a DM through the front is one trace, slack.request ->
wakeful.run -> wakeful.post, joined by the trace context stored with the event and with the
outbox row; a merged post links to every run it carries; a duplicate delivery says so and
stores nothing; log lines written inside a span carry its ids; off, nothing is traced or
stored; message text goes in no attribute unless WAKEFUL_OTEL_CONTENT=on. On both stores,
through the real front, worker and dispatcher, Slack being the local emulator; the spans are
collected with OpenTelemetry's own in-memory exporter."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import T0
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.otlp_receiver import decode as decode_spans
from wakeful.agents import Agent, Message, Run
from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import SlackFront
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core import logs, tracing
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.store import Store
from wakeful.core.worker import Worker
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import EventSender, SlackEmulator

SECRET = "tracing-signing-secret"
TOKEN = "xoxb-tracing-test-token"
INBOX = "T1:U1"
SAID = "my secret plans for friday"
"""What the person writes: it must reach no attribute unless content is on."""
agent_log = logging.getLogger("wakeful.tracing_test")
_ts = itertools.count(1)


class Echo(Agent):
    """Answers each message with its text; says so in a log line; fails on `fail once`'s
    first attempt."""

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message):
                agent_log.info("echoing event %s", e.id)
                if e.text == "fail once" and e.attempt == 1:
                    raise RuntimeError("first attempt fails")
                run.reply(f"echo: {e.text}", to=e)


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN) as e:
        yield e


def collector(content: bool = False) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider, content=content)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, every finished span kept in memory (off again after the test)."""
    yield from collector()


class World:
    """The front, a worker and a dispatcher on one store, at a hand-moved clock; Slack is the
    emulator."""

    def __init__(self, store: Store, emu: SlackEmulator) -> None:
        self.store = store
        self.emu = emu
        self.clock = ManualClock(T0)
        self.front = SlackFront(Listeners(store, SECRET, "UBOT", "BBOT", clock=self.clock))
        self.worker = Worker(store=store, clock=self.clock, agent=Echo())
        sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
        self.dispatcher = Dispatcher(store=store, clock=self.clock, sender=sender)

    def dm(self, event_id: str, text: str = SAID) -> str:
        """A signed DM through the front's WSGI callable: its status line."""
        body = json.dumps(
            {
                "type": "event_callback",
                "team_id": "T1",
                "api_app_id": "A1",
                "event_id": event_id,
                "event_time": T0,
                "event": {
                    "type": "message",
                    "channel_type": "im",
                    "channel": "D1",
                    "user": "U1",
                    "text": text,
                    "ts": f"{T0}.{next(_ts):06d}",
                },
            }
        ).encode()
        stamp = int(time.time())
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/slack/events",
            "QUERY_STRING": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_X_SLACK_REQUEST_TIMESTAMP": str(stamp),
            "HTTP_X_SLACK_SIGNATURE": EventSender("http://unused", SECRET).sign(body, stamp),
            "wsgi.input": io.BytesIO(body),
        }
        seen: list[str] = []
        b"".join(self.front(environ, lambda status, headers: seen.append(status)))
        return seen[0]

    def run(self) -> int:
        return self.worker.tick(self.clock.now)

    def send(self) -> int:
        return self.dispatcher.tick(self.clock.now)

    def stored_traces(self) -> tuple[list[Any], list[Any]]:
        """The trace column of the inbox's events and of its outbox rows, as stored."""
        with self.store.db.transaction(write=False) as tx:
            events = [r["trace"] for r in tx.all("inbox_events", {"inbox": INBOX})]
            rows = [r["trace"] for r in tx.all("inbox_outbox", {"inbox": INBOX})]
        return events, rows


@pytest.fixture
def world(store: Store, emu: SlackEmulator) -> World:
    return World(store, emu)


def named(found: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def one(found: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    [span] = named(found, name)
    return span


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def traceparent(span: ReadableSpan) -> str:
    assert span.context is not None
    trace_id, span_id = ids(span)
    return f"00-{trace_id:032x}-{span_id:016x}-{span.context.trace_flags:02x}"


def test_one_dm_is_one_trace_from_the_request_to_the_post(
    world: World, spans: InMemorySpanExporter
) -> None:
    assert world.dm("EvT1").startswith("200")
    assert world.run() == 1
    assert world.send() == 1
    found = spans.get_finished_spans()
    request, run, post = (one(found, n) for n in ("slack.request", "wakeful.run", "wakeful.post"))
    # One trace: the run's parent is the span that stored the event, the post's the run.
    assert {s.context.trace_id for s in found if s.context} == {ids(request)[0]}
    assert request.parent is None
    assert parent_of(run) == ids(request)[1]
    assert parent_of(post) == ids(run)[1]
    assert parent_of(one(found, "wakeful.agent")) == ids(run)[1]
    # The claim and the finish's commit: moments of the run, its span's events.
    claimed, finished = run.events
    assert (claimed.name, finished.name) == ("wakeful.claim", "wakeful.finish")
    assert claimed.attributes is not None and finished.attributes is not None
    assert claimed.attributes["wakeful.claim.ms"] >= 0 and finished.attributes["wakeful.finished"]
    assert "wakeful.finish.runs" not in finished.attributes  # said only of a shared commit
    assert run.start_time is not None and run.end_time is not None
    assert run.start_time <= claimed.timestamp <= finished.timestamp <= run.end_time
    # What each one says.
    assert request.attributes is not None and run.attributes is not None
    assert {k: request.attributes.get(k) for k in ("wakeful.slack.event_id", "wakeful.inbox")} == {
        "wakeful.slack.event_id": "EvT1",
        "wakeful.inbox": INBOX,
    }
    assert request.attributes["wakeful.stored"] == "new"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["http.route"] == "/slack/events"
    [event] = world.store.events(INBOX)
    assert run.attributes["wakeful.inbox"] == INBOX
    assert run.attributes["wakeful.event_ids"] == (event.id,)
    assert run.attributes["wakeful.attempt"] == 1
    assert run.attributes["wakeful.lease.generation"] == 1
    assert run.attributes["wakeful.outcome"] == "done"
    [posted] = world.emu.messages("D1")
    assert post.attributes == {
        **dict(post.attributes or {}),
        "wakeful.slack.channel": "D1",
        "wakeful.outbox.kind": "post",
        "wakeful.outbox.rows": 1,
        "wakeful.slack.ts": posted["ts"],
    }
    # The contexts stored: the event's is the request's span, the row's the run's.
    assert world.stored_traces() == ([traceparent(request)], [traceparent(run)])


def test_a_post_merging_two_runs_replies_links_both_traces(
    world: World, spans: InMemorySpanExporter
) -> None:
    assert world.dm("EvM1", "first").startswith("200")
    assert world.run() == 1
    assert world.dm("EvM2", "second").startswith("200")
    assert world.run() == 1
    assert world.send() == 1  # both replies in one post
    [posted] = world.emu.messages("D1")
    assert "echo: first" in posted["text"] and "echo: second" in posted["text"]
    found = spans.get_finished_spans()
    first, second = named(found, "slack.request")
    runs = named(found, "wakeful.run")
    assert sorted(parent_of(r) for r in runs) == sorted([ids(first)[1], ids(second)[1]])
    post = one(found, "wakeful.post")
    assert post.attributes is not None and post.attributes["wakeful.outbox.rows"] == 2
    assert post.context is not None and post.context.trace_id == ids(first)[0]
    linked = {(link.context.trace_id, link.context.span_id) for link in post.links}
    assert linked == {ids(r) for r in runs}  # every run it answers
    assert ids(first)[0] != ids(second)[0]


def test_a_duplicate_delivery_says_duplicate_and_stores_nothing(
    world: World, spans: InMemorySpanExporter
) -> None:
    assert world.dm("EvD1").startswith("200")
    assert world.dm("EvD1").startswith("200")  # Slack's retry
    first, retry = named(spans.get_finished_spans(), "slack.request")
    assert first.attributes is not None and retry.attributes is not None
    assert (first.attributes["wakeful.stored"], retry.attributes["wakeful.stored"]) == (
        "new",
        "duplicate",
    )
    assert count_events(world.store) == 1
    assert world.stored_traces()[0] == [traceparent(first)]  # the first copy's, kept


def test_a_retried_run_is_in_the_trace_of_its_failed_attempt(
    world: World, spans: InMemorySpanExporter
) -> None:
    assert world.dm("EvR1", "fail once").startswith("200")
    assert world.run() == 1  # the failed attempt
    world.clock.now += 600  # past its backoff
    assert world.run() == 1
    request = one(spans.get_finished_spans(), "slack.request")
    runs = named(spans.get_finished_spans(), "wakeful.run")
    said = [(r.attributes or {}).get("wakeful.outcome") for r in runs]
    attempts = [(r.attributes or {}).get("wakeful.attempt") for r in runs]
    assert (said, attempts) == (["failed", "done"], [1, 2])
    # Both attempts are children of the request that stored the event: one trace.
    assert [parent_of(r) for r in runs] == [ids(request)[1]] * 2
    assert runs[0].status.is_ok is False and runs[1].status.is_ok


def test_json_log_lines_inside_a_span_carry_its_trace_and_span_ids(
    world: World, spans: InMemorySpanExporter
) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    agent_log.addHandler(handler)
    agent_log.setLevel(logging.INFO)
    try:
        assert world.dm("EvL1").startswith("200")
        world.run()
        agent_log.info("outside every span")
    finally:
        agent_log.removeHandler(handler)
    inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
    agent = one(spans.get_finished_spans(), "wakeful.agent")
    trace_id, span_id = ids(agent)
    assert (inside["trace_id"], inside["span_id"]) == (f"{trace_id:032x}", f"{span_id:016x}")
    assert inside["message"].startswith("echoing event")
    assert "trace_id" not in outside and "span_id" not in outside


def test_off_nothing_is_traced_or_stored(world: World) -> None:
    # An OpenTelemetry span is current (another library's): off, wakeful neither joins it nor
    # stores its context.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.ON is False
    with provider.get_tracer("another").start_as_current_span("outer"):
        assert world.dm("EvO1").startswith("200")
        assert world.run() == 1
        assert world.send() == 1
    provider.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["outer"]
    assert world.stored_traces() == ([None], [None])


def test_off_the_engine_never_imports_opentelemetry() -> None:
    # The front, the loops, a store's ingest and a JSON log line, tracing off: the flag
    # alone is looked at (the `otel` extra is installed here, so an import would show).
    code = (
        "import logging, os, sys, tempfile\n"
        "from wakeful.bot.commands import serve\n"
        "from wakeful.core import dispatcher, logs, worker\n"
        "from wakeful.core.store import open_store\n"
        "store = open_store(os.path.join(tempfile.mkdtemp(), 'w.db'))\n"
        "store.ingest('T1:U1', 'slack', 'Ev1', {'v': 1}, 1)\n"
        "from wakeful.core.effects import Post\n"
        "store.post('T1:U1', [Post('C1', 'x')], 1)\n"
        "logs.JsonFormatter().format(logging.makeLogRecord({'msg': 'x'}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def attributes_of(found: Sequence[ReadableSpan]) -> list[str]:
    """Every attribute value, link attribute and status text of `found`, as text."""
    said: list[str] = []
    for s in found:
        said += [f"{k}={v}" for k, v in (s.attributes or {}).items()]
        said += [str(v) for e in s.events for v in (e.attributes or {}).values()]
        said += [str(v) for link in s.links for v in (link.attributes or {}).values()]
        said.append(s.status.description or "")
    return said


@pytest.mark.parametrize("content", [False, True], ids=["content off", "content on"])
def test_message_text_is_in_no_attribute_unless_content_is_on(
    store: Store, emu: SlackEmulator, content: bool
) -> None:
    for exporter in collector(content):
        world = World(store, emu)
        assert world.dm("EvC1").startswith("200")
        world.run()
        world.send()
        said = attributes_of(exporter.get_finished_spans())
        assert [a for a in said if SECRET in a or TOKEN in a] == []
        assert len(said) > 20
        shown = [a for a in said if SAID in a]
        if content:
            assert shown == [f"wakeful.slack.text={SAID}", f"wakeful.post.text=echo: {SAID}"]
        else:
            assert shown == []


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "desk"}, False),  # a name alone exports nowhere
    ],
)
def test_tracing_is_on_only_when_an_exporter_is_asked_for(env: dict[str, str], on: bool) -> None:
    assert tracing.tracing_on(env) is on


@pytest.mark.parametrize(
    ("extra", "service"),
    [({}, "wakeful"), ({"OTEL_SERVICE_NAME": "refund-desk"}, "refund-desk")],
)
def test_a_process_is_set_up_by_opentelemetry_s_own_variables(
    extra: dict[str, str], service: str
) -> None:
    # A process of its own: the provider it sets is the process's, once.
    code = (
        "import os\n"
        "from opentelemetry import trace\n"
        "from wakeful.core import tracing\n"
        "assert tracing.configure(os.environ, 'worker')\n"
        "with tracing.span('wakeful.test', {'n': 1}):\n"
        "    pass\n"
        "trace.get_tracer_provider().shutdown()\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        **extra,
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    exported = json.loads(done.stdout)
    assert exported["name"] == "wakeful.test"
    resource = exported["resource"]["attributes"]
    assert resource["service.name"] == service
    assert resource["wakeful.process"] == "worker"
    assert resource["deployment.environment"] == "test"


@pytest.mark.parametrize(
    ("setting", "largest"),
    [(None, tracing.EXPORT_BATCH), ("512", 200)],
    ids=["wakeful's batch", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"],
)
def test_spans_are_exported_64_at_a_time_unless_opentelemetry_s_variable_says(
    setting: str | None, largest: int
) -> None:
    """Encoding a batch holds the interpreter's lock: wakeful exports 64 spans at a time (not
    OpenTelemetry's 512), and the standard variable still decides when set."""
    code = (
        "import os\n"
        "from opentelemetry import trace\n"
        "from wakeful.core import tracing\n"
        "assert tracing.configure(os.environ, 'worker')\n"
        "for n in range(200):\n"
        "    with tracing.span('wakeful.test', {'n': n}):\n"
        "        pass\n"
        "trace.get_tracer_provider().shutdown()\n"
    )
    with OtlpReceiver() as receiver:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "60000",  # batches leave full, or at the shutdown
            **({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": setting} if setting else {}),
        }
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 0, done.stderr
        assert receiver.wait_count(200, 10), receiver.count
        sizes = [len(decode_spans(body)) for body in receiver.bodies()]
    assert sum(sizes) == 200 and max(sizes) == largest, sizes
