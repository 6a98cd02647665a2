"""The examples of docs/agents.md, run as a user runs them: `wakeful serve` with
`WAKEFUL_AGENT=examples.<name>:factory` (found through WAKEFUL_AGENT_PATH), against the Slack
emulator, spoken to with signed requests.

The ops example's restart is the test of durable steps across a crash: the worker is killed
with SIGKILL while the ops service holds its answer (after it acted, before the worker could
record the result); the restarted process calls again with the same key, the service
restarts once, and the person is told the same restart id, once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ops_service import OpsService
from tests.support.slack_app import (
    BOT_USER,
    TEAM,
    TOKEN,
    Wakeful,
    dm,
    launch,
    shut_down,
)
from wakeful.devtools.emulator import SlackEmulator

ROOT = Path(__file__).resolve().parents[2]
BOSS, ALICE = "U0BOSS", "U0ALICE"


def settings(agent: str, **more: str) -> dict[str, str]:
    return {
        "WAKEFUL_AGENT": f"examples.{agent}:factory",
        "WAKEFUL_AGENT_PATH": str(ROOT),
        "WAKEFUL_APPROVERS": BOSS,
        "WAKEFUL_BATCH_WINDOW": "0.1",
        **more,
    }


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as running:
        yield running


def test_the_echo_example_answers_what_was_said_and_obeys_none_of_it(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    app = launch(tmp_path, emu, str(tmp_path / "echo.db"), settings("echo"))
    try:
        assert app.sender.message(ALICE, "hello <!channel>").status == 200
        app.wait_post(dm(ALICE), "You said: hello")
        [post] = app.posts(dm(ALICE), "You said")
        assert post["text"] == "You said: hello &lt;!channel&gt;"
    finally:
        shut_down(app)


def prompt(app: Wakeful, channel: str) -> tuple[str, str]:
    """(ts, request id) of the one approval prompt in `channel`, once posted."""
    app.emu.wait_for(lambda e: any(m.get("blocks") for m in e.messages(channel)), 10)
    for m in app.emu.messages(channel):
        for block in m.get("blocks") or []:
            if block.get("type") == "actions":
                return str(m["ts"]), str(block["elements"][0]["value"])
    raise AssertionError(f"no prompt in {channel}: {app.emu.messages(channel)}")


def approve(app: Wakeful, channel: str) -> str:
    ts, request_id = prompt(app, channel)
    click = app.sender.block_action(BOSS, "approve", request_id, channel=channel, message_ts=ts)
    assert click.status == 200
    return request_id


def test_the_ops_example_restarts_once_across_a_sigkill_mid_call(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    db = str(tmp_path / "ops.db")
    # The default lease: the restart ends the killed process's lease at once (its pid is gone,
    # core/heartbeat.py); a short one lapses under the live retry on a loaded machine and the
    # service is called a third time (issue 36).
    fast = {"WAKEFUL_LEASE_TTL": "120", "WAKEFUL_BACKOFF_BASE": "1"}
    with OpsService() as ops:
        app = launch(tmp_path, emu, db, settings("ops", OPS_URL=ops.url, **fast))
        channel = dm(ALICE)
        try:
            assert app.sender.message(ALICE, "restart web").status == 200
            ops.hold()
            request_id = approve(app, channel)
            assert ops.wait_held(), f"the ops service was never called:\n{app.tail()}"
            app.proc.popen.send_signal(signal.SIGKILL)  # mid-call: acted, not recorded
            assert app.proc.stop() == -signal.SIGKILL
        finally:
            app.store.close()
            ops.release()
        again = launch(tmp_path, emu, db, settings("ops", OPS_URL=ops.url, **fast))
        try:
            again.wait_post(channel, "Restarted web", timeout=30)
            assert ops.keys == [request_id, request_id], "the same key, twice"
            assert [r["key"] for r in ops.restarts] == [request_id], "one restart"
            replies = again.posts(channel, "Restarted web")
            assert [r["text"] for r in replies] == ["Restarted web (rs-1)."]
            step = again.store.recorded_step(request_id)
            assert step is not None and step.result == {"service": "web", "restart_id": "rs-1"}
        finally:
            shut_down(again)


def test_the_ops_example_sets_a_daily_report_and_refuses_what_it_does_not_know(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    with OpsService() as ops:
        app = launch(tmp_path, emu, str(tmp_path / "ops.db"), settings("ops", OPS_URL=ops.url))
        try:
            channel = dm(ALICE)
            assert app.sender.message(ALICE, "report daily at 09:00").status == 200
            app.wait_post(channel, "Report set: daily at 09:00")
            [timer] = app.store.timers(f"{TEAM}:{ALICE}")
            assert timer.id.endswith("/report") and timer.kind == "daily"
            assert app.sender.message(ALICE, "reboot <!here>").status == 200
            app.wait_post(channel, "I know `restart <service>`")
            [reply] = app.posts(channel, "I know")
            assert reply["text"].endswith("you said reboot &lt;!here&gt;")
            assert app.sender.message(ALICE, "restart db").status == 200
            ts, request_id = prompt(app, channel)
            deny = app.sender.block_action(BOSS, "deny", request_id, channel=channel, message_ts=ts)
            assert deny.status == 200
            app.wait_post(channel, "Not restarted: no")
            assert ops.keys == []
        finally:
            shut_down(app)


def test_the_ops_example_answers_an_at_mention_in_a_channel_as_it_answers_a_dm(
    emu: SlackEmulator, tmp_path: Path
) -> None:
    """Slack's `app_mention` text starts with the bot's `<@U…>`: the agent reads the words
    after it (`Message.text`), so `@bot restart web` in a channel asks for the restart, and
    the whole text stays in `raw_text`."""
    channel = "C0OPS"
    with OpsService() as ops:
        app = launch(tmp_path, emu, str(tmp_path / "ops.db"), settings("ops", OPS_URL=ops.url))
        try:
            assert app.sender.mention(ALICE, "restart web", channel=channel).status == 200
            ts, request_id = prompt(app, channel)
            click = app.sender.block_action(
                BOSS, "approve", request_id, channel=channel, message_ts=ts
            )
            assert click.status == 200
            app.wait_post(channel, "Restarted web")
            assert [r["text"] for r in app.posts(channel, "Restarted")] == ["Restarted web (rs-1)."]
            assert app.posts(channel, "I know") == [], "the mention was read as the words after it"
            assert [r["key"] for r in ops.restarts] == [request_id]
            [row] = [r for r in app.store.events(f"{TEAM}:{ALICE}") if r.source == "slack"]
            assert row.payload["text"] == "restart web"
            assert row.payload["raw_prefix"] == f"<@{BOT_USER}> "  # the whole: prefix + text
        finally:
            shut_down(app)
