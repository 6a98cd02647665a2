"""`wakeful serve` as Slack meets it, on SQLite: approvals denied, expired, refused and answered
twice, reminders and digests, outbound posts, configuration, the loops in their own processes
(slack_app/conftest.py; the approval round trip on both stores is test_slack_app_ingest.py's)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.slack_app import (
    APPROVAL_TTL,
    APPROVER,
    BOT_USER,
    QUICK_SETTINGS,
    QUICK_WINDOW,
    SECRET,
    TEAM,
    TOKEN,
    Proc,
    Wakeful,
    child_env,
    eventually,
    inbox,
    json_field,
    launch,
    message_at,
    refund_calls,
    settle,
    shut_down,
    wait_prompt,
    wakeful_cmd,
)
from wakeful.devtools.emulator import SlackEmulator

# -- 7. approvals --------------------------------------------------------------------------------


def test_a_click_from_an_org_wide_install_with_team_null_is_answered(app: Wakeful) -> None:
    # Enterprise Grid org-wide installs send interactions with "team": null; the clicker's
    # team is in user.team_id. The click must count, not be refused as malformed.
    user, channel = "U7010", "D7010"
    app.sender.message(user, "refund order 710")
    prompt_ts, rid = wait_prompt(app, channel, "710")
    click = app.sender.block_action(
        user, "deny", rid, channel=channel, message_ts=prompt_ts, org_install=True
    )
    assert click.status == 200, click.body
    app.wait_post(channel, "Refund for order 710 denied; nothing was done.")
    answered = app.store.approval(rid)
    assert answered is not None and (answered.answer, answered.answered_by) == ("no", user)


def test_refund_denied(app: Wakeful) -> None:
    user, channel = "U7002", "D7002"
    app.sender.message(user, "refund order 78")
    prompt_ts, rid = wait_prompt(app, channel, "78")
    click = app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200
    app.wait_post(channel, "Refund for order 78 denied; nothing was done.")
    ok = app.emu.wait_for(
        lambda e: f"Denied by <@{user}>" in json.dumps(message_at(app, channel, prompt_ts)), 10
    )
    assert ok, message_at(app, channel, prompt_ts)
    assert refund_calls(app, rid) == []
    assert app.posts(channel, "Refunded") == []


def test_refund_request_expires(app: Wakeful) -> None:
    user, channel = "U7003", "D7003"
    app.sender.message(user, "refund order 79")
    prompt_ts, rid = wait_prompt(app, channel, "79")
    app.wait_post(
        channel, "Refund request for order 79 expired; nothing was done.", APPROVAL_TTL + 10
    )
    ok = app.emu.wait_for(
        lambda e: "Expired" in json.dumps(message_at(app, channel, prompt_ts)), 10
    )
    assert ok, message_at(app, channel, prompt_ts)
    state = app.store.approval(rid)
    assert state is not None and state.answer == "expired"
    assert refund_calls(app, rid) == []
    # A tap after the expiry changes nothing.
    late = app.sender.block_action(user, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert late.status == 200
    assert app.emu.wait_for(lambda e: bool(e.ephemerals(channel=channel, user=user)), 10)
    assert refund_calls(app, rid) == []
    assert app.posts(channel, "Refunded") == []


def test_a_click_by_someone_else_is_refused(app: Wakeful) -> None:
    user, other, channel = "U7004", "U7999", "D7004"
    app.sender.message(user, "refund order 80")
    prompt_ts, rid = wait_prompt(app, channel, "80")
    click = app.sender.block_action(other, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200
    ok = app.emu.wait_for(
        lambda e: any(
            "not yours to answer" in str(x["text"]) for x in e.ephemerals(channel, other)
        ),
        10,
    )
    assert ok, f"no ephemeral refusal for {other}: {app.emu.ephemerals()}"
    state = app.store.approval(rid)
    assert state is not None and state.answer is None
    assert app.store.event_by_key("approval", rid) is None
    assert refund_calls(app, rid) == []
    assert app.emu.ephemerals(channel, user) == []
    # The requester may still answer.
    app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    app.wait_post(channel, "Refund for order 80 denied; nothing was done.")
    assert app.posts(channel, "Refunded") == []


def test_a_second_tap_changes_nothing(app: Wakeful) -> None:
    user, channel = "U7005", "D7005"
    app.sender.message(user, "refund order 81")
    prompt_ts, rid = wait_prompt(app, channel, "81")
    app.sender.block_action(user, "approve", rid, channel=channel, message_ts=prompt_ts)
    app.wait_post(channel, "Refunded order 81.")
    events_before = len(app.store.events(inbox(user)))
    again = app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    assert again.status == 200
    ok = app.emu.wait_for(lambda e: bool(e.ephemerals(channel, user)), 10)
    assert ok, "the second tap got no ephemeral"
    note = app.emu.ephemerals(channel, user)[-1]["text"]
    assert f"Approved by <@{user}>" in note, note
    settle(app, inbox(user))
    assert len(app.store.events(inbox(user))) == events_before
    assert app.posts(channel, "denied") == []
    assert len(app.posts(channel, "Refunded order 81.")) == 1
    assert len(refund_calls(app, rid)) == 1
    state = app.store.approval(rid)
    assert state is not None and state.answer == "yes"


def test_a_click_with_an_unknown_request_id_stores_nothing(app: Wakeful) -> None:
    user, channel = "U7006", "D7006"
    app.sender.message(user, "refund order 83")
    prompt_ts, rid = wait_prompt(app, channel, "83")
    events_before = len(app.store.events(inbox(user)))
    tampered = [rid + "x", "refund-999999-0", "x" * 300, ""]
    for value in tampered:
        reply = app.sender.block_action(
            user, "approve", value, channel=channel, message_ts=prompt_ts
        )
        assert reply.status == 200, f"{value[:20]!r}: {reply.status} {reply.body}"
        if value:
            assert app.store.event_by_key("approval", value) is None
    assert app.store.approval(rid) is not None
    assert app.store.approval(rid).answer is None  # type: ignore[union-attr]
    assert len(app.store.events(inbox(user))) == events_before
    assert refund_calls(app, rid) == []
    assert all(r.key not in tampered for r in app.store.recorded_steps())
    app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    app.wait_post(channel, "Refund for order 83 denied")
    assert app.posts(channel, "Refunded") == []


def test_a_configured_approver_may_answer(app: Wakeful) -> None:
    user, channel = "U7007", "D7007"
    app.sender.message(user, "refund order 82")
    prompt_ts, rid = wait_prompt(app, channel, "82")
    click = app.sender.block_action(APPROVER, "approve", rid, channel=channel, message_ts=prompt_ts)
    assert click.status == 200
    app.wait_post(channel, "Refunded order 82.")
    ok = app.emu.wait_for(
        lambda e: f"Approved by <@{APPROVER}>" in json.dumps(message_at(app, channel, prompt_ts)),
        10,
    )
    assert ok, message_at(app, channel, prompt_ts)
    assert app.emu.ephemerals(channel, APPROVER) == []
    assert len(refund_calls(app, rid)) == 1


# -- 8. reminders, digests, status -----------------------------------------------------------


def test_reminder(app: Wakeful) -> None:
    user, channel = "U8001", "D8001"
    app.sender.message(user, "remind me in 1 seconds to stretch")
    app.wait_post(channel, "I'll remind you in 1 seconds: stretch")
    app.wait_post(channel, "Reminder: stretch", timeout=8)


def test_digest_every_and_off(app: Wakeful) -> None:
    user, channel = "U8002", "D8002"
    app.sender.message(user, "digest every 1 seconds")
    app.wait_post(channel, "Digest set: every 1 seconds.")
    app.wait_post(channel, "Digest since", timeout=10)
    digest = app.posts(channel, "Digest since")[0]["text"]
    assert "- messages handled: 1" in digest, digest
    rows = [r for r in app.store.outbox(inbox=inbox(user)) if "Digest since" in r.text]
    assert rows and {r.priority for r in rows} == {"normal"}

    app.sender.message(user, "digest off")
    app.wait_post(channel, "Digest off.")

    def settled() -> bool:
        no_timer = not any(t.id.endswith("/digest") for t in app.store.timers(inbox(user)))
        idle = not app.store.events(inbox(user), "open")
        drained = all(r.status == "sent" for r in app.store.outbox(inbox=inbox(user)))
        return no_timer and idle and drained

    assert eventually(settled, 10), "the digest timer survived `digest off`"
    seen = len(app.posts(channel, "Digest since"))
    settle(app, inbox(user))
    assert len(app.posts(channel, "Digest since")) == seen


def test_status(app: Wakeful) -> None:
    user, channel = "U8003", "D8003"
    app.sender.message(user, "refund order 84, and digest every 1 hours")
    prompt_ts, rid = wait_prompt(app, channel, "84")
    app.wait_post(channel, "Digest set: every 1 hours.")
    app.sender.message(user, "status")
    app.wait_post(channel, "Status:")
    status = app.posts(channel, "Status:")[0]["text"]
    assert "Status: 0 pending events, 0 dead" in status, status
    assert f"Open approvals: {rid} (refund_order 84, expires " in status, status
    assert re.search(r"Next digest: \d{4}-\d\d-\d\d \d\d:\d\d UTC", status), status

    app.sender.block_action(user, "deny", rid, channel=channel, message_ts=prompt_ts)
    app.sender.message(user, "digest off")
    app.wait_post(channel, "Refund for order 84 denied")
    app.wait_post(channel, "Digest off.")
    app.sender.message(user, "status")
    app.wait_post(channel, "Status:", count=2)
    status = app.posts(channel, "Status:")[1]["text"]
    assert "Open approvals: none" in status, status
    assert "Next digest: none scheduled" in status, status


# -- 9. outbound -------------------------------------------------------------------------------


def test_every_post_carries_its_dispatch_id(app: Wakeful) -> None:
    user, channel = "U9001", "D9001"
    app.sender.message(user, "hello")
    app.wait_post(channel, "Handled 1 message.")
    posts = app.emu.calls("chat.postMessage")
    assert posts
    for call in posts:
        meta = json_field(call.params.get("metadata"))
        assert meta and meta.get("event_type") == "wakeful_dispatch", call.params
        assert meta["event_payload"].get("dispatch_id"), call.params
    mine = [c for c in posts if c.params.get("channel") == channel and c.response.get("ok")]
    rows = app.store.outbox(inbox=inbox(user))
    assert len(mine) == 1 and len(rows) == 1
    meta = json_field(mine[0].params["metadata"])
    assert meta["event_payload"]["dispatch_id"] == rows[0].dispatch_id


def test_a_rate_limited_post_is_delivered_after_retry_after(app: Wakeful) -> None:
    user, channel = "U9002", "D9002"
    app.emu.fault("chat.postMessage", status=429, retry_after=1)
    # Send at a fixed phase of the wall-clock second, so that (after the batch window) the 429
    # lands late in a second: a clock that rounds down must not shorten the wait then.
    time.sleep((0.7 - QUICK_WINDOW - time.time() % 1.0) % 1.0)  # the 429 at .7 of a second
    app.sender.message(user, "are we rate limited?")
    ok = app.emu.wait_for(
        lambda e: any(c.status == 429 for c in e.calls("chat.postMessage")), timeout=10
    )
    assert ok, "the fault was never hit"
    limited = next(c for c in app.emu.calls("chat.postMessage") if c.status == 429)
    assert limited.params["channel"] == channel

    def delivered() -> list[Any]:
        return [
            c
            for c in app.emu.calls("chat.postMessage")
            if c.params.get("channel") == channel and c.response.get("ok")
        ]

    # Other traffic keeps waking the dispatcher meanwhile, as it would in production, until
    # the post is delivered (longer than the Retry-After).
    for i in range(18):
        if delivered():
            break
        app.sender.message("U9003", f"busy {i}")
        time.sleep(0.15)
    app.wait_post(channel, "Handled 1 message.", timeout=10)
    assert len(delivered()) == 1
    waited = delivered()[0].at - limited.at
    assert waited >= 0.95, f"re-posted {waited:.2f} s after a 429 with Retry-After: 1"
    settle(app, inbox(user))
    assert len(app.posts(channel)) == 1


def test_a_permanent_failure_is_parked_and_requeued(app: Wakeful, tmp_path: Path) -> None:
    user, channel = "U9004", "D9004"
    app.emu.remove_channel(channel)
    app.sender.message(user, "is anyone home?")

    def failed_rows() -> list[Any]:
        return [r for r in app.store.dead_letters().outbox if r.channel == channel]

    assert eventually(failed_rows, 10), f"no failed outbox row:\n{app.tail()}"
    row = failed_rows()[0]
    assert row.status == "failed" and "channel_not_found" in str(row.error)
    assert app.posts(channel) == []

    env = child_env()
    listed = subprocess.run(
        wakeful_cmd("dead-letters", "--db", app.db),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    line = next((ln for ln in listed.stdout.splitlines() if f"outbox {row.id} " in ln), "")
    assert f"channel {channel}" in line and "channel_not_found" in line, listed.stdout

    app.emu.add_channel(channel)
    requeued = subprocess.run(
        wakeful_cmd("requeue", "--db", app.db, "outbox", str(row.id)),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert requeued.returncode == 0, requeued.stderr
    assert f"requeued outbox {row.id}" in requeued.stdout
    app.wait_post(channel, "Handled 1 message.", timeout=10)
    assert not failed_rows()
    again = subprocess.run(
        wakeful_cmd("requeue", "--db", app.db, "outbox", str(row.id)),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert again.returncode == 1 and f"with id {row.id}" in again.stderr


def test_posts_to_one_channel_are_a_second_apart(app: Wakeful) -> None:
    user, channel = "U9005", "D9005"
    # One run yields two posts to this DM (the reply and the prompt): the sender must pace them.
    app.sender.message(user, "refund order 90, and remind me in 10 minutes to check")
    wait_prompt(app, channel, "90")
    app.wait_post(channel, "Handled 1 message.\nI'll remind you in 10 minutes: check")
    assert len(app.posts(channel)) == 2
    by_channel: dict[str, list[float]] = {}
    for call in app.emu.calls("chat.postMessage"):
        if call.response.get("ok"):
            by_channel.setdefault(str(call.params.get("channel")), []).append(call.at)
    assert len(by_channel.get(channel, [])) == 2
    for ch, times in by_channel.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(g >= 0.95 for g in gaps), f"{ch}: posts {[round(g, 3) for g in gaps]} s apart"


# -- 10. configuration --------------------------------------------------------------------------


def test_bad_configuration_stops_start_up_with_one_line(tmp_path: Path) -> None:
    with SlackEmulator(bot_token=TOKEN) as emu:
        good = {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": emu.api_url,
            "WAKEFUL_HOST": "127.0.0.1",
            "WAKEFUL_PORT": "0",
        }
        cases: dict[str, tuple[dict[str, str | None], str]] = {
            "no token": ({"SLACK_BOT_TOKEN": None}, "SLACK_BOT_TOKEN"),
            "no secret": ({"SLACK_SIGNING_SECRET": None}, "SLACK_SIGNING_SECRET"),
            "port not a number": ({"WAKEFUL_PORT": "eighty"}, "WAKEFUL_PORT"),
            "gap not a duration": ({"WAKEFUL_OUTBOX_GAP": "1 hour"}, "WAKEFUL_OUTBOX_GAP"),
            "approvers": ({"WAKEFUL_APPROVERS": "U0OK,alice"}, "WAKEFUL_APPROVERS"),
            "agent": ({"WAKEFUL_AGENT": "skynet"}, "WAKEFUL_AGENT"),
            "api url": ({"SLACK_API_URL": "not a url"}, "SLACK_API_URL"),
            "rejected token": ({"SLACK_BOT_TOKEN": "xoxb-wrong"}, "invalid_auth"),
        }
        procs: dict[str, tuple[subprocess.Popen[str], float, Path]] = {}
        for n, (name, (change, _)) in enumerate(cases.items()):
            settings = {**good, "WAKEFUL_DB": str(tmp_path / f"case-{n}.db")}
            for key, value in change.items():
                if value is None:
                    settings.pop(key)
                else:
                    settings[key] = value
            procs[name] = (
                subprocess.Popen(
                    wakeful_cmd("serve"),
                    env=child_env(**settings),
                    cwd=tmp_path,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
                time.monotonic(),
                tmp_path / f"case-{n}.db",
            )
        failures: list[str] = []
        for name, (proc, started, db) in procs.items():
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                failures.append(f"{name}: still running after 30 s (stdout {out!r})")
                continue
            took = time.monotonic() - started
            lines = [ln for ln in err.splitlines() if ln.strip()]
            needle = cases[name][1]
            if proc.returncode == 0:
                failures.append(f"{name}: exited 0")
            if len(lines) != 1 or needle not in lines[0]:
                failures.append(f"{name}: stderr should be one line naming {needle}: {lines}")
            if "listening" in out:
                failures.append(f"{name}: listened before failing: {out!r}")
            if took > 20:
                failures.append(f"{name}: took {took:.1f} s to fail")
            if needle != "invalid_auth" and db.exists():
                failures.append(f"{name}: wrote the store before checking its settings")
        assert not failures, "\n".join(failures)


# -- 11. loops in their own processes ----------------------------------------------------------


def test_serve_without_loops_and_three_loop_processes(tmp_path: Path) -> None:
    db = str(tmp_path / "shared.db")
    user, channel = "U1101", "D1101"
    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        app = launch(tmp_path, emu, db, QUICK_SETTINGS, args=("serve", "--no-loops"))
        loops: list[Proc] = []
        try:
            env = child_env(
                SLACK_BOT_TOKEN=TOKEN,
                SLACK_API_URL=emu.api_url,
                WAKEFUL_DB=db,
                **QUICK_SETTINGS,
            )
            for role in ("worker", "scheduler", "dispatcher"):
                loops.append(
                    Proc(wakeful_cmd(role, "--poll", "0.2"), env, tmp_path, tmp_path / role)
                )
            for role, proc in zip(("worker", "scheduler", "dispatcher"), loops, strict=True):
                assert proc.next_line() == f"wakeful: {role} running on {db}"

            reply = app.sender.message(user, "remind me in 1 seconds to hydrate")
            assert reply.status == 200
            assert app.store.event_by_key("slack", str(reply.event_id)) is not None
            app.wait_post(channel, "Handled 1 message.", timeout=10)
            app.wait_post(channel, "Reminder: hydrate", timeout=10)
            settle(app, inbox(user))
            assert [m["text"] for m in app.posts(channel)] == [
                "Handled 1 message.\nI'll remind you in 1 seconds: hydrate",
                "Reminder: hydrate",
            ]
        finally:
            codes = {p.args[3]: p.stop() for p in loops}
            shut_down(app)
        assert codes == {"worker": 0, "scheduler": 0, "dispatcher": 0}, {
            p.args[3]: p.tail() for p in loops
        }
