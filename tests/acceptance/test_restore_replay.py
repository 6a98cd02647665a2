"""Restore without re-answering (issue 27), as an operator meets it: a backup holding pending
events whose replies `wakeful serve` posted after the backup, `wakeful restore` of it, then
`wakeful serve` again against the same Slack (the emulator keeps every post): no second reply,
and no inbox waits out a lease of the copy."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.acceptance.test_backup_restore import wakeful
from tests.support.slack_app import (
    APP_SETTINGS,
    BOT_USER,
    TEAM,
    TOKEN,
    eventually,
    launch,
    pg_schema_url,
    shut_down,
)
from wakeful.core.effects import Post
from wakeful.core.events import Message
from wakeful.core.store import open_store
from wakeful.devtools.emulator import SlackEmulator

PENDING = 12
REPLY = "Handled 1 message."
IN_FLIGHT = "C275099"


def user(i: int) -> str:
    return f"U2750{i:02d}"


def dm(i: int) -> str:
    return f"D2750{i:02d}"


def seed(db: Path) -> None:
    """PENDING messages stored as the listener stores them, and a lease a worker held."""
    store = open_store(db)
    now = int(time.time())
    for i in range(PENDING):
        said = Message(
            text="hello", user=user(i), team=TEAM, channel=dm(i), ts=f"{now}.{i:06d}",
            thread_ts=None, channel_type="im", mention=False,
        )  # fmt: skip
        store.ingest(f"{TEAM}:{user(i)}", "slack", f"Ev27R{i:02d}", said.to_wire(), now)
    assert store.acquire(f"{TEAM}:{user(0)}", "a-worker-of-the-copy", now) is not None
    # A post in flight when the copy was taken: `sending` until now + WAKEFUL_SEND_TIMEOUT.
    store.post(f"{TEAM}:{user(99)}", [Post(IN_FLIGHT, "in flight", priority="urgent")], now)
    [batch] = store.claim_batches(now)
    assert batch.until >= now + 60
    store.close()


def settled(db: str) -> bool:
    store = open_store(db)
    try:
        events = [e for i in range(PENDING) for e in store.events(f"{TEAM}:{user(i)}")]
        rows = store.outbox()
        done = len(events) == PENDING and all(e.status == "done" for e in events)
        return done and len(rows) >= PENDING and all(r.status == "sent" for r in rows)
    finally:
        store.close()


def test_a_restored_copy_does_not_answer_again_what_slack_shows_answered(tmp_path: Path) -> None:
    live, copy = tmp_path / "live.db", tmp_path / "copy.db"
    seed(live)
    backed = wakeful(tmp_path, str(live), "backup", str(copy))
    assert backed.returncode == 0, backed.stderr
    conn = sqlite3.connect(live)  # the copy's worker and dispatcher went on after the backup
    conn.execute("UPDATE leases SET expires_at = 0")
    conn.execute("UPDATE outbox SET in_flight_until = 0")
    conn.commit()
    conn.close()

    with SlackEmulator(bot_token=TOKEN, bot_user_id=BOT_USER, team_id=TEAM) as emu:
        first = launch(tmp_path, emu, str(live), APP_SETTINGS)
        try:
            for i in range(PENDING):
                first.wait_post(dm(i), REPLY, timeout=30)
            first.wait_post(IN_FLIGHT, "in flight", timeout=30)
        finally:
            shut_down(first)
        posts_before = len(emu.calls("chat.postMessage"))

        restored = wakeful(tmp_path, str(live), "restore", str(copy))
        assert restored.returncode == 0, restored.stderr
        assert (
            f"marked {live} as restored: 1 lease of the copy ended; 1 unsent reply, and the "
            "replies to its events, are looked for in Slack before they are posted"
        ) in restored.stdout, restored.stdout

        started = time.monotonic()
        second = launch(tmp_path, emu, str(live), APP_SETTINGS)
        try:
            assert eventually(lambda: settled(str(live)), 60), second.tail()
            waited = time.monotonic() - started
        finally:
            shut_down(second)
    again = [len(emu.messages(dm(i))) - 1 for i in range(PENDING)]
    print(f"\nrestore replay: {PENDING} events re-run, {sum(again)} second replies, "
          f"settled {waited:.2f} s after serve started")  # fmt: skip
    assert again == [0] * PENDING, again
    assert len(emu.messages(IN_FLIGHT)) == 1
    assert len(emu.calls("chat.postMessage")) == posts_before  # looked, never posted
    assert waited < 20, (
        f"the restored store took {waited:.1f} s (a copied lease is 120 s, a copied claim 60 s)"
    )


def test_after_a_pg_restore_mark_only_records_it_and_ends_the_copys_leases(
    tmp_path: Path,
) -> None:
    with pg_schema_url() as dsn:
        store = open_store(dsn)
        now = int(time.time())
        assert store.acquire("T1:U1", "a-worker-of-the-copy", now) is not None
        store.post("T1:U1", [Post("C1", "unsent")], now)
        store.close()
        marked = wakeful(tmp_path, dsn, "restore", "--mark-only", "nightly.dump")
        assert marked.returncode == 0, marked.stderr
        assert marked.stdout.endswith(
            "as restored: 1 lease of the copy ended; 1 unsent reply, and the replies to its "
            "events, are looked for in Slack before they are posted\n"
        ), marked.stdout
        store = open_store(dsn)
        try:
            lease = store.inbox_view("T1:U1", int(time.time())).lease
            assert lease is not None and lease["expires_at"] <= int(time.time())
            assert [r.look_first for r in store.outbox()] == [True]
            assert store.last_restored() is not None
        finally:
            store.close()
