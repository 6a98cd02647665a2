"""A store holding every kind of row an operator's commands read, for the tests that run those
commands against it (`wakeful inspect`, `dead-letters`, `doctor`, `/metrics`).

`fill(db, now)` writes events pending, running, done, retried (a traceback kept), dead after
three failed attempts (each attempt recorded with its traceback), dead at once, and
discarded; the run log (one run with its model usage); outbox rows sent, held by the gap,
parked (Slack refused them for good) and held by a paused workspace (a rate limit's
deferral); approvals open, answered yes and no, expired; the calls of approved ones done,
waiting on a transient failure, given up and failed; timers once, every (one due now) and
daily; steps, one with a standing error; a saved session and one set aside; installations
(tokens sealed, one ended: its workspace set aside); a row of `processes`.

Every row goes in through the store's public methods (the approved calls' fates with the
finish of the runs that made them, as core/approved.py hands them over), so the rows are the
ones wakeful itself writes. Times are real ones around `now`, so the ages the commands print
read as an operator would see them.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet
from slack_sdk.oauth.installation_store import Installation

from tests.support.approvals import ApprovalRequest
from wakeful.bot.slack.installations import StoreInstallations, TokenCipher
from wakeful.core.effects import Effects, Post, RunTiming, Timer, ToolWait
from wakeful.core.records import Claim, ProcessRecord
from wakeful.core.store import Store, open_store
from wakeful.core.store.dead_letters import DeadFilter
from wakeful.core.usage import ModelUsage

HOLDER = "worker-0f1e2d3c"
"""The worker every run of the fixture is made under."""
TOKEN_KEY = Fernet.generate_key().decode()
"""The key the installations' tokens are sealed with (WAKEFUL_TOKEN_KEY)."""
SECRET_IN_PAYLOAD = "xoxb-1111-2222-FIXTURESECRET"
"""A Slack token someone pasted into a message: no command may print it."""

DEAD = "T1:U0DEAD"
"""Events dead after three attempts, dead at once, discarded; one retried, one done."""
WAIT = "T1:U0WAIT"
"""Approvals of every kind, and approved calls done, waiting, given up and failed."""
BUSY = "T1:U0BUSY"
"""Backlog: pending events, one running under a held lease; a saved session; timers."""
POST = "T1:U0POST"
"""Outbox rows sent, held by the gap and parked."""
PAUSED = "T2:U0PAUSE"
"""An outbox row held by its paused workspace (T2 was rate limited)."""
ASIDE = "T1:U0ASIDE"
"""A session set aside after it poisoned the runs (its event dead for it)."""
GONE = "T3:U0GONE"
"""An inbox of the workspace whose installation ended (set aside)."""

TIMEOUT_ERROR = "TimeoutError: stripe did not answer in 10s"
VALUE_ERROR = "ValueError: order 'twelve' is not a number\nthe agent read the whole message as one"
PAUSE_ERROR = "paused: rate limited (ratelimited)"
PARK_ERROR = "channel_not_found"
WAITING_REASON = "the payment service did not answer (503)"
GIVEN_UP_REASON = "the payment service could not be reached"
FAILED_REASON = "Your card was declined."
SET_ASIDE_REASON = "session unusable: the model refused the saved conversation (400)"


@dataclass(frozen=True, slots=True)
class Filled:
    """What `fill` wrote that a test looks for by id."""

    now: int
    exhausted: int
    """The event dead after three failed attempts (error: too many attempts; ...)."""
    dead_at_once: int
    """The event its agent dead-lettered (a two-line error)."""
    discarded: int
    retried: int
    """Pending again after one failure, its traceback kept."""
    running: int
    parked: int
    """The outbox row Slack refused for good."""
    paused: int
    """The outbox row held by its paused workspace."""
    held: int
    """The outbox row held by the gap."""
    poisoned: int
    """The event dead for its inbox's session, which was set aside."""
    approvals: Mapping[str, str]
    """By what it shows: open, no, expired, done, waiting, given_up, failed."""


def tb(exc: BaseException) -> str:
    """A real traceback of `exc`, raised and caught here."""
    try:
        raise exc
    except BaseException:
        return traceback.format_exc()


def fill(db: str, now: int) -> Filled:
    """Fill the store at `db` (a SQLite path or a postgresql:// URL, migrated on open) with
    every kind of row; what happened took place in the two hours before `now`."""
    store = open_store(db)
    try:
        filled = _fill(store, now)
        _sealed_installations(store, now)
        store.register(_process(now))  # after the runs: no lease names it
    finally:
        store.close()
    return filled


def _fill(store: Store, now: int) -> Filled:
    t = now - 7200
    exhausted, dead_at_once, discarded, retried = _dead_letters(store, t)
    approvals = _approvals(store, t + 1200, now)
    running = _backlog(store, t + 2400, now)
    parked, held, paused = _outbox(store, t + 3600, now)
    poisoned = _set_aside(store, t + 4800)
    store.record_step("refund_order:1000", POST, "refund_order", {"order": 1000}, {"ok": 1}, t)
    store.record_step(
        approvals["failed"], WAIT, "refund_order", {"order": 1003}, None, t, error=FAILED_REASON
    )
    store.add_timer(BUSY, Timer.once("remind", now + 600, {"text": "stretch"}), now - 60)
    store.add_timer(BUSY, Timer.every("digest", 3600, now - 30), now - 60)  # due now
    store.add_timer(BUSY, Timer.daily("standup", "09:30", "Europe/Paris"), now - 60)
    return Filled(
        now=now,
        exhausted=exhausted,
        dead_at_once=dead_at_once,
        discarded=discarded,
        retried=retried,
        running=running,
        parked=parked,
        paused=paused,
        held=held,
        poisoned=poisoned,
        approvals=approvals,
    )


def _ingest(store: Store, inbox: str, source: str, key: str, payload: Any, at: int) -> int:
    stored = store.ingest(inbox, source, key, payload, at)
    assert stored.event_id is not None, f"{source}:{key} was stored before"
    return stored.event_id


def _run(store: Store, inbox: str, at: int) -> Claim:
    claim = store.acquire_and_claim(inbox, HOLDER, at)
    assert claim is not None and claim.events, f"nothing to claim in {inbox} at {at}"
    return claim


def _finish(store: Store, claim: Claim, effects: Effects, at: int) -> None:
    """The run's finish, logged as a run of 850 ms with an id of its own."""
    run_id = f"{at * 1000 + len(claim.events):012x}"[-12:]
    effects.timing = RunTiming(run_id, at * 1000 - 850, at * 1000)
    assert store.finish(claim, effects, at, release=True), f"finish of {claim.inbox} refused"


def _dead_letters(store: Store, t: int) -> tuple[int, int, int, int]:
    """Three failed attempts then dead; dead at once; dead then discarded; retried once."""
    payload = {"text": f"refund order 1000, my token is {SECRET_IN_PAYLOAD}", "user": "U0DEAD"}
    exhausted = _ingest(store, DEAD, "slack", "EvDEAD0001", payload, t)
    at = t + 5
    for attempt in range(1, store.settings.max_attempts + 1):
        claim = _run(store, DEAD, at)
        trace = tb(TimeoutError("stripe did not answer in 10s"))
        effects = Effects(failed={exhausted: TIMEOUT_ERROR}, traceback=trace)
        _finish(store, claim, effects, at + 10)
        at += store.settings.backoff(attempt) + 20
    settle = store.acquire_and_claim(DEAD, HOLDER, at, release_if_empty=True)  # dead now
    assert settle is not None and not settle.events
    dead_at_once = _ingest(store, DEAD, "slack", "EvDEAD0002", {"text": "refund order twelve"}, at)
    discarded = _ingest(store, DEAD, "slack", "EvDEAD0003", {"text": "refund order x"}, at)
    claim = _run(store, DEAD, at + 60)
    trace = tb(ValueError("order 'twelve' is not a number"))
    effects = Effects(dead={dead_at_once: VALUE_ERROR, discarded: "KeyError: 'order'"})
    effects.traceback = trace
    _finish(store, claim, effects, at + 61)
    op = store.operate("discard", DeadFilter(ids=(discarded,)), "fixture", at + 120)
    assert [e.id for e in op.touched] == [discarded]
    retried = _ingest(store, DEAD, "slack", "EvDEAD0004", {"text": "status of 1001"}, at + 200)
    claim = _run(store, DEAD, at + 201)
    effects = Effects(failed={retried: "ConnectionError: the model is down"})
    effects.traceback = tb(ConnectionError("the model is down"))
    _finish(store, claim, effects, at + 202)
    return exhausted, dead_at_once, discarded, retried


def _approvals(store: Store, t: int, now: int) -> dict[str, str]:
    """One approval of every kind; the yes answers' events run (done)."""
    names = ("expired", "open", "no", "done", "waiting", "given_up", "failed")
    ids = {name: f"refund-order-{n}-{name.replace('_', '-')}" for n, name in enumerate(names)}
    _ingest(store, WAIT, "slack", "EvWAIT0001", {"text": "refund orders 1000 to 1006"}, t)
    claim = _run(store, WAIT, t + 1)
    asks = [
        ApprovalRequest(
            id=ids[name],
            tool="refund_order",
            args={"order": 1000 + n},
            requester="U0WAIT",
            deadline=t + 60 if name == "expired" else now + 3 * 3600,
            summary=f"refund order {1000 + n}",
        )
        for n, name in enumerate(names)
    ]
    _finish(store, claim, Effects(approvals=asks[:5]), t + 2)
    _ingest(store, WAIT, "slack", "EvWAIT0002", {"text": "and the rest"}, t + 3)
    claim = _run(store, WAIT, t + 4)
    _finish(store, claim, Effects(approvals=asks[5:]), t + 5)
    assert store.fire_due_timers(t + 120).expired_approvals == 1
    assert store.answer(ids["no"], "no", "U0WAIT", t + 130).stored
    for name in ("done", "waiting", "given_up", "failed"):
        assert store.answer(ids[name], "yes", "U0WAIT", t + 140).stored
    # The answers' run: one call done, one failed for good, two held by transient failures.
    claim = _run(store, WAIT, t + 150)
    answer_of = {e.source_id: e.id for e in claim.events}
    effects = Effects(messages=[Post("D0WAIT", "On it.")])
    effects.tool_outcomes = {ids["done"]: ("done", None), ids["failed"]: ("failed", FAILED_REASON)}
    effects.tool_waits = [
        ToolWait(
            answer_of[ids["waiting"]], ids["waiting"], WAITING_REASON, t + 150, 4, now + 540, 1
        ),
        ToolWait(
            answer_of[ids["given_up"]], ids["given_up"], GIVEN_UP_REASON, t + 150, 31, t + 200, 1
        ),
    ]
    _finish(store, claim, effects, t + 151)
    _dispatch(store, t + 152)
    claim = _run(store, WAIT, t + 300)  # the given-up call's last try: its time is over
    assert claim.ids == [answer_of[ids["given_up"]]]
    effects = Effects(tool_outcomes={ids["given_up"]: ("given_up", GIVEN_UP_REASON)})
    _finish(store, claim, effects, t + 301)
    return ids


def _backlog(store: Store, t: int, now: int) -> int:
    """A saved session; one event running under a lease held past `now`; two pending."""
    _ingest(store, BUSY, "slack", "EvBUSY0001", {"text": "remember: I like tea"}, t)
    claim = _run(store, BUSY, t + 1)
    effects = Effects(messages=[Post("D0BUSY", "Noted.", priority="urgent")])
    effects.set_session({"likes": "tea"})
    effects.usage = [  # the run called a model twice, once replayed from its recorded step
        ModelUsage(
            "claude-sonnet-4-5",
            input=1200,
            output=80,
            cache_read=900,
            cost=0.0051,
            calls=2,
            replayed=1,
        )
    ]
    _finish(store, claim, effects, t + 2)
    running = _ingest(store, BUSY, "slack", "EvBUSY0002", {"text": "what do I like?"}, now - 40)
    assert _run(store, BUSY, now - 30).ids == [running]  # held until now + lease_ttl - 30
    _ingest(store, BUSY, "slack", "EvBUSY0003", {"text": "and my order?"}, now - 20)
    _ingest(store, BUSY, "github", "delivery-0001", {"action": "opened"}, now - 10)
    return running


def _outbox(store: Store, t: int, now: int) -> tuple[int, int, int]:
    """A reply sent, one held by the gap behind it, one parked, one paused (T2)."""
    _ingest(store, POST, "slack", "EvPOST0001", {"text": "hello"}, t)
    claim = _run(store, POST, t + 1)
    replies = [Post("D0POST", "Hello!"), Post("D0GONE", "I'll remind you in 10 minutes")]
    _finish(store, claim, Effects(messages=replies), t + 2)
    _dispatch(store, t + 3, park={"D0GONE": PARK_ERROR})
    _ingest(store, POST, "slack", "EvPOST0002", {"text": "and again"}, t + 10)
    claim = _run(store, POST, t + 11)
    _finish(store, claim, Effects(messages=[Post("D0POST", "Held by the gap.")]), t + 12)
    _ingest(store, PAUSED, "slack", "EvPAUSE001", {"text": "hi from T2"}, now - 60)
    claim = _run(store, PAUSED, now - 59)
    _finish(store, claim, Effects(messages=[Post("D0PAUSE", "Hi T2!")]), now - 58)
    _dispatch(store, now - 57, pause={"D0PAUSE": (now + 300, PAUSE_ERROR)})
    rows = {(o.channel, o.status): o.id for o in store.outbox()}
    return rows[("D0GONE", "failed")], rows[("D0POST", "pending")], rows[("D0PAUSE", "sending")]


def _dispatch(
    store: Store,
    at: int,
    park: Mapping[str, str] | None = None,
    pause: Mapping[str, tuple[int, str]] | None = None,
) -> None:
    """What a dispatcher does with every batch due at `at`: sent, or parked (`park`: channel
    -> Slack's error), or deferred until a paused workspace's end (`pause`)."""
    for batch in store.claim_batches(at):
        if pause and batch.channel in pause:
            until, why = pause[batch.channel]
            store.defer_batch(batch.dispatch_id, until, why, at, held=batch.until)
            continue
        for part in batch.parts:
            if park and part.channel in park:
                assert store.fail_part(part, park[part.channel], at)
            else:
                store.mark_sent(part, f"{at}.{part.row_ids[0]:06d}", at)


def _set_aside(store: Store, t: int) -> int:
    """A session that poisoned every run: its event dead for it, the session set aside."""
    _ingest(store, ASIDE, "slack", "EvASIDE001", {"text": "hi"}, t)
    claim = _run(store, ASIDE, t + 1)
    effects = Effects()
    effects.set_session({"turns": ["a conversation the model now refuses"]})
    _finish(store, claim, effects, t + 2)
    poisoned = _ingest(store, ASIDE, "slack", "EvASIDE002", {"text": "and now?"}, t + 10)
    claim = _run(store, ASIDE, t + 11)
    effects = Effects(dead={poisoned: SET_ASIDE_REASON}, set_aside_session=SET_ASIDE_REASON)
    _finish(store, claim, effects, t + 12)
    return poisoned


def _sealed_installations(store: Store, now: int) -> None:
    """Distribution mode's rows: T1 and T2 installed (tokens sealed), T3's installation
    ended (its workspace set aside, with an event of it waiting)."""
    installations = StoreInstallations(store, TokenCipher(TOKEN_KEY), lambda: now - 3000)
    for team in ("T1", "T2", "T3"):
        installations.save(
            Installation(
                app_id="A0FIXTURE",
                team_id=team,
                bot_token=f"xoxb-{team}-fixture-token",
                bot_id=f"B0{team}",
                bot_user_id=f"U0BOT{team}",
                bot_scopes=["chat:write", "im:history"],
                user_id="U0INSTALLER",
            )
        )
    _ingest(store, GONE, "slack", "EvGONE0001", {"text": "still there?"}, now - 2900)
    ended = installations.end(None, "T3", "uninstalled", "app_uninstalled")
    assert ended is not None


def _process(now: int) -> ProcessRecord:
    """A worker on another host that said it was alive five seconds ago."""
    return ProcessRecord(
        id="fixture-host:4242:1",
        host="fixture-host",
        boot="boot-0001",
        pid=4242,
        pid_start="123456",
        role="worker",
        started_at=now - 7200,
        seen_at=now - 5,
    )
