"""What a run asked for, written inside its fenced finish (core/store/claims.py): replies,
session, timers, approvals, approved calls' outcomes and memory."""

from __future__ import annotations

from wakeful.core.errors import SessionUnusable
from wakeful.core.settings import Settings
from wakeful.core.store.approvals import request_all
from wakeful.core.store.codec import PreparedEffects
from wakeful.core.store.memory import write_memory
from wakeful.core.store.outbox import queue
from wakeful.core.store.sql import Tx
from wakeful.core.store.timers import set_timers


def write_effects(tx: Tx, inbox: str, p: PreparedEffects, now: int, settings: Settings) -> None:
    """Everything a run asked for, inside its finish: replies, session, timers, approvals."""
    queue(tx, p.messages, now)
    if p.set_aside_session is not None:
        reason = p.set_aside_session[:2000]
        tx.run("set_aside_session", {"inbox": inbox, "reason": reason, "now": now})
        tx.run("drop_session", {"inbox": inbox})
        failed_on_session = SessionUnusable.ERROR_PREFIX + "%"
        params = {"inbox": inbox, "failed_on_session": failed_on_session, "now": now}
        tx.run("forgive_session_failures", params)
    if p.session is not None:
        tx.run("upsert_session", {"inbox": inbox, "state": p.session, "now": now})
    for name in p.cancel:
        if not name.startswith("approval:"):  # expiries are not the agent's to cancel
            tx.run("delete_timer", {"id": f"{inbox}/{name}"})
            # `digest off` sends nothing more: what the timer earned and the gap still holds
            # goes with it (a digest is stored with its timer's name, core/run.py).
            tx.run("withdraw_held_digests", {"inbox": inbox, "ref": name})
    set_timers(tx, inbox, p.timers, now, settings)  # within WAKEFUL_MAX_TIMERS_PER_INBOX
    request_all(tx, inbox, p.approvals, now, settings)
    for outcome in p.tool_outcomes or ():
        tx.run("set_tool_outcome", outcome)
    write_memory(tx, p.memory, now, p.run_id)
