"""Timers: one-off, every N seconds, daily at a wall time. A due occurrence becomes an inbox event
in the same transaction that advances the timer, under the key `<timer id>@<scheduled time>`."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from wakeful.core import metrics, tracing
from wakeful.core.effects import Post, Timer, check_json
from wakeful.core.events import TimerTick
from wakeful.core.records import TimerFired, TimerState
from wakeful.core.rules.schedule import missed
from wakeful.core.rules.timers import TimerBudget, not_set
from wakeful.core.settings import Settings
from wakeful.core.store.approvals import store_answer
from wakeful.core.store.base import StoreBase, insert_event
from wakeful.core.store.codec import (
    Params,
    approval_record,
    message_params,
    require,
    timer_params,
    timer_record,
)
from wakeful.core.store.outbox import queue
from wakeful.core.store.sql import Tx

log = logging.getLogger("wakeful")

DUE_PAGE = 500
"""Timers one scheduler transaction fires at most; the scheduler pages through the rest."""


def set_timers(tx: Tx, inbox: str, timers: Sequence[Params], now: int, settings: Settings) -> None:
    """A run's timers, within WAKEFUL_MAX_TIMERS_PER_INBOX whatever the agent returned: one the
    inbox has already (by name) is replaced, a new one is set while the inbox has fewer than
    `max_timers_per_inbox` (approvals' expiries aside). The ones over the cap are not set, and
    the person is told so in one line, where the first of them would have answered (a run's
    own budget keeps a built-in agent within the cap, so this line is for one that does not)."""
    if not timers:
        return
    have = {str(r["id"]) for r in tx.all("inbox_capped_timers", {"inbox": inbox})}
    cap, skipped, where = settings.max_timers_per_inbox, 0, None
    for params in timers:
        if params["id"] in have or len(have) < cap:
            tx.run("upsert_timer", {**params, "now": now})
            have.add(str(params["id"]))
        else:
            skipped += 1
            where = where or _conversation(params["payload"])
    if not skipped:
        return
    text = not_set(skipped, cap)
    tx.after_commit(lambda: log.warning("%s: %s", inbox, text))
    if where is None:
        return  # no conversation to answer in: the log line is all there is
    notice = Post(where[0], text, thread_ts=where[1], priority="urgent")
    queue(tx, [message_params(inbox, notice)], now)


def _conversation(payload: Any) -> tuple[str, str | None] | None:
    """The conversation a timer's ticks answer in, from its stored payload (`timer_payload`)."""
    data = json.loads(payload) if isinstance(payload, str) else payload
    to = data.get("to") if isinstance(data, dict) and "v" in data else None
    if not isinstance(to, dict) or not isinstance(to.get("channel"), str):
        return None
    thread = to.get("thread_ts")
    return to["channel"], thread if isinstance(thread, str) and thread else None


def _tick_span(t: Mapping[str, Any], at: int, now: int) -> AbstractContextManager[None]:
    """A tick's span, `wakeful.timer` (core/tracing.py): the root of a trace of its own, which
    the run of the event it stores joins, linked to the run that set the timer."""
    if not tracing.ON:
        return tracing.NOOP
    attrs = {
        "wakeful.inbox": t["inbox"],
        "wakeful.timer.name": str(t["id"]).split("/", 1)[-1],
        "wakeful.timer.action": t["action"],
        "wakeful.timer.scheduled_for": int(at),
        "wakeful.timer.late_by": int(now - at),
    }
    return tracing.span("wakeful.timer", attrs, links=[t.get("trace")], root=True)


class Timers(StoreBase):
    def timer_budget(self, inbox: str) -> TimerBudget:
        """What a run of `inbox` may still set under WAKEFUL_MAX_TIMERS_PER_INBOX (see
        `TimerBudget`); read when the run starts: only the inbox's own runs set its timers,
        one at a time, so the count can only fall (a timer fires and ends) before the finish."""
        require(inbox=inbox)
        with self._tx(write=False) as tx:
            rows = tx.all("inbox_capped_timers", {"inbox": inbox})
        prefix = f"{inbox}/"
        names = {str(r["id"]).removeprefix(prefix) for r in rows}
        return TimerBudget(self.settings.max_timers_per_inbox, names)

    def add_timer(self, inbox: str, timer: Timer, now: int) -> str:
        """Register or replace a timer outside a run (a run adds them through finish): an
        operator's or a test's, not capped by WAKEFUL_MAX_TIMERS_PER_INBOX."""
        require(inbox=inbox)
        params = timer_params(inbox, timer, now)
        with self._tx() as tx:
            tx.run("upsert_timer", {**params, "now": now})
        return str(params["id"])

    def timers(self, inbox: str) -> list[TimerState]:
        with self._tx(write=False) as tx:
            return [timer_record(r) for r in tx.all("inbox_timers", {"inbox": inbox})]

    def next_timer_at(self) -> int | None:
        """When the earliest timer is due, so a scheduler can sleep until then."""
        with self._tx(write=False) as tx:
            row = tx.one("next_timer_at")
        return None if row is None or row["next_at"] is None else int(row["next_at"])

    def fire_due_timers(self, now: int, limit: int = DUE_PAGE) -> TimerFired:
        """Turn due timers into inbox events and advance each timer in the same transaction.

        Each occurrence's event key is `<timer id>@<scheduled time>`, so a replayed occurrence
        stays one event. Missed occurrences: `coalesce` stores one event for the latest (its
        payload says scheduled_for, late_by and how many were skipped); `catch_up` stores one per
        occurrence (at most settings.max_catch_up per pass, oldest dropped first). An approval's
        expiry timer stores the `expired` answer instead.
        """
        due = fired = expired = 0
        earliest = self.next_timer_at()  # most passes find nothing: no write lock for those
        if earliest is None or earliest > now:
            return TimerFired(0, 0, 0)
        with self._tx() as tx:
            for row in tx.all("due_timers", {"now": now, "limit": limit}):
                due += 1
                t = dict(row)
                if t["action"] == "expire_approval":
                    request_id = json.loads(t["payload"])["approval"]
                    state = approval_record(tx.one("get_approval_for_update", {"id": request_id}))
                    if state is not None and state.answer is None:
                        with _tick_span(t, t["next_at"], now):
                            expired += store_answer(tx, state, "expired", None, now)
                    tx.run("delete_timer", {"id": t["id"]})
                    continue
                shown, count, following = missed(
                    t["kind"],
                    t["next_at"],
                    now,
                    t["anchor"],
                    t["every_seconds"],
                    t["daily_at"],
                    t["tz"],
                    self.settings.max_catch_up if t["policy"] == "catch_up" else 1,
                )
                payload = json.loads(t["payload"])
                for at in shown:
                    tick = TimerTick(
                        name=t["id"].split("/", 1)[-1],
                        scheduled_for=at,
                        late_by=now - at,
                        skipped=count - 1 if t["policy"] == "coalesce" else 0,
                        data=payload,  # with the conversation it answers in (events.py)
                    )
                    key = f"{t['id']}@{at}"
                    body_json = check_json(tick.to_wire(), "timer event")
                    with _tick_span(t, at, now):  # the tick's event is stored in its trace
                        stored = insert_event(tx, t["inbox"], "timer", key, body_json, now)
                        tracing.note({"wakeful.stored": "duplicate" if stored is None else "new"})
                    if stored is not None:
                        fired += 1
                        tx.after_commit(partial(metrics.TIMER_LATENESS.observe, now - at))
                if following is None:
                    tx.run("delete_timer", {"id": t["id"]})
                else:
                    tx.run("advance_timer", {"id": t["id"], "next_at": following})
        return TimerFired(due=due, fired=fired, expired_approvals=expired)
