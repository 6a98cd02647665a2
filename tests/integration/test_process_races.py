"""Races between real processes: a barrier for the lease, and several schedulers and several
dispatchers running at once on one store."""

from __future__ import annotations

import collections
import json
import multiprocessing as mp
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import T0, MakeStore
from tests.support import lease_racer
from tests.support.forked_cli import Forked, Forks
from wakeful.core.effects import Post, Timer
from wakeful.core.store import Store
from wakeful.core.store.sqlite import SQLiteConnector
from wakeful.devtools.emulator import SlackEmulator

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 1000
RACERS = 4


def _where(store: Store) -> tuple[str, str | None]:
    if isinstance(store.db, SQLiteConnector):
        return store.db.path, None
    return store.db.dsn, store.db.schema  # type: ignore[attr-defined]


def test_processes_racing_for_a_lease_get_one_holder_per_generation_every_round(
    make_store: MakeStore,
) -> None:
    """The racers are forked from a server that imported their module once
    (tests/support/lease_racer.py): processes of their own, each with its own connection,
    without a new interpreter each."""
    store = make_store()
    db, schema = _where(store)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.support.lease_racer"])
    barrier = ctx.Barrier(RACERS)
    out = ctx.Queue()
    args = [(db, schema, i, T0, ROUNDS, barrier, out) for i in range(RACERS)]
    procs = [ctx.Process(target=lease_racer.race, args=a) for a in args]
    try:
        for p in procs:
            p.start()
        results = dict(out.get(timeout=300) for _ in procs)
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
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


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    """The loops are forked from one process that imported wakeful once
    (tests/support/forked_cli.py): each is a process of its own with its own connections,
    signals and exit status, without a new interpreter each."""
    with Forks(tmp_path_factory.mktemp("forks"), {**os.environ, "PYTHONPATH": str(ROOT)}) as made:
        yield made


def _fleet(forks: Forks, role: str, n: int, env: dict[str, str]) -> list[Forked]:
    args = ["--log-level", "WARNING", role, "--poll", "0.05"]
    procs = [forks.popen(args, env=env, cwd=ROOT) for _ in range(n)]
    for p in procs:  # each says it is running once its loop has started (a loaded machine: late)
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert "running" in line, line + p.stderr_text()
    return procs


def _stop(procs: list[Forked]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        code = p.wait(timeout=30)
        assert code == 0, p.stderr_text()[-1000:]
        p.close_files()


def test_several_scheduler_processes_store_each_occurrence_once(
    make_store: MakeStore, forks: Forks
) -> None:
    store = make_store()
    now = int(time.time())
    inboxes = 100
    for u in range(inboxes):
        store.add_timer(f"T1:U{u}", Timer.every("tick", 1, now, {"u": u}, "catch_up"), now)
    procs = _fleet(forks, "scheduler", 3, _cli_env(*_where(store)))
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


def test_several_dispatcher_processes_never_post_a_row_twice(
    make_store: MakeStore, forks: Forks
) -> None:
    store = make_store(outbox_gap=0)
    now = int(time.time())
    for c in range(40):
        for i in range(5):
            store.post(f"T1:U{c}", [Post(f"C{c}", f"row {c}-{i}", priority="urgent")], now)
    with SlackEmulator(bot_token="xoxb-race") as emu:
        env = _cli_env(*_where(store), SLACK_BOT_TOKEN="xoxb-race", SLACK_API_URL=emu.api_url)
        procs = _fleet(forks, "dispatcher", 3, env)
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
