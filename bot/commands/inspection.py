"""`wakeful inspect [INBOX] [--json]`: what an unattended agent is doing, without SQL.

The overview lists where work waits and what failed (backlog, dead events by inbox and the
latest ones, held outbox rows with why a deferred one waits, parked rows, open approvals,
approved calls waiting on a transient failure, given up or failed, the next timers);
`inspect INBOX` shows one inbox's latest events (with tracebacks), runs, outbox rows, timers
and approvals (with each approved call's state). Aligned tables for people, `--json` for
scripts (times as epoch seconds there, as ages here); both redacted like every log line.
Reads only: every list is one bounded, indexed statement.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Sequence
from typing import Any, Protocol

from wakeful.core import logs, usage
from wakeful.core.store.base import Connector
from wakeful.core.store.installations import ASIDE_PREFIX
from wakeful.core.store.overview import InboxView, Overview
from wakeful.core.usage import ModelUsage

CELL = 60
"""Widest cell in a table; longer text (errors, message text) is cut with an ellipsis."""


class Described(Protocol):
    """The store as the views describe it: its backend and schema."""

    @property
    def db(self) -> Connector: ...

    def schema_version(self) -> int: ...


def render_json(view: Overview | InboxView, store: Described, db: str) -> str:
    """The view as JSON: every string in it redacted (payloads, errors, tracebacks, texts),
    times as epoch seconds, each run's model usage as an object."""
    data = dataclasses.asdict(view)
    for run in data.get("runs") or []:
        run["usage"] = json.loads(run["usage"]) if run.get("usage") else None
    data = redacted(data)
    data["store"] = {"db": db, "backend": store.db.dialect, "schema": store.schema_version()}
    return json.dumps(data, indent=2, sort_keys=False)


def redacted(value: Any) -> Any:
    """`value` with every string in it passed through the log lines' redaction."""
    if isinstance(value, str):
        return logs.redact(value)
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def render_overview(view: Overview, header: str) -> str:
    t, now = view.totals, view.now
    oldest = f" (oldest {ago(now - t.oldest_pending_age, now)})" if t.events["pending"] else ""
    held_age = ""
    if t.outbox["held"] + t.outbox["sending"]:
        held_age = f" (oldest {ago(now - t.oldest_outbox_age, now)})"
    calls = view.approved_calls
    lines = [
        header,
        f"events: {t.events['pending']} pending{oldest}, {t.events['running']} running, "
        f"{t.events['dead']} dead",
        f"outbox: {t.outbox['held']} held, {t.outbox['sending']} sending, "
        f"{t.outbox['parked']} parked{held_age}",
        f"approvals open: {t.approvals_open}; approved calls waiting: {calls.get('waiting', 0)}, "
        f"given up: {calls.get('given_up', 0)}, failed: {calls.get('failed', 0)}; "
        f"timers due now: {t.timers_due}",
    ]
    sections = [
        (
            "inboxes with backlog",
            ["inbox", "pending", "running", "oldest"],
            [[r["inbox"], r["pending"], r["running"], ago(r["oldest"], now)] for r in view.backlog],
        ),
        (
            "dead events by inbox",
            ["inbox", "dead", "latest event"],
            [[r["inbox"], r["n"], r["last_id"]] for r in view.dead],
        ),
        (
            "latest dead events (wakeful dead-letters --id ID)",
            ["id", "inbox", "key", "attempts", "died", "error"],
            [
                [
                    r["id"],
                    r["inbox"],
                    f"{r['source']}:{r['source_id']}",
                    r["attempts"],
                    ago(r["died_at"], now),
                    r["error"],
                ]
                for r in view.dead_events
            ],
        ),
        (
            "held outbox (by conversation)",
            ["channel", "thread", "inbox", "held", "sending", "oldest", "next try", "why"],
            [
                [
                    r["channel"],
                    r["thread_ts"] or "-",
                    r["inbox"],
                    r["held"],
                    r["sending"],
                    ago(r["oldest"], now),
                    ago(r["retry_at"], now),
                    r["error"],
                ]
                for r in view.held_outbox
            ],
        ),
        (
            "parked outbox rows (wakeful requeue outbox ID)",
            ["id", "inbox", "channel", "attempts", "created", "error"],
            [
                [
                    r["id"],
                    r["inbox"],
                    r["channel"],
                    r["attempts"],
                    ago(r["created_at"], now),
                    r["error"],
                ]
                for r in view.parked_outbox
            ],
        ),
        (
            "open approvals",
            ["id", "inbox", "tool", "requester", "deadline"],
            [
                [r["id"], r["inbox"], r["tool"], r["requester"], ago(r["deadline"], now)]
                for r in view.open_approvals
            ],
        ),
        (
            "approved calls waiting (retried under the same key)",
            ["id", "inbox", "tool", "failing since", "tries", "next try", "reason"],
            [
                [
                    r["id"],
                    r["inbox"],
                    r["tool"],
                    ago(r["tool_first_failed_at"], now),
                    r["tool_tries"],
                    ago(r["tool_retry_at"], now),
                    r["tool_error"],
                ]
                for r in view.approved_calls_waiting
            ],
        ),
        (
            "approved calls given up or failed (latest)",
            ["id", "inbox", "tool", "state", "approved", "tries", "reason"],
            [
                [
                    r["id"],
                    r["inbox"],
                    r["tool"],
                    call_state(r["tool_state"]),
                    ago(r["answered_at"], now),
                    r["tool_tries"],
                    r["tool_error"],
                ]
                for r in view.approved_calls_failed
            ],
        ),
        (
            "next timers",
            ["timer", "inbox", "kind", "due"],
            [[r["id"], r["inbox"], r["kind"], ago(r["next_at"], now)] for r in view.next_timers],
        ),
    ]
    for title, headers, rows in sections:
        lines += ["", title, table(headers, rows)]
    return logs.redact("\n".join(lines))


def call_state(state: Any) -> str:
    """An approved call's state as shown: `given up` for `given_up`; `-` for none (not
    approved, or not called yet)."""
    return "-" if state is None else str(state).replace("_", " ")


def render_inbox(view: InboxView, header: str) -> str:
    now, c = view.now, view.counts
    models = any(r.get("usage") for r in view.runs)  # an agent that calls a model says so
    model_headers = ["model calls", "est. cost"] if models else []
    lease = view.lease
    if lease is None:
        held = "none yet"
    elif str(lease["holder"]).startswith(ASIDE_PREFIX):
        workspace = str(lease["holder"]).removeprefix(ASIDE_PREFIX)
        held = f"set aside (workspace {workspace}'s installation ended; it runs once reinstalled)"
    elif int(lease["expires_at"]) > now:
        held = f"gen {lease['gen']} held by {lease['holder']} until {ago(lease['expires_at'], now)}"
    else:
        held = f"gen {lease['gen']}, free (last held by {lease['holder']})"
    lines = [
        header,
        f"inbox {view.inbox}: {c['pending']} pending, {c['running']} running, {c['dead']} dead; "
        f"lease: {held}",
        "",
        f"events (latest {len(view.events)})",
        table(
            ["id", "status", "attempts", "gen", "source", "key", "arrived", "error"],
            [
                [
                    e["id"],
                    e["status"],
                    e["attempts"],
                    e["gen"],
                    e["source"],
                    e["source_id"],
                    ago(e["created_at"], now),
                    e["error"],
                ]
                for e in view.events
            ],
        ),
        *_tracebacks(view.events),
        *_dead_events(view.dead),
        "",
        f"runs (latest {len(view.runs)}, from the run log)",
        table(
            ["claimed", "outcome", "run_id", "took", "gen", "holder", "events", *model_headers],
            [
                [
                    ago(r["claimed_at"], now),
                    r.get("outcome"),
                    r.get("run_id"),
                    _took(r),
                    r["gen"],
                    r["holder"],
                    ",".join(str(i) for i in json.loads(r["events"])),
                    *(_run_usage(r) if models else []),
                ]
                for r in view.runs
            ],
        ),
        *_model_usage(view.runs),
        "",
        f"outbox (latest {len(view.outbox)})",
        table(
            ["id", "kind", "status", "priority", "channel", "attempts", "queued", "text / error"],
            [
                [
                    o["id"],
                    o["kind"],
                    _state(o["status"]),
                    o["priority"],
                    o["channel"],
                    o["attempts"],
                    ago(o["created_at"], now),
                    o["error"] or o["text"],
                ]
                for o in view.outbox
            ],
        ),
        "",
        "timers",
        table(
            ["timer", "kind", "policy", "due"],
            [[t["id"], t["kind"], t["policy"], ago(t["next_at"], now)] for t in view.timers],
        ),
        "",
        "approvals (latest)",
        table(
            ["id", "tool", "requester", "asked", "deadline", "answer", "call"],
            [
                [
                    a["id"],
                    a["tool"],
                    a["requester"],
                    ago(a["created_at"], now),
                    ago(a["deadline"], now),
                    _answer(a, now),
                    call_state(a.get("tool_state")),
                ]
                for a in view.approvals
            ],
        ),
        *_calls(view.approvals, now),
    ]
    return logs.redact("\n".join(lines))


def _calls(approvals: Sequence[dict[str, Any]], now: int) -> list[str]:
    """A line for each approved call not done: waiting (since when, tries, next try, the
    latest reason), given up or failed (the reason the person was told)."""
    out: list[str] = []
    for a in approvals:
        state, reason = a.get("tool_state"), logs.one_line(str(a.get("tool_error") or "-"))
        tries = f"{a.get('tool_tries') or 0} tries"
        since = ago(a.get("tool_first_failed_at"), now)
        if state == "waiting":
            what = (
                f"waiting: failing since {since}, {tries}, next try {ago(a['tool_retry_at'], now)}"
            )
        elif state == "given_up":
            what = f"given up after {tries} (failing since {since})"
        elif state == "failed":
            what = "failed for good"
        else:
            continue
        out.append(f"  approved call {a['id']}: {what}: {reason}")
    return ["", "approved calls not done", *out] if out else []


def _usage_of(run: dict[str, Any]) -> dict[str, ModelUsage]:
    return usage.from_json(json.loads(run["usage"])) if run.get("usage") else {}


def _run_usage(run: dict[str, Any]) -> list[str]:
    """A run's model calls (`3 (1 replayed)`) and estimated cost, `-` when it made none."""
    used = list(_usage_of(run).values())
    if not used:
        return ["-", "-"]
    calls, replayed = sum(u.calls for u in used), sum(u.replayed for u in used)
    shown = f"{calls} ({replayed} replayed)" if replayed else str(calls)
    return [shown, _dollars(used)]


def _model_usage(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The shown runs' model usage added up per model: calls, tokens by kind, cost."""
    totals = usage.by_model(u for r in runs for u in _usage_of(r).values())
    if not totals:
        return []
    rows = [
        [
            model,
            u.calls,
            u.replayed,
            u.input,
            u.cache_write,
            u.cache_read,
            u.output,
            _dollars([u]),
        ]
        for model, u in totals.items()
    ]
    headers = ["model", "calls", "replayed", "input", "cache write", "cache read", "output"]
    return ["", "model usage (the runs above)", table([*headers, "est. cost"], rows)]


def _dollars(used: Sequence[ModelUsage]) -> str:
    if any(u.cost is None and u.calls for u in used):
        return "unknown"
    return f"${sum(u.cost or 0.0 for u in used):.4f}"


def _state(status: str) -> str:
    return {"pending": "held", "failed": "parked"}.get(status, status)


def _answer(a: dict[str, Any], now: int) -> str:
    if a["answer"] is None:
        return "open"
    by = f" by {a['answered_by']}" if a["answered_by"] else ""
    return f"{a['answer']}{by} {ago(a['answered_at'], now)}"


def _took(run: dict[str, Any]) -> str:
    """A run's duration in ms (from the run log's ms times; whole seconds for older rows)."""
    if run.get("started_ms") is not None and run.get("finished_ms") is not None:
        return f"{max(0, int(run['finished_ms']) - int(run['started_ms']))}ms"
    return f"{int(run['finished_at']) - int(run['claimed_at'])}s"


def _dead_events(dead: Sequence[dict[str, Any]]) -> list[str]:
    """Each dead event's payload (redacted), its attempts and the end of its last traceback."""
    from wakeful.bot.commands.dead_letters import describe_attempts, payload_text

    out: list[str] = []
    for d in dead:
        out += ["", f"dead event {d['id']}", f"  payload: {payload_text(d['payload'])}"]
        attempts = list(d["attempts"])
        if not any(a.get("traceback") for a in attempts) and d.get("traceback"):
            attempts.append({"traceback": d["traceback"]})  # died before any attempt was kept
        out += describe_attempts(attempts, indent="  ")
    return out


TRACEBACK_LINES = 12
"""Lines of a failed run's traceback shown per event (its end: where it was raised)."""


def _tracebacks(events: Sequence[dict[str, Any]]) -> list[str]:
    """The traceback the agent raised, for each shown event that still has one (failed and
    retried, or dead): the end of it, where the error was raised."""
    out: list[str] = []
    for e in events:
        trace = str(e.get("traceback") or "").rstrip()
        if not trace or e["status"] in ("done", "dead"):  # a dead one's: with its attempts
            continue
        lines = trace.splitlines()
        cut = lines[-TRACEBACK_LINES:]
        more = f" (last {len(cut)} of {len(lines)} lines)" if len(lines) > len(cut) else ""
        out += ["", f"traceback of event {e['id']}, attempt {e['attempts']}{more}:"]
        out += [f"  {line}" for line in cut]
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart; `(none)` for no rows."""
    if not rows:
        return "  (none)"
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    out = [headers, *cells]
    return "\n".join(
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in out
    )


def _cell(value: Any) -> str:
    text = "-" if value is None or value == "" else str(value)
    text = " ".join(text.split())
    return text if len(text) <= CELL else text[: CELL - 1] + "…"


def ago(at: Any, now: int) -> str:
    """`3m12s ago` / `in 4m` / `now`: when something happened or is due, against `now`."""
    if at is None:
        return "-"
    delta = int(now) - int(at)
    if delta == 0:
        return "now"
    span = _span(abs(delta))
    return f"{span} ago" if delta > 0 else f"in {span}"


def _span(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def header_line(db: str, store: Described, now: int) -> str:
    when = datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"store {db} ({store.db.dialect}, schema {store.schema_version()}) at {when}"
