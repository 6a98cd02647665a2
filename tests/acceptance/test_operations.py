"""What an operator sees of a running wakeful: /metrics moving as events flow, `wakeful inspect`
on the live store, the loops' own metrics port, and JSON log lines that name the run and never
a secret. Real processes on both stores, Slack played by the emulator."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import T0
from tests.support.slack_app import (
    SECRET,
    Proc,
    Wakeful,
    child_env,
    dm,
    eventually,
    http_request,
    launch,
    pg_schema_url,
    shut_down,
    wakeful_cmd,
)
from wakeful.core.events import Message
from wakeful.core.store import open_store
from wakeful.devtools.audit import count_events
from wakeful.devtools.emulator import SlackEmulator

BOT_TOKEN = "xoxb-4242-ops-BOTSECRET"
APP_KEY = "sk-ant-api03-OPSSECRETKEY"
DB_PASSWORD = "ops-db-password-SECRET"
SECRETS = (BOT_TOKEN, APP_KEY, DB_PASSWORD, SECRET)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def with_password(dsn: str) -> str:
    """The DSN with a password in it (the test server trusts the user and ignores it)."""
    return dsn.replace("://postgres@", f"://postgres:{DB_PASSWORD}@", 1)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "ops.db")
        return
    with pg_schema_url() as dsn:
        if "://postgres@" not in dsn:
            pytest.fail(f"the password test needs a DSN of user postgres, got {dsn}")
        yield with_password(dsn)


@pytest.fixture
def app(tmp_path: Path, db: str) -> Iterator[Wakeful]:
    with SlackEmulator(bot_token=BOT_TOKEN) as emu:
        settings = {
            "WAKEFUL_LOG_FORMAT": "json",
            "ANTHROPIC_API_KEY": APP_KEY,
            "WAKEFUL_BATCH_WINDOW": "0",
            "WAKEFUL_OUTBOX_GAP": "0",
        }
        running = launch(tmp_path, emu, db, settings, args=("--log-level", "DEBUG", "serve"))
        try:
            yield running
        finally:
            if running.proc.popen.poll() is None:
                shut_down(running)


def inspect(app: Wakeful, *args: str) -> subprocess.CompletedProcess[str]:
    """`wakeful inspect` run by an operator against the running app's store."""
    return subprocess.run(
        wakeful_cmd("inspect", *args),
        env=child_env(WAKEFUL_DB=app.db),
        capture_output=True,
        text=True,
        timeout=60,
    )


def metrics_url(app: Wakeful) -> str:
    return app.url.replace("/slack/events", "/metrics")


def test_metrics_move_as_events_flow_and_inspect_reads_the_live_store(
    app: Wakeful, tmp_path: Path
) -> None:
    before = scrape(metrics_url(app))
    assert value(before, "wakeful_store_up") == 1
    first = app.sender.message("U7001", "hello")
    app.sender.message("U7001", "second")
    app.sender.message("U7002", "hi")
    retry = app.sender.message("U7001", "hello", event_id=first.event_id, retry_num=1)
    forged = app.sender.raw(b'{"type":"event_callback"}', {}, secret="not-the-secret")
    assert (first.status, retry.status, forged.status) == (200, 200, 401)
    assert eventually(
        lambda: (
            count_events(app.store, "done") == 3
            and all(o.status == "sent" for o in app.store.outbox())
            and len(app.store.outbox()) >= 2
        )
    ), app.tail()
    app.emu.fault("chat.postMessage", error="invalid_blocks")  # a reply Slack refuses for good
    app.sender.message("U7003", "this reply will be parked")
    assert eventually(lambda: len(app.store.dead_letters().outbox) == 1), app.tail()

    after = scrape(metrics_url(app))

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("wakeful_events_ingested_total", source="slack", outcome="stored") == 4
    assert moved("wakeful_events_ingested_total", source="slack", outcome="duplicate") == 1
    assert moved("wakeful_events_ingested_total", source="slack", outcome="rejected") == 1
    assert moved("wakeful_http_ack_seconds_count", status="200") == 5
    assert moved("wakeful_http_ack_seconds_count", status="401") == 1
    assert moved("wakeful_runs_total", outcome="done") >= 3
    assert moved("wakeful_run_duration_seconds_count") >= 3
    assert moved("wakeful_event_attempts_total", attempt="first") == 4
    assert moved("wakeful_outbox_rows_sent_total") >= 2
    assert moved("wakeful_outbox_parts_total", kind="post", outcome="failed") == 1
    assert (
        moved("wakeful_slack_api_errors_total", method="chat.postMessage", error="invalid_blocks")
        == 1
    )
    assert value(after, "wakeful_events", status="pending") == 0
    assert value(after, "wakeful_outbox_rows", state="parked") == 1
    assert value(after, "process_resident_memory_bytes") > 0

    inspected = inspect(app, "--json")
    assert inspected.returncode == 0, inspected.stderr
    overview = json.loads(inspected.stdout)
    assert overview["totals"]["outbox"]["parked"] == 1
    assert [r["inbox"] for r in overview["parked_outbox"]] == ["T1:U7003"]
    assert DB_PASSWORD not in inspected.stdout
    table = inspect(app, "T1:U7001")
    assert table.returncode == 0, table.stderr
    assert "inbox T1:U7001: 0 pending, 0 running, 0 dead; lease: gen " in table.stdout
    runs = table.stdout.split("runs (latest")[1].split("outbox (latest")[0]
    assert re.search(
        r"^\s+(now|\S+ ago)\s+ok\s+[0-9a-f]{12}\s+\d+ms\s+\d+\s+worker-\w+\s+[\d,]+$",
        runs,
        re.MULTILINE,
    ), runs

    shut_down(app)
    lines = app.proc.log.read_text().splitlines()
    assert lines, "no log lines"
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    runs_logged = [p for p in parsed if str(p["message"]).startswith("run done")]
    assert len(runs_logged) >= 3
    for p in runs_logged:
        assert p["inbox"].startswith("T1:U700")
        assert isinstance(p["events"], list) and p["events"]
        assert isinstance(p["gen"], int) and p["gen"] >= 1
        assert re.fullmatch(r"[0-9a-f]{12}", p["run_id"])
    everything = app.proc.log.read_text()
    for secret in SECRETS:
        assert secret not in everything


def test_the_loops_serve_metrics_on_their_own_port(tmp_path: Path, db: str) -> None:
    open_store(db).close()
    env = child_env(WAKEFUL_DB=db, WAKEFUL_METRICS_PORT="0", WAKEFUL_HOST="127.0.0.1")
    worker = Proc(wakeful_cmd("worker", "--poll", "0.1"), env, tmp_path, tmp_path / "w.log")
    try:
        assert worker.next_line().startswith("wakeful: worker running on")
        line = worker.next_line()
        match = re.fullmatch(r"wakeful: metrics on (http://127\.0\.0\.1:\d+/metrics)", line)
        assert match, line
        before = scrape(match.group(1))
        store = open_store(db)
        try:
            for i in range(5):
                said = Message(text="hi", user=f"U{i}", team="T1", channel="D1", ts=f"{T0}.{i}")
                store.ingest(f"T1:U{i}", "slack", f"split-{i}", said.to_wire(), T0)
            assert eventually(lambda: count_events(store, "done") == 5), worker.tail()
        finally:
            store.close()
        after = scrape(match.group(1))
    finally:
        assert worker.stop() == 0, worker.tail()
    done = value(after, "wakeful_runs_total", outcome="done")
    assert done - value(before, "wakeful_runs_total", outcome="done") == 5
    assert value(after, "wakeful_outbox_rows", state="held") == 5  # no dispatcher here
    assert value(after, "wakeful_events", status="pending") == 0
    log = (tmp_path / "w.log").read_text()
    assert DB_PASSWORD not in log and DB_PASSWORD not in "\n".join(worker.lines.queue)


def test_no_secret_reaches_an_error_or_a_log_line(tmp_path: Path) -> None:
    """Start-up errors (a token Slack refuses, a database that does not answer) and a
    running app whose Slack calls fail, at DEBUG: grep everything they wrote."""
    outputs: list[str] = []

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            wakeful_cmd(*args),
            env=child_env(ANTHROPIC_API_KEY=APP_KEY, SLACK_SIGNING_SECRET=SECRET, **env),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        outputs.append(result.stdout + result.stderr)
        return result

    dead_db = f"postgresql://wakeful:{DB_PASSWORD}@127.0.0.1:1/wakeful"
    with SlackEmulator(bot_token="xoxb-the-right-one") as emu:
        refused = run(
            "--log-level",
            "DEBUG",
            "serve",
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_API_URL=emu.api_url,
            WAKEFUL_DB=str(tmp_path / "a.db"),
            WAKEFUL_PORT="0",
        )
        assert refused.returncode == 2
        assert "SLACK_BOT_TOKEN was rejected by Slack (invalid_auth)" in refused.stderr
        for fmt in ("json", "text"):
            unreachable = run(
                "--log-level",
                "DEBUG",
                "worker",
                WAKEFUL_DB=dead_db,
                WAKEFUL_LOG_FORMAT=fmt,
                WAKEFUL_STARTUP_WAIT="3",
            )
            assert unreachable.returncode == 1
            assert "store unavailable at start-up, retrying" in unreachable.stderr
            assert "store error" in unreachable.stderr
        odd_url = run("inspect", WAKEFUL_DB=f"mysql://wakeful:{DB_PASSWORD}@db/wakeful")
        assert odd_url.returncode == 2
        # Refused unshown (issue 34, item 6 c): once it was printed with its password masked.
        assert "WAKEFUL_DB must be a file path or a postgresql:// URL" in odd_url.stderr
        assert "(its value is not shown)" in odd_url.stderr and "mysql" not in odd_url.stderr
        doctor = run(
            "doctor",
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_API_URL=emu.api_url,
            WAKEFUL_DB=dead_db,
            WAKEFUL_AGENT="claude",
        )
        assert doctor.returncode == 1
        assert "FAIL store" in doctor.stdout and "FAIL slack token" in doctor.stdout
    with SlackEmulator(bot_token=BOT_TOKEN) as emu:
        app = launch(
            tmp_path,
            emu,
            str(tmp_path / "b.db"),
            {"ANTHROPIC_API_KEY": APP_KEY, "WAKEFUL_BATCH_WINDOW": "0", "WAKEFUL_OUTBOX_GAP": "0"},
            args=("--log-level", "DEBUG", "serve"),
        )
        try:
            emu.fault("chat.postMessage", status=500)
            emu.fault("users.info", error="user_not_found", times=5)
            app.sender.message("U7100", "reply through a flaky Slack")
            app.wait_post(dm("U7100"), "", timeout=20)
            assert http_request(app, "GET", "/metrics")[0] == 200
        finally:
            shut_down(app)
        outputs.append(app.proc.log.read_text())
        outputs.append("\n".join(app.proc.lines.queue))
    everything = "\n".join(outputs)
    for secret in SECRETS:
        assert secret not in everything, secret
