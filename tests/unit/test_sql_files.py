"""The SQL files: shared statements written once and run by both stores, per-dialect files only
for what differs, every name defined once, and the migrations alike in both dialects."""

import re
import sqlite3
from importlib import resources

import psycopg
import pytest

from wakeful.core.store import Store
from wakeful.core.store.sql import (
    DIALECTS,
    SHARED,
    batched,
    for_dialect,
    load_migrations,
    load_queries,
    load_statements,
    values_repeated,
)

FILES = [SHARED, *(f"{d}.sql" for d in DIALECTS)]
_HEADER = re.compile(r"^--\s*name:\s*([a-z_0-9]+)\s*$", re.MULTILINE)


def _names(filename: str) -> list[str]:
    """Every `-- name:` header of a file, repeats kept (the loader would refuse them)."""
    text = resources.files("wakeful.core.store").joinpath(filename).read_text("utf-8")
    return _HEADER.findall(text)


def test_no_statement_name_is_defined_twice_in_a_file_or_in_shared_and_a_dialect_file() -> None:
    for filename in FILES:
        names = _names(filename)
        twice = sorted({n for n in names if names.count(n) > 1})
        assert not twice, f"{filename} defines {twice} more than once"
    shared = set(_names(SHARED))
    for dialect in DIALECTS:
        also = sorted(shared & set(_names(f"{dialect}.sql")))
        assert not also, f"{dialect}.sql redefines {also}: shared.sql already has them"


def test_both_dialects_define_the_same_statements_and_most_are_shared() -> None:
    sqlite, postgres = set(_names("sqlite.sql")), set(_names("postgres.sql"))
    assert sqlite == postgres, f"only one dialect defines {sorted(sqlite ^ postgres)}"
    assert set(load_queries("sqlite")) == set(load_queries("postgres"))
    assert len(_names(SHARED)) > 4 * len(sqlite)


def test_a_name_in_shared_and_a_dialect_file_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wakeful.core.store import sql

    real = sql.load_statements
    shared_name = next(iter(real(SHARED)))

    def twice(filename: str) -> dict[str, sql.Statement]:
        found = real(filename)
        if filename == "sqlite.sql":
            found[shared_name] = sql.Statement(shared_name, "a copy", "SELECT 1")
        return found

    monkeypatch.setattr(sql, "load_statements", twice)
    with pytest.raises(ValueError) as refused:
        sql.load_dialect("sqlite")
    assert str(refused.value) == f"sqlite.sql: {shared_name} also defined in shared.sql"


def test_postgres_reads_a_shared_statement_with_psycopg_placeholders() -> None:
    shared = "SELECT ':x', a FROM t WHERE b LIKE 'p%' AND c = :c AND d = :d -- note: 5% :e"
    assert for_dialect(shared, "sqlite") == shared
    assert for_dialect(shared, "postgres") == (
        "SELECT ':x', a FROM t WHERE b LIKE 'p%%' AND c = %(c)s AND d = %(d)s -- note: 5%% :e"
    )
    with pytest.raises(ValueError) as refused:
        for_dialect(shared, "mysql")
    assert str(refused.value) == (
        "unknown SQL dialect 'mysql': expected one of ('sqlite', 'postgres')"
    )


def test_a_batch_statement_repeats_its_values_row_with_positional_placeholders() -> None:
    sql = "INSERT INTO t (a, b, c) VALUES (:a, :b, :b) RETURNING id"
    assert values_repeated(sql, 3) == (
        "INSERT INTO t (a, b, c) VALUES (?, ?, ?), (?, ?, ?), (?, ?, ?) RETURNING id",
        ("a", "b", "b"),
    )
    assert batched(sql, [{"a": 1, "b": 2}, {"a": 3, "b": 4}]) == (
        "INSERT INTO t (a, b, c) VALUES (?, ?, ?), (?, ?, ?) RETURNING id",
        [1, 2, 2, 3, 4, 4],
    )
    assert batched(sql, [{"a": 1, "b": 2}]) == (sql, {"a": 1, "b": 2})  # one row: as written
    assert values_repeated("INSERT INTO t VALUES (%(a)s, lower(%(b)s))", 2) == (
        "INSERT INTO t VALUES (%s, lower(%s)), (%s, lower(%s))",
        ("a", "b"),
    )
    with pytest.raises(ValueError) as refused:
        values_repeated("UPDATE t SET a = :a", 2)
    assert str(refused.value) == "a batch statement needs a VALUES (...) row: 'UPDATE t SET a = :a'"
    with pytest.raises(ValueError) as refused:
        values_repeated("INSERT INTO t VALUES (:a) ON CONFLICT DO UPDATE SET b = :b", 2)
    assert str(refused.value) == (
        "a batch statement takes parameters in its VALUES row only: "
        "'INSERT INTO t VALUES (:a) ON CONFLICT DO UPDATE SET b = :b'"
    )


_TRANSACTION_CONTROL = re.compile(r"(SAVEPOINT|ROLLBACK|RELEASE)\b")


def _parameters(sql: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", sql)))


def test_every_shared_statement_is_prepared_by_both_stores(store: Store) -> None:
    """Each shared statement compiled against the migrated schema of each store: SQLite's
    EXPLAIN (nothing runs), PostgreSQL's PREPARE (parsed, planned, types resolved); the
    savepoint statements, which PostgreSQL cannot prepare, run for real in a transaction."""
    shared = load_statements(SHARED)
    refused: dict[str, str] = {}
    if store.db.dialect == "sqlite":
        conn = sqlite3.connect(store.db.path)  # type: ignore[attr-defined]
        try:
            for name, s in shared.items():
                try:
                    conn.execute("EXPLAIN " + s.sql, dict.fromkeys(_parameters(s.sql)))
                except sqlite3.Error as exc:
                    refused[name] = str(exc)
        finally:
            conn.close()
    else:
        db = store.db
        options = f"-c search_path={db.schema}"  # type: ignore[attr-defined]
        with psycopg.connect(db.dsn, autocommit=True, options=options) as conn:  # type: ignore[attr-defined]
            savepoints = [n for n, s in shared.items() if _TRANSACTION_CONTROL.match(s.sql)]
            assert savepoints == ["savepoint", "rollback_to_savepoint", "release_savepoint"]
            with conn.transaction():
                for name in savepoints:
                    conn.execute(for_dialect(shared.pop(name).sql, "postgres"))
            for i, (name, s) in enumerate(shared.items()):
                numbered = {p: f"${n}" for n, p in enumerate(_parameters(s.sql), 1)}
                pg = for_dialect(s.sql, "postgres").replace("%%", "%")
                pg = re.sub(r"%\((\w+)\)s", lambda m, at=numbered: at[m[1]], pg)
                try:
                    conn.execute(f"PREPARE shared_{i} AS {pg}")
                    conn.execute(f"DEALLOCATE shared_{i}")
                except psycopg.Error as exc:
                    refused[name] = str(exc).splitlines()[0]
    assert not refused, f"{store.db.dialect} cannot prepare: {refused}"
    assert len(shared) > 100


def test_migrations_are_numbered_from_one_and_differ_only_in_the_row_id_and_its_sequence() -> None:
    sqlite, postgres = load_migrations("sqlite"), load_migrations("postgres")
    versions = [v for v, _, _ in sqlite]
    assert versions == list(range(1, len(versions) + 1))
    for (_, _, lite), (_, _, pg) in zip(sqlite, postgres, strict=True):
        assert "{{" not in lite + pg
        pg = re.sub(r"SELECT setval\(pg_get_serial_sequence\('\w+', 'id'\),.*?;", "", pg)
        assert lite.replace("INTEGER PRIMARY KEY", "ID") == pg.replace(
            "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "ID"
        )


def test_every_statement_the_engine_names_exists() -> None:
    from pathlib import Path

    import wakeful.core.store as package

    folder = Path(package.__file__).parent
    source = "\n".join(p.read_text() for p in folder.glob("*.py"))
    named = set(re.findall(r'(?:tx\.(?:run|one|all|many)\(|_QUERIES\[)\s*"([a-z_0-9]+)"', source))
    named |= set(re.findall(r'"(prune_[a-z]+)"', source))  # retention's table of statements
    assert len(named) > 40, sorted(named)
    assert "insert_events" in named
    for dialect in DIALECTS:
        assert named <= set(load_queries(dialect)), sorted(named - set(load_queries(dialect)))


def test_every_statement_is_run_by_some_code() -> None:
    """A statement no code names is dead, and its description can drift unseen (one said
    "post_once counts on it" after post_once was gone). Statements are run by name from the
    store's modules (and the dev tools' audit); a name is looked for there, quoted."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    runners = [*(root / "core" / "store").glob("*.py"), *(root / "devtools").rglob("*.py")]
    quoted = set(re.findall(r'"([a-z_0-9]+)"', "\n".join(p.read_text() for p in runners)))
    for dialect in DIALECTS:
        unused = sorted(set(load_queries(dialect)) - quoted)
        assert not unused, f"{dialect}: no code runs {unused}"


@pytest.mark.parametrize("filename", FILES)
def test_every_statement_says_what_it_is_for(filename: str) -> None:
    undescribed = [s.name for s in load_statements(filename).values() if len(s.description) < 10]
    assert not undescribed, f"{filename}: no description line above {undescribed}"
    assert all(
        not s.sql or "--" not in s.sql.splitlines()[0] for s in load_statements(filename).values()
    )


def test_one_statement_and_one_function_put_events_into_the_inbox() -> None:
    from pathlib import Path

    import wakeful.core as package

    for dialect in DIALECTS:
        writers = [
            name
            for name, sql in load_queries(dialect).items()
            if re.search(r"INSERT\s+INTO\s+events\b", sql, re.IGNORECASE)
        ]
        assert writers == ["insert_events"], f"{dialect}: {writers} insert events"
    folder = Path(package.__file__).parent
    callers = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*.py")
        if '"insert_events"' in p.read_text() or re.search(r"INSERT\s+INTO\s+events", p.read_text())
    )
    assert callers == ["store/base.py"], callers
