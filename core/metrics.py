"""Every Prometheus metric wakeful exports, defined once, and the scrape of the store's gauges.

Counters and histograms are bumped in-process where the event happens (ingest, a run, a send,
an answer, a timer firing, an HTTP acknowledgement). What only the database knows (backlog,
dead events, outbox rows by state, open approvals, overdue timers) is read when Prometheus
scrapes, by `StoreCollector`: one indexed statement each, in a read-only transaction, so a
scrape never waits for, or takes, the write lock. No label carries an inbox, user or channel:
the number of series stays fixed however many people write to the agent.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from wakeful.core.usage import KINDS, ModelUsage

if TYPE_CHECKING:
    from wakeful.core.store.overview import StoreGauges, StoreSize


class GaugeSource(Protocol):
    """What a scrape reads from a store (a `wakeful.core.store.Store`): named by its two reads,
    so this module, which the store's modules import to count, does not import the store."""

    def gauges(self, now: int) -> StoreGauges: ...

    def store_size(self) -> StoreSize: ...


CONTENT_TYPE = CONTENT_TYPE_LATEST
REGISTRY = CollectorRegistry()
"""The process's own metrics (not prometheus_client's global registry, so embedding wakeful in
another program never collides with that program's metrics)."""
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

INGESTED = Counter(
    "wakeful_events_ingested_total",
    "Deliveries offered to the inbox, by source and outcome (stored, duplicate, rejected).",
    ["source", "outcome"],
    registry=REGISTRY,
)
RUNS = Counter(
    "wakeful_runs_total",
    "Agent runs by outcome: done, failed (events retried), dead (events dead-lettered), "
    "fenced (the finish was refused: the lease was lost).",
    ["outcome"],
    registry=REGISTRY,
)
RUN_SECONDS = Histogram(
    "wakeful_run_duration_seconds",
    "Wall time of one run: the agent, then the fenced finish.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)
SCHEDULE_TO_START = Histogram(
    "wakeful_schedule_to_start_seconds",
    "Wait between an event becoming due (stored, its retry's backoff over, or requeued) and "
    "a worker claiming it (whole seconds: the store's clock).",
    buckets=(0, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
ATTEMPTS = Counter(
    "wakeful_event_attempts_total",
    "Events claimed for a run: a first attempt, or a retry after a failure.",
    ["attempt"],
    registry=REGISTRY,
)
DEAD = Counter(
    "wakeful_events_dead_total",
    "Events dead-lettered: claimed too many times (exhausted), or given up by the agent.",
    ["reason"],
    registry=REGISTRY,
)
TAKEOVERS = Counter(
    "wakeful_lease_takeovers_total",
    "Claims that found events left running by an older lease generation (a worker crashed or "
    "stalled past its lease).",
    registry=REGISTRY,
)
FENCED = Counter(
    "wakeful_finishes_fenced_total",
    "Finishes refused because the worker no longer held the lease in its generation.",
    registry=REGISTRY,
)
PARTS = Counter(
    "wakeful_outbox_parts_total",
    "Outbox parts sent to Slack, by kind (post, update, ephemeral) and outcome (sent, "
    "retry: a transient failure, kept; failed: parked for a person).",
    ["kind", "outcome"],
    registry=REGISTRY,
)
ROWS_SENT = Counter(
    "wakeful_outbox_rows_sent_total",
    "Outbox rows delivered (several rows can merge into one post).",
    registry=REGISTRY,
)
SEND_SECONDS = Histogram(
    "wakeful_outbox_send_seconds",
    "Time one outbox part spent in the Slack Web API (including a retry's look-up).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
SLACK_ERRORS = Counter(
    "wakeful_slack_api_errors_total",
    "Slack Web API calls that failed, by method and Slack's error code (or http_<status>, "
    "network).",
    ["method", "error"],
    registry=REGISTRY,
)
PAUSES = Counter(
    "wakeful_dispatch_pauses_total",
    "Answers that paused a workspace's sends until a retry time: Slack's 429 (its "
    "Retry-After), its 5xx and network failures, tokens this process cannot open.",
    registry=REGISTRY,
)
PAUSED_SECONDS = Counter(
    "wakeful_dispatch_paused_seconds_total",
    "Seconds of those pauses (a 429's Retry-After, or the retry time of the failure).",
    registry=REGISTRY,
)
APPROVALS = Counter(
    "wakeful_approvals_total",
    "Approvals requested, and answers that stood: yes, no, expired.",
    ["outcome"],
    registry=REGISTRY,
)
TIMER_LATENESS = Histogram(
    "wakeful_timer_lateness_seconds",
    "How late a timer occurrence was stored, against its scheduled time.",
    buckets=(0, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 86400),
    registry=REGISTRY,
)
ACK_SECONDS = Histogram(
    "wakeful_http_ack_seconds",
    "Time from a Slack request's arrival to the app's answer (Slack waits 3 s at most), by "
    "HTTP status.",
    ["status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 3, 5),
    registry=REGISTRY,
)

MODEL_CALLS = Counter(
    "wakeful_model_calls_total",
    "Model calls by model and outcome: made (billed), or replayed (a retried run got the "
    "recorded answer back instead of calling again).",
    ["model", "outcome"],
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "wakeful_model_tokens_total",
    "Tokens of the model calls made, by model and kind: input (full price), output, "
    "cache_write, cache_read.",
    ["model", "kind"],
    registry=REGISTRY,
)
MODEL_COST = Counter(
    "wakeful_model_cost_dollars_total",
    "Estimated cost of the model calls made, in US dollars, from the agent's price table.",
    ["model"],
    registry=REGISTRY,
)
MODEL_BUDGET_REFUSALS = Counter(
    "wakeful_model_budget_refusals_total",
    "Model calls not made because a spend budget was spent, by scope: person (one inbox's "
    "last 24 hours) or workspace.",
    ["scope"],
    registry=REGISTRY,
)
FEEDBACK = Counter(
    "wakeful_feedback_total",
    "Feedback on the agent's replies (a click stored once), by value: positive, negative.",
    ["value"],
    registry=REGISTRY,
)

# The ingest path runs thousands of times a second: its children are looked up once.
_INGEST_CHILDREN: dict[tuple[str, str], Any] = {}
_SOURCE = re.compile(r"[a-z0-9_.-]{1,40}")
_MODEL = re.compile(r"[A-Za-z0-9._-]{1,60}")


def count_ingest(source: str, outcome: str) -> None:
    """One delivery offered to the inbox (`stored`, `duplicate` or `rejected`)."""
    child = _INGEST_CHILDREN.get((source, outcome))
    if child is None:
        child = _INGEST_CHILDREN[(source, outcome)] = INGESTED.labels(source, outcome)
    child.inc()


def source_label(source: object) -> str:
    """A source as a label value: a malformed one must not mint a new series per request."""
    if isinstance(source, str) and _SOURCE.fullmatch(source):
        return source
    return "invalid"


def count_model(usage: ModelUsage) -> None:
    """One model call (or one replayed), counted when it returns: a run that never finishes
    was still billed for it."""
    model = usage.model if _MODEL.fullmatch(usage.model) else "other"
    if usage.calls:
        MODEL_CALLS.labels(model, "made").inc(usage.calls)
    if usage.replayed:
        MODEL_CALLS.labels(model, "replayed").inc(usage.replayed)
    for kind in KINDS:
        if amount := usage.tokens(kind):
            MODEL_TOKENS.labels(model, kind).inc(amount)
    if usage.cost:
        MODEL_COST.labels(model).inc(usage.cost)


UNANSWERED_SECONDS = Histogram(
    "wakeful_unanswered_seconds",
    "From a person's event being stored to the first post back to that person (a reply, a "
    "notice, a rewritten prompt, an ephemeral): the silence they sat in.",
    buckets=(1, 2, 5, 10, 30, 60, 120, 300, 900, 3600, 14400, 86400),
    registry=REGISTRY,
)


def observe_unanswered(waits: list[int]) -> None:
    """Silences just ended by a post (after its commit)."""
    for wait in waits:
        UNANSWERED_SECONDS.observe(wait)


def observe_waits(waits: list[int]) -> None:
    """Schedule-to-start of events just claimed (after their claim committed)."""
    for wait in waits:
        SCHEDULE_TO_START.observe(wait)


def count_claim(attempts: list[int]) -> None:
    """Events just claimed, each with its attempt number (1 = first)."""
    retries = sum(1 for a in attempts if a > 1)
    if len(attempts) > retries:
        ATTEMPTS.labels("first").inc(len(attempts) - retries)
    if retries:
        ATTEMPTS.labels("retry").inc(retries)


class StoreCollector(Collector):
    """The store's gauges, read on scrape: one indexed statement each, read-only."""

    def __init__(
        self, store: GaugeSource, clock: Callable[[], int] = lambda: int(time.time())
    ) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily("wakeful_store_up", "1 when the scrape could read the store.")
        try:
            gauges = self.store.gauges(self.clock())
        except Exception:  # a scrape reports an outage; it never fails the other metrics
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield _by_label(
            "wakeful_events",
            "Events not done, by status (pending, running, dead).",
            "status",
            ("pending", "running", "dead"),
            gauges.events,
        )
        yield _gauge(
            "wakeful_oldest_pending_event_age_seconds",
            "Age of the oldest pending event (0 when none): a quiet agent shows here first.",
            gauges.oldest_pending_age,
        )
        yield _by_label(
            "wakeful_outbox_rows",
            "Outbox rows by state: held (pending, waiting for the gap or a dispatcher), sending, "
            "parked (failed, waiting for a person).",
            "state",
            ("held", "sending", "parked"),
            gauges.outbox,
        )
        yield _gauge(
            "wakeful_oldest_held_outbox_age_seconds",
            "Age of the oldest held or sending outbox row (0 when none).",
            gauges.oldest_outbox_age,
        )
        yield _gauge(
            "wakeful_approvals_open",
            "Approvals still waiting for an answer.",
            gauges.approvals_open,
        )
        yield _gauge("wakeful_timers_due", "Timers due now and not yet fired.", gauges.timers_due)
        yield _gauge(
            "wakeful_oldest_due_timer_age_seconds",
            "How long the most overdue timer has been due (0 when none): a stopped scheduler.",
            gauges.oldest_due_timer_age,
        )
        yield _by_label(
            "wakeful_people_waiting",
            "Inboxes where a person has waited longer than `over` (1m, 5m, 15m) for a first "
            "word back, counting waits begun in the last day.",
            "over",
            ("1m", "5m", "15m"),
            gauges.people_waiting,
        )
        yield from _store_size(self.store)
        yield _gauge(
            "wakeful_store_scrape_seconds",
            "Time this scrape spent reading the store.",
            time.perf_counter() - started,
        )


def _store_size(store: GaugeSource) -> Iterator[Metric]:
    """The store's bytes, and for SQLite the cap past which writes fail (0: no cap)."""
    try:
        size = store.store_size()
    except Exception:  # a size the OS cannot tell is left out; the scrape goes on
        return
    yield _gauge(
        "wakeful_store_bytes",
        "Bytes the store takes: SQLite's file plus its WAL, or PostgreSQL's pg_database_size.",
        size.bytes,
    )
    if size.cap is not None:
        yield _gauge(
            "wakeful_store_cap_bytes",
            "SQLite's cap (WAKEFUL_SQLITE_MAX_PAGES x page size; 0: none): past it, writes "
            "fail with 503. Alert well before wakeful_store_bytes reaches it.",
            size.cap,
        )


def _by_label(
    name: str, doc: str, label: str, values: Sequence[str], counts: Mapping[str, int]
) -> GaugeMetricFamily:
    """One gauge per value of `label`, each present (0 when the store counted none)."""
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value in values:
        family.add_metric([value], counts.get(value, 0))
    return family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class _Forward(Collector):
    """The process's metrics inside a registry that also holds one store's collector."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def registry_for(store: GaugeSource) -> CollectorRegistry:
    """What `/metrics` shows for a process using `store`: its counters and the store's gauges."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Forward())
    registry.register(StoreCollector(store))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of a registry."""
    return generate_latest(registry)


class MetricsServer:
    """`/metrics` on a port of its own, for processes that serve no HTTP (the loops)."""

    def __init__(self, store: GaugeSource, host: str, port: int) -> None:
        self._server, self._thread = start_http_server(port, host, registry_for(store))
        self.port = int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
