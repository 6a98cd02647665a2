"""Slack faults: the real Dispatcher and SlackSender against the emulator answering 429 with
Retry-After, 500, slow answers, invalid_auth and channel_not_found. Nothing is lost; transient
failures go out later in their original order, not before Retry-After; permanent ones are parked,
visible and requeueable. Time is simulated: the dispatcher's clock is a number the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import T0
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import Post
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-faults"


@pytest.fixture
def emu() -> Iterator[SlackEmulator]:
    with SlackEmulator(bot_token=TOKEN) as e:
        yield e


def dispatcher(
    store: Store, emu: SlackEmulator, clock: ManualClock, timeout: int = 5
) -> Dispatcher:
    client = make_client(TOKEN, emu.api_url, timeout=timeout)
    sender = SlackSender(client, sleep=lambda _s: None)  # pacing observed, not slept
    return Dispatcher(store=store, sender=sender, clock=clock, concurrency=1)


def post(store: Store, clock: ManualClock, channel: str, text: str) -> None:
    store.post("T1:U1", [Post(channel, text, priority="urgent")], clock.now)


def texts(emu: SlackEmulator, channel: str) -> list[str]:
    return [m["text"] for m in emu.messages(channel)]


def test_429_is_waited_out_for_at_least_retry_after_then_delivered_in_order(
    store: Store, emu: SlackEmulator
) -> None:
    clock = ManualClock(T0)
    d = dispatcher(store, emu, clock)
    emu.fault("chat.postMessage", status=429, retry_after=30)
    post(store, clock, "C1", "first")
    assert d.tick(clock.now) == 0
    post(store, clock, "C1", "second")  # arrives while the first waits
    post(store, clock, "C2", "elsewhere")  # another conversation: also paused (per-app limit)
    for wait in (1, 10, 29):
        clock.now = T0 + wait
        assert d.tick(clock.now) == 0, f"sent {wait}s after a 429 asking for 30s"
    assert texts(emu, "C1") == [] and texts(emu, "C2") == []
    clock.now = T0 + 31  # whole-second clock: the dispatcher adds one second to be sure
    for _ in range(3):
        d.tick(clock.now)
        clock.now += 1
    assert texts(emu, "C1") == ["first", "second"]
    assert texts(emu, "C2") == ["elsewhere"]
    assert {r.status for r in store.outbox()} == {"sent"}


@pytest.mark.parametrize("fault", [{"status": 500}, {"error": "internal_error"}])
def test_a_5xx_keeps_the_rows_and_they_go_out_later(
    store: Store, emu: SlackEmulator, fault: dict[str, object]
) -> None:
    clock = ManualClock(T0)
    d = dispatcher(store, emu, clock)
    emu.fault("chat.postMessage", times=2, **fault)  # type: ignore[arg-type]
    post(store, clock, "C1", "hello")
    for _ in range(8):
        d.tick(clock.now)
        clock.now += 5
    assert texts(emu, "C1") == ["hello"]
    assert len([c for c in emu.calls("chat.postMessage") if c.response.get("ok")]) == 1


def test_a_slow_slack_times_out_and_the_retry_finds_the_post_instead_of_posting_twice(
    store: Store, emu: SlackEmulator
) -> None:
    clock = ManualClock(T0)
    d = dispatcher(store, emu, clock, timeout=1)
    emu.fault("chat.postMessage", delay=2.0)  # Slack posts, the answer comes too late
    post(store, clock, "C1", "only once")
    assert d.tick(clock.now) == 0
    for _ in range(4):
        clock.now += 10
        d.tick(clock.now)
    assert texts(emu, "C1") == ["only once"]
    assert [r.status for r in store.outbox()] == ["sent"]
    assert emu.calls("conversations.history"), "the retry did not look before posting"


@pytest.mark.parametrize("error", ["channel_not_found", "invalid_auth"])
def test_a_permanent_failure_is_parked_visible_and_requeueable(
    store: Store, emu: SlackEmulator, error: str
) -> None:
    clock = ManualClock(T0)
    d = dispatcher(store, emu, clock)
    emu.fault("chat.postMessage", error=error)
    post(store, clock, "C9", "parked")
    d.tick(clock.now)
    (row,) = store.dead_letters().outbox
    assert (row.status, row.error, row.text) == ("failed", error, "parked")
    clock.now += 100
    d.tick(clock.now)
    assert texts(emu, "C9") == []  # parked rows are not retried on their own
    assert store.requeue_outbox(row.id, clock.now)
    d.tick(clock.now)
    assert texts(emu, "C9") == ["parked"]
    assert store.dead_letters().outbox == []


def test_nothing_is_lost_under_a_mix_of_faults(store: Store, emu: SlackEmulator) -> None:
    clock = ManualClock(T0)
    d = dispatcher(store, emu, clock, timeout=1)
    expected: dict[str, list[str]] = {f"C{c}": [] for c in range(4)}
    faults = [
        {"status": 429, "retry_after": 3},
        {"status": 500},
        {"error": "ratelimited"},
        {"delay": 1.5},
        {"error": "channel_not_found"},
    ]
    for step in range(25):
        channel = f"C{step % 4}"
        post(store, clock, channel, f"m{step}")
        expected[channel].append(f"m{step}")
        if step % 3 == 0:
            emu.fault("chat.postMessage", **faults[step % len(faults)])  # type: ignore[arg-type]
        d.tick(clock.now)
        clock.now += 2
    parked: set[str] = set()
    for _ in range(30):  # drain, requeueing what was parked
        for row in store.dead_letters().outbox:
            parked.add(row.text)
            store.requeue_outbox(row.id, clock.now)
        d.tick(clock.now)
        clock.now += 5
    assert parked, "the mix never produced a permanent failure"
    for channel, wanted in expected.items():
        got = [t for m in texts(emu, channel) for t in m.split("\n\n")]
        assert sorted(got) == sorted(wanted), channel  # every message, exactly once
        # Transient failures keep the original order; a parked row goes out when requeued.
        assert [t for t in got if t not in parked] == [t for t in wanted if t not in parked]
    assert {r.status for r in store.outbox()} == {"sent"}
