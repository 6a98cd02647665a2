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


def measure_instrumentation(tmp: Path, quick: bool, rounds: int, n: int) -> list[Figure]:
    """Ingest in small blocks alternating metrics on and off, so the disk's drift (a fifth
    within a minute on a shared VM) falls on both alike. With the metrics on, a full /metrics
    scrape runs inline once per second of ingest (15 times Prometheus' default rate), its time
    charged to the ingest path as if the scrape stole it all."""
    store = open_store(tmp / "instrumented.db")
    registry = metrics.registry_for(store)
    block = 100
    time_on = time_off = 0.0
    count = 0
    scrapes: list[float] = []
    since_scrape = 0.0
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
        if on:
            time_on += took
            since_scrape += took
        else:
            time_off += took
    # The counter alone, timed apart from the disk: what it adds to each event.
    calls = 200_000
    started = time.perf_counter()
    for _ in range(calls):
        metrics.count_ingest("slack", "stored")
    per_call = (time.perf_counter() - started) / calls
    store.close()
    events = count // 2 * block
    rate_on, rate_off = events / time_on, events / time_off
    r = rate_on / rate_off
    scrape_ms = 1000 * statistics.median(scrapes) if scrapes else float("nan")
    per_event = 1 / rate_off
    return [
        Figure(
            "ingest with metrics on and /metrics scraped every second",
            rate_on,
            "events/s",
            r,
            "metrics off",
            ">= 0.97x",
            r >= 0.97,
            f"metrics off: {rate_off:,.0f}/s; {len(scrapes)} scrapes of {scrape_ms:.1f} ms",
        ),
        Figure(
            "the ingest counter, per event",
            per_call * 1e6,
            "µs",
            per_call / per_event,
            "one ingest",
            "<= 0.03x",
            per_call / per_event <= 0.03,
            f"one ingest: {per_event * 1e6:.0f} µs",
        ),
    ]


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
    rounds = 1 if quick else 7
    figures = measure_instrumentation(tmp, quick, rounds, 300 if quick else 3000)
    figures += measure_reads(tmp, quick, 1 if quick else 3)
    for f in figures:
        say("  " + f.row())
    return figures
