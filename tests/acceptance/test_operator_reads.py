"""Every read command an operator has, run as the installed `wakeful` CLI against a store that
holds every kind of row (tests/support/full_store.py), on SQLite and PostgreSQL: `inspect`
(the overview and one inbox, tables and JSON), `dead-letters` (listing, filters, discarded,
dry runs), `doctor` (single workspace and distribution mode) and `GET /metrics`. Each exits as
docs/operating.md says, prints no traceback and no secret, and shows what an operator needs:
the dead events with their errors and tracebacks, the parked and the paused posts, the
approved calls waiting, given up and failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import full_store
from tests.support.forked_cli import Forks
from tests.support.full_store import Filled
from tests.support.slack_app import LISTENING, SECRET, Proc, child_env, pg_schema_url
from wakeful.core.store.sql import load_migrations
from wakeful.devtools.emulator import SlackEmulator

WAKEFUL = str(Path(sys.executable).parent / "wakeful")
"""The console script pip installed, as an operator runs it."""


class Full(NamedTuple):
    db: str
    filled: Filled
    here: Path
    """The store's folder: the commands' working directory."""
    forks: Forks


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    """Most commands are forked from one process that imported wakeful once (a new
    interpreter per command was most of this module's CPU); each command is still a process
    of its own. A few run as the installed script (`real=True`) for its start."""
    with Forks(tmp_path_factory.mktemp("forks"), child_env()) as made:
        yield made


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def full(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, forks: Forks
) -> Iterator[Full]:
    """A store filled with every kind of row (read only by the tests), its folder."""
    here = tmp_path_factory.mktemp(f"reads-{request.param}")
    with ExitStack() as stack:
        if request.param == "sqlite":
            db = str(here / "wakeful.db")
        else:
            db = stack.enter_context(pg_schema_url())
        yield Full(db, full_store.fill(db, int(time.time())), here, forks)


def wakeful(
    full: Full, *args: str, real: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """One command as an operator types it: no traceback of its own, no secret anywhere.
    Forked (tests/support/forked_cli.py) unless `real`: the installed console script."""
    if real:
        done = subprocess.run(
            [WAKEFUL, *args],
            cwd=full.here,
            env=child_env(WAKEFUL_DB=full.db, **env),
            capture_output=True,
            text=True,
            timeout=60,
        )
    else:
        done = full.forks.run(args, env=child_env(WAKEFUL_DB=full.db, **env), cwd=full.here)
    both = done.stdout + done.stderr
    # A crash is logged on stderr; the tracebacks on stdout are the stored ones, shown.
    assert "Traceback" not in done.stderr and "uncaught" not in both, f"{args}:\n{both}"
    assert "bot/commands/cli.py" not in both, f"{args}:\n{both}"
    assert full_store.SECRET_IN_PAYLOAD not in both
    assert "fixture-token" not in both  # the installations' tokens, sealed at rest
    return done


def section(out: str, title: str) -> list[list[str]]:
    """The rows (cells split on runs of 2+ spaces) of the table under `title`."""
    block = out.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0]
    return [[c for c in line.strip().split("  ") if c.strip()] for line in block.splitlines()]


def cells(row: list[str]) -> list[str]:
    return [c.strip() for c in row]


# -- inspect ---------------------------------------------------------------------------------


def test_the_overview_shows_where_work_waits_and_what_failed(
    full: Full,
) -> None:
    filled = full.filled
    done = wakeful(full, "inspect", real=True)
    assert done.returncode == 0 and done.stderr == ""
    out = done.stdout
    assert "events: 5 pending" in out and "1 running, 3 dead" in out
    assert "outbox: 1 held, 1 sending, 1 parked" in out
    assert "approvals open: 1; approved calls waiting: 1, given up: 1, failed: 1" in out
    assert "timers due now: 1" in out
    dead = {
        cells(r)[0]: cells(r)
        for r in section(out, "latest dead events (wakeful dead-letters --id ID)")[1:]
    }
    assert set(dead) == {str(filled.exhausted), str(filled.dead_at_once), str(filled.poisoned)}
    assert dead[str(filled.dead_at_once)][1:4] == [full_store.DEAD, "slack:EvDEAD0002", "1"]
    assert dead[str(filled.dead_at_once)][-1] == "ValueError: order 'twelve' is not a number"
    assert dead[str(filled.exhausted)][3] == "3"
    parked = [cells(r) for r in section(out, "parked outbox rows (wakeful requeue outbox ID)")[1:]]
    assert parked == [
        [str(filled.parked), full_store.POST, "D0GONE", "1", parked[0][4], "channel_not_found"]
    ]
    held = {cells(r)[0]: cells(r) for r in section(out, "held outbox (by conversation)")[1:]}
    assert held["D0PAUSE"][2:5] == [full_store.PAUSED, "0", "1"]
    assert held["D0PAUSE"][6].startswith("in ") and held["D0PAUSE"][7] == full_store.PAUSE_ERROR
    assert held["D0POST"][3:5] == ["1", "0"]  # held by the gap
    waiting = [
        cells(r) for r in section(out, "approved calls waiting (retried under the same key)")
    ]
    assert waiting[0] == ["id", "inbox", "tool", "failing since", "tries", "next try", "reason"]
    (call,) = waiting[1:]
    assert call[:3] == [filled.approvals["waiting"], full_store.WAIT, "refund_order"]
    assert call[3].endswith(" ago") and call[4] == "4" and call[5].startswith("in ")
    assert call[6] == full_store.WAITING_REASON
    ended = {
        cells(r)[0]: cells(r)
        for r in section(out, "approved calls given up or failed (latest)")[1:]
    }
    assert ended[filled.approvals["given_up"]][3:] == [
        "given up",
        ended[filled.approvals["given_up"]][4],
        "31",
        full_store.GIVEN_UP_REASON,
    ]
    assert ended[filled.approvals["failed"]][3] == "failed"
    assert ended[filled.approvals["failed"]][-1] == full_store.FAILED_REASON
    opened = [cells(r)[0] for r in section(out, "open approvals")[1:]]
    assert opened == [filled.approvals["open"]]
    kinds = {cells(r)[0]: cells(r)[2] for r in section(out, "next timers")[1:]}
    assert {kinds[f"{full_store.BUSY}/{n}"] for n in ("remind", "digest", "standup")} == {
        "once",
        "every",
        "daily",
    }


def test_the_overview_as_json_lists_each_dead_event_and_each_approved_call(
    full: Full,
) -> None:
    """The KeyError of issue 33: `inspect --json` on a store holding a dead event."""
    db, filled = full.db, full.filled
    done = wakeful(full, "inspect", "--json")
    assert done.returncode == 0 and done.stderr == ""
    data = json.loads(done.stdout)
    assert data["totals"]["events"] == {"pending": 5, "running": 1, "dead": 3}
    assert data["totals"]["outbox"] == {"held": 1, "sending": 1, "parked": 1}
    dead = {e["id"]: e for e in data["dead_events"]}
    assert set(dead) == {filled.exhausted, filled.dead_at_once, filled.poisoned}
    assert {k: dead[filled.dead_at_once][k] for k in ("inbox", "source", "source_id")} == {
        "inbox": full_store.DEAD,
        "source": "slack",
        "source_id": "EvDEAD0002",
    }
    assert dead[filled.dead_at_once]["error"] == "ValueError: order 'twelve' is not a number"
    assert dead[filled.exhausted]["error"].startswith("too many attempts; last error: Timeout")
    assert dead[filled.exhausted]["attempts"] == 3
    assert dead[filled.poisoned]["error"] == full_store.SET_ASIDE_REASON
    assert {(r["inbox"], r["n"]) for r in data["dead"]} == {
        (full_store.DEAD, 2),
        (full_store.ASIDE, 1),
    }
    assert data["approved_calls"] == {"waiting": 1, "failed": 1, "given_up": 1}
    (waiting,) = data["approved_calls_waiting"]
    assert waiting["id"] == filled.approvals["waiting"]
    assert waiting["tool_tries"] == 4 and waiting["tool_error"] == full_store.WAITING_REASON
    assert waiting["tool_first_failed_at"] < filled.now < waiting["tool_retry_at"]
    ended = {r["id"]: r for r in data["approved_calls_failed"]}
    assert ended[filled.approvals["given_up"]]["tool_state"] == "given_up"
    assert ended[filled.approvals["failed"]]["tool_error"] == full_store.FAILED_REASON
    paused = [r for r in data["held_outbox"] if r["channel"] == "D0PAUSE"]
    assert paused[0]["error"] == full_store.PAUSE_ERROR and paused[0]["retry_at"] > filled.now
    assert [r["id"] for r in data["parked_outbox"]] == [filled.parked]
    assert data["store"]["schema"] == max(v for v, _, _ in load_migrations("sqlite"))
    assert data["store"]["backend"] == ("sqlite" if "://" not in db else "postgres")


def test_an_inbox_with_dead_events_shows_their_attempts_and_tracebacks(
    full: Full,
) -> None:
    filled = full.filled
    done = wakeful(full, "inspect", full_store.DEAD)
    assert done.returncode == 0 and done.stderr == ""
    out = done.stdout
    assert f"inbox {full_store.DEAD}: 1 pending, 0 running, 2 dead; lease: gen 6, free" in out
    exhausted = out.split(f"\ndead event {filled.exhausted}\n")[1]
    assert "[redacted]" in exhausted.splitlines()[0]  # the payload, its token masked
    attempts = [line.split() for line in exhausted.splitlines() if line.startswith("  attempt ")]
    assert [a[:3] for a in attempts] == [["attempt", str(n), "failed"] for n in (1, 2, 3)]
    assert all(" ".join(a).endswith(full_store.TIMEOUT_ERROR) for a in attempts)
    assert "TimeoutError: stripe did not answer in 10s" in exhausted.split("last traceback")[1]
    at_once = out.split(f"\ndead event {filled.dead_at_once}\n")[1].split("\n\n")[0]
    assert "ValueError: order 'twelve' is not a number; the agent read" in at_once  # one line
    assert "raise exc" in at_once  # the traceback's frames
    retried = out.split(f"traceback of event {filled.retried}, attempt 1:\n")[1]
    assert "ConnectionError: the model is down" in retried.split("\n\n")[0]

    done = wakeful(full, "inspect", full_store.DEAD, "--json")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert data["counts"] == {"pending": 1, "running": 0, "dead": 2}
    dead = {d["id"]: d for d in data["dead"]}
    assert set(dead) == {filled.exhausted, filled.dead_at_once}
    assert "[redacted]" in dead[filled.exhausted]["payload"]["text"]
    assert [a["attempt"] for a in dead[filled.exhausted]["attempts"]] == [1, 2, 3]
    assert all("TimeoutError" in a["traceback"] for a in dead[filled.exhausted]["attempts"])
    events = {e["id"]: e for e in data["events"]}
    assert "ConnectionError: the model is down" in events[filled.retried]["traceback"]


def test_an_inbox_with_approved_calls_shows_each_ones_state(
    full: Full,
) -> None:
    filled = full.filled
    ids = filled.approvals
    done = wakeful(full, "inspect", full_store.WAIT)
    assert done.returncode == 0 and done.stderr == ""
    out = done.stdout
    table = {cells(r)[0]: cells(r) for r in section(out, "approvals (latest)")[1:]}
    assert {name: table[ids[name]][-1] for name in ids} == {
        "expired": "-",
        "open": "-",
        "no": "-",
        "done": "done",
        "waiting": "waiting",
        "given_up": "given up",
        "failed": "failed",
    }
    assert table[ids["open"]][-2] == "open"
    assert table[ids["expired"]][-2].startswith("expired")
    assert table[ids["no"]][-2].startswith("no by U0WAIT")
    lines = {
        line.split(":", 1)[0].split()[-1]: line.split(":", 1)[1]
        for line in out.split("\napproved calls not done\n")[1].splitlines()
    }
    assert set(lines) == {ids["waiting"], ids["given_up"], ids["failed"]}
    waiting = lines[ids["waiting"]]
    assert " waiting: failing since " in waiting and ", 4 tries, next try in " in waiting
    assert waiting.endswith(f": {full_store.WAITING_REASON}")
    assert "given up after 31 tries" in lines[ids["given_up"]]
    assert lines[ids["failed"]].endswith(f"failed for good: {full_store.FAILED_REASON}")

    # The waiting call's answer waits with it: pending until the next try, no attempt spent.
    assert f"inbox {full_store.WAIT}: 1 pending, 0 running, 0 dead;" in out
    events = {cells(r)[5]: cells(r) for r in section(out, "events (latest 8)")[1:]}
    assert events[ids["waiting"]][1:3] == ["pending", "0"]
    assert events[ids["waiting"]][-1] == full_store.WAITING_REASON

    done = wakeful(full, "inspect", full_store.WAIT, "--json")
    data = json.loads(done.stdout)
    calls = {a["id"]: a for a in data["approvals"]}
    assert calls[ids["waiting"]]["tool_state"] == "waiting"
    assert calls[ids["waiting"]]["tool_retry_at"] > filled.now
    assert calls[ids["given_up"]]["tool_error"] == full_store.GIVEN_UP_REASON
    assert calls[ids["open"]]["tool_state"] is None


@pytest.mark.parametrize(
    ("inbox", "counts", "says"),
    [
        (full_store.BUSY, (2, 1, 0), ("held by worker-0f1e2d3c until in ", "2 (1 replayed)")),
        (full_store.POST, (0, 0, 0), ("free (last held by worker-0f1e2d3c)",)),
        (full_store.PAUSED, (0, 0, 0), (full_store.PAUSE_ERROR,)),
        (full_store.ASIDE, (0, 0, 1), (full_store.SET_ASIDE_REASON,)),
        (full_store.GONE, (1, 0, 0), ("set aside (workspace T3's installation ended",)),
    ],
)
def test_every_other_inbox_reads_as_text_and_json(
    full: Full, inbox: str, counts: tuple[int, int, int], says: tuple[str, ...]
) -> None:
    done = wakeful(full, "inspect", inbox)
    assert done.returncode == 0 and done.stderr == ""
    pending, running, dead = counts
    assert f"inbox {inbox}: {pending} pending, {running} running, {dead} dead;" in done.stdout
    assert all(said in done.stdout for said in says), done.stdout
    data = json.loads(wakeful(full, "inspect", inbox, "--json").stdout)
    assert data["counts"] == {"pending": pending, "running": running, "dead": dead}


def test_the_post_inbox_shows_its_parked_and_held_rows(full: Full) -> None:
    filled = full.filled
    out = wakeful(full, "inspect", full_store.POST).stdout
    rows = {cells(r)[0]: cells(r) for r in section(out, "outbox (latest 3)")[1:]}
    assert rows[str(filled.parked)][2] == "parked"
    assert rows[str(filled.parked)][-1] == full_store.PARK_ERROR
    assert rows[str(filled.held)][2] == "held"


# -- dead-letters ----------------------------------------------------------------------------


def test_dead_letters_lists_filters_and_dry_runs_without_changing_anything(
    full: Full,
) -> None:
    filled = full.filled
    done = wakeful(full, "dead-letters", real=True)
    assert done.returncode == 0 and done.stderr == ""
    out = done.stdout
    assert out.startswith("dead events: 3\n")
    heads = [line for line in out.splitlines() if line.startswith("  event ")]
    assert [h.split()[1] for h in heads] == [
        str(i) for i in sorted((filled.exhausted, filled.dead_at_once, filled.poisoned))
    ]
    assert all(len(h.split("error: ", 1)[1]) > 0 for h in heads)
    assert "ValueError: order 'twelve' is not a number; the agent read" in out  # one line
    assert "last traceback (its last" in out
    assert (
        f"  outbox {filled.parked}  channel D0GONE  attempts 1  error: {full_store.PARK_ERROR}"
        in out
    )
    assert f"sessions set aside: 1\n  session 1  inbox {full_store.ASIDE}  at " in out
    assert "  #1  discard  1 event(s)  by fixture" in out

    one = wakeful(full, "dead-letters", "--id", str(filled.dead_at_once)).stdout
    assert one.startswith("dead events: 1 (filtered)\n")
    assert f"  event {filled.dead_at_once}  inbox {full_store.DEAD}  slack:EvDEAD0002" in one
    by_inbox = wakeful(full, "dead-letters", "list", "--inbox", full_store.ASIDE).stdout
    assert by_inbox.startswith("dead events: 1 (filtered)\n")
    by_error = wakeful(full, "dead-letters", "--error", "stripe").stdout
    assert by_error.startswith("dead events: 1 (filtered)\n")
    discarded = wakeful(full, "dead-letters", "--discarded").stdout
    assert discarded.startswith("discarded events: 1\n")
    assert f"  event {filled.discarded}  inbox {full_store.DEAD}" in discarded

    for action in ("requeue", "discard"):
        dry = wakeful(full, "dead-letters", action, "--inbox", full_store.DEAD, "--dry-run")
        assert dry.returncode == 0
        assert dry.stdout.startswith(f"would {action} 2 dead event(s) (dry run: nothing changed)")
        assert len(dry.stdout.splitlines()) == 3  # one line per event, whatever its error
    assert wakeful(full, "dead-letters").stdout.startswith("dead events: 3\n")  # unchanged
    nothing = wakeful(full, "dead-letters", "--inbox", "T9:U9")
    assert nothing.returncode == 0 and nothing.stdout.startswith("dead events: 0 (filtered)")


# -- doctor ----------------------------------------------------------------------------------


def doctor_lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """`doctor`'s checks by name (mark first); its exit status agrees with its last line."""
    lines = done.stdout.splitlines()
    checks = {line[5:21].strip(): line[:5].strip() for line in lines[:-1]}
    assert all(mark in ("ok", "FAIL", "skip") for mark in checks.values()), done.stdout
    failed = sum(mark == "FAIL" for mark in checks.values())
    assert lines[-1] == (f"{failed} check(s) failed" if failed else "all checks passed"), lines
    assert done.returncode == (1 if failed else 0)
    return checks


def test_doctor_checks_the_store_and_says_what_failed(full: Full) -> None:
    db = full.db
    with SlackEmulator(bot_token="xoxb-doctor") as emu:
        single = wakeful(
            full,
            "doctor",
            "--integrity",
            real=True,
            SLACK_BOT_TOKEN=emu.bot_token,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=emu.api_url,
        )
        checks = doctor_lines(single)
        assert {checks[k] for k in ("settings", "store", "migrations", "durability")} == {"ok"}
        assert checks["slack token"] == "ok" and checks["agent"] == "ok"
        assert checks["integrity"] == ("ok" if "://" not in db else "skip")
        distribution = wakeful(
            full,
            "doctor",
            SLACK_CLIENT_ID=emu.client_id,
            SLACK_CLIENT_SECRET=emu.client_secret,
            WAKEFUL_TOKEN_KEY=full_store.TOKEN_KEY,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=emu.api_url,
        )
    checks = doctor_lines(distribution)
    assert distribution.returncode == 1  # the emulator knows none of the fixture's tokens
    assert "ok   installations   2 active of 3 (distribution mode)" in distribution.stdout
    for team in ("T1", "T2"):  # opened with the key, then refused by Slack: said, per workspace
        assert checks[f"workspace {team}"] == "FAIL"
        assert f"workspace {team}    token rejected by Slack (invalid_auth)" in distribution.stdout


# -- /metrics --------------------------------------------------------------------------------


def test_a_metrics_scrape_counts_every_kind_of_row(full: Full) -> None:
    db, here = full.db, full.here
    with SlackEmulator(bot_token="xoxb-metrics") as emu:
        env = child_env(
            SLACK_BOT_TOKEN=emu.bot_token,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=emu.api_url,
            WAKEFUL_DB=db,
            WAKEFUL_HOST="127.0.0.1",
            WAKEFUL_PORT="0",
        )
        proc = Proc([WAKEFUL, "serve", "--no-loops"], env, here, here / "serve.log")
        try:
            match = LISTENING.match(proc.next_line())
            assert match, proc.tail()
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            url = f"http://127.0.0.1:{match.group(1)}/metrics"
            with opener.open(url, timeout=10) as resp:
                assert resp.status == 200
                text = resp.read().decode()
        finally:
            assert proc.stop() == 0, proc.tail()
    assert "Traceback" not in proc.tail(400)
    found: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return float(found[(name, tuple(sorted(labels.items())))])

    assert value("wakeful_store_up") == 1
    events = {s: value("wakeful_events", status=s) for s in ("pending", "running", "dead")}
    assert events == {"pending": 5, "running": 1, "dead": 3}
    rows = {s: value("wakeful_outbox_rows", state=s) for s in ("held", "sending", "parked")}
    assert rows == {"held": 1, "sending": 1, "parked": 1}
    assert value("wakeful_approvals_open") == 1
    assert value("wakeful_timers_due") == 1
    assert value("wakeful_oldest_pending_event_age_seconds") > 3600


def test_a_reader_that_stops_early_gets_no_traceback(full: Full) -> None:
    """`wakeful inspect --json | head -c 0`: the reader is gone before the output is written;
    the command ends quietly (exit 1, nothing on stderr) instead of an uncaught
    BrokenPipeError with its traceback."""
    db, here = full.db, full.here
    read, write = os.pipe()
    os.close(read)  # nobody will read: the first flush meets a closed pipe
    try:
        done = subprocess.run(
            [WAKEFUL, "inspect", "--json"],
            cwd=here,
            env=child_env(WAKEFUL_DB=db),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["dead-letters"]])
def test_a_server_that_cannot_be_reached_is_one_line_not_a_crash(
    command: list[str], tmp_path: Path, forks: Forks
) -> None:
    """The operator's tools when PostgreSQL is down: one line naming the failure, exit 1."""
    from tests.support.chaos import free_port

    url = f"postgresql://nobody@127.0.0.1:{free_port()}/wakeful"
    done = forks.run([*command, "--db", url], cwd=tmp_path, env=child_env())
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr and "uncaught" not in done.stderr, done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.strip()]
    assert line.startswith("wakeful: store error: cannot connect to PostgreSQL"), line
