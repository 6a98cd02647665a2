"""Shared fixtures: every store test runs against each backend that can be reached."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from tests.support.store_templates import PgSchemas, SqliteTemplate
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.core.kinds import Kinds
from wakeful.core.settings import Settings
from wakeful.core.store import Store

# The suite starts hundreds of Python processes (serve, loops, gateways, each killed and
# restarted): compiling wakeful's modules anew costs each about 0.3 s of CPU, and each test
# worker rewrites every test module. Bytecode is kept for this run and its children even where
# the environment says otherwise (PYTHONDONTWRITEBYTECODE=1).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

T0 = 1_700_000_000
PG_DSN = os.environ.get("WAKEFUL_TEST_PG_DSN", "")
BACKENDS = ["sqlite", "postgres"]

MakeStore = Callable[..., Store]


def need_pg(what: str = "PostgreSQL store tests") -> str:
    """The PostgreSQL DSN of the tests. The only skip: no server named, on a developer's
    machine. Where WAKEFUL_TEST_REQUIRE_PG is set (`.ci/run` sets it), a missing DSN fails the
    test instead, so a CI run can never pass with the PostgreSQL half skipped; with a DSN set,
    a missing driver or an unreachable server is a failure too."""
    if not PG_DSN:
        message = f"WAKEFUL_TEST_PG_DSN is not set: {what} skipped"
        if os.environ.get("WAKEFUL_TEST_REQUIRE_PG"):
            pytest.fail(message + ", but WAKEFUL_TEST_REQUIRE_PG asks for them")
        pytest.skip(message)
    return PG_DSN


@pytest.fixture
def pg_required() -> str:
    """For a module whose every test needs PostgreSQL: `need_pg` as a fixture."""
    return need_pg()


PG_SCHEMAS = PgSchemas(PG_DSN)
"""Migrated schemas, emptied and reused from test to test (tests/support/store_templates.py)."""


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """One migrated SQLite file per session; each new store is a copy of it."""
    return SqliteTemplate(tmp_path_factory.mktemp("template"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    PG_SCHEMAS.drop_all()


CATALOG_SLACK = 1000
"""Dead rows a system catalog may hold before the run vacuums it (see pytest_sessionstart)."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Vacuum the catalogs the suite churns. Every run creates and drops thousands of tables
    (schemas per test, migrations); where the server runs without autovacuum, as the test
    machine's does, their dead rows pile up from run to run (pg_attribute had grown to
    134 MB, 830,000 dead rows) and every catalog read, every new connection and every
    migration slows with them. Once per run, before the test processes start; a role that may
    not vacuum the catalogs just gets PostgreSQL's warning."""
    if not PG_DSN or hasattr(session.config, "workerinput"):
        return
    import psycopg

    with suppress(psycopg.Error), psycopg.connect(PG_DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, pg_relation_size(relid) > 8 * 1024 * 1024 FROM pg_stat_sys_tables"
            " WHERE schemaname = 'pg_catalog' AND n_dead_tup > %s",
            (CATALOG_SLACK,),
        ).fetchall()
        for table, bloated in rows:  # FULL rewrites a grown one; plain makes room for reuse
            conn.execute(f"VACUUM {'FULL ' if bloated else ''}pg_catalog.{table}")


WORKERS_PER_CORE = 3.5
"""Much of the suite's time is waiting (on subprocesses, pacing gaps, leases to lapse), not
computing: three and a half test processes per core keep the cores busy (`-n auto` in
pyproject.toml). On 2 cores, 2026-12-05: seven took 208 s with the machine 95% busy, six 234-238
s (83%), eight 288 s before the commands were forked from a zygote."""
MAX_WORKERS = 8
"""Each worker holds a few PostgreSQL connections; the local server allows 100."""
LONG_FIRST = (
    "tests/acceptance/test_claude_slack.py",
    "tests/acceptance/test_refund_no_silence.py",
    "tests/chaos/test_crash_chaos.py",
    "tests/acceptance/slack_app/test_slack_app_work.py",
    "tests/acceptance/slack_app/test_slack_app_ingest.py",
    "tests/acceptance/test_operator_reads.py",
    "tests/acceptance/test_refund_no_silence.py::TestStripe503For30sSqlite",
    "tests/acceptance/test_refund_no_silence.py::TestStripe429For30sPostgres",
    "tests/acceptance/test_refund_gateway.py",
    "tests/acceptance/test_claude_streams.py",
    "tests/acceptance/test_claude_streams.py::TestSigkillSqlite",
    "tests/acceptance/hostile/test_hostile_fuzz.py",
    "tests/acceptance/test_claude_streams.py::TestSigkillSqliteAtTheEnds",
    "tests/acceptance/test_claude_streams.py::TestSigkillPostgres",
    "tests/acceptance/test_slack_surfaces.py",
    "tests/integration/claude/test_claude_failures.py",
    "tests/integration/claude/test_claude_asks.py",
    "tests/integration/claude/test_claude_turns.py",
    "tests/integration/test_process_races.py",
    "tests/integration/test_worker.py",
    "tests/integration/test_dispatch_races.py",
    "tests/chaos/test_pg_outage.py",
    "tests/acceptance/test_crash_takeover.py",
    "tests/acceptance/test_dispatch_fairness.py",
    "tests/acceptance/test_dev.py",
    "tests/integration/test_gateway.py",
    "tests/acceptance/test_operations.py",
    "tests/acceptance/test_distribution.py",
    "tests/acceptance/test_store_setting.py",
    "tests/acceptance/test_demo.py",
    "tests/acceptance/test_tracing_demo.py",
    "tests/integration/test_webhooks.py",
    "tests/integration/test_forget_cli.py",
    "tests/integration/test_pg_reconnect.py",
    "tests/acceptance/test_webhooks_app.py",
    "tests/acceptance/test_forget_slack.py",
    "tests/unit/test_docs_samples.py",
    "tests/acceptance/test_refused_posts.py",
    "tests/unit/test_slack_text.py",
    "tests/integration/test_startup_messages.py",
    "tests/integration/test_stripe_refund_failures.py",
    "tests/integration/refund_desk/test_refund_desk_digests.py",
    "tests/integration/refund_desk/test_refund_desk_replies.py",
    "tests/integration/refund_desk/test_refund_desk_tools.py",
    "tests/acceptance/test_isolation_app.py",
    "tests/integration/test_clock_skew.py",
    "tests/acceptance/test_dev_client.py",
    "tests/acceptance/test_hostile_webhooks.py",
    "tests/integration/test_migrations.py",
    "tests/integration/test_outbox_posts.py",
    "tests/integration/test_outbox.py",
    "tests/integration/test_process_liveness.py",
    "tests/integration/test_approvals.py",
    "tests/acceptance/test_backup_restore.py",
    "tests/integration/test_concurrency.py",
)
"""The scopes (modules, or a module's class) that take 15 s or more, handed out first: each goes
to one test process whole (`--dist loadscope`), so a long one handed out last would end the
run with the other processes idle. Longest first, alternating those that compute (a Claude
run's model calls, crash chaos, the operator's commands) with those that mostly wait on
leases, pacing gaps and a 30 s outage, so the waits overlap computing instead of leaving the
cores idle at the start (measured this session: cpu/wall per scope). `--no-loadscope-reorder`
keeps the order."""


def scope_of(nodeid: str) -> str:
    """The unit `--dist loadscope` hands out: `module::Class` for a class's tests, else the
    module."""
    parts = nodeid.split("::")
    return "::".join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`; 0 (one process) for `-m chaos` or `-m soak`: the long runs' figures were
    measured one at a time, each with the machine to itself."""
    expr = str(config.option.markexpr or "")
    if "not chaos" not in expr and ("chaos" in expr or "soak" in expr):
        return 0
    return max(2, min(MAX_WORKERS, round(WORKERS_PER_CORE * (os.cpu_count() or 1))))


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {scope: n for n, scope in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(scope_of(item.nodeid), len(LONG_FIRST)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting built (2,700 items, every module imported, the Claude SDK's 1,500
    models) lives to the end of the run: frozen, the collector's full passes skip it instead
    of walking it again for every test that allocates."""
    gc.freeze()


@pytest.fixture(params=BACKENDS)
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: SqliteTemplate
) -> Iterator[MakeStore]:
    """A factory of fresh, empty, migrated stores of one backend; all are closed after the
    test. Each is as a first `open_store` leaves it, without migrating each one, and takes
    Slack's outbox kinds, as every wakeful process's store does (`kinds=` says otherwise)."""
    made: list[Store] = []
    counter = iter(range(1000))

    def make(*, kinds: Kinds = SLACK_KINDS, **overrides: int) -> Store:
        settings = Settings(**overrides)
        if request.param == "sqlite":
            path = tmp_path / f"store-{next(counter)}.db"
            store: Store = sqlite_template.store(path, settings, kinds)
        else:
            need_pg()
            store = PG_SCHEMAS.store(settings, kinds=kinds)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> Store:
    return make_store()
