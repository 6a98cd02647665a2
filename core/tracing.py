"""Tracing (issue 39): spans that follow a person's event from Slack's request to the post it
caused, across processes, joined by the trace context stored with each event and outbox row.

The one place OpenTelemetry is set up and used. It is off unless the process's environment asks
for it (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_TRACES_EXPORTER` other than `none`) and the
`otel` extra is installed; off, every helper here returns after one check of a module flag
(`ON`) and nothing imports opentelemetry. On, OpenTelemetry's own environment variables set it
up (service name, resource attributes, sampler, exporter, batching), read by OpenTelemetry's own
pieces. Callers pass and store W3C `traceparent` strings, never OpenTelemetry objects, so the
store keeps text and the engine needs no OpenTelemetry to run.

Attributes never carry a secret: every string goes through the logs' redaction and is cut to
`MAX_TEXT` characters. Message text goes in only through `content`, which gives nothing unless
`WAKEFUL_OTEL_CONTENT=on` (the GenAI conventions' advice: content is opt-in).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from wakeful.core import logs
from wakeful.core.records import StoredEvent

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Link, Span, Tracer, TracerProvider

log = logging.getLogger("wakeful")

ON = False
"""True while spans are made (a provider is in use): the one check every helper makes first."""
CONTENT = "WAKEFUL_OTEL_CONTENT"
"""`on`: message text may go in attributes (`content`); off by default."""
SERVICE = "wakeful"
"""The service name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one."""
EXPORT_BATCH = 64
"""Spans an export carries at most, unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE says (its default is
512): encoding a batch holds the interpreter's lock, and 512 spans held it long enough to
double the front's ack p99 at 200 msg/s; 64 at a time keep each hold short."""
BATCH_SETTING = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
EXPORT_QUEUE = 8192
"""Spans waiting for export at most, unless OTEL_BSP_MAX_QUEUE_SIZE says (its default is
2,048, beyond which spans are dropped): smaller batches leave more waiting in a burst."""
QUEUE_SETTING = "OTEL_BSP_MAX_QUEUE_SIZE"
MAX_TEXT = 256
"""Longest string attribute kept (content aside): an error's text, never a message's."""
_tracer: Tracer | None = None
_content = False
_configured = False
_otel: Any = None
"""`opentelemetry.trace`, once tracing is on: the helpers' one lookup instead of an import."""
_KINDS: dict[str, Any] = {}
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ROWS: ContextVar[Mapping[str, str] | None] = ContextVar("wakeful_trace_rows", default=None)
Attrs = Mapping[str, Any]


class _Off:
    """What `span` gives while tracing is off: a block that does nothing."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


NOOP: AbstractContextManager[None] = _Off()


class _Content(str):
    """Message text, let into an attribute whole by `content` (WAKEFUL_OTEL_CONTENT=on)."""

    __slots__ = ()


# -- setting up --------------------------------------------------------------------------------


def tracing_on(env: Mapping[str, str]) -> bool:
    """Whether `env` asks for tracing (an OTLP endpoint, or an exporter other than `none`,
    and not OTEL_SDK_DISABLED) and the OpenTelemetry SDK is installed to do it."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        wanted = exporters != "none"
    else:
        wanted = bool(
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
            or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        )
    if not wanted:
        return False
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        log.warning("OTEL_* asks for tracing but the `otel` extra is not installed: no spans")
        return False
    return True


def configure(env: Mapping[str, str], service: str) -> bool:
    """Set this process's tracing up once, when `env` asks for it (`tracing_on`); True when
    spans are made. `service` (serve, worker, ...) becomes the resource's `wakeful.process`.
    The sampler (OTEL_TRACES_SAMPLER), resource attributes and batching are OpenTelemetry's
    own, from the process environment; raises ValueError for an exporter wakeful does not ship."""
    global _configured
    if _configured or not tracing_on(env):
        return ON
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attrs = {"wakeful.process": service}
    named = "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not env.get("OTEL_SERVICE_NAME", "").strip() and not named:
        attrs["service.name"] = SERVICE
    resource = _steady(Resource.create(attrs))
    provider = TracerProvider(resource=resource)  # sampler: OTEL_TRACES_SAMPLER
    # Either OTEL_BSP_* variable set: OpenTelemetry reads both itself (None), as they decide
    # together (a batch larger than the queue is refused).
    told = any(env.get(name, "").strip() for name in (BATCH_SETTING, QUEUE_SETTING))
    size, queue = (None, None) if told else (EXPORT_BATCH, EXPORT_QUEUE)
    for exporter in _exporters(env):
        processor = BatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=size)
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)  # other instrumentation joins the same traces
    use_provider(provider, content=env.get(CONTENT, "").strip().lower() == "on")
    _configured = True
    return True


def _steady(resource: Resource) -> Resource:
    """`resource`, its hash worked out once: OTLP's encoder hashes the resource of every span
    it exports (a JSON dump of its attributes each time, a tenth of the export's cost), and a
    process's resource is immutable."""
    from opentelemetry.sdk.resources import Resource

    class Steady(Resource):
        def __init__(self, made: Resource) -> None:
            super().__init__(made.attributes, made.schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    return Steady(resource)


def _exporters(env: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters OTEL_TRACES_EXPORTER names (default `otlp`: OTLP over HTTP/protobuf, its
    endpoint, headers and timeout from OTEL_EXPORTER_OTLP_*), or `console`."""
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")]
    made: list[SpanExporter] = []
    for name in [n for n in names if n and n != "none"]:
        if name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
            )
            if protocol.strip() != "http/protobuf":
                raise ValueError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: wakeful ships the OTLP exporter "
                    "over http/protobuf only"
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            made.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            made.append(ConsoleSpanExporter())
        else:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER={name}: wakeful ships the `otlp` and `console` exporters"
            )
    return made


def use_provider(provider: TracerProvider | None, *, content: bool = False) -> None:
    """Make spans with `provider` from now on; None turns tracing off. `configure` calls it
    with the process's provider; tests with one of their own (an in-memory exporter).
    `content`: message text may go in attributes (WAKEFUL_OTEL_CONTENT=on)."""
    global ON, _tracer, _content, _otel
    if provider is None:
        ON, _tracer, _content = False, None, False
        logs.TRACE_IDS = None
        return
    from opentelemetry import trace

    _otel = trace
    _KINDS.update({kind.name.lower(): kind for kind in trace.SpanKind})
    _tracer = provider.get_tracer("wakeful")
    _content = content
    ON = True
    logs.TRACE_IDS = log_ids


# -- spans -------------------------------------------------------------------------------------


def span(
    name: str,
    attrs: Attrs | None = None,
    parent: str | Span | None = None,
    links: Iterable[str | None] = (),
    kind: str = "internal",
    root: bool = False,
) -> AbstractContextManager[None]:
    """A span around the block, current inside it (log lines and inner spans join it); an
    exception leaving the block marks it failed (`error.type`). `parent`: a stored
    traceparent or a span (None: the current span, if any; `root`: none, a trace of its
    own); `links`: traceparents."""
    if not ON:
        return NOOP
    made = start(name, attrs, parent, links, kind, root=root)
    assert made is not None
    return inside(made, close=True)


def start(
    name: str,
    attrs: Attrs | None = None,
    parent: str | Span | None = None,
    links: Iterable[str | None] = (),
    kind: str = "internal",
    start_ns: int | None = None,
    root: bool = False,
) -> Span | None:
    """A span begun but not made current, for work whose end is elsewhere (a run, finished in
    a later commit): `end` ends it, `inside` makes it current. None while tracing is off.
    `root`: a new trace, whatever span is current (a timer's tick)."""
    if not ON:
        return None
    from opentelemetry.context import Context

    assert _tracer is not None
    context = None
    if root:
        context = Context()
    elif isinstance(parent, str):
        context = context_of(parent)
    elif parent is not None:
        context = _otel.set_span_in_context(parent)
    found = [link for tp in links if (link := link_to(tp)) is not None]
    return _tracer.start_span(
        name,
        context=context,
        kind=_KINDS[kind],
        attributes=_clean(attrs or {}),
        links=_unique(found),
        start_time=start_ns,
        record_exception=False,
        set_status_on_exception=False,
    )


def end(
    made: Span | None,
    attrs: Attrs | None = None,
    error: BaseException | str | None = None,
    end_ns: int | None = None,
) -> None:
    """End a span from `start`, with last attributes and, when it failed, why."""
    if made is None:
        return
    if attrs:
        made.set_attributes(_clean(attrs))
    if error is not None:
        failed(made, error)
    made.end(end_time=end_ns)


def event(
    made: Span | None, name: str, attrs: Attrs | None = None, at_ns: int | None = None
) -> None:
    """A moment of a span's work (a run's claim, its finish's commit) as a span event: cheaper
    than a span of its own, to make and to export, and as plain on a trace's timeline."""
    if made is not None:
        made.add_event(name, _clean(attrs or {}), timestamp=at_ns)


@contextmanager
def inside(made: Span | None, close: bool = False) -> Iterator[None]:
    """Make `made` the current span inside the block (nothing when None); `close` ends it
    after."""
    if made is None:
        yield
        return
    with _otel.use_span(made, record_exception=False, set_status_on_exception=False):
        try:
            yield
        except BaseException as exc:
            failed(made, exc)
            raise
        finally:
            if close:
                made.end()


def failed(made: Span, error: BaseException | str) -> None:
    """Mark a span failed with `error.type` (the exception's class, or a word). The error's
    text, which may quote what a person wrote, is its status only with WAKEFUL_OTEL_CONTENT=on:
    a caller adds what it knows to be safe (a Slack error code) as an attribute of its own."""
    from opentelemetry.trace import Status, StatusCode

    kind = type(error).__name__ if isinstance(error, BaseException) else str(error)
    made.set_attribute("error.type", _text(kind))
    made.set_status(Status(StatusCode.ERROR, _text(str(error)) if _content else kind))


def note(attrs: Attrs, error: BaseException | str | None = None) -> None:
    """Add attributes to the current span (what a block learns on its way: stored or not);
    `error`: the span failed, though nothing was raised (an answer of 500)."""
    if not ON:
        return
    current = _otel.get_current_span()
    if current.is_recording():
        current.set_attributes(_clean(attrs))
        if error is not None:
            failed(current, error)


def link(traceparent: str | None) -> None:
    """Link the current span to the span a stored traceparent names (an approval's click to
    the run that asked), learnt after the span began; nothing when off or either is absent."""
    found = link_to(traceparent)
    if found is None:
        return
    current = _otel.get_current_span()
    if current.is_recording():
        current.add_link(found.context)


# -- contexts ----------------------------------------------------------------------------------


def current_context() -> str | None:
    """The current span's W3C traceparent, to store with what it writes; None when off or
    outside any span."""
    if not ON:
        return None
    return _traceparent(_otel.get_current_span())


def traceparent_of(made: Span | None) -> str | None:
    """A span's traceparent (None for None, or while off)."""
    if not ON or made is None:
        return None
    return _traceparent(made)


def _traceparent(made: Span) -> str | None:
    """W3C trace context's `traceparent` of a span (version 00), as its propagator writes it,
    without a carrier's round trip: this runs on every stored event and row."""
    context = made.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def context_of(traceparent: str | None) -> Context | None:
    """The context a stored traceparent names, to parent a span on; None when off, absent or
    malformed (read as W3C trace context's propagator reads a header)."""
    if not ON or not traceparent:
        return None
    found = _remote(traceparent)
    return None if found is None else _otel.set_span_in_context(_otel.NonRecordingSpan(found))


def _remote(traceparent: str) -> Any:
    """The remote SpanContext a traceparent names; None when malformed: a version other than
    hex, `ff`, ids of all zeros, or (version 00) anything after the flags."""
    match = _TRACEPARENT.match(traceparent.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    rest = traceparent.strip()[match.end() :]
    if version == "ff" or (version == "00" and rest) or (rest and not rest.startswith("-")):
        return None
    made = _otel.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=_otel.TraceFlags(int(flags, 16)),
    )
    return made if made.is_valid else None


def link_to(traceparent: str | None) -> Link | None:
    """A link to the span a stored traceparent names; None when off, absent or malformed."""
    if not ON or not traceparent:
        return None
    found = _remote(traceparent)
    return None if found is None else _otel.Link(found)


def stored(events: Iterable[StoredEvent]) -> list[str | None]:
    """The stored traceparent of each event (None: stored outside any span)."""
    return [e.trace for e in events]


@contextmanager
def rows_for(traces: Mapping[str, str]) -> Iterator[None]:
    """Inside the block, a row queued for an inbox named here stores that inbox's trace (its
    run's) instead of the current span's: several runs share one finish transaction."""
    token = _ROWS.set(traces)
    try:
        yield
    finally:
        _ROWS.reset(token)


def row_trace(inbox: str) -> str | None:
    """The traceparent an outbox row queued now for `inbox` stores (None when off)."""
    if not ON:
        return None
    rows = _ROWS.get()
    if rows is not None and inbox in rows:
        return rows[inbox]
    return current_context()


def log_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex, for a log line; None outside a span."""
    if not ON:
        return None
    context = _otel.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


# -- attributes --------------------------------------------------------------------------------


def content(key: str, text: str | None) -> dict[str, str]:
    """`{key: text}` when message text may be traced (WAKEFUL_OTEL_CONTENT=on), else nothing:
    the one way text a person wrote, or will read, goes in an attribute."""
    if not ON or not _content or not text:
        return {}
    return {key: _Content(text)}


def _clean(attrs: Attrs) -> dict[str, Any]:
    """Attributes as OpenTelemetry takes them: None dropped, every string redacted (and cut,
    unless it is `content`), sequences of one primitive type."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, _Content):
            out[key] = logs.redact(str(value))
        elif isinstance(value, list | tuple | set | frozenset):
            items = list(value)
            ints = all(isinstance(v, int) and not isinstance(v, bool) for v in items)
            out[key] = items if ints else [_text(str(v)) for v in items]
        else:
            out[key] = _text(str(value))
    return out


def _text(value: str) -> str:
    return logs.redact_short(value)[:MAX_TEXT]


def _unique(links: list[Link]) -> list[Link]:
    seen: set[tuple[int, int]] = set()
    out = []
    for link in links:
        key = (link.context.trace_id, link.context.span_id)
        if key not in seen:
            seen.add(key)
            out.append(link)
    return out
