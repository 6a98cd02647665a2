"""The operator's commands: `inspect`, `backup`, `restore` and `doctor` (registered by cli;
`inspect --memory` is privacy.py's).

Each reads its settings from the environment like every other command; what they print is
redacted like every log line.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Protocol

from wakeful.bot.commands.inspection import Described
from wakeful.bot.process.config import Config
from wakeful.core import logs
from wakeful.core.errors import InvalidInput
from wakeful.core.store.overview import InboxView, Overview
from wakeful.core.store.restores import Restored
from wakeful.core.store.target import store_target

PG_DUMP = (
    "the store is PostgreSQL: back it up with pg_dump, which takes a consistent snapshot while "
    "wakeful runs (nothing needs quiescing), e.g. pg_dump --format=custom --file={path} "
    '"$WAKEFUL_DB"; restore with pg_restore --clean --dbname="$WAKEFUL_DB" {path} after '
    "stopping every wakeful process, then `wakeful restore --mark-only {path}` so replies "
    "Slack already shows are not posted again"
)


class OpsStore(Described, Protocol):
    """The store as `inspect` and `restore` use it: read the views, mark a copy restored."""

    def overview(self, now: int, *, limit: int) -> Overview: ...

    def inbox_view(self, inbox: str, now: int, *, limit: int) -> InboxView: ...

    def mark_restored(self, now: int, source: str) -> Restored: ...

    def close(self) -> None: ...


def inspect(args: argparse.Namespace, env: dict[str, str]) -> int:
    from wakeful.bot.commands.inspection import (
        header_line,
        render_inbox,
        render_json,
        render_overview,
    )
    from wakeful.core.store import open_store
    from wakeful.core.store.probe import check_readable

    if args.contents and not args.memory:
        raise InvalidInput("--contents shows the memory documents' text: use it with --memory")
    if args.memory:
        from wakeful.bot.commands.privacy import inspect_memory

        return inspect_memory(args, env)
    config = Config.from_env(env)
    check_readable(config.db)
    store: OpsStore = open_store(config.db, config.settings, migrate=False)
    shown = logs.redact(config.db)
    now = int(time.time())
    try:
        if args.inbox is None:
            overview = store.overview(now, limit=args.limit)
            text = (
                render_json(overview, store, shown)
                if args.json
                else render_overview(overview, header_line(shown, store, now))
            )
            print(text)
            return 0
        view = store.inbox_view(args.inbox, now, limit=args.limit)
        if args.json:
            print(render_json(view, store, shown))
        else:
            print(render_inbox(view, header_line(shown, store, now)))
    finally:
        store.close()
    empty = not (view.events or view.runs or view.outbox or view.timers or view.approvals)
    if empty and view.lease is None:
        print(
            f"wakeful: nothing stored for inbox {args.inbox!r} (inbox ids look like T123:U456; "
            "`wakeful inspect` lists the busy ones)",
            file=sys.stderr,
        )
        return 1
    return 0


def _sqlite_file(db: str, path: str) -> str | None:
    """The SQLite store's file; None (after saying to use pg_dump) for PostgreSQL."""
    backend, file = store_target(db, "WAKEFUL_DB")
    if backend == "postgres":
        print(f"wakeful: {PG_DUMP.format(path=path)}", file=sys.stderr)
        return None
    return file


def backup(args: argparse.Namespace, env: dict[str, str]) -> int:
    from wakeful.core.store import sqlite_files

    source = _sqlite_file(Config.from_env(env).db, args.path)
    if source is None:
        return 2
    copied = sqlite_files.backup(source, args.path)
    print(
        f"backed up {source} to {copied.path}: {copied.events} events, schema "
        f"{copied.schema_version}, {copied.bytes:,} bytes, integrity ok, in {copied.seconds:.2f} s"
    )
    return 0


def restore(args: argparse.Namespace, env: dict[str, str]) -> int:
    from wakeful.core.store import sqlite_files

    db = Config.from_env(env).db
    if args.mark_only:
        return _mark_restored(db, args.path)
    target = _sqlite_file(db, args.path)
    if target is None:
        return 2
    try:
        copied = sqlite_files.restore(args.path, target)
    except sqlite_files.StoreHeld as exc:
        print(f"wakeful: {exc}", file=sys.stderr)
        return 1
    aside = f"; the previous store was moved to {copied.set_aside}" if copied.set_aside else ""
    print(
        f"restored {target} from {args.path}: {copied.events} events, schema "
        f"{copied.schema_version}, integrity ok{aside}"
    )
    return _mark_restored(target, args.path)


def _mark_restored(db: str, source: str) -> int:
    """Tell the restored store it is a copy (its leases end, its unsent replies are looked
    for in Slack before they are posted): run by `restore`, or alone after a pg_restore."""
    from wakeful.core.store import open_store

    store: OpsStore = open_store(db)
    try:
        marked = store.mark_restored(int(time.time()), source)
    finally:
        store.close()
    leases, rows = marked.leases_expired, marked.rows_to_check
    print(
        f"marked {logs.redact(db)} as restored: {_count(leases, 'lease')} of the copy ended; "
        f"{_count(rows, 'unsent reply', 'unsent replies')}, and the replies to its events, are "
        "looked for in Slack before they are posted"
    )
    return 0


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def doctor(args: argparse.Namespace, env: dict[str, str]) -> int:
    from wakeful.bot.commands.doctor import report, run_checks

    text, code = report(run_checks(env, integrity=args.integrity, manifest=args.manifest))
    print(logs.redact(text))
    return code


def _limit(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--limit must be a whole number, got {raw!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"--limit must be between 1 and 1000, got {value}")
    return value


def register(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add the operator's commands to the `wakeful` parser."""

    p = sub.add_parser("inspect", help="inboxes with backlog, dead events, outbox, approvals")
    common(p)
    p.add_argument("inbox", nargs="?", help="one inbox (e.g. T1:U1): its latest rows of each kind")
    p.add_argument("--json", action="store_true", help="JSON for scripts instead of tables")
    p.add_argument("--limit", type=_limit, default=20, help="rows per list (default 20)")
    p.add_argument(
        "--memory",
        action="store_true",
        help="instead: the inbox's memory documents (path, bytes, version, last write)",
    )
    p.add_argument("--contents", action="store_true", help="with --memory: each one's text too")
    p.set_defaults(with_env=inspect)
    p = sub.add_parser("backup", help="an online, consistent copy of the SQLite store")
    common(p)
    p.add_argument("path", help="the new file to write (never overwritten)")
    p.set_defaults(with_env=backup)
    p = sub.add_parser("restore", help="replace the SQLite store with a backup (stopped only)")
    common(p)
    p.add_argument("path", help="the backup to restore")
    p.add_argument(
        "--mark-only",
        action="store_true",
        help="only record that the store was restored by other means (pg_restore of PATH)",
    )
    p.set_defaults(with_env=restore)
    p = sub.add_parser("doctor", help="check the store, Slack, secrets and clocks")
    common(p)
    p.add_argument("--integrity", action="store_true", help="also PRAGMA integrity_check")
    p.add_argument("--manifest", help="the Slack manifest to compare scopes with")
    p.set_defaults(with_env=doctor)
