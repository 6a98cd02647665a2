"""Issue 33's "done when", through a real `wakeful serve` and the Slack emulator, on both
stores: an agent raising on "boom", sent by two people, WAKEFUL_OPS_CHANNEL set. Each person
is told, the ops channel names both events (inbox, id, source, the error's first line) within
WAKEFUL_OUTBOX_GAP + 10 s of their death, and `wakeful inspect --json` lists both."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.doc_samples import ROOT
from tests.support.slack_app import (
    Wakeful,
    child_env,
    dm,
    eventually,
    inbox,
    launch,
    pg_schema_url,
    shut_down,
    wakeful_cmd,
)
from wakeful.core.runner import FAILURE_TEXT
from wakeful.devtools.emulator import SlackEmulator

OPS = "C0PS"
GAP = 4
DEADLINE = GAP + 10
"""The issue's figure: an ops post is out within WAKEFUL_OUTBOX_GAP + 10 s of a death."""
PEOPLE = ("U7101", "U7102")
TOLD = FAILURE_TEXT.replace("{attempts}", "2")
SAMPLE = re.compile(r"<!-- ops post sample -->\n```\n(?P<body>.*?)^```", re.S | re.M)


@pytest.fixture(params=["sqlite", "postgres"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Wakeful]:
    settings = {
        "WAKEFUL_AGENT": "tests.support.agents:boom_desk",
        "WAKEFUL_MAX_ATTEMPTS": "2",
        "WAKEFUL_BACKOFF_BASE": "1",
        "WAKEFUL_OUTBOX_GAP": str(GAP),
        "WAKEFUL_BATCH_WINDOW": "0",
        "WAKEFUL_OPS_CHANNEL": OPS,
    }
    with SlackEmulator(bot_token="xoxb-ops-acceptance", channels=(OPS,)) as emu:
        if request.param == "sqlite":
            running = launch(tmp_path, emu, str(tmp_path / "ops.db"), settings)
        else:
            with pg_schema_url() as dsn:
                running = launch(tmp_path, emu, dsn, settings, backend="postgres")
                try:
                    yield running
                finally:
                    if running.proc.popen.poll() is None:
                        shut_down(running)
                return
        try:
            yield running
        finally:
            if running.proc.popen.poll() is None:
                shut_down(running)


def ops_text(app: Wakeful) -> str:
    return "\n".join(str(m.get("text", "")) for m in app.emu.messages(OPS))


def test_two_people_say_boom_each_is_told_and_the_ops_channel_names_both(app: Wakeful) -> None:
    for user in PEOPLE:
        assert app.sender.message(user, "boom").status == 200
    died: dict[str, float] = {}

    def both_dead() -> bool:
        for user in PEOPLE:
            if user not in died and any(e.status == "dead" for e in app.store.events(inbox(user))):
                died[user] = time.monotonic()
        return len(died) == len(PEOPLE)

    assert eventually(both_dead, timeout=30, every=0.02), app.tail()
    events = {user: app.store.events(inbox(user))[0] for user in PEOPLE}
    wanted = {
        user: f"inbox {inbox(user)}: event {e.id} from slack is dead: too many attempts; "
        f"last error: RuntimeError: boom"
        for user, e in events.items()
    }
    seen: dict[str, float] = {}

    def named() -> bool:
        text = ops_text(app)
        for user, line in wanted.items():
            if user not in seen and line in text:
                seen[user] = time.monotonic()
        return len(seen) == len(PEOPLE)

    assert eventually(named, timeout=DEADLINE + 5, every=0.02), (ops_text(app), app.tail())
    late = {user: round(seen[user] - died[user], 2) for user in PEOPLE}
    assert all(s <= DEADLINE for s in late.values()), late
    print(f"ops post after the death, seconds (gap {GAP}): {late}")
    for user in PEOPLE:  # each person told, once, where they wrote
        app.wait_post(dm(user), TOLD)
        assert [m["text"] for m in app.emu.messages(dm(user))] == [TOLD]
    assert "boom" not in ops_text(app).replace("RuntimeError: boom", "")  # no one's words
    listed = subprocess.run(
        wakeful_cmd("inspect", "--json"),
        env=child_env(WAKEFUL_DB=app.db),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    dead = {d["id"]: d for d in json.loads(listed.stdout)["dead_events"]}
    assert {e.id for e in events.values()} <= set(dead), dead
    # The page's sample is a real post of this run (times and ids aside).
    [post] = [str(m["text"]) for m in app.emu.messages(OPS) if wanted[PEOPLE[0]] in m["text"]]
    match = SAMPLE.search((ROOT / "docs" / "operating.md").read_text())
    assert match, "docs/operating.md has no <!-- ops post sample -->"
    assert shape(match["body"]) == shape(post), post


def shape(post: str) -> list[str]:
    """A post's lines with what differs from one run to the next replaced (times, ids, the
    people, how many problems one post holds), each distinct line once."""
    post = re.sub(r"\d\d:\d\d:\d\d", "<time>", post)
    post = re.sub(r"event \d+", "event <id>", post)
    post = re.sub(r"U71\d\d", "U<user>", post)
    post = re.sub(r"^wakeful: \d+ problems?", "wakeful: <n> problems", post)
    return list(dict.fromkeys(post.strip().splitlines()))
