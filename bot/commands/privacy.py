"""What is kept about a person, from the command line (issue 38): `wakeful inspect INBOX
--memory` lists their memory documents, `wakeful export INBOX` writes everything kept about
them as JSON (the data-subject request) and `wakeful forget INBOX` erases it.

`forget` is the same erasure as the person's own Forget (core/store/forget.py): one
transaction that also fences a worker running the inbox, so it is safe while `serve` runs;
then the store's files are scrubbed (held back, the scrub is retried by the scheduler). It
asks first on a terminal; without one it needs `--yes` (a script must say so, never erase by
default). Whatever these commands print or write is redacted like every log line: a click's
response_url is a live credential, not the person's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from wakeful.bot.commands.inspection import Described, ago, header_line, redacted, table
from wakeful.bot.process.config import Config
from wakeful.core import logs
from wakeful.core.errors import InvalidInput
from wakeful.core.inbox_id import InboxId
from wakeful.core.store.forget import Forgotten
from wakeful.core.store.memory import MemoryDoc

PROMPT = "Forget everything kept about {inbox}? This cannot be undone. [y/N] "
NO_TERMINAL = (
    "forget asks before it erases and there is no terminal to ask on: "
    "pass --yes to forget {inbox} (nothing was erased)"
)
NOT_SCRUBBED = (
    "the erased text is unreachable, but may remain in the store's files for now (another "
    "process or an older transaction held the store): the scrub is retried until it is done, "
    "every few seconds by the scheduler of `wakeful serve` (or by the next `wakeful forget`); "
    "`wakeful export {inbox}` shows when (`scrubbed_at` in `forgotten`)"
)
INBOX_HELP = "an inbox id like T123:U456 (a person) or channel:C123 (a conversation)"
_INBOX = re.compile(r"[A-Za-z0-9_-]+:[A-Za-z0-9_-]+")
"""Two Slack ids (or `channel` and one) around a colon: nothing else is a person's inbox."""
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029]")
"""What json.dumps(ensure_ascii=False) leaves raw that a terminal may act on."""


class PrivacyStore(Described, Protocol):
    """The store as these commands use it."""

    def memory_docs(self, owner: str) -> list[MemoryDoc]: ...

    def memory_read(self, owner: str, path: str) -> str | None: ...

    def forget_inbox(self, inbox: str, asked_by: str, now: int) -> Forgotten: ...

    def export_inbox(self, inbox: str) -> dict[str, Any]: ...

    def close(self) -> None: ...


def inbox_arg(text: str | None) -> str:
    """The INBOX of a command that is about one person: a person's or a conversation's inbox
    id, or a usage error (exit 2) saying what one looks like, before any store is opened."""
    raw = (text or "").strip()
    inbox = InboxId(raw)
    if _INBOX.fullmatch(raw) and (inbox.user or inbox.channel):
        return raw
    shown = logs.inline(logs.redact(text or ""))
    raise InvalidInput(f"INBOX must be {INBOX_HELP}, got {shown!r}")


def _open(env: dict[str, str]) -> PrivacyStore:
    """The store as it is: a mistyped path is refused, never created nor migrated."""
    from wakeful.core.store import open_store
    from wakeful.core.store.probe import check_readable

    config = Config.from_env(env)
    check_readable(config.db)
    store: PrivacyStore = open_store(config.db, config.settings, migrate=False)
    return store


def inspect_memory(args: argparse.Namespace, env: dict[str, str]) -> int:
    """`wakeful inspect INBOX --memory [--contents] [--json]`: instead of the inbox's usual
    view, its memory documents (path, bytes, version, last write); their text only when
    asked for."""
    if args.inbox is None:
        raise InvalidInput("--memory lists one inbox's documents: wakeful inspect INBOX --memory")
    inbox = inbox_arg(args.inbox)
    config = Config.from_env(env)
    store = _open(env)
    shown = logs.redact(config.db)
    now = int(time.time())
    try:
        docs = store.memory_docs(inbox)
        texts = [store.memory_read(inbox, d.path) or "" for d in docs] if args.contents else []
        if args.json:
            print(_memory_json(store, shown, inbox, docs, texts))
        else:
            print(render_memory(inbox, docs, texts, header_line(shown, store, now), now))
    finally:
        store.close()
    return 0


def render_memory(
    inbox: str, docs: Sequence[MemoryDoc], texts: Sequence[str], header: str, now: int
) -> str:
    """The documents as a table; with `texts` (--contents), each one's text below its row."""
    size = sum(d.bytes for d in docs)
    hint = "" if texts else "; their text: --contents"
    lines = [header, f"memory of {inbox}: {_count(len(docs), 'document')}, {size:,} bytes{hint}"]
    rows = [[d.path, f"{d.bytes:,}", d.version, ago(d.written_at, now)] for d in docs]
    listed = table(["path", "bytes", "version", "last write"], rows).splitlines()
    lines.append(listed[0])
    for n, row in enumerate(listed[1:]):
        lines.append(row)
        if texts:
            lines += [f"    | {logs.inline(line)}" for line in texts[n].split("\n")]
    return logs.redact("\n".join(lines))


def _memory_json(
    store: Described, db: str, inbox: str, docs: Sequence[MemoryDoc], texts: Sequence[str]
) -> str:
    memory: list[dict[str, Any]] = [
        {"path": d.path, "bytes": d.bytes, "version": d.version, "written_at": d.written_at}
        for d in docs
    ]
    for doc, text in zip(memory, texts, strict=False):
        doc["text"] = text
    store_info = {"db": db, "backend": store.db.dialect, "schema": store.schema_version()}
    return json.dumps({"inbox": inbox, "memory": redacted(memory), "store": store_info}, indent=2)


def forget(args: argparse.Namespace, env: dict[str, str]) -> int:
    """`wakeful forget INBOX [--yes]`: erase what is kept about one person, at once with
    --yes, else after a `y` on a terminal; whether or not `serve` runs."""
    from wakeful.bot.commands.dead_letters import actor
    from wakeful.core.store.probe import check_readable

    inbox = inbox_arg(args.inbox)
    check_readable(Config.from_env(env).db)  # a store that will not open fails before asking
    if not args.yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise InvalidInput(NO_TERMINAL.format(inbox=inbox))
        if not _confirmed(PROMPT.format(inbox=inbox)):
            print("wakeful: nothing was forgotten", file=sys.stderr)
            return 1
    store = _open(env)
    try:
        done = store.forget_inbox(inbox, f"cli:{actor()}", int(time.time()))
    finally:
        store.close()
    print(
        f"forgot {inbox}: {_count(done.documents, 'document')} "
        f"({_count(done.versions, 'version')}), {_count(done.events, 'event')}, "
        f"{_count(done.outbox, 'outbox row')}"
    )
    if not done.scrubbed:
        print(NOT_SCRUBBED.format(inbox=inbox))
    return 0


def _confirmed(prompt: str) -> bool:
    try:
        answer = input(prompt)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def export(args: argparse.Namespace, env: dict[str, str]) -> int:
    """`wakeful export INBOX [--out FILE [--force]]`: what is kept about one person as JSON,
    on stdout or in FILE (written whole or not at all; an existing one only with --force)."""
    inbox = inbox_arg(args.inbox)
    if args.force and args.out is None:
        raise InvalidInput("--force overwrites the --out FILE: give one")
    if args.out is not None and not args.force and os.path.lexists(args.out):
        raise InvalidInput(f"{args.out} exists: pass --force to overwrite it")
    store = _open(env)
    try:
        data = store.export_inbox(inbox)
    finally:
        store.close()
    text = export_json(data)
    kept = [data["memory"], data["events"], data["outbox"], data["timers"], data["approvals"]]
    if not any(kept) and data["conversation"] is None:
        print(f"wakeful: nothing is kept about {inbox}", file=sys.stderr)
    if args.out is None:
        print(text)
        return 0
    _write_new(Path(args.out), text + "\n", replace=args.force)
    print(
        f"exported {inbox} to {args.out}: {_count(len(data['memory']), 'memory version')}, "
        f"{_count(len(data['events']), 'event')}, {_count(len(data['outbox']), 'outbox row')}"
    )
    return 0


def export_json(data: dict[str, Any]) -> str:
    """The export as JSON text: redacted like every log line; the characters JSON leaves raw
    that a terminal would act on (C1 codes, U+2028, U+2029) escaped."""
    text = json.dumps(redacted(data), indent=2, ensure_ascii=False, default=str)
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _write_new(path: Path, text: str, *, replace: bool) -> None:
    """Write `path` whole (a temporary file beside it, then renamed), readable by its owner
    only: it holds a person's words. Without `replace` an existing file is never touched,
    even one that appeared meanwhile (a hard link, which fails on an existing name)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise InvalidInput(f"{path} exists: pass --force to overwrite it") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _count(n: int, one: str) -> str:
    return f"{n} {one if n == 1 else one + 's'}"


def register(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add `forget` and `export` to the `wakeful` parser (`inspect --memory`: ops.py)."""
    p = sub.add_parser("forget", help="erase everything kept about one person (asks first)")
    common(p)
    p.add_argument("inbox", help=INBOX_HELP)
    p.add_argument("--yes", action="store_true", help="erase without asking (no terminal)")
    p.set_defaults(with_env=forget)
    p = sub.add_parser("export", help="everything kept about one person, as JSON")
    common(p)
    p.add_argument("inbox", help=INBOX_HELP)
    p.add_argument("--out", help="write the JSON to this file (default: stdout)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --out file")
    p.set_defaults(with_env=export)
