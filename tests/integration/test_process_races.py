"""Races between real processes: a barrier for the lease, and several schedulers and several
dispatchers running at once on one store."""

from __future__ import annotations

import collections
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import T0, MakeStore
from wakeful.core.effects import Post, Timer
from wakeful.core.store import Store, open_store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.emulator import SlackEmulator

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 1000
RACERS = 4


def _where(store: Store) -> tuple[str, str | None]:
    if isinstance(store.db, SQLiteConnector):
        return store.db.path, None
    return store.db.dsn, store.db.schema  # type: ignore[attr-defined]


def _open(db: str, schema: str | None) -> Store:
    if db.startswith("postgresql://"):
        return open_store(db, schema=schema, pool_size=1)
    return open_store(db)


def _racer(db: str, schema: str | None, me: int, barrier: Any, out: Any) -> None:
    store = _open(db, schema)
    results = []
    for r in range(ROUNDS):
        barrier.wait()
        # Each round starts after the previous lease expired: everyone asks at the same instant.
        results.append(store.acquire("T1:race", f"P{me}", T0 + r * 1000))
    store.close()
    out.put((me, results))


def test_processes_racing_for_a_lease_get_one_holder_per_generation_every_round(
    make_store: MakeStore,
) -> None:
    store = make_store()
    db, schema = _where(store)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    out = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(db, schema, i, barrier, out)) for i in range(RACERS)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    winners_per_round = collections.Counter()
    for r in range(ROUNDS):
        gens = [results[i][r] for i in range(RACERS)]
        granted = [g for g in gens if g is not None]
        assert len(granted) == 1, f"round {r}: {gens}"
        assert granted[0] == r + 1, f"round {r}: generation {granted[0]}"
        winners_per_round[gens.index(granted[0])] += 1
    assert len(winners_per_round) >= 2, "the race never had more than one winner: no contention"
    print(f"lease race: {ROUNDS} rounds x {RACERS} processes, one holder per generation")


def _cli_env(db: str, schema: str | None, **extra: str) -> dict[str, str]:
    if schema:
        db = f"{db}?options=-csearch_path%3D{schema}"
    return {**os.environ, "PYTHONPATH": str(ROOT), "WAKEFUL_DB": db, **extra}


def _fleet(role: str, n: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    cmd = [
        sys.executable,
        "-m",
        "wakeful.bot.commands.cli",
        "--log-level",
        "WARNING",
        role,
        "--poll",
        "0.05",
    ]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(n)
    ]
    for p in procs:  # each says it is running once its loop has started (a loaded machine: late)
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert "running" in line, line + (p.stderr.read().decode() if p.stderr else "")
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        _, err = p.communicate(timeout=30)
        assert p.returncode == 0, err.decode()[-1000:]


def test_several_scheduler_processes_store_each_occurrence_once(make_store: MakeStore) -> None:
    store = make_store()
    now = int(time.time())
    inboxes = 100
    for u in range(inboxes):
        store.add_timer(f"T1:U{u}", Timer.every("tick", 1, now, {"u": u}, "catch_up"), now)
    procs = _fleet("scheduler", 3, _cli_env(*_where(store)))
    deadline = time.monotonic() + 60
    while min(len(store.events(f"T1:U{u}")) for u in range(inboxes)) < 3:
        assert time.monotonic() < deadline, "the schedulers stored too few occurrences"
        time.sleep(0.2)
    _stop(procs)
    end = int(time.time())
    keys = collections.Counter()
    for u in range(inboxes):
        events = store.events(f"T1:U{u}")
        keys.update(e.source_id for e in events)
        fired = sorted(e.payload["scheduled_for"] for e in events)
        # catch_up: every occurrence from `now` on, once, with no gap
        assert fired == list(range(now, now + len(fired))), f"U{u}: {fired}"
        assert len(fired) >= 3 and fired[-1] <= end
    assert max(keys.values()) == 1


def test_several_dispatcher_processes_never_post_a_row_twice(make_store: MakeStore) -> None:
    store = make_store(outbox_gap=0)
    now = int(time.time())
    for c in range(40):
        for i in range(5):
            store.post(f"T1:U{c}", [Post(f"C{c}", f"row {c}-{i}", priority="urgent")], now)
    with SlackEmulator(bot_token="xoxb-race") as emu:
        env = _cli_env(*_where(store), SLACK_BOT_TOKEN="xoxb-race", SLACK_API_URL=emu.api_url)
        procs = _fleet("dispatcher", 3, env)
        try:
            assert emu.wait_for(
                lambda e: sum(len(e.messages(f"C{c}")) for c in range(40)) >= 40, timeout=60
            )
            deadline = time.monotonic() + 60
            while store.outbox("pending") or store.outbox("sending"):
                assert time.monotonic() < deadline, "rows never drained"
                time.sleep(0.2)
        finally:
            _stop(procs)
        texts = collections.Counter()
        parts = collections.Counter()
        for c in range(40):
            for m in emu.messages(f"C{c}"):
                texts.update(m["text"].split("\n\n"))
                meta = m.get("metadata") or {}
                parts[json.dumps(meta.get("event_payload"), sort_keys=True)] += 1
        assert max(parts.values()) == 1, "a part was posted twice"
        assert texts == collections.Counter(f"row {c}-{i}" for c in range(40) for i in range(5))
        assert len(store.outbox("sent")) == 200
