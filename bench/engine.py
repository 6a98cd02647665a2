"""Engine benchmarks on SQLite: the durability floor, ingest, the run cycle, history, timers,
outbox preparation and peers. Each returns Figures; ratios are against the floor measured in
the same process run."""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from wakeful.core.effects import Effects, Post
from wakeful.core.store import Store, open_store

from .common import NOW, Figure, rate, seconds
from .retention import measure_pruning


class Bench:
    def __init__(self, quick: bool, say: Callable[[str], None] = print) -> None:
        self.quick = quick
        self.say = say
        self.rounds = 1 if quick else 5
        self.n = 300 if quick else 3000
        self.tmp = Path(tempfile.mkdtemp(prefix="wakeful-bench-"))
        self.counter = 0
        self.floor = 0.0
        self.figures: list[Figure] = []

    def path(self, name: str) -> Path:
        self.counter += 1
        return self.tmp / f"{name}-{self.counter}.db"

    def add(self, fig: Figure) -> Figure:
        self.figures.append(fig)
        self.say("  " + fig.row())
        return fig

    # -- the floor --------------------------------------------------------------------------

    def raw_inserts(self, synchronous: str, rounds: int | None = None) -> float:
        def once() -> None:
            conn = sqlite3.connect(self.path("floor"), isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(
                "CREATE TABLE e (id INTEGER PRIMARY KEY, source TEXT, source_id TEXT, "
                "payload TEXT, UNIQUE (source, source_id))"
            )
            for i in range(self.n):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO e (source, source_id, payload) VALUES (?, ?, ?)",
                    ("slack", f"Ev{i}", '{"text":"hello"}'),
                )
                conn.execute("COMMIT")
            conn.close()

        value, _ = rate(self.n, once, self.rounds if rounds is None else rounds)
        return value

    def floor_round(self) -> float:
        return self.raw_inserts("FULL", rounds=1)

    def paired(
        self, measure: Callable[[], float], baseline: Callable[[], float]
    ) -> tuple[float, float]:
        """(median rate, median ratio) over rounds that each run `baseline` right before
        `measure`. The disk's fsync time on a shared VM drifts by a fifth within a minute, more
        than some margins here: a ratio of two rounds taken seconds apart sees one machine."""
        values, ratios = [], []
        for _ in range(self.rounds):
            base = baseline()
            value = measure()
            values.append(value)
            ratios.append(value / base)
        return statistics.median(values), statistics.median(ratios)

    def measure_floor(self) -> None:
        self.floor = self.raw_inserts("FULL")
        self.add(
            Figure(
                "floor: raw INSERT per commit (WAL, synchronous=FULL)",
                self.floor,
                "rows/s",
                note="the baseline of every ratio",
            )
        )
        normal = self.raw_inserts("NORMAL")
        self.add(
            Figure(
                "raw INSERT per commit, synchronous=NORMAL",
                normal,
                "rows/s",
                normal / self.floor,
                "floor",
                note="reference only; wakeful uses FULL",
            )
        )

    def ratio(
        self, name: str, measure: Callable[[], float], unit: str, goal: float, note: str = ""
    ) -> float:
        """A figure against the floor, the two measured in alternating rounds."""
        value, r = self.paired(measure, self.floor_round)
        self.add(Figure(name, value, unit, r, "floor", f">= {goal}x", r >= goal, note))
        return value

    # -- ingest ------------------------------------------------------------------------------

    def ingest_round(self, store: Store, prefix: str) -> float:
        def once() -> None:
            tag = f"{prefix}{time.perf_counter_ns()}"
            for i in range(self.n):
                store.ingest(f"T1:U{i % 50}", "slack", f"{tag}-{i}", {"text": "hello"}, NOW)

        value, _ = rate(self.n, once, 1)
        return value

    def measure_ingest(self) -> Store:
        """Returns the store, for the figures that compare against ingest on it."""
        store = open_store(self.path("ingest"))
        self.ratio("ingest, one caller", lambda: self.ingest_round(store, "a"), "events/s", 0.9)
        return store

    def measure_concurrent_ingest(self, callers: int = 16) -> None:
        store = open_store(self.path("concurrent"))

        def once() -> None:
            barrier = threading.Barrier(callers)
            tag = time.perf_counter_ns()

            def caller(c: int) -> None:
                barrier.wait()
                for i in range(self.n // callers):
                    store.ingest(f"T1:U{c}", "slack", f"{tag}-{c}-{i}", {"text": "x"}, NOW)

            threads = [threading.Thread(target=caller, args=(c,)) for c in range(callers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        self.ratio(
            f"ingest, {callers} concurrent callers (group commit)",
            lambda: rate(self.n // callers * callers, once, 1)[0],
            "events/s",
            3.0,
            "each caller returns after its own commit",
        )
        store.close()

    # -- the run cycle -----------------------------------------------------------------------

    def cycle_round(self, store: Store, inboxes: int) -> float:
        """A full run per inbox: acquire+claim one event, finish with one outbox message."""
        tag = time.perf_counter_ns()
        names = [f"T9:C{tag}-{i}" for i in range(inboxes)]
        for i, inbox in enumerate(names):
            store.ingest(inbox, "slack", f"cycle-{tag}-{i}", {"text": "hi"}, NOW)
        effects = Effects(messages=[Post("D1", "reply", priority="urgent")])
        started = time.perf_counter()
        for inbox in names:
            claim = store.acquire_and_claim(inbox, "bench", NOW, release_if_empty=True)
            assert claim is not None and len(claim.events) == 1
            finished, following = store.finish_and_claim(claim, effects, NOW)
            assert finished and following is None
        return inboxes / (time.perf_counter() - started)

    def measure_cycle(self) -> Store:
        """Returns the store, for the figures that compare against the cycle on it."""
        store = open_store(self.path("cycle"))
        self.ratio(
            "run cycle (lease, claim 1, finish + 1 outbox row)",
            lambda: self.cycle_round(store, self.n // 2),
            "cycles/s",
            0.3,
            "two commits per cycle",
        )
        return store

    # -- history -----------------------------------------------------------------------------

    def history_store(self, done: int, inboxes: int, age: int = 86400) -> Store:
        """A store holding `done` events handled `age` seconds before NOW."""
        path = self.path("history")
        store = open_store(path)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO events (inbox, source, source_id, payload, status, attempts, gen, "
            "created_at, updated_at) VALUES (?, 'slack', ?, ?, 'done', 1, 1, ?, ?)",
            (
                (f"T1:U{i % inboxes}", f"old-{i}", '{"text":"old"}', NOW - age, NOW - age)
                for i in range(done)
            ),
        )
        conn.execute("COMMIT")
        conn.close()
        return store

    def measure_history(self, empty_cycle: Store, empty_ingest: Store) -> None:
        """The cycle and ingest on a store with a long history, in rounds alternating with
        the same on the (nearly) empty stores of the figures above."""
        done, inboxes = (100_000, 1_000) if self.quick else (1_000_000, 10_000)
        self.say(f"  (building a store with {done:,} done events over {inboxes:,} inboxes)")
        store = self.history_store(done, inboxes)
        half = self.n // 2
        cycle, cycle_r = self.paired(
            lambda: self.cycle_round(store, half), lambda: self.cycle_round(empty_cycle, half)
        )
        ingest, ingest_r = self.paired(
            lambda: self.ingest_round(store, "h"), lambda: self.ingest_round(empty_ingest, "e")
        )
        store.close()
        for name, value, r, unit in (
            ("run cycle", cycle, cycle_r, "cycles/s"),
            ("ingest", ingest, ingest_r, "events/s"),
        ):
            self.add(
                Figure(
                    f"{name} with {done:,} done events stored",
                    value,
                    unit,
                    r,
                    "empty store",
                    ">= 0.8x",
                    r >= 0.8,
                )
            )

    # -- timers ------------------------------------------------------------------------------

    def timer_pass(self, total: int, due: int) -> float:
        path = self.path("timers")
        store = open_store(path)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO timers (id, inbox, kind, action, next_at, anchor, every_seconds, "
            "tz, policy, payload, created_at) VALUES (?, ?, 'every', 'event', ?, ?, 3600, "
            "'UTC', 'coalesce', 'null', ?)",
            (
                (f"T1:U{i}/t", f"T1:U{i}", NOW + 10 * 86400 + i, NOW, NOW)
                for i in range(total - due)
            ),
        )
        conn.execute("COMMIT")
        state = {"round": 0}

        def setup() -> None:
            state["round"] += 1
            now = NOW + state["round"] * 10
            conn.execute("BEGIN")
            conn.execute("DELETE FROM timers WHERE id LIKE 'due-%'")
            conn.executemany(
                "INSERT INTO timers (id, inbox, kind, action, next_at, anchor, every_seconds, "
                "tz, policy, payload, created_at) VALUES (?, ?, 'once', 'event', ?, ?, NULL, "
                "'UTC', 'coalesce', 'null', ?)",
                (
                    (f"due-{state['round']}-{i}", f"T2:U{i}", now - 1, now - 1, NOW)
                    for i in range(due)
                ),
            )
            conn.execute("COMMIT")

        def run() -> None:
            result = store.fire_due_timers(NOW + state["round"] * 10)
            assert result.fired == due, result

        value = seconds(run, max(3, self.rounds * 3), setup)
        conn.close()
        store.close()
        return value

    def measure_timers(self) -> None:
        big = 10_000 if self.quick else 100_000
        small_t = self.timer_pass(100, 100)
        big_t = self.timer_pass(big, 100)
        r = big_t / small_t
        self.add(
            Figure(
                f"scheduler pass: {big:,} timers, 100 due",
                big_t * 1000,
                "ms",
                r,
                "100 timers, 100 due",
                "<= 2x",
                r <= 2.0,
                f"100 timers: {small_t * 1000:.1f} ms",
            )
        )

    # -- outbox ------------------------------------------------------------------------------

    def measure_outbox(self) -> None:
        store = open_store(self.path("outbox"))
        destinations, per = 1000, 3
        for d in range(destinations):
            store.post(f"T1:U{d}", [Post(f"C{d}", f"update {i}") for i in range(per)], NOW)
        started = time.perf_counter()
        batches = store.claim_batches(NOW, limit=destinations)
        elapsed = time.perf_counter() - started
        rows = sum(len(p.row_ids) for b in batches for p in b.parts)
        assert rows == destinations * per, rows
        store.close()
        value = rows / elapsed
        self.add(
            Figure(
                f"outbox: prepare merged posts, {destinations} destinations",
                value,
                "rows/s",
                goal=">= 1,000 rows/s",
                met=value >= 1000,
                note=f"{len(batches)} batches in {elapsed * 1000:.0f} ms, no network",
            )
        )

    # -- peers -------------------------------------------------------------------------------

    def measure_peers(self, ours: Store) -> None:
        """Each peer's enqueue in rounds alternating with wakeful's ingest on the same disk."""

        def ingest() -> float:
            return self.ingest_round(ours, "p")

        try:
            from huey import SqliteHuey
        except ImportError:
            self.say("  huey not installed: peer skipped (pip install 'wakeful[bench]')")
        else:
            huey = SqliteHuey(filename=str(self.path("huey")))

            @huey.task()
            def noop(i: int) -> None:
                return None

            def enqueue() -> None:
                for i in range(self.n):
                    noop(i)

            value, r = self.paired(lambda: rate(self.n, enqueue, 1)[0], ingest)
            self.add(Figure("peer: huey SqliteHuey enqueue", value, "tasks/s"))
            self.add(
                Figure("wakeful ingest vs huey enqueue", 1 / r, "x", goal=">= 1.0x", met=r <= 1.0)
            )
        try:
            import persistqueue
        except ImportError:
            self.say("  persist-queue not installed: peer skipped (pip install 'wakeful[bench]')")
        else:
            q = persistqueue.SQLiteQueue(
                str(self.tmp / f"pq-{self.counter}"), auto_commit=True, multithreading=True
            )

            def put() -> None:
                for i in range(self.n):
                    q.put({"i": i})

            value, r = self.paired(lambda: rate(self.n, put, 1)[0], ingest)
            self.add(Figure("peer: persist-queue SQLiteQueue put", value, "items/s"))
            self.add(
                Figure(
                    "wakeful ingest vs persist-queue put", 1 / r, "x", goal=">= 1.0x", met=r <= 1.0
                )
            )


def run_engine(quick: bool, say: Callable[[str], None] = print) -> list[Figure]:
    b = Bench(quick, say)
    b.measure_floor()
    ingest = b.measure_ingest()
    b.measure_concurrent_ingest()
    cycle = b.measure_cycle()
    b.measure_history(cycle, ingest)
    cycle.close()
    b.measure_timers()
    b.measure_outbox()
    b.measure_peers(ingest)
    measure_pruning(b)
    ingest.close()
    return b.figures


if __name__ == "__main__":
    for f in run_engine(quick=True):
        print(json.dumps(f.__dict__))
