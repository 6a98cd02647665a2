"""What watching costs: the ingest path with and without the metrics (and a scraper running),
and a scrape and `wakeful inspect` on a store with a long history against an almost empty one.
Every ratio is between rounds of the same run, taken alternately."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from wakeful.core import metrics
from wakeful.core.store import Store, open_store

from .common import Figure, seconds

NOW = 1_700_000_000
HEAVY = "T1:UHEAVY"


@contextmanager
def uninstrumented() -> Iterator[None]:
    """The ingest path without its counter: the baseline the instrumented path is held to."""
    real = metrics.count_ingest
    metrics.count_ingest = lambda source, outcome: None
    try:
        yield
    finally:
        metrics.count_ingest = real


def measure_instrumentation(
    tmp: Path, quick: bool, rounds: int, n: int, synchronous: str = "FULL"
) -> Figure:
    """Ingest in small blocks alternating metrics on and off, so the disk's drift (a fifth
    within a minute on a shared VM) falls on both alike. With the metrics on, a full /metrics
    scrape runs inline once per second of ingest (15 times Prometheus' default rate), its time
    charged to the ingest path as if the scrape stole it all."""
    store = open_store(tmp / "instrumented.db", synchronous=synchronous)
    registry = metrics.registry_for(store)
    block = 100
    time_on = time_off = 0.0
    count = 0
    scrapes: list[float] = []
    since_scrape = 0.0
    pair: list[tuple[bool, float]] = []
    ratios: list[float] = []
    tag = time.perf_counter_ns()
    for i in range(block):  # warm up: the file, the caches, the statement cache
        store.ingest("T1:U1", "slack", f"{tag}-warm-{i}", {"text": "hello"}, NOW)
    for k in range(rounds * n // block * 2):
        on = (k % 2 == 0) == (k // 2 % 2 == 0)  # on/off, then off/on: neither always first
        started = time.perf_counter()
        if on:
            for i in range(block):
                store.ingest("T1:U1", "slack", f"{tag}-{count}-{i}", {"text": "hello"}, NOW)
            if since_scrape >= 1.0:
                scraped = time.perf_counter()
                metrics.exposition(registry)
                scrapes.append(time.perf_counter() - scraped)
                since_scrape = 0.0
        else:
            with uninstrumented():
                for i in range(block):
                    store.ingest("T1:U1", "slack", f"{tag}-{count}-{i}", {"text": "hello"}, NOW)
        took = time.perf_counter() - started
        count += 1
        pair.append((on, took))
        if len(pair) == 2:  # one block of each, back to back: their ratio sees one machine
            t_on = next(t for o, t in pair if o)
            t_off = next(t for o, t in pair if not o)
            ratios.append(t_off / t_on)
            pair = []
        if on:
            time_on += took
            since_scrape += took
        else:
            time_off += took
    store.close()
    events = count // 2 * block
    r = statistics.median(ratios)  # a stalled flush in one block moves a sum, not a median
    scrape_ms = 1000 * statistics.median(scrapes) if scrapes else float("nan")
    return Figure(
        f"ingest (synchronous={synchronous}) with metrics on, /metrics scraped every second",
        events / time_on,
        "events/s",
        r,
        "metrics off",
        ">= 0.97x",
        r >= 0.97,
        f"metrics off: {events / time_off:,.0f}/s; {len(scrapes)} scrapes of {scrape_ms:.1f} ms",
    )


def measure_share(tmp: Path, n: int) -> Figure:
    """What the metrics add to one durable ingest, from their parts measured apart: the
    counter's bump per event, and a scrape a second spread over that second's events."""
    store = open_store(tmp / "share.db")
    tag = time.perf_counter_ns()
    started = time.perf_counter()
    for i in range(n):
        store.ingest("T1:U1", "slack", f"{tag}-{i}", {"text": "hello"}, NOW)
    per_event = (time.perf_counter() - started) / n
    calls = 200_000
    started = time.perf_counter()
    for _ in range(calls):
        metrics.count_ingest("slack", "stored")
    bump = (time.perf_counter() - started) / calls
    registry = metrics.registry_for(store)
    scrape = seconds(lambda: metrics.exposition(registry), 21)
    store.close()
    share = bump / per_event + scrape  # per second: events * bump + one scrape
    return Figure(
        "metrics' share of durable ingest (synchronous=FULL), scraped every second",
        100 * share,
        "%",
        None,
        "",
        "<= 3%",
        share <= 0.03,
        f"ingest {per_event * 1e6:.0f} µs/event, counter {bump * 1e6:.2f} µs, "
        f"scrape {scrape * 1000:.1f} ms",
    )


def history(path: Path, done: int) -> Store:
    """A store with `done` finished events (a tenth in one heavy inbox, with as many runs and
    sent outbox rows), plus a live part: 100 pending, 10 dead, held and parked outbox rows,
    open approvals and timers."""
    import sqlite3

    store = open_store(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO events (inbox, source, source_id, payload, status, attempts, gen, "
        "created_at, updated_at) VALUES (?, 'slack', ?, '{}', 'done', 1, 1, ?, ?)",
        (
            (HEAVY if i % 10 == 0 else f"T1:U{i % 1000}", f"old-{i}", NOW - 86400, NOW - 86400)
            for i in range(done)
        ),
    )
    conn.executemany(
        "INSERT INTO runs (inbox, holder, gen, claim_seq, finish_seq, events, claimed_at, "
        "finished_at) VALUES (?, 'w', 1, ?, ?, '[1]', ?, ?)",
        ((HEAVY, 2 * i, 2 * i + 1, NOW - 86400, NOW - 86400) for i in range(done // 10)),
    )
    conn.executemany(
        "INSERT INTO outbox (inbox, channel, text, priority, status, created_at, sent_at) "
        "VALUES (?, 'D1', 'old reply', 'urgent', 'sent', ?, ?)",
        ((HEAVY, NOW - 86400, NOW - 86400) for _ in range(done // 10)),
    )
    conn.execute("COMMIT")
    conn.close()
    for i in range(100):
        store.ingest(f"T1:U{i}", "slack", f"live-{i}", {"text": "hi"}, NOW)
    return store


def measure_reads(tmp: Path, quick: bool, rounds: int) -> list[Figure]:
    big_n = 20_000 if quick else 1_000_000
    small = history(tmp / "small.db", 1_000)
    big = history(tmp / "big.db", big_n)
    figures = []
    reads: list[tuple[str, Callable[[Store], object]]] = [
        ("/metrics scrape (store gauges)", lambda s: metrics.exposition(metrics.registry_for(s))),
        ("wakeful inspect (overview)", lambda s: s.overview(NOW)),
        ("wakeful inspect <inbox> (heavy inbox)", lambda s: s.inbox_view(HEAVY, NOW)),
    ]
    for name, read in reads:
        ratios, values = [], []
        for _ in range(rounds):
            base = seconds(lambda r=read: r(small), 5)  # type: ignore[misc]
            value = seconds(lambda r=read: r(big), 5)  # type: ignore[misc]
            values.append(value)
            ratios.append(value / base)
        ratio = statistics.median(ratios)
        figures.append(
            Figure(
                f"{name}, {big_n:,} done events stored",
                1000 * statistics.median(values),
                "ms",
                ratio,
                "1,000 done events",
                "<= 2x",
                ratio <= 2,
                f"heavy inbox: {big_n // 10:,} events, runs and outbox rows",
            )
        )
    small.close()
    big.close()
    return figures


def run_ops(quick: bool, say: Callable[[str], None] = print) -> list[Figure]:
    tmp = Path(tempfile.mkdtemp(prefix="wakeful-bench-ops-"))
    # No flush per commit: ingest is at its fastest, so the metrics' share is at its largest,
    # and the disk's noise is out of the ratio.
    rounds, n = (1, 2000) if quick else (7, 40_000)
    figures = [measure_instrumentation(tmp, quick, rounds, n, synchronous="NORMAL")]
    figures.append(measure_share(tmp, 300 if quick else 3000))
    figures += measure_reads(tmp, quick, 1 if quick else 3)
    for f in figures:
        say("  " + f.row())
    return figures
