"""What a new user meets at start-up, as the real processes print it (issue 27 item 1 and 3):
each mistake is one line that says what is wrong and what to do, by exact text, and with
WAKEFUL_LOG_FORMAT=json every line a process writes is JSON."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import need_pg
from tests.support.forked_cli import Forks
from tests.support.slack_app import Proc, child_env, wakeful_cmd
from wakeful.core.store import open_store
from wakeful.devtools.emulator import EventSender, SlackEmulator

SECRET = "the-right-signing-secret"
MISMATCH = (
    "3 requests refused in the last 60 s: their signature does not match SLACK_SIGNING_SECRET; "
    "check that it is the app's Signing Secret (Basic Information page)"
)

NO_SLACK = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_API_URL": "http://127.0.0.1:1/api/"}
"""A doctor that must not reach the real Slack: its Slack checks fail at once, on loopback."""


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token="xoxb-startup") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    """Most commands are forked from one process that imported wakeful once
    (tests/support/forked_cli.py: a new interpreter per command was most of this module's
    CPU); each is still a process of its own. A fatal line, a serve and serve with its
    gateway run the real entry point."""
    with Forks(tmp_path_factory.mktemp("forks"), child_env()) as made:
        yield made


def run(
    forks: Forks | None, tmp: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """`wakeful *args`, forked, or a new interpreter where `forks` is None."""
    if forks is not None:
        return forks.run(args, env=child_env(**env), cwd=tmp, timeout=timeout)
    return subprocess.run(
        wakeful_cmd(*args),
        env=child_env(**env),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def serve_env(emu: SlackEmulator, db: str, **more: str) -> dict[str, str]:
    settings = {
        "SLACK_BOT_TOKEN": emu.bot_token,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": emu.api_url,
        "WAKEFUL_DB": db,
        "WAKEFUL_HOST": "127.0.0.1",
    }
    return child_env(**{**settings, **more})


def json_lines(text: str) -> list[dict[str, object]]:
    """Every line parsed as JSON: a line that is not fails the test, naming it."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    return out


def test_wrong_secret_is_warned_json_lines_and_a_second_serve_on_the_port(
    emu: SlackEmulator, tmp_path: Path, forks: Forks
) -> None:
    db = str(tmp_path / "wakeful.db")
    env = serve_env(emu, db, WAKEFUL_PORT="0", WAKEFUL_LOG_FORMAT="json")
    proc = Proc(wakeful_cmd("serve"), env, tmp_path, tmp_path / "serve.log")
    try:
        first = json.loads(proc.next_line())
        assert first["level"] == "info" and first["logger"] == "wakeful"
        message = str(first["message"])
        assert message.startswith("listening on http://127.0.0.1:"), first
        port = int(message.split(":")[2].split("/")[0])
        url = f"http://127.0.0.1:{port}/slack/events"
        # a Slack whose app has another secret: twelve deliveries refused, one line said
        wrong = EventSender(url, "a-secret-from-another-app")
        for i in range(12):
            reply = wrong.event({"type": "app_mention", "user": "U1", "text": f"hi {i}"})
            assert reply.status == 401
        deadline = time.monotonic() + 10
        while MISMATCH not in proc.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        said = [r for r in json_lines(proc.log.read_text()) if "refused" in str(r["message"])]
        assert [(r["level"], r["message"]) for r in said] == [("warning", MISMATCH)]
        # the same port again: one line, no traceback, exit 2 (JSON, like every line)
        again = forks.run(["serve"], env={**env, "WAKEFUL_PORT": str(port)}, cwd=tmp_path)
        assert again.returncode == 2, again.stderr
        lines = json_lines(again.stderr)
        assert [(r["level"], r["message"]) for r in lines] == [
            (
                "error",
                f"port {port} is already in use: another wakeful serve? set WAKEFUL_PORT or "
                "stop it",
            )
        ]
        json_lines(again.stdout)
    finally:
        code = proc.stop()
    assert code == 0, proc.tail()
    json_lines(proc.log.read_text())  # stderr of the first serve: all JSON, to its last line
    rest = []
    while not proc.lines.empty():
        rest.append(proc.lines.get())
    json_lines("\n".join(rest))  # and the rest of its stdout


def test_a_second_serve_on_a_port_in_use_says_so_in_one_text_line(
    emu: SlackEmulator, tmp_path: Path, forks: Forks
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = serve_env(emu, str(tmp_path / "w.db"), WAKEFUL_PORT=str(port))
        done = forks.run(["serve"], env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"wakeful: port {port} is already in use: another wakeful serve? set WAKEFUL_PORT or "
        "stop it\n"
    )


def test_a_fatal_start_up_line_is_json_with_json_logs(tmp_path: Path) -> None:
    done = run(None, tmp_path, "worker", WAKEFUL_DB=str(tmp_path), WAKEFUL_LOG_FORMAT="json")
    assert done.returncode == 2
    (line,) = json_lines(done.stderr)
    assert line["level"] == "error" and line["logger"] == "wakeful"
    assert line["message"] == (
        f"the store {tmp_path} is a directory, not a SQLite file: name a file, e.g. "
        f"{tmp_path / 'wakeful.db'}"
    )


def test_sqlite_paths_that_cannot_be_a_store_are_one_line_and_create_nothing(
    tmp_path: Path, forks: Forks
) -> None:
    not_db = tmp_path / "notes.txt"
    not_db.write_text("not a database\n")
    cases = {
        str(tmp_path): (
            f"wakeful: the store {tmp_path} is a directory, not a SQLite file: name a file, "
            f"e.g. {tmp_path / 'wakeful.db'}"
        ),
        str(tmp_path / "missing" / "w.db"): (
            f"wakeful: the store {tmp_path / 'missing' / 'w.db'} cannot be created: the folder "
            f"{tmp_path / 'missing'} does not exist (create it, or name a path in an existing "
            "folder)"
        ),
        str(not_db): (
            f"wakeful: {not_db} is not a SQLite database (it does not start with SQLite's "
            "header); nothing was created beside it: name a wakeful store or a new path"
        ),
    }
    for db, said in cases.items():
        done = run(forks, tmp_path, "worker", WAKEFUL_DB=db)
        assert (done.returncode, done.stderr) == (2, said + "\n"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no -lock beside it


def test_read_only_commands_on_a_mistyped_path_create_no_store(
    tmp_path: Path, forks: Forks
) -> None:
    missing = tmp_path / "wakeful.dbb"
    said = f"wakeful: no store at {missing} (`wakeful serve` creates a new one)\n"
    for args in (["dead-letters"], ["inspect"]):
        done = run(forks, tmp_path, *args, WAKEFUL_DB=str(missing))
        assert (done.returncode, done.stderr) == (2, said), (args, done.stderr)
    done = run(forks, tmp_path, "doctor", WAKEFUL_DB=str(missing), **NO_SLACK)
    assert done.returncode == 1
    assert (
        f"FAIL store           no store at {missing} (`wakeful serve` creates a new one)"
        in done.stdout.splitlines()
    )
    done = run(forks, tmp_path, "backup", str(tmp_path / "copy.db"), WAKEFUL_DB=str(missing))
    assert (done.returncode, done.stderr) == (
        2,
        f"wakeful: no store at {missing}: nothing to back up\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_unknown_settings_are_warned_with_the_closest_name(tmp_path: Path, forks: Forks) -> None:
    db = tmp_path / "w.db"
    open_store(db).close()
    done = run(
        forks,
        tmp_path,
        "inspect",
        WAKEFUL_DB=str(db),
        WAKEFUL_OUTBOX_GAPS="1h",
        WAKEFUL_LOGLEVEL="DEBUG",
        WAKEFUL_COLOUR="on",
        WAKEFUL_TEST_ANYTHING="1",  # the test suite's own: never warned
    )
    assert done.returncode == 0, done.stderr
    said = [line.split(" WARNING wakeful: ", 1)[1] for line in done.stderr.splitlines()]
    assert said == [
        "unknown setting WAKEFUL_COLOUR ignored (no known setting is close; see docs/settings.md)",
        "unknown setting WAKEFUL_LOGLEVEL ignored; did you mean WAKEFUL_LOG_LEVEL?",
        "unknown setting WAKEFUL_OUTBOX_GAPS ignored; did you mean WAKEFUL_OUTBOX_GAP?",
    ]


def test_doctor_fails_an_agent_that_cannot_be_loaded(
    emu: SlackEmulator, tmp_path: Path, forks: Forks
) -> None:
    db = tmp_path / "w.db"
    open_store(db).close()
    done = run(
        forks,
        tmp_path,
        "doctor",
        SLACK_BOT_TOKEN=emu.bot_token,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=emu.api_url,
        WAKEFUL_DB=str(db),
        WAKEFUL_AGENT="my_agent:factory",
        WAKEFUL_AGENT_PATH=str(tmp_path / "agents"),
    )
    assert done.returncode == 1
    assert (
        "FAIL agent           WAKEFUL_AGENT 'my_agent:factory' cannot be loaded: No module named "
        f"'my_agent' (looked in {tmp_path / 'agents'}, {tmp_path} and the installed packages; set "
        "WAKEFUL_AGENT_PATH to the folder holding the module)"
    ) in done.stdout.splitlines()
    assert done.stdout.splitlines()[-1] == "1 check(s) failed"


PERMANENT = [
    (
        "role",
        "postgresql://nobody_i27a@{hostport}/{db}",
        'FATAL: role "nobody_i27a" does not exist',
    ),
    (
        "database",
        "postgresql://{user}@{hostport}/no_such_db_i27a",
        'FATAL: database "no_such_db_i27a" does not exist',
    ),
]


def _pg_parts() -> tuple[str, str, str]:
    import urllib.parse

    url = urllib.parse.urlsplit(need_pg("the PostgreSQL address tests"))
    return url.username or "postgres", url.netloc.rsplit("@", 1)[-1], url.path.lstrip("/")


@pytest.mark.parametrize(("what", "template", "server_says"), PERMANENT)
def test_a_permanent_postgresql_error_fails_at_once_with_the_servers_message(
    tmp_path: Path, what: str, template: str, server_says: str, forks: Forks
) -> None:
    user, hostport, db = _pg_parts()
    dsn = template.format(user=user, hostport=hostport, db=db)
    host, _, port = hostport.partition(":")
    started = time.monotonic()
    done = run(forks, tmp_path, "scheduler", WAKEFUL_DB=dsn, WAKEFUL_STARTUP_WAIT="60")
    took = time.monotonic() - started
    assert done.returncode == 1
    assert done.stderr == (
        f'wakeful: store error: cannot connect to PostgreSQL: connection to server at "{host}", '
        f"port {port or 5432} failed: {server_says} (not retried: fix the address in WAKEFUL_DB)\n"
    )
    assert took < 15, f"{what}: took {took:.1f} s with a 60 s start-up wait: it was retried"


def test_an_unknown_host_is_not_retried(tmp_path: Path, forks: Forks) -> None:
    started = time.monotonic()
    done = run(
        forks,
        tmp_path,
        "scheduler",
        WAKEFUL_DB="postgresql://postgres@nonexistent.invalid/test",
        WAKEFUL_STARTUP_WAIT="60",
    )
    assert time.monotonic() - started < 15
    assert done.returncode == 1
    assert done.stderr == (
        "wakeful: store error: cannot connect to PostgreSQL: failed to resolve host "
        "'nonexistent.invalid': [Errno -2] Name or service not known (not retried: fix the "
        "address in WAKEFUL_DB)\n"
    )


def test_a_refused_connection_is_retried_then_given_up_with_its_cause(
    tmp_path: Path, forks: Forks
) -> None:
    done = run(
        forks,
        tmp_path,
        "scheduler",
        WAKEFUL_DB="postgresql://postgres@127.0.0.1:1/test",
        WAKEFUL_STARTUP_WAIT="2s",
    )
    assert done.returncode == 1
    cause = (
        'cannot connect to PostgreSQL: connection to server at "127.0.0.1", port 1 failed: '
        "Connection refused; Is the server running on that host and accepting TCP/IP "
        "connections?"
    )
    lines = done.stderr.splitlines()
    assert (
        lines[-1] == f"wakeful: store error: {cause} (still failing after WAKEFUL_STARTUP_WAIT=2 s)"
    )
    retries = lines[:-1]
    assert retries and all(
        " WARNING wakeful: store unavailable at start-up, retrying in " in line
        and line.endswith(cause)
        for line in retries
    ), retries
    assert "pool initialization incomplete" not in done.stderr


def test_doctor_prints_a_postgresql_error_on_one_line(tmp_path: Path, forks: Forks) -> None:
    done = run(
        forks,
        tmp_path,
        "doctor",
        WAKEFUL_DB="postgresql://postgres@127.0.0.1:1/test",
        **NO_SLACK,
    )
    assert done.returncode == 1
    store = [line for line in done.stdout.splitlines() if line.startswith("FAIL store")]
    assert store == [
        "FAIL store           unreachable: cannot connect to PostgreSQL: connection to server at "
        '"127.0.0.1", port 1 failed: Connection refused; Is the server running on that host '
        "and accepting TCP/IP connections?"
    ]
    assert all(line[:5] in ("ok   ", "skip ", "FAIL ") for line in done.stdout.splitlines()[:-1])


def test_a_host_address_not_of_this_host_is_one_line(
    emu: SlackEmulator, tmp_path: Path, forks: Forks
) -> None:
    env = serve_env(emu, str(tmp_path / "w.db"), WAKEFUL_PORT="0", WAKEFUL_HOST="192.0.2.1")
    done = forks.run(["serve"], env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "wakeful: WAKEFUL_HOST 192.0.2.1 is not an address of this host (Cannot assign requested "
        "address): use 0.0.0.0 for every interface or 127.0.0.1 for this host only\n"
    )


def test_serve_with_its_gateway_warns_once_and_not_of_the_gateway_s_secret(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    from tests.support.gateway import write_config

    # the secret's variable has the wakeful prefix: the gateway's file names it, so no typo;
    # serve re-executes itself without it and starts a gateway child: one warning all the same
    config = write_config(tmp_path, "http://127.0.0.1:9", secret_env="WAKEFUL_STRIPE_KEY")
    env = serve_env(
        emu,
        str(tmp_path / "w.db"),
        WAKEFUL_PORT="0",
        WAKEFUL_GATEWAY_CONFIG=str(config),
        WAKEFUL_STRIPE_KEY="sk_test_i27a",
        WAKEFUL_OUTBOX_GAPS="1h",
    )
    proc = Proc(wakeful_cmd("serve"), env, tmp_path, tmp_path / "serve.log")
    try:
        assert "listening on" in proc.next_line()
    finally:
        code = proc.stop()
    assert code == 0, proc.tail()
    warned = [line for line in proc.log.read_text().splitlines() if "unknown setting" in line]
    assert [line.split(" WARNING wakeful: ", 1)[1] for line in warned] == [
        "unknown setting WAKEFUL_OUTBOX_GAPS ignored; did you mean WAKEFUL_OUTBOX_GAP?"
    ]
