"""The eight reference failure scenarios, replayed against a real store on a simulated clock.

Every number printed is read back from the engine; the scenario only drives it. `wakeful
scenarios` prints the transcript and the test suite checks it line for line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher, Sender
from wakeful.core.effects import ApprovalRequest, Effects, Post, Timer
from wakeful.core.rules.outbox import SEPARATOR, Part
from wakeful.core.settings import Settings
from wakeful.core.store import Store, open_store

SETTINGS = Settings(lease_ttl=120, max_attempts=3, outbox_gap=3600)
T0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC
HOUR = 3600
DAY = 86_400
StoreFactory = Callable[[Settings], Store]


class _RecordingSender(Sender):
    """Stands in for Slack: keeps what was posted, in order."""

    def __init__(self) -> None:
        self.posts: list[str] = []

    def send(self, part: Part) -> str:
        self.posts.append(part.text)
        return f"{len(self.posts)}.000"


def webhook_twice(store: Store) -> list[str]:
    first = store.ingest("T1:U1", "webhook", "delivery-1", {"n": 1}, T0)
    retry = store.ingest("T1:U1", "webhook", "delivery-1", {"n": 1}, T0 + 5)
    rows = len(store.events("T1:U1"))
    return [f"   first: {first.stored}  retry: {retry.stored}  rows: {rows}"]


def lease_race(store: Store) -> list[str]:
    a = store.acquire("T1:U2", "A", T0)
    b = store.acquire("T1:U2", "B", T0)
    return [f"   A: {a}  B: {b}"]


def quick_messages(store: Store) -> list[str]:
    for i in range(3):
        store.ingest("T1:U3", "slack", f"Ev-quick-{i}", {"text": f"message {i}"}, T0 + i)
    claim = store.acquire_and_claim("T1:U3", "W", T0 + 3)
    assert claim is not None
    store.finish(claim, Effects(), T0 + 4, release=True)
    return [f"   events in one run: {len(claim.events)}"]


def stalled_worker(store: Store) -> list[str]:
    inbox, t = "T1:U4", T0
    store.ingest(inbox, "slack", "msg-3", {"text": "hello"}, t)
    gen_a = store.acquire(inbox, "A", t + 10)
    assert gen_a is not None
    claim_a = store.claim(inbox, "A", gen_a, t + 10)
    b_early = store.acquire(inbox, "B", t + 60)
    b_gen = store.acquire(inbox, "B", t + 131)
    assert b_gen is not None
    claim_b = store.claim(inbox, "B", b_gen, t + 131)
    reply = Effects(messages=[Post(channel="D4", text="done", priority="urgent")])
    store.finish(claim_b, reply, t + 140)
    a_again = store.acquire(inbox, "A", t + 252)
    a_finish = store.finish(claim_a, reply, t + 253)
    ev = store.event_by_key("slack", "msg-3")
    assert ev is not None
    return [
        f"   B before A's lease expires: {b_early}",
        f"   B after expiry: gen {b_gen}  re-claims {[e.source_id for e in claim_b.events]}",
        f"   A renews after both leases lapsed: gen {a_again}",
        f"   A finishes its old claim (gen {claim_a.gen} ): {a_finish}",
        f"   msg-3: {(ev.status, ev.attempts)}  outbox rows: {len(store.outbox(inbox=inbox))}",
    ]


def poison_event(store: Store) -> list[str]:
    inbox, t = "T1:U5", T0
    store.ingest(inbox, "slack", "poison", {"text": "crash me"}, t)
    store.ingest(inbox, "slack", "healthy", {"text": "hi"}, t)
    lines = []
    for i in range(5):
        t += 121
        claim = store.acquire_and_claim(inbox, f"W{i}", t)
        assert claim is not None
        names = [e.source_id for e in claim.events]
        if "poison" in names:
            outcome = "crashed"  # the worker dies mid-run: no finish, the lease lapses
        else:
            outcome = (
                "finished" if store.finish(claim, Effects(), t + 1, release=True) else "fenced"
            )
        lines.append(f"   W{i} claimed {names} and {outcome}")
    poison = store.event_by_key("slack", "poison")
    healthy = store.event_by_key("slack", "healthy")
    assert poison is not None and healthy is not None
    p, h = (poison.status, poison.attempts), (healthy.status, healthy.attempts)
    lines.append(f"   poison: {p}  healthy: {h}")
    return lines


def timers(store: Store) -> list[str]:
    inbox = "T1:U6"
    digest = Timer.daily("digest", "09:00", tz="Europe/Berlin", payload={"kind": "digest"})
    store.add_timer(inbox, digest, T0)
    first = store.timers(inbox)[0].next_at
    pass1 = store.fire_due_timers(first).fired
    pass2 = store.fire_due_timers(first).fired
    store.add_timer(inbox, digest, first)  # re-registered for the occurrence that already fired
    replay = store.fire_due_timers(first)
    total_after_replay = len(store.events(inbox))
    now = first + DAY + 3 * DAY + 600
    store.fire_due_timers(now)
    events = store.events(inbox)
    last = events[-1].payload
    next_at = store.timers(inbox)[0].next_at
    return [
        f"   pass 1: {pass1}  pass 2: {pass2}",
        f"   replay of the same occurrence: {replay.due} due, {total_after_replay} event total",
        f"   after the outage: events total {len(events)}  skipped {last['skipped']}  "
        f"late by {last['late_by'] // 60} min  next due in {(next_at - now) / HOUR:.1f} h",
    ]


def approvals(store: Store) -> list[str]:
    window = 4 * HOUR

    def request(rid: str, at: int) -> None:
        inbox = f"T1:U7-{rid}"
        store.ingest(inbox, "slack", f"ask-{rid}", {"text": "refund"}, at)
        claim = store.acquire_and_claim(inbox, "W", at)
        assert claim is not None
        req = ApprovalRequest(
            id=rid,
            tool="refund_order",
            args={"order_id": rid},
            requester="U7",
            deadline=at + window,
            prompt=Post("D7", f"Approval needed: refund order {rid}", priority="urgent"),
        )
        store.finish(claim, Effects(approvals=[req]), at, release=True)

    b1, b2, b3 = T0, T0 + 10 * HOUR, T0 + 20 * HOUR
    request("881", b1)
    request("882", b2)
    request("883", b3)
    store.fire_due_timers(b1 + 5 * HOUR)
    a881 = store.answer("881", "yes", "U7", b1 + 6 * HOUR).outcome
    a882 = store.answer("882", "yes", "U7", b2 + 5 * HOUR).outcome
    a883 = store.answer("883", "yes", "U7", b3 + 1 * HOUR).outcome
    a883b = store.answer("883", "no", "U7", b3 + 2 * HOUR).outcome
    store.fire_due_timers(b3 + 5 * HOUR)
    final = store.approval("883")
    assert final is not None
    unknown = store.answer("999", "yes", "U7", b3 + HOUR).outcome
    return [
        f"   881: expiry ran at 5h, yes at 6h -> {a881}",
        f"   882: yes at 5h, scheduler not run yet -> {a882}",
        f"   883: yes at 1h -> {a883}  second tap no at 2h -> {a883b}",
        f"   883 after its expiry timer fired: {final.answer}",
        f"   never requested -> {unknown}",
    ]


def paced_outbox(store: Store) -> list[str]:
    inbox, clock = "T1:U8", ManualClock(T0 - 2 * HOUR)
    sender = _RecordingSender()
    dispatcher = Dispatcher(store=store, clock=clock, sender=sender)
    store.post(inbox, [Post(channel="C8", text="earlier update")], clock.now)
    dispatcher.tick(clock.now)  # the last send, two hours before minute 0
    sender.posts.clear()
    for minute in (0, 10, 20, 61):
        clock.now = T0 + minute * 60
        if minute < 60:
            store.post(inbox, [Post(channel="C8", text=f"update {minute // 10}")], clock.now)
        dispatcher.tick(clock.now)
    sends = [p.replace(SEPARATOR, " | ") for p in sender.posts]
    return [f"   sends: {sends}"]


SCENARIOS: list[tuple[str, Callable[[Store], list[str]]]] = [
    ("webhook delivered twice", webhook_twice),
    ("two workers ask for the lease at the same time", lease_race),
    ("three quick chat messages", quick_messages),
    ("A stalls mid-run; B takes over; A wakes up", stalled_worker),
    ("a poison event arrives together with a healthy one", poison_event),
    ("timers: a second scheduler pass, a replay, a three-day outage", timers),
    ("approvals with a four-hour window", approvals),
    ("outbox: three updates inside an hour", paced_outbox),
]


def transcript(make_store: StoreFactory) -> list[str]:
    """Run every scenario on its own fresh store and return the transcript lines."""
    lines: list[str] = []
    for number, (title, scenario) in enumerate(SCENARIOS, start=1):
        store = make_store(SETTINGS)
        try:
            lines.append(f"{number}. {title}")
            lines.extend(scenario(store))
        finally:
            store.close()
    return lines


def print_transcript(db: str | None = None) -> int:
    """`wakeful scenarios`: each scenario on a throwaway store, SQLite files in a temporary
    folder by default, or fresh schemas of the PostgreSQL database `db` names."""
    if db and db.startswith(("postgresql://", "postgres://")):
        from wakeful.devtools.stores import fresh_postgres

        def make_pg(settings: Settings) -> Store:
            return fresh_postgres(db, settings)

        lines = transcript(make_pg)
    else:
        with tempfile.TemporaryDirectory(prefix="wakeful-scenarios-") as tmp:
            counter = iter(range(1_000_000))

            def make(settings: Settings) -> Store:
                return open_store(Path(tmp) / f"scenario-{next(counter)}.db", settings)

            lines = transcript(make)
    for line in lines:
        print(line)
    return 0


__all__ = ["SCENARIOS", "print_transcript", "transcript"]
