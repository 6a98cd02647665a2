"""PostgreSQL going away under a running process: connections terminated by the server are
replaced without a failed request once it answers again, a refused server is a quick
StoreUnavailable (the front answers 503 within Slack's three seconds), and LISTEN reconnects.
A process that starts while the server refuses waits for it (for a bounded time)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import PG_DSN, T0
from tests.support.gateway import new_token, write_config
from tests.support.tcp_proxy import TcpProxy
from wakeful.bot.process.config import Config
from wakeful.bot.process.runtime import open_configured_store
from wakeful.core.errors import StoreUnavailable
from wakeful.core.store import Store, open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.stores import fresh_postgres

pytestmark = pytest.mark.usefixtures("pg_required")


def terminate(application_name: str) -> int:
    """Have the server terminate every connection of one application; how many it ended."""
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return len(rows)


@pytest.fixture
def named() -> Iterator[tuple[Store, str]]:
    """A throwaway store whose connections carry an application name of their own."""
    seed = fresh_postgres(PG_DSN)
    schema = seed.db.schema  # type: ignore[attr-defined]
    name = f"wakeful-test-{uuid.uuid4().hex[:8]}"
    store = open_store(f"{PG_DSN}?application_name={name}", schema=schema, pool_size=4)
    yield store, name
    store.close()
    seed.close()


def test_connections_the_server_terminated_are_replaced_without_a_failed_request(
    named: tuple[Store, str],
) -> None:
    store, name = named
    for i in range(8):  # warm the pool up
        store.ingest("T1:U1", "slack", f"warm-{i}", {}, T0)
    for round_ in range(5):
        assert terminate(name) >= 1
        time.sleep(0.1)
        for i in range(6):  # every one of them succeeds, first try
            assert store.ingest("T1:U1", "slack", f"r{round_}-{i}", {}, T0).stored
    assert count_events(store) == 8 + 30


def test_a_server_that_refuses_connections_is_a_quick_store_unavailable_then_recovers(
    named: tuple[Store, str],
) -> None:
    seed, _ = named
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        host, port = proxy.address
        dsn = PG_DSN.replace("127.0.0.1:5432", f"{host}:{port}")
        store = open_store(dsn, schema=seed.db.schema, pool_size=2)  # type: ignore[attr-defined]
        try:
            assert store.ingest("T1:U2", "slack", "before", {}, T0).stored
            proxy.refuse()
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="PostgreSQL store unavailable"):
                store.ingest("T1:U2", "slack", "during", {}, T0)
            assert time.monotonic() - started < 3.0, "the front must answer inside Slack's 3 s"
            proxy.accept()
            deadline = time.monotonic() + 15
            while True:
                try:
                    assert store.ingest("T1:U2", "slack", "during", {}, T0).stored
                    break
                except StoreUnavailable:
                    assert time.monotonic() < deadline, "never recovered"
                    time.sleep(0.2)
        finally:
            store.close()


def test_listen_reconnects_after_the_server_ends_its_connection(
    named: tuple[Store, str],
) -> None:
    store, name = named
    woken = threading.Event()
    stop = store.listen(woken.set)
    assert stop is not None
    try:
        # The listener calls on_work once it is LISTENing (for events stored before): that
        # wake-up says it is connected, before and again after the outage.
        assert woken.wait(10), "the listener never connected"
        woken.clear()
        store.ingest("T1:U3", "slack", "first", {}, T0)
        assert woken.wait(5), "no wake-up before the outage"
        woken.clear()
        assert terminate(name) >= 1
        assert woken.wait(10), "the listener never reconnected"  # it pauses 1 s, then LISTENs
        woken.clear()
        store.ingest("T1:U3", "slack", "after", {}, T0)
        assert woken.wait(5), "LISTEN did not come back"
    finally:
        stop()


ROLES = {
    # role: (its command line's arguments, the line it prints once it runs)
    "scheduler": (["scheduler", "--poll", "0.2"], "scheduler running"),
    # The gateway too: restarted in an outage it exited at once (the chaos run saw it).
    "gateway": (["gateway"], "wakeful: gateway on http://"),
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_process_started_while_the_server_refuses_waits_for_it_and_migrates(
    tmp_path: Path, role: str
) -> None:
    args, running = ROLES[role]
    schema = f"wakeful_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")  # empty: the process must migrate it
    log = (tmp_path / "scheduler.log").open("w+")
    try:
        with TcpProxy(("127.0.0.1", 5432)) as proxy:
            host, port = proxy.address
            dsn = PG_DSN.replace("127.0.0.1:5432", f"{host}:{port}")
            proxy.refuse()  # the server is down when the process starts
            env = {
                **os.environ,
                "WAKEFUL_DB": f"{dsn}?options=-csearch_path%3D{schema}",
                # A patience of 10 s: the first try connects for 5 s, then the retry is logged.
                "WAKEFUL_STARTUP_WAIT": "10",
                "WAKEFUL_GATEWAY_CONFIG": str(write_config(tmp_path, "http://127.0.0.1:9")),
                "STRIPE_SECRET_KEY": "sk_test_startup",
                "WAKEFUL_GATEWAY_TOKEN": new_token(),  # a gateway on TCP needs one
            }
            proc = subprocess.Popen(
                [sys.executable, "-m", "wakeful.bot.commands.cli", *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parents[2],
            )
            try:
                # The server comes back only once a whole connection attempt has failed and
                # the start-up said it tries again.
                retrying = "store unavailable at start-up, retrying"
                deadline = time.monotonic() + 30
                while retrying not in Path(log.name).read_text():
                    assert proc.poll() is None, "exited while the server was down"
                    assert time.monotonic() < deadline, Path(log.name).read_text()
                    time.sleep(0.1)
                assert proc.poll() is None, "exited while the server was down"
                proxy.accept()
                deadline = time.monotonic() + 30
                while running not in Path(log.name).read_text():
                    assert proc.poll() is None, Path(log.name).read_text()
                    assert time.monotonic() < deadline, "never started once the server was back"
                    time.sleep(0.2)
            finally:
                proc.terminate()
                proc.wait(15)
        text = Path(log.name).read_text()
        assert "store unavailable at start-up, retrying" in text
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            applied = admin.execute(f"SELECT count(*) FROM {schema}.schema_migrations").fetchone()
        assert applied is not None and applied[0] >= 8
    finally:
        log.close()
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_start_up_gives_up_after_its_patience_with_the_error() -> None:
    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        host, port = proxy.address
        proxy.refuse()
        dsn = PG_DSN.replace("127.0.0.1:5432", f"{host}:{port}")
        config = Config.from_env({"WAKEFUL_DB": dsn, "WAKEFUL_STARTUP_WAIT": "3"})
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="cannot connect to PostgreSQL"):
            open_configured_store(config)
        took = time.monotonic() - started
    assert 3.0 <= took < 8.0, f"gave up after {took:.1f} s, patience 3 s"


def _peak_connections(config: Config, name: str) -> int:
    """The most connections of application `name` the server saw while eight threads wrote
    and read through the store `open_configured_store(config)` opened."""
    store = open_configured_store(config)
    stop = threading.Event()
    peak = 0

    def write(n: int) -> None:
        i = 0
        while not stop.is_set():
            store.ingest(f"T1:U{n}", "slack", f"e-{n}-{i}", {"text": "hi"}, T0)
            store.events(f"T1:U{n}")  # a transaction of its own, from the pool
            i += 1

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    try:
        for t in threads:
            t.start()
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                ).fetchone()
                peak = max(peak, int(row[0]) if row else 0)
                time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join()
    try:
        assert count_events(store) > 0
    finally:
        store.close()
    return peak


def test_wakeful_pg_pool_caps_the_connections_a_process_opens() -> None:
    """WAKEFUL_PG_POOL: what one process may take of the server's max_connections, however
    many of its threads write at once (the default pool, 8, is the control: it does open
    more)."""
    schema = f"wakeful_pool_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        peaks = {}
        for pool in ("2", ""):
            name = f"wakeful-pool-{uuid.uuid4().hex[:8]}"
            db = f"{PG_DSN}?options=-csearch_path%3D{schema}&application_name={name}"
            config = Config.from_env({"WAKEFUL_DB": db, "WAKEFUL_PG_POOL": pool})
            peaks[pool] = _peak_connections(config, name)
        print(f"peak connections: WAKEFUL_PG_POOL=2 {peaks['2']}, default {peaks['']}")
        assert peaks["2"] <= 2, peaks
        assert peaks[""] > 2, peaks  # eight threads do open more than two of their own
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
