"""Where the engine's values meet the tables: rows to records, records to statement parameters,
and the checks that run before any transaction opens, so a malformed value never gets as far as
the store and every write transaction stays short."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wakeful.core import tracing, usage
from wakeful.core.effects import ApprovalRequest, Effects, Post, Timer, check_json
from wakeful.core.errors import InvalidInput
from wakeful.core.kinds import Kinds
from wakeful.core.memory import MemoryChange
from wakeful.core.records import (
    ApprovalState,
    Lease,
    OutboxRow,
    RunRecord,
    StoredEvent,
    TimerState,
)
from wakeful.core.rules.approvals import expiry_timer_id
from wakeful.core.rules.schedule import first_occurrence
from wakeful.core.settings import MAX_PAYLOAD_BYTES
from wakeful.core.storable import check_name, storable
from wakeful.core.store.sql import Row

Params = dict[str, Any]

# -- checks ----------------------------------------------------------------------------------


def require(**fields: str) -> None:
    """Each field must be a non-empty string both stores can hold, or InvalidInput names it."""
    for name, value in fields.items():
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{name} must be a non-empty string, got {value!r}")
        check_name(name, value)


def event_body(inbox: str, source: str, source_id: str, payload: Any) -> str:
    """The payload's JSON, after checking the key and the size; InvalidInput otherwise. A NUL
    or lone surrogate in the key is refused; in the payload it becomes U+FFFD, so no agent
    ever reads one (core/storable.py)."""
    require(inbox=inbox, source=source, source_id=source_id)
    for name, value in (("inbox", inbox), ("source", source), ("source_id", source_id)):
        if len(value) > 512:
            raise InvalidInput(f"{name} is longer than 512 characters")
    body = check_json(payload, "payload")
    size = len(body.encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"payload is {size} bytes of JSON; the cap is {MAX_PAYLOAD_BYTES}")
    return body


# -- records to parameters ---------------------------------------------------------------------


def message_params(inbox: str, m: Post, ref: str | None = None) -> Params:
    """An outbox row's parameters, with the trace that queued it (a run's, core/tracing.py
    `row_trace`), so its post joins that trace: taken here, in the queuing thread."""
    return {
        "inbox": inbox,
        "kind": m.kind,
        "channel": m.channel,
        "thread_ts": m.thread_ts or "",
        "text": storable(m.text),
        "blocks": None if m.blocks is None else check_json(m.blocks, "blocks"),
        "priority": m.priority,
        "ref": m.ref or ref,
        "user_id": m.user,
        "facts": None if m.facts is None else check_json(m.facts, "facts"),
        "answers": None,
        "look_first": 0,
        "trace": tracing.row_trace(inbox),
    }


def timer_params(inbox: str, t: Timer, now: int) -> Params:
    return {
        "id": f"{inbox}/{t.name}",
        "inbox": inbox,
        "kind": t.kind,
        "action": "event",
        "next_at": first_occurrence(t.kind, now, t.first_at, t.daily_at, t.tz),
        "anchor": t.first_at,
        "every_seconds": t.every_seconds,
        "daily_at": t.daily_at,
        "tz": t.tz,
        "policy": t.policy,
        "payload": check_json(t.payload, "timer payload"),
        "trace": tracing.row_trace(inbox),  # the run that set it: each tick's trace links to it
    }


def expiry_timer_params(inbox: str, req: ApprovalRequest) -> Params:
    """The one-off timer that stores an approval's `expired` answer at its deadline."""
    return {
        "id": expiry_timer_id(inbox, req.id),
        "inbox": inbox,
        "kind": "once",
        "action": "expire_approval",
        "next_at": req.deadline,
        "anchor": None,
        "every_seconds": None,
        "daily_at": None,
        "tz": "UTC",
        "policy": "coalesce",
        "payload": check_json({"approval": req.id}, "payload"),
        "trace": tracing.row_trace(inbox),
    }


@dataclass(frozen=True, slots=True)
class PreparedApproval:
    request: Params
    prompt: Params | None
    expiry: Params


@dataclass(frozen=True, slots=True)
class PreparedEffects:
    """A run's effects as statement parameters, ready for the finish transaction."""

    messages: list[Params]
    session: str | None
    set_aside_session: str | None
    timers: list[Params]
    cancel: list[str]
    approvals: list[PreparedApproval]
    traceback: str | None = None
    usage: str | None = None
    cost: float | None = None
    """The run's estimated model cost (the known costs of its usage): spend budgets sum it."""
    tool_waits: dict[int, Params] | None = None
    """Event id -> the wait of its approved call (core/approved.py)."""
    tool_outcomes: list[Params] | None = None
    memory: list[MemoryChange] = field(default_factory=list)
    """The run's memory writes, checked (core/memory.py), written with the finish."""
    run_id: str | None = None


def prepare_effects(inbox: str, effects: Effects, now: int, kinds: Kinds) -> PreparedEffects:
    """Validate and serialise everything before the transaction opens, so it stays short and a
    malformed effect fails the run without touching the store: each post (and approval prompt)
    against the store's `kinds`. Text a store cannot hold becomes U+FFFD here (error texts in
    place: the finish writes them from `effects`)."""
    for m in [*effects.messages, *(_shown(req) for req in effects.approvals)]:
        kinds.check(m)
    for errors in (effects.failed, effects.dead):
        for event_id, error in errors.items():
            errors[event_id] = storable(str(error))
    approvals = [
        PreparedApproval(
            request={
                "id": req.id,
                "inbox": inbox,
                "tool": req.tool,
                "args": check_json(req.args, "args"),
                "requester": req.requester,
                "approvers": check_json(list(req.approvers), "approvers"),
                "deadline": req.deadline,
                "summary": storable(req.summary) or None,
                "channel": req.channel,
                "thread_ts": req.thread_ts,
                "trace": tracing.row_trace(inbox),  # the asking run: its answer links to it
            },
            prompt=message_params(inbox, _shown(req), ref=req.id),
            expiry=expiry_timer_params(inbox, req),
        )
        for req in effects.approvals
    ]
    return PreparedEffects(
        messages=[message_params(inbox, m) for m in effects.messages],
        session=check_json(effects.session, "session")
        if effects.save_session and effects.forget is None
        else None,
        set_aside_session=None
        if effects.set_aside_session is None
        else storable(effects.set_aside_session),
        timers=[timer_params(inbox, t, now) for t in effects.timers],
        cancel=[storable(name) for name in effects.cancel_timers],  # such a name matches none
        approvals=approvals,
        traceback=None if effects.traceback is None else storable(effects.traceback[-8000:]),
        usage=check_json(usage.to_json(effects.usage), "usage") if effects.usage else None,
        cost=usage.known_cost(effects.usage),
        memory=list(effects.memory) if effects.forget is None else [],
        run_id=effects.timing.run_id if effects.timing is not None else None,
        tool_waits={
            w.event_id: {
                "id": w.request_id,
                "error": storable(w.reason)[:2000],
                "first": w.first_failed_at,
                "tries": w.tries,
                "retry_at": w.retry_at,
                "told": w.told,
            }
            for w in effects.tool_waits
        },
        tool_outcomes=[
            {"id": rid, "state": state, "error": None if err is None else storable(err)[:2000]}
            for rid, (state, err) in effects.tool_outcomes.items()
        ],
    )


def _shown(req: ApprovalRequest) -> Post:
    """The prompt an approval is shown with: no path stores an approval nobody sees."""
    if req.prompt is None:
        raise InvalidInput(
            f"approval {req.id!r} has no prompt: ask with run.ask, which shows one to the people "
            "who may answer"
        )
    return req.prompt


# -- rows to records -------------------------------------------------------------------------


def event_record(row: Row, status: str | None = None, attempts: int | None = None) -> StoredEvent:
    """A row as an event, with the trace it was stored in (None: untraced)."""
    keys = row.keys()
    fields: dict[str, Any] = {
        "id": int(row["id"]),
        "inbox": str(row["inbox"]),
        "source": str(row["source"]),
        "source_id": str(row["source_id"]),
        "payload": json.loads(row["payload"]),
        "status": status or row["status"],
        "attempts": int(row["attempts"]) if attempts is None else attempts,
        "created_at": int(row["created_at"]),
        "error": row["error"],
        "traceback": row["traceback"] if "traceback" in keys else None,
    }
    return StoredEvent(**fields, trace=row["trace"] if "trace" in keys else None)


def lease_record(row: Row | None) -> Lease | None:
    if row is None:
        return None
    return Lease(str(row["inbox"]), str(row["holder"]), int(row["gen"]), int(row["expires_at"]))


def approval_record(row: Row | None) -> ApprovalState | None:
    if row is None:
        return None
    return ApprovalState(
        id=str(row["id"]),
        inbox=str(row["inbox"]),
        tool=str(row["tool"]),
        args=json.loads(row["args"]),
        requester=str(row["requester"]),
        approvers=tuple(json.loads(row["approvers"])),
        deadline=int(row["deadline"]),
        created_at=int(row["created_at"]),
        answer=row["answer"],
        answered_by=row["answered_by"],
        answered_at=row["answered_at"],
        prompt_channel=row["prompt_channel"],
        prompt_ts=row["prompt_ts"],
        summary=row["summary"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        tool_state=row["tool_state"],
        tool_error=row["tool_error"],
        tool_first_failed_at=row["tool_first_failed_at"],
        tool_tries=int(row["tool_tries"] or 0),
        tool_retry_at=row["tool_retry_at"],
        tool_told=int(row["tool_told"] or 0),
        trace=row["trace"] if "trace" in list(row.keys()) else None,
    )


def outbox_record(row: Row) -> OutboxRow:
    return OutboxRow(
        id=int(row["id"]),
        inbox=str(row["inbox"]),
        kind=str(row["kind"]),
        channel=str(row["channel"]),
        thread_ts=str(row["thread_ts"]),
        text=str(row["text"]),
        blocks=None if row["blocks"] is None else json.loads(row["blocks"]),
        facts=None if row["facts"] is None else json.loads(row["facts"]),
        priority=str(row["priority"]),
        status=row["status"],
        ref=row["ref"],
        user=row["user_id"],
        attempts=int(row["attempts"]),
        error=row["error"],
        created_at=int(row["created_at"]),
        dispatch_id=row["dispatch_id"],
        answers=tuple(json.loads(row["answers"])) if row["answers"] else (),
        look_first=bool(row["look_first"]),
    )


def timer_record(row: Row) -> TimerState:
    return TimerState(
        id=str(row["id"]),
        inbox=str(row["inbox"]),
        kind=str(row["kind"]),
        next_at=int(row["next_at"]),
        policy=str(row["policy"]),
        payload=json.loads(row["payload"]),
    )


def run_record(row: Row) -> RunRecord:
    return RunRecord(
        inbox=str(row["inbox"]),
        holder=str(row["holder"]),
        gen=int(row["gen"]),
        claim_seq=int(row["claim_seq"]),
        finish_seq=int(row["finish_seq"]),
        events=tuple(json.loads(row["events"])),
        claimed_at=int(row["claimed_at"]),
        finished_at=int(row["finished_at"]),
        usage=usage.from_json(json.loads(row["usage"])) if row["usage"] else {},
        outcome=row["outcome"],
        run_id=row["run_id"],
        started_ms=None if row["started_ms"] is None else int(row["started_ms"]),
        finished_ms=None if row["finished_ms"] is None else int(row["finished_ms"]),
    )
