"""What a store remembers of a restore (core/store/restores.py), on both stores, and the
sender's look before posting a row that may already be in Slack (real emulator)."""

from __future__ import annotations

import json

from tests.conftest import T0, MakeStore
from wakeful.bot.slack.sender import SlackSender, make_client
from wakeful.core.clock import ManualClock
from wakeful.core.dispatcher import Dispatcher
from wakeful.core.effects import ApprovalRequest, Effects, Post
from wakeful.core.store import Store
from wakeful.devtools.emulator import SlackEmulator

TOKEN = "xoxb-restore"


def run(store: Store, inbox: str, key: str, at: int, text: str, stored: bool = False) -> None:
    """One event stored (unless already `stored`) and answered with one reply, as a run does."""
    if not stored:
        assert store.ingest(inbox, "slack", key, {"text": key}, at).stored
    claim = store.acquire_and_claim(inbox, "W", at)
    assert claim is not None
    assert store.finish(claim, Effects(messages=[Post("C1", text)]), at, release=True)


def test_a_runs_rows_name_the_events_they_answer(make_store: MakeStore) -> None:
    store = make_store()
    run(store, "T1:U1", "Ev1", T0, "hi")
    [row] = store.outbox(inbox="T1:U1")
    assert row.answers == ("slack:Ev1",) and not row.look_first
    [part] = store.claim_batches(T0)[0].parts
    assert part.answers == ("slack:Ev1",) and not part.look_first
    store.post("T1:U1", [Post("C2", "an operator's notice")], T0)
    assert [r.answers for r in store.outbox(inbox="T1:U1") if r.channel == "C2"] == [()]


def test_a_restore_ends_the_copys_leases_and_claims_and_marks_what_it_did_not_send(
    make_store: MakeStore,
) -> None:
    store = make_store()
    assert store.last_restored() is None
    assert store.ingest("T1:U1", "slack", "Ev1", {"text": "x"}, T0).stored
    assert store.acquire("T1:U2", "gone", T0) is not None  # a lease the copy holds
    store.post("T1:U3", [Post("C3", "in flight")], T0)
    [batch] = store.claim_batches(T0)  # `sending` until T0 + send_timeout
    store.post("T1:U3", [Post("C4", "pending")], T0)

    marked = store.mark_restored(T0 + 5, "copy.db")
    assert (marked.leases_expired, marked.rows_to_check) == (1, 2)
    assert store.last_restored() == T0 + 5
    lease = store.inbox_view("T1:U2", T0 + 5).lease
    assert lease is not None and lease["expires_at"] <= T0 + 5
    [again] = [b for b in store.claim_batches(T0 + 5) if b.channel == "C3"]  # not at T0 + 60
    assert again.retry and again.dispatch_id == batch.dispatch_id
    assert all(p.look_first for p in again.parts)
    # A reply written after the restore to an event from before it is looked for first ...
    claim = store.acquire_and_claim("T1:U1", "W", T0 + 6)
    assert claim is not None
    assert store.finish(claim, Effects(messages=[Post("C1", "hi")]), T0 + 6, release=True)
    [row] = store.outbox(inbox="T1:U1")
    assert row.look_first and row.answers == ("slack:Ev1",)
    # ... and one to an event after it is not; a new process reads the mark from the store.
    reopened = make_store_like(store)
    run(reopened, "T1:U5", "Ev5", T0 + 7, "later")
    [later] = reopened.outbox(inbox="T1:U5")
    assert not later.look_first


def make_store_like(store: Store) -> Store:
    """A second Store over the same backend: what another process reads."""
    return Store(store.db, store.settings, store.kinds)


def test_a_timer_that_fired_before_the_restore_counts_as_from_before(
    make_store: MakeStore,
) -> None:
    store = make_store()
    store.mark_restored(T0 + 100, "copy.db")
    # The occurrence `<timer>@T0+50` fires (again) after the restore, at T0 + 120.
    assert store.ingest("T1:U1", "timer", f"T1:U1/remind@{T0 + 50}", {}, T0 + 120).stored
    claim = store.acquire_and_claim("T1:U1", "W", T0 + 120)
    assert claim is not None
    assert store.finish(claim, Effects(messages=[Post("C1", "Reminder")]), T0 + 120)
    [row] = store.outbox(inbox="T1:U1")
    assert row.look_first and row.answers == (f"timer:T1:U1/remind@{T0 + 50}",)


def test_a_row_to_look_for_is_not_posted_when_slack_shows_its_events_answered(
    make_store: MakeStore,
) -> None:
    store = make_store()
    with SlackEmulator(bot_token=TOKEN) as emu:
        sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
        clock = ManualClock(T0)
        dispatcher = Dispatcher(store=store, sender=sender, clock=clock)
        run(store, "T1:U1", "Ev1", T0, "first answer")
        assert dispatcher.tick(T0) == 1
        [posted] = emu.messages("C1")
        payload = posted["metadata"]["event_payload"]
        assert json.loads(payload["answers"]) == ["slack:Ev1"]

        # The store is set back to a copy where Ev1 is pending again (its answer already in
        # Slack) beside Ev3, from before the restore too but never answered.
        copy = make_store()
        assert copy.ingest("T1:U1", "slack", "Ev1", {"text": "x"}, T0).stored
        assert copy.ingest("T1:U3", "slack", "Ev3", {"text": "x"}, T0).stored
        copy.mark_restored(T0 + 10, "copy")
        dispatcher = Dispatcher(store=copy, sender=sender, clock=ManualClock(T0 + 11))
        run(copy, "T1:U1", "Ev1", T0 + 11, "first answer, again", stored=True)
        run(copy, "T1:U3", "Ev3", T0 + 11, "a new answer", stored=True)
        for at in range(T0 + 11, T0 + 16):
            dispatcher.tick(at)
        texts = [m["text"] for m in emu.messages("C1")]
        assert texts == ["first answer", "a new answer"], texts
        assert {r.status for r in copy.outbox()} == {"sent"}


def test_a_prompt_to_look_for_is_never_taken_for_the_reply_beside_it(
    make_store: MakeStore,
) -> None:
    def run_of(store: Store, at: int, prompt: bool) -> None:
        shown = Post("C1", "Approve refund order 7?", ref="r-7")
        asks = [ApprovalRequest("r-7", "refund_order", {}, "U1", at + 600, prompt=shown)]
        effects = Effects(messages=[Post("C1", "Asking.")], approvals=asks if prompt else [])
        claim = store.acquire_and_claim("T1:U1", "W", at)
        assert claim is not None and store.finish(claim, effects, at, release=True)

    store, copy = make_store(), make_store()
    with SlackEmulator(bot_token=TOKEN) as emu:
        sender = SlackSender(make_client(TOKEN, emu.api_url), sleep=lambda _s: None)
        for s in (store, copy):
            assert s.ingest("T1:U1", "slack", "Ev7", {"text": "refund 7"}, T0).stored
        run_of(store, T0, prompt=False)  # the first run only answered
        Dispatcher(store=store, sender=sender, clock=ManualClock(T0)).tick(T0)
        assert [m["text"] for m in emu.messages("C1")] == ["Asking."]

        # After the restore the run asks too: its reply is found, its prompt must be posted
        # (an update later rewrites the prompt: it must never be the reply).
        copy.mark_restored(T0 + 10, "copy")
        run_of(copy, T0 + 11, prompt=True)
        dispatcher = Dispatcher(store=copy, sender=sender, clock=ManualClock(T0 + 11))
        for at in range(T0 + 11, T0 + 15):
            dispatcher.tick(at)
        texts = [m["text"] for m in emu.messages("C1")]
        assert texts == ["Asking.", "Approve refund order 7?"], texts
        state = copy.approval("r-7")
        assert state is not None and state.prompt_ts == emu.messages("C1")[1]["ts"]
