"""RefundDesk's digests and status: periods, resets, outages, time zones, quiet and merged
digests, status, retried runs (refund_desk/conftest.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import T0, MakeStore
from tests.support.refund_world import (
    BOSS,
    DAY,
    HOUR,
    INBOX,
    TTL,
    USER,
    Desk,
    desk_runner,
    utc,
)
from wakeful.core.store import Store

# -- digests -------------------------------------------------------------------------------


def _busy_period(desk: Desk) -> int:
    """A digest every 2 hours, and a first period with one of everything a digest counts.

    Returns the dead event's id.
    """
    desk.say("digest every 2 hours")  # message 1
    desk.tick()
    assert [(t.kind, t.next_at) for t in desk.store.timers(INBOX)] == [("every", T0 + 2 * HOUR)]
    for order in ("1", "2", "3"):  # messages 2-4
        desk.say(f"refund order {order}")
    desk.tick(T0 + 10)
    ids = [a.id for a in desk.store.approvals(INBOX)]
    assert len(ids) == 3
    desk.store.answer(ids[0], "yes", BOSS, T0 + 20)
    desk.store.answer(ids[1], "no", BOSS, T0 + 20)
    desk.tick(T0 + 20)
    desk.tick(T0 + 10 + TTL)  # order 3 expires
    dead = desk.poison()
    desk.kill_poison(dead)
    desk.tick(T0 + 2 * HOUR - 100)
    desk.say("refund order 4")  # message 5, still pending at the digest
    desk.tick()
    assert not desk.with_prefix("Digest since")
    return dead


def test_a_digest_summarises_the_period_as_a_normal_post(make_store: MakeStore) -> None:
    desk = Desk(make_store())
    dead = _busy_period(desk)
    desk.tick(T0 + 2 * HOUR)
    [digest] = desk.with_prefix("Digest since")
    assert (digest.channel, digest.priority, digest.status) == ("D1", "normal", "sent")
    text = digest.text
    assert f"Digest since {utc(T0)}" in text
    assert "messages handled: 5" in text
    assert "1 approved, 1 denied, 1 expired, 1 pending" in text
    assert "refunds done: 1" in text
    assert re.search(rf"dead events: 1 \(ids {dead}\)", text), text


def test_digest_counts_reset_after_each_digest(make_store: MakeStore) -> None:
    desk = Desk(make_store())
    dead = _busy_period(desk)
    desk.tick(T0 + 2 * HOUR)
    desk.say("one more thing")
    desk.tick(T0 + 2 * HOUR + 10)
    desk.tick(T0 + 2 * HOUR - 100 + TTL)  # order 4 expires in the second period
    desk.tick(T0 + 4 * HOUR)
    _, second = desk.with_prefix("Digest since")
    text = second.text
    assert f"Digest since {utc(T0 + 2 * HOUR)}" in text
    assert "messages handled: 1" in text
    assert "0 approved, 0 denied, 1 expired, 0 pending" in text
    assert "refunds done: 0" in text
    assert f"ids {dead}" in text  # still dead: still reported
    assert second.status == "sent"


@pytest.mark.parametrize(
    ("command", "period", "skipped", "unit"),
    [("digest every 1 hour", HOUR, 4, "periods"), ("digest daily at 09:00", DAY, 2, "days")],
    ids=["every", "daily"],
)
def test_a_digest_after_an_outage_says_how_much_it_covers(
    desk: Desk, command: str, period: int, skipped: int, unit: str
) -> None:
    desk.say(command)
    desk.tick()
    [timer] = desk.store.timers(INBOX)
    first = timer.next_at
    desk.tick(first + skipped * period + 5)  # the scheduler was down for several periods
    [digest] = desk.with_prefix("Digest since")
    assert re.search(rf"\b{skipped + 1} {unit}\b", digest.text), digest.text
    desk.tick(first + (skipped + 1) * period)  # the next one is an ordinary digest
    assert len(desk.with_prefix("Digest since")) == 2
    assert not re.search(rf"\b\d+ {unit}\b", desk.with_prefix("Digest since")[1].text)


def test_digest_daily_uses_the_users_time_zone(store: Store) -> None:
    zones = {USER: "America/New_York"}
    desk = Desk(store, tz_lookup=lambda user: zones.get(user, ""))
    desk.say("digest daily at 07:30")
    desk.tick()
    [timer] = store.timers(INBOX)
    local = datetime.fromtimestamp(timer.next_at, ZoneInfo("America/New_York"))
    assert local.strftime("%H:%M") == "07:30"
    assert T0 < timer.next_at <= T0 + DAY
    desk.tick(timer.next_at)
    [digest] = desk.with_prefix("Digest since")
    assert digest.priority == "normal"


@pytest.mark.parametrize(
    "tz_lookup",
    [None, lambda user: "", lambda user: "Mars/Olympus_Mons"],
    ids=["no-lookup", "unknown-user", "unknown-zone"],
)
def test_digest_daily_falls_back_to_utc(
    store: Store, tz_lookup: Callable[[str], str] | None
) -> None:
    desk = Desk(store, tz_lookup=tz_lookup)
    desk.say("digest daily at 07:30")
    desk.tick()
    [timer] = store.timers(INBOX)
    assert timer.next_at == int(datetime(2023, 11, 15, 7, 30, tzinfo=UTC).timestamp())
    assert desk.texts() and desk.texts()[0].startswith("Handled 1 message.")


def test_digest_off_removes_the_timer(desk: Desk) -> None:
    desk.say("digest every 1 hour")
    desk.tick()
    assert [t.id for t in desk.store.timers(INBOX)] == [f"{INBOX}/digest"]
    desk.say("digest off")
    desk.tick(T0 + 60)
    assert desk.store.timers(INBOX) == []
    desk.tick(T0 + 5 * HOUR)
    assert not desk.with_prefix("Digest since")


def test_digest_off_withdraws_the_digest_the_gap_still_holds(desk: Desk) -> None:
    """`digest off` sends nothing more: a digest earned before it, still held by the gap, is
    neither merged into the confirmation nor sent later."""
    desk.say("digest every 1 minute")
    desk.tick()
    desk.tick(T0 + 60)  # the first digest goes out and starts the gap
    desk.say("hello")
    desk.tick(T0 + 61)
    desk.tick(T0 + 120)  # the second is earned and held by the gap
    assert [r.status for r in desk.rows("digest")] == ["sent", "pending"]
    desk.say("digest off")
    desk.tick(T0 + 130)
    assert desk.sender.parts[-1].text == "Handled 1 message.\nDigest off."
    assert [r.status for r in desk.rows("digest")] == ["sent"]
    desk.tick(T0 + 5 * HOUR)
    assert sum("Digest since" in p.text for p in desk.sender.parts) == 1


# -- status --------------------------------------------------------------------------------


def _status_scene(desk: Desk) -> tuple[int, int, str, str]:
    """A dead event, a pending one (failed once, in backoff), an open approval, a digest."""
    desk.say("digest every 1 hour")
    desk.tick()
    dead = desk.poison()
    desk.kill_poison(dead)
    desk.say("refund order 77")
    desk.tick(desk.now + 1)
    [approval] = desk.store.approvals(INBOX)
    pending = desk.poison()
    desk.tick(desk.now + 1)  # fails once: pending again, waiting out its backoff
    assert desk.store.event(pending).status == "pending"  # type: ignore[union-attr]
    desk.say("status")
    desk.tick()
    [status] = [t for t in desk.texts() if "Status:" in t]
    return dead, pending, approval.id, status


def test_status_reports_events_approvals_and_next_digest(desk: Desk) -> None:
    dead, _, approval_id, status = _status_scene(desk)
    assert "1 pending event" in status
    assert re.search(rf"1 dead \(ids {dead}\)", status), status
    assert f"Open approvals: {approval_id}" in status
    assert f"Next digest: {utc(T0 + HOUR)}" in status


def test_status_names_the_pending_events(desk: Desk) -> None:
    dead, pending, _, status = _status_scene(desk)
    lines = [x for x in status.splitlines() if not x.startswith(("Open approvals", "Next digest"))]
    about_events = "\n".join(lines).replace(f"ids {dead}", "")
    assert re.search(rf"\b{pending}\b", about_events), status


# -- retried runs --------------------------------------------------------------------------


def test_a_retried_run_does_not_double_count_or_ask_twice(make_store: MakeStore) -> None:
    store = make_store()
    desk = Desk(store, holder="worker-b", ttl=2 * HOUR)
    desk.say("digest every 1 hour")
    desk.tick()
    for text in ("refund order 9", "hello", "anyone?"):
        desk.say(text)
    # Worker A claims the batch, runs the agent, then stalls: its lease lapses unfinished.
    claim = store.acquire_and_claim(INBOX, "worker-a", T0 + 10)
    assert claim is not None and len(claim.events) == 3
    _, runner_a = desk_runner(store, clock=desk.clock, ttl=2 * HOUR)
    stalled = runner_a.run(claim, lambda: store.session(INBOX), T0 + 10, lambda: None)
    [asked] = stalled.approvals
    # Worker B takes over once the lease has lapsed and runs the same events again (each
    # retried event alone: as many rounds as that takes).
    desk.settle(T0 + 10 + store.settings.lease_ttl + 1)
    assert [e.status for e in store.events(INBOX)] == ["done"] * 4
    # Worker A wakes up and tries to finish: fenced off, nothing of it is written.
    assert store.finish(claim, stalled, desk.now) is False
    # The same message asks under the same request id on every run: one approval, one prompt.
    assert [a.id for a in store.approvals(INBOX)] == [asked.id]
    assert len([r for r in desk.rows() if r.ref is not None]) == 1
    # The refund's message is answered by its prompt alone; the other three by replies.
    assert sum(int(r.text.split()[1]) for r in desk.with_prefix("Handled")) == 3
    desk.tick(T0 + HOUR)
    [digest] = desk.with_prefix("Digest since")
    assert "messages handled: 4" in digest.text
    assert "0 expired, 1 pending" in digest.text


# -- quiet digests and merged digests (issue 13) --------------------------------------------


def test_a_quiet_period_posts_nothing_and_the_next_digest_with_news_covers_it(
    make_store: MakeStore,
) -> None:
    desk = Desk(make_store(), quiet_digests=True)
    desk.say("digest every 1 hour")
    desk.tick()
    desk.tick(T0 + HOUR)  # the command was a message handled: news
    assert len(desk.with_prefix("Digest since")) == 1
    desk.tick(T0 + 2 * HOUR)  # nothing new: nothing said
    desk.tick(T0 + 3 * HOUR)
    assert len(desk.with_prefix("Digest since")) == 1
    assert len([p for p in desk.sender.parts if p.text.startswith("Digest")]) == 1
    desk.say("hello")
    desk.tick(T0 + 3 * HOUR + 10)
    desk.tick(T0 + 4 * HOUR)
    _, digest = desk.with_prefix("Digest since")
    assert f"Digest since {utc(T0 + HOUR)}" in digest.text
    assert "This digest covers 3 periods." in digest.text
    assert "messages handled: 1" in digest.text
    desk.tick(T0 + 5 * HOUR)  # quiet again, after the reset
    assert len(desk.with_prefix("Digest since")) == 2


def test_a_new_dead_event_is_news_for_a_quiet_digest(make_store: MakeStore) -> None:
    desk = Desk(make_store(), quiet_digests=True)
    desk.say("digest every 1 hour")
    desk.tick()
    dead = desk.poison()
    desk.kill_poison(dead)
    desk.tick(T0 + HOUR)
    [digest] = desk.with_prefix("Digest since")
    assert f"dead events: 1 (ids {dead})" in digest.text
    desk.tick(T0 + 2 * HOUR)  # still dead, but already reported: nothing new
    assert len(desk.with_prefix("Digest since")) == 1


def test_digests_held_by_the_gap_go_out_as_one_digest_covering_the_span(
    make_store: MakeStore,
) -> None:
    desk = Desk(make_store(outbox_gap=HOUR))
    desk.say("digest every 10 minutes")
    desk.tick()
    for period in range(1, 7):  # one message a period (answered elsewhere, so the urgent reply
        desk.say(f"note {period}", channel="C9", kind="mention")  # takes no digest along)
        desk.tick(T0 + period * 600 - 5)
        desk.tick(T0 + period * 600)
    sent = [p for p in desk.sender.parts if p.text.startswith("Digest since")]
    assert len(sent) == 1  # the first digest started the gap
    desk.tick(T0 + 600 + HOUR)
    sent = [p for p in desk.sender.parts if p.text.startswith("Digest since")]
    assert len(sent) == 2
    merged = sent[1].text
    assert merged.count("Digest since") == 1, merged
    assert f"Digest since {utc(T0 + 600)}" in merged
    # the digests of 20, 30, 40, 50 and 60 minutes, and the one due as the gap ends (70)
    assert "This digest covers 6 periods." in merged
    assert "messages handled: 5" in merged  # summed, not the last period's 0 or 1
    assert len(sent[1].row_ids) == 6
    assert all(r.status == "sent" for r in desk.with_prefix("Digest since"))
