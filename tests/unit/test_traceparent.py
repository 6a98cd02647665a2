"""Tracing writes and reads stored `traceparent` strings itself (core/tracing.py), without the
propagator's carrier round trip: what it writes and what it accepts must be what W3C trace
context's propagator, OpenTelemetry's own, writes and accepts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from wakeful.core import tracing

W3C = TraceContextTextMapPropagator()
HEX = "0123456789abcdef"


@pytest.fixture(autouse=True, scope="module")
def traced() -> Iterator[None]:
    tracing.use_provider(TracerProvider())
    yield
    tracing.use_provider(None)


def propagators(traceparent: str) -> trace.SpanContext | None:
    found = trace.get_current_span(W3C.extract({"traceparent": traceparent})).get_span_context()
    return found if found.is_valid else None


def ours(traceparent: str) -> trace.SpanContext | None:
    context = tracing.context_of(traceparent)
    if context is None:
        return None
    return trace.get_current_span(context).get_span_context()


def same(a: trace.SpanContext | None, b: trace.SpanContext | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.trace_id, a.span_id, a.trace_flags, a.is_remote) == (
        b.trace_id,
        b.span_id,
        b.trace_flags,
        b.is_remote,
    )


def hexes(n: int) -> st.SearchStrategy[str]:
    return st.text(HEX, min_size=n, max_size=n)


CASES = [
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # the spec's example
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # the forbidden version
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # 00 has nothing after
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # a later version may
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01extra",
    "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
    " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
    "not a traceparent",
    "",
]


@pytest.mark.parametrize("traceparent", CASES)
def test_a_stored_traceparent_is_read_as_w3c_s_propagator_reads_it(traceparent: str) -> None:
    assert same(ours(traceparent), propagators(traceparent))
    link = tracing.link_to(traceparent)
    assert same(None if link is None else link.context, propagators(traceparent))


@given(
    st.one_of(st.just("00"), st.just("ff"), hexes(2)),
    st.one_of(hexes(32), st.just("0" * 32)),
    st.one_of(hexes(16), st.just("0" * 16)),
    hexes(2),
    st.one_of(st.just(""), st.text(max_size=8)),
)
def test_any_traceparent_reads_as_the_propagator_reads_it(
    version: str, trace_id: str, span_id: str, flags: str, rest: str
) -> None:
    traceparent = f"{version}-{trace_id}-{span_id}-{flags}{rest}"
    assert same(ours(traceparent), propagators(traceparent)), traceparent


def test_what_a_span_stores_is_what_the_propagator_injects() -> None:
    tracer = trace.get_tracer("test", tracer_provider=TracerProvider())
    for sampled in (True, False):
        flags = trace.TraceFlags(1 if sampled else 0)
        parent = trace.NonRecordingSpan(
            trace.SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, flags)
        )
        made = tracer.start_span("x", context=trace.set_span_in_context(parent))
        carrier: dict[str, str] = {}
        W3C.inject(carrier, context=trace.set_span_in_context(made))
        assert tracing.traceparent_of(made) == carrier["traceparent"]
        with trace.use_span(made, end_on_exit=True):
            assert tracing.current_context() == carrier["traceparent"]
    assert tracing.current_context() is None  # outside any span
