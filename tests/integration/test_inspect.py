"""`wakeful inspect`, on both stores: what it shows, how it lines up, and what it refuses."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.approvals import ApprovalRequest
from tests.support.slack_app import pg_schema_url
from wakeful.bot.commands.cli import main
from wakeful.core.effects import Effects, Post, Timer
from wakeful.core.store import open_store
from wakeful.core.store.probe import latest_version


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "inspect.db")
    else:
        with pg_schema_url() as dsn:
            yield dsn


def seed(db: str) -> None:
    store = open_store(db)
    t = 1_700_000_000
    for i in range(3):
        store.ingest("T1:U1", "slack", f"Ev{i}", {"text": f"m{i}"}, t + i)
    store.ingest("T1:U2", "slack", "Ev9", {"text": "waiting"}, t)
    claim = store.acquire_and_claim("T1:U1", "worker-x", t + 10)
    assert claim is not None
    ask = ApprovalRequest(id="R1", tool="refund_order", args={}, requester="U1", deadline=t + 3600)
    effects = Effects(
        messages=[Post("D1", "a reply\nover two lines", priority="urgent")],
        approvals=[ask],
        failed={claim.events[0].id: "RuntimeError: the model is down"},
    )
    assert store.finish(claim, effects, t + 12, release=True)
    store.add_timer("T1:U1", Timer.once("digest", t + 600), t)
    store.close()


def run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, db: str, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("WAKEFUL_DB", db)
    code = main(["inspect", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def columns(block: str) -> list[list[int]]:
    """Where each cell of each table row starts, to check the rows line up."""
    rows = [line for line in block.splitlines() if line.startswith("  ")]
    return [
        [i for i in range(2, len(r)) if r[i] != " " and r[i - 1] == " " and r[i - 2] == " "]
        for r in rows
    ]


def test_the_overview_and_one_inbox_as_tables_and_as_json(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(db)
    code, out, _ = run(capsys, monkeypatch, db)
    assert code == 0
    assert "events: 2 pending" in out
    assert "0 running, 0 dead" in out
    assert "approvals open: 1" in out
    backlog = out.split("inboxes with backlog\n")[1].split("\n\n")[0]
    lines = backlog.splitlines()
    assert lines[0].split() == ["inbox", "pending", "running", "oldest"]
    assert [line.split()[:3] for line in lines[1:]] == [["T1:U1", "1", "0"], ["T1:U2", "1", "0"]]
    starts = columns(backlog)
    assert all(s[:3] == starts[0][:3] for s in starts)  # aligned
    assert "T1:U1/digest" in out and "R1" in out

    code, out, _ = run(capsys, monkeypatch, db, "T1:U1")
    assert code == 0
    assert "inbox T1:U1: 1 pending, 0 running, 0 dead; lease: gen 1, free" in out
    events = out.split("events (latest 3)\n")[1].split("\n\n")[0]
    assert "RuntimeError: the model is down" in events
    assert [line.split()[:2] for line in events.splitlines()[1:]] == [
        ["3", "done"],
        ["2", "done"],
        ["1", "pending"],
    ]
    assert "a reply over two lines" in out  # one line per row, whatever the text
    assert "worker-x" in out.split("runs (latest 1")[1]

    code, out, _ = run(capsys, monkeypatch, db, "--json", "--limit", "1")
    assert code == 0
    data = json.loads(out)
    assert data["totals"]["events"] == {"pending": 2, "running": 0, "dead": 0}
    assert len(data["backlog"]) == 1  # the limit holds
    assert data["open_approvals"][0]["id"] == "R1"
    code, out, _ = run(capsys, monkeypatch, db, "T1:U1", "--json")
    one = json.loads(out)
    assert [e["status"] for e in one["events"]] == ["done", "done", "pending"]
    assert one["runs"][0]["gen"] == 1 and one["lease"]["holder"] == "worker-x"


def test_the_overview_as_json_lists_a_dead_event_with_its_errors_first_line(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: `inspect --json` raised KeyError('payload') on any store with a dead event."""
    seed(db)
    store = open_store(db)
    t = 1_700_000_100
    store.ingest("T1:U3", "slack", "EvDead", {"text": "x"}, t)
    claim = store.acquire_and_claim("T1:U3", "worker-y", t)
    assert claim is not None
    effects = Effects(dead={claim.events[0].id: "KeyError: 'order'\nwhile reading the order"})
    effects.traceback = "Traceback (most recent call last):\nKeyError: 'order'"
    assert store.finish(claim, effects, t + 1, release=True)
    store.close()
    code, out, err = run(capsys, monkeypatch, db, "--json")
    assert code == 0, err
    (dead,) = json.loads(out)["dead_events"]
    assert dead == {
        "id": claim.events[0].id,
        "inbox": "T1:U3",
        "source": "slack",
        "source_id": "EvDead",
        "attempts": 1,
        "error": "KeyError: 'order'",
        "died_at": t + 1,
    }
    code, out, _ = run(capsys, monkeypatch, db)
    assert code == 0
    (line,) = [x for x in out.splitlines() if "slack:EvDead" in x]
    assert line.split()[:4] == [str(claim.events[0].id), "T1:U3", "slack:EvDead", "1"]
    assert line.endswith("KeyError: 'order'")  # the first line of its error, on one line


def test_an_unknown_inbox_and_a_bad_limit_are_said_plainly(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(db)
    code, _, err = run(capsys, monkeypatch, db, "T9:U9")
    assert code == 1
    assert "nothing stored for inbox 'T9:U9'" in err
    with pytest.raises(SystemExit):
        run(capsys, monkeypatch, db, "--limit", "0")
    assert "--limit must be between 1 and 1000, got 0" in capsys.readouterr().err


def test_inspect_creates_no_store_and_migrates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "none.db"
    code, _, err = run(capsys, monkeypatch, str(missing))
    assert code == 2
    assert err.strip() == f"wakeful: no store at {missing} (`wakeful serve` creates a new one)"
    assert not missing.exists() and not Path(f"{missing}-lock").exists()
    behind = tmp_path / "behind.db"
    seed(str(behind))
    latest = latest_version("sqlite")
    conn = sqlite3.connect(behind)
    conn.execute(
        "DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)"
    )
    conn.commit()
    conn.close()
    code, _, err = run(capsys, monkeypatch, str(behind))
    assert code == 2
    assert "1 migration(s) pending" in err
    conn = sqlite3.connect(behind)
    assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == latest - 1
    conn.close()
