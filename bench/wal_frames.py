"""`python -m bench.wal_frames`: what an ingest's indexes cost in WAL writes, by measurement.

Goal 5 asked whether a narrower claim index would lift the single-caller ingest: each variant
of the events table takes single-row durable commits in alternating rounds, with the
checkpoint off so the -wal file's growth counts the frames each commit writes."""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

TABLE = (
    "CREATE TABLE e (id INTEGER PRIMARY KEY, inbox TEXT, source TEXT, source_id TEXT, "
    "payload TEXT, status TEXT DEFAULT 'pending', created_at INT, updated_at INT, "
    "UNIQUE (source, source_id))"
)
VARIANTS = {
    "dedupe key only (the floor's shape)": None,
    "claim index (status, inbox, id)": "CREATE INDEX s ON e (status, inbox, id)",
    "claim index on open rows only": (
        "CREATE INDEX s ON e (inbox, id) WHERE status IN ('pending', 'running')"
    ),
}
FRAME = 4096 + 24  # page size + WAL frame header


def one_round(folder: Path, index: str | None, n: int) -> tuple[float, float]:
    """(commits per second, WAL frames per commit) for n single-row commits."""
    path = folder / f"v{time.monotonic_ns()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute(TABLE)
    if index:
        conn.execute(index)
    wal = Path(f"{path}-wal")
    before = wal.stat().st_size
    started = time.perf_counter()
    for i in range(n):
        conn.execute(
            "INSERT INTO e (inbox, source, source_id, payload, created_at, updated_at) "
            "VALUES (?, 'slack', ?, '{\"text\":\"hello\"}', 1, 1)",
            (f"T1:U{i % 50}", f"Ev{i}"),
        )
    took = time.perf_counter() - started
    frames = (wal.stat().st_size - before) / FRAME / n
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return n / took, frames


def main(argv: list[str]) -> int:
    n, rounds = (500, 2) if "--quick" in argv else (3000, 5)
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    frames: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-wal-") as tmp:
        for _ in range(rounds):
            for name, index in VARIANTS.items():
                rate, frames[name] = one_round(Path(tmp), index, n)
                rates[name].append(rate)
    floor = statistics.median(rates["dedupe key only (the floor's shape)"])
    for name in VARIANTS:
        rate = statistics.median(rates[name])
        print(f"{name}: {rate:,.0f} commits/s ({rate / floor:.2f}x), {frames[name]:.2f} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
