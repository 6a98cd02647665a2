"""Tracing across processes (issue 39): one DM through the real `wakeful serve` is ONE trace,
slack.request -> wakeful.run -> wakeful.post, each span a child of the one before, joined by
the trace context stored with the event and with the outbox row; split over `serve --no-loops`,
`worker` and `dispatcher` on PostgreSQL, the same trace holds spans from all three processes.

Each process exports with OpenTelemetry's own OTLP/HTTP exporter, configured only by OTEL_*
variables, to a real OTLP receiver on loopback (tests/support/otlp_receiver.py): across
processes that is what the in-memory exporter of tests/integration/test_tracing.py is within
one. Slack is the emulator, events come signed from `EventSender`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.slack_app import (
    APP_SETTINGS,
    BOT_USER,
    TEAM,
    TOKEN,
    Proc,
    Wakeful,
    child_env,
    launch,
    pg_schema_url,
    serving,
    shut_down,
    wakeful_cmd,
)
from wakeful.devtools.emulator import SlackEmulator

SPANS_TIMEOUT = 15.0
"""Patience for exported spans (each process batches for OTEL_BSP_SCHEDULE_DELAY ms)."""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def otel(receiver: OtlpReceiver, service: str) -> dict[str, str]:
    """A process's tracing settings: OpenTelemetry's own variables, nothing else."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }


def dm_trace(app: Wakeful, receiver: OtlpReceiver, user: str) -> dict[str, ReceivedSpan]:
    """Send one DM, wait for its reply, then for its trace to hold a request, a run and a
    post; the trace's spans by name (each name once: one DM, one run, one post)."""
    reply = app.sender.message(user, "hello tracing")
    assert reply.status == 200, reply
    app.wait_post("D" + user.removeprefix("U"), "Handled 1 message.", timeout=15)

    def requests(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [
            s
            for s in spans
            if s.name == "slack.request"
            and s.attributes.get("wakeful.slack.event_id") == reply.event_id
        ]

    def complete(spans: list[ReceivedSpan]) -> bool:
        found = requests(spans)
        names = {s.name for s in spans if found and s.trace_id == found[0].trace_id}
        return {"wakeful.run", "wakeful.post"} <= names

    if not receiver.wait_for(complete, SPANS_TIMEOUT):
        seen = [(s.service, s.name, s.trace_id, s.parent_id) for s in receiver.spans()]
        raise AssertionError(f"no trace request -> run -> post; received: {seen}\n{app.tail()}")
    [request] = requests(receiver.spans())
    trace = receiver.trace(request.trace_id)
    names = [s.name for s in trace]
    for name in ("slack.request", "wakeful.run", "wakeful.post"):
        assert names.count(name) == 1, names
    # The run and the post went into this trace, not into one of their own.
    strays = [
        (s.name, s.trace_id)
        for s in receiver.spans()
        if s.name in ("wakeful.run", "wakeful.post") and s.trace_id != request.trace_id
    ]
    assert not strays, strays
    return {s.name: s for s in trace}


def assert_chain(spans: dict[str, ReceivedSpan]) -> None:
    """slack.request is the root; the run is its child; the post is the run's child."""
    request, run, post = spans["slack.request"], spans["wakeful.run"], spans["wakeful.post"]
    assert request.parent_id == "", request
    assert run.parent_id == request.span_id, (run, request)
    assert post.parent_id == run.span_id, (post, run)
    assert spans["wakeful.agent"].parent_id == run.span_id, spans["wakeful.agent"]
    assert run.events == ("wakeful.claim", "wakeful.finish"), run  # moments of the run
    assert request.attributes.get("http.response.status_code") == 200, request.attributes


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.pg)])
def test_one_dm_through_serve_is_one_trace(
    backend: str, tmp_path: Path, receiver: OtlpReceiver
) -> None:
    settings = {**APP_SETTINGS, **otel(receiver, "wakeful-serve")}
    with serving(backend, tmp_path, settings) as app:
        spans = dm_trace(app, receiver, "U3901")
    assert_chain(spans)
    assert {s.service for s in spans.values()} == {"wakeful-serve"}


@pytest.mark.pg
def test_front_worker_dispatcher_processes_join_one_trace(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    roles = ("worker", "dispatcher")
    with (
        pg_schema_url() as db,
        SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu,
    ):
        front = {**APP_SETTINGS, **otel(receiver, "wakeful-front")}
        app = launch(tmp_path, emu, db, front, args=("serve", "--no-loops"), backend="postgres")
        loops: list[Proc] = []
        try:
            for role in roles:
                env = child_env(
                    SLACK_BOT_TOKEN=TOKEN,
                    SLACK_API_URL=emu.api_url,
                    WAKEFUL_DB=db,
                    **APP_SETTINGS,
                    **otel(receiver, f"wakeful-{role}"),
                )
                loops.append(
                    Proc(wakeful_cmd(role, "--poll", "0.2"), env, tmp_path, tmp_path / role)
                )
            for role, proc in zip(roles, loops, strict=True):
                line = proc.next_line()
                assert line.startswith(f"wakeful: {role} running on"), (line, proc.tail())
            spans = dm_trace(app, receiver, "U3902")
        finally:
            codes = {p.args[3]: p.stop() for p in loops}
            shut_down(app)
    assert codes == {"worker": 0, "dispatcher": 0}, codes
    assert_chain(spans)
    where = {name: (s.service, s.resource.get("wakeful.process")) for name, s in spans.items()}
    assert where["slack.request"] == ("wakeful-front", "front"), where
    assert where["wakeful.run"] == ("wakeful-worker", "worker"), where
    assert where["wakeful.post"] == ("wakeful-dispatcher", "dispatcher"), where
    assert {s.service for s in spans.values()} == {
        "wakeful-front",
        "wakeful-worker",
        "wakeful-dispatcher",
    }
