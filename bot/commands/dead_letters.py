"""`wakeful dead-letters [list|discard|requeue]` and `wakeful requeue event`: what an operator
does with dead events, by filter (inbox, error text, time range, ids), with a dry run.

Listing shows each dead event's payload (redacted like every log line) and its attempts: the
error type and message of each, the last traceback. Discard and requeue change events a batch
per transaction and are audited (the OS user, when, the filter, how many); a dry run lists
exactly what they would touch and changes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import getpass
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from wakeful.bot.process.config import Config
from wakeful.core import logs
from wakeful.core.errors import InvalidInput
from wakeful.core.records import DeadLetters, SetAsideSession, StoredEvent
from wakeful.core.settings import parse_duration
from wakeful.core.store.dead_letters import Action, Attempt, DeadFilter, Operation
from wakeful.core.store.sql import Row

PAYLOAD_CHARS = 400
"""Most characters of a payload shown per event (redacted first)."""
TRACEBACK_LINES = 12
"""Lines of the last traceback shown per event (its end: where it was raised)."""
WHEN_HELP = (
    "an ISO time (2026-12-01T21:00, UTC unless it says) or a duration ago (90s, 15m, 2h, 30d)"
)
NEEDS_FILTER = (
    "{action} needs a filter (--inbox, --error, --since, --until or --id), or --all for every "
    "dead event; try --dry-run first to see what it would touch"
)


def when(text: str, now: int, flag: str) -> int:
    """Epoch seconds of an ISO time, or of `now` minus a duration (`2h` = two hours ago),
    written as every duration setting is (core/settings.py's one parser)."""
    raw = text.strip()
    try:
        return now - int(parse_duration(flag, raw))
    except InvalidInput:
        pass
    try:
        parsed = datetime.datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(f"{flag} must be {WHEN_HELP}, got {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return int(parsed.timestamp())


def filter_of(args: argparse.Namespace, now: int) -> DeadFilter:
    """The events the flags name; InvalidInput when they contradict each other."""
    since = None if args.since is None else when(args.since, now, "--since")
    until = None if args.until is None else when(args.until, now, "--until")
    if since is not None and until is not None and since >= until:
        raise InvalidInput(
            f"--since ({_iso(since)}) is not before --until ({_iso(until)}): nothing can match; "
            "swap them"
        )
    if args.error is not None and not args.error:
        raise InvalidInput("--error needs some text to look for in the events' errors")
    ids = tuple(args.id) if args.id else None
    return DeadFilter(args.inbox, args.error, since, until, ids, args.discarded)


def _filtered(args: argparse.Namespace) -> bool:
    return any(v is not None for v in (args.inbox, args.error, args.since, args.until, args.id))


def add_filters(p: argparse.ArgumentParser) -> None:
    """The flags every dead-letter command takes to say which events it means."""
    p.add_argument("--inbox", help="only this inbox's events (T123:U456)")
    p.add_argument("--error", help="only events whose error contains this text (case as typed)")
    p.add_argument("--since", help=f"only events that died at or after this: {WHEN_HELP}")
    p.add_argument("--until", help=f"only events that died before this: {WHEN_HELP}")
    p.add_argument("--id", type=int, action="append", help="only this event id (repeat for more)")
    p.add_argument(
        "--discarded", action="store_true", help="look at discarded events instead of dead ones"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list what would be touched; change nothing"
    )
    p.add_argument("--all", action="store_true", help="discard or requeue without a filter")


def register(
    sub: Any,
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """`dead-letters` and `requeue` on the command line."""
    p = sub.add_parser(
        "dead-letters",
        help="list dead events and failed outbox rows; discard or requeue dead events",
    )
    common(p)
    p.add_argument(
        "action",
        nargs="?",
        choices=("list", "discard", "requeue"),
        default="list",
        help="list (the default), discard or requeue the events the filters name",
    )
    add_filters(p)
    p.add_argument("--limit", type=int, default=100, help="most events listed (default 100)")
    p.set_defaults(with_env=dead_letters)
    p = sub.add_parser("requeue", help="give dead events (or a failed outbox row) another go")
    common(p)
    p.add_argument("kind", choices=("event", "outbox"))
    p.add_argument("target", type=int, nargs="?", metavar="id")
    add_filters(p)
    p.set_defaults(with_env=requeue)


class DeadLetterStore(Protocol):
    """The store as these commands use it: find dead events, act on them, audited."""

    def matching(self, which: DeadFilter, limit: int | None = ...) -> list[Row]: ...

    def event(self, event_id: int) -> StoredEvent | None: ...

    def event_attempts(self, event_id: int) -> list[Attempt]: ...

    def operations(self, *, limit: int) -> list[dict[str, Any]]: ...

    def operate(self, action: Action, which: DeadFilter, actor: str, now: int) -> Operation: ...

    def dead_letters(self, *, limit: int) -> DeadLetters: ...

    def set_aside_sessions(self, *, limit: int) -> list[SetAsideSession]: ...

    def requeue_outbox(self, row_id: int, now: int) -> bool: ...

    def close(self) -> None: ...


def _open(env: dict[str, str]) -> DeadLetterStore:
    """The store as it is: a mistyped path is refused, never created."""
    from wakeful.core.store import open_store
    from wakeful.core.store.probe import check_readable

    config = Config.from_env(env)
    check_readable(config.db)
    return open_store(config.db, config.settings, migrate=False)


def dead_letters(args: argparse.Namespace, env: dict[str, str]) -> int:
    if args.limit < 1:
        raise InvalidInput(f"--limit must be 1 or more, got {args.limit}")
    if args.action != "list":
        return operate(args.action, args, env)
    now = int(time.time())
    which = filter_of(args, now)
    store = _open(env)
    try:
        rows = store.matching(which, limit=args.limit)
        kind = "discarded" if which.discarded else "dead"
        print(f"{kind} events: {len(rows)}{' (filtered)' if _filtered(args) else ''}")
        for r in rows:
            event = store.event(int(r["id"]))
            if event is not None:
                print("\n".join(describe(event, store.event_attempts(event.id), now)))
        if not _filtered(args) and not which.discarded:
            _print_outbox_and_sessions(store, args.limit)
        ops = store.operations(limit=5)
        if ops:
            print("latest operations on dead events:")
            for op in ops:
                print(
                    f"  #{op['id']}  {op['action']}  {op['touched']} event(s)  by {op['actor']}"
                    f"  at {_iso(int(op['at']))}  filter {op['filter']}"
                )
    finally:
        store.close()
    return 0


def _print_outbox_and_sessions(store: DeadLetterStore, limit: int) -> None:
    dead = store.dead_letters(limit=limit)
    print(f"failed outbox rows: {len(dead.outbox)}")
    for r in dead.outbox:
        print(
            logs.redact(
                f"  outbox {r.id}  channel {r.channel}  attempts {r.attempts}  "
                f"error: {logs.one_line(str(r.error))}  text: {r.text[:60]!r}"
            )
        )
    aside = store.set_aside_sessions(limit=limit)
    print(f"sessions set aside: {len(aside)}")
    for s in aside:
        print(
            logs.redact(
                f"  session {s.id}  inbox {s.inbox}  at {_iso(s.set_aside_at)}  "
                f"reason: {logs.one_line(s.reason)}"
            )
        )


def describe(event: StoredEvent, attempts: list[Attempt], now: int) -> list[str]:
    """A dead event as an operator reads it: what it is, its payload (redacted), each
    attempt's error, and the end of the last traceback."""
    lines = [
        logs.redact(
            f"  event {event.id}  inbox {event.inbox}  {event.source}:{event.source_id}  "
            f"attempts {event.attempts}  error: {logs.one_line(str(event.error))}"
        ),
        f"    payload: {payload_text(event.payload)}",
    ]
    shown = [dataclasses.asdict(a) for a in attempts]
    if not any(a.traceback for a in attempts) and event.traceback:
        shown.append({"traceback": event.traceback})
    return lines + describe_attempts(shown, indent="    ")


def describe_attempts(attempts: Sequence[Mapping[str, Any]], indent: str) -> list[str]:
    """One line per attempt (outcome, run_id, ms, error type and message), then the end of
    the last traceback; all redacted."""
    lines: list[str] = []
    for a in attempts:
        if a.get("attempt") is None:
            continue
        took = max(0, int(a["finished_ms"]) - int(a["started_ms"]))
        kind, message = a.get("error_type"), a.get("message")
        error = f"{kind}: {message}" if kind else (message or "-")
        lines.append(
            f"{indent}attempt {a['attempt']}  {a['outcome']}  run {a['run_id'] or '-'}  "
            f"{took}ms  {logs.redact(logs.one_line(error))}"
        )
    trace = next((a["traceback"] for a in reversed(attempts) if a.get("traceback")), None)
    if trace:
        cut = str(trace).rstrip().splitlines()[-TRACEBACK_LINES:]
        lines.append(f"{indent}last traceback (its last {len(cut)} lines):")
        lines += [f"{indent}  {logs.redact(line)}" for line in cut]
    return lines


def payload_text(payload: Any) -> str:
    """The payload as one line of JSON, redacted (tokens, known secrets), then cut."""
    text = logs.redact(json.dumps(payload, ensure_ascii=False, sort_keys=True))
    return text if len(text) <= PAYLOAD_CHARS else text[: PAYLOAD_CHARS - 1] + "…"


def operate(action: str, args: argparse.Namespace, env: dict[str, str]) -> int:
    """Discard or requeue the events the filter names (all of them only with --all)."""
    now = int(time.time())
    which = filter_of(args, now)
    if not _filtered(args) and not args.all:
        raise InvalidInput(NEEDS_FILTER.format(action=action))
    store = _open(env)
    verb = "discard" if action == "discard" else "requeue"
    kind = "discarded" if which.discarded else "dead"
    try:
        if args.dry_run:
            rows = store.matching(which)
            print(f"would {verb} {len(rows)} {kind} event(s) (dry run: nothing changed)")
            for r in rows:
                error = logs.one_line(str(r["error"]))
                print(
                    logs.redact(
                        f"  event {r['id']}  inbox {r['inbox']}  {r['source']}:{r['source_id']}  "
                        f"attempts {r['attempts']}  error: {error}"
                    )
                )
            return 0
        op = store.operate(verb, which, actor(), now)  # type: ignore[arg-type]
    finally:
        store.close()
    if not op.touched:
        print(f"wakeful: no {kind} event matched {which.describe()}", file=sys.stderr)
        return 1
    done = "discarded" if verb == "discard" else "requeued"
    per_inbox = Counter(t.inbox for t in op.touched)
    print(
        f"{done} {len(op.touched)} {kind} event(s) in {len(per_inbox)} inbox(es) "
        f"(operation #{op.id} by {actor()})"
    )
    for inbox, n in sorted(per_inbox.items()):
        print(f"  {inbox}: {n}")
    return 0


def requeue(args: argparse.Namespace, env: dict[str, str]) -> int:
    """`requeue outbox ID` as before; `requeue event ID` or `requeue event --inbox ...`."""
    if args.kind == "outbox":
        return _requeue_outbox(args, env)
    if args.target is not None:
        args.id = [*(args.id or []), args.target]
        if not args.dry_run and not (args.inbox or args.error or args.since or args.until):
            return _requeue_one(args, env)
    return operate("requeue", args, env)


def _requeue_one(args: argparse.Namespace, env: dict[str, str]) -> int:
    """The single id form keeps its old answers: `requeued event 5` or `no dead event ...`."""
    now = int(time.time())
    store = _open(env)
    try:
        op = store.operate("requeue", filter_of(args, now), actor(), now)
    finally:
        store.close()
    if not op.touched:
        kind = "discarded event" if args.discarded else "dead event"
        print(f"wakeful: no {kind} with id {', '.join(map(str, args.id))}", file=sys.stderr)
        return 1
    print(f"requeued event {', '.join(str(t.id) for t in op.touched)}")
    return 0


def _requeue_outbox(args: argparse.Namespace, env: dict[str, str]) -> int:
    if args.target is None:
        raise InvalidInput("requeue outbox needs the row's id: wakeful requeue outbox ID")
    if _filtered(args) or args.discarded or args.all or args.dry_run:
        raise InvalidInput(
            "requeue outbox takes one row's id and no filter (the filters are for events: "
            "wakeful requeue event --inbox ...)"
        )
    store = _open(env)
    try:
        ok = store.requeue_outbox(args.target, int(time.time()))
    finally:
        store.close()
    if not ok:
        print(f"wakeful: no failed outbox row with id {args.target}", file=sys.stderr)
        return 1
    print(f"requeued outbox {args.target}")
    return 0


def actor() -> str:
    """Who did it, for the audit: the OS user."""
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _iso(at: int) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
