"""Both backends must define the same statements and the same migrations."""

from wakeful.core.store.sql import load_migrations, load_queries


def test_both_dialects_define_the_same_statement_names() -> None:
    sqlite, postgres = load_queries("sqlite.sql"), load_queries("postgres.sql")
    assert set(sqlite) == set(postgres)
    assert len(sqlite) > 40


def test_both_dialects_have_the_same_migration_versions() -> None:
    versions = [v for v, _, _ in load_migrations("sqlite")]
    assert versions == [v for v, _, _ in load_migrations("postgres")]
    assert versions == sorted(set(versions)) and versions[0] == 1


def test_every_statement_the_engine_names_exists() -> None:
    import re
    from pathlib import Path

    import wakeful.core.store.contract as contract

    source = Path(contract.__file__).read_text()
    named = set(re.findall(r'tx\.(?:run|one|all)\(\s*"([a-z_0-9]+)"', source))
    assert named, "no statements found"
    assert named <= set(load_queries("sqlite.sql"))
