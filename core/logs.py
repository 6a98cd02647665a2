"""Log lines an operator can follow and a machine can parse, that never carry a secret.

A run's lines share its context (inbox, event ids, lease generation, run id, holder), set once
by the worker in a context variable, so a line logged anywhere inside the run (the agent, the
store, the SDKs) carries it without being passed along. `WAKEFUL_LOG_FORMAT=json` writes one
JSON object per line; the default is a human line with the context appended. Every line, and
every error the command line prints, goes through `redact` last: known secret values and
anything shaped like a Slack or Anthropic token, a Slack response_url or a password in a URL
(`user:password@` or `?password=`) becomes `[redacted]`.

What a line quotes (a request's field, an exception's message) can never start a line of its
own: in the text format every control character (newline, carriage return, ESC, C1 codes),
U+2028 and U+2029 is written escaped (`\\n`, `\\x1b`, `\\u2028`), and a traceback's lines are
indented under the line they belong to; in JSON, where `json` escapes only the C0 codes, U+2028,
U+2029, DEL and the C1 codes are escaped too.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType, TracebackType
from typing import Any, TextIO

FORMATS = ("text", "json")
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_CONTEXT: ContextVar[Mapping[str, Any]] = ContextVar("wakeful_log_context", default=_EMPTY)
_SHAPES = re.compile(
    r"xox[abeoprs]-[A-Za-z0-9-]+"  # Slack bot / user / config tokens
    r"|xapp-[A-Za-z0-9-]+"  # Slack app-level tokens
    r"|sk-ant-[A-Za-z0-9_-]+"  # Anthropic keys
    r"|https?://hooks\.slack\.com/[^\s'\"<>,]+"  # response_urls and incoming webhooks
    r"|https?%3A%2F%2Fhooks\.slack\.com%2F[^\s&'\"<>,]+",  # the same, form-encoded
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*):[^@\s]*@")
_PARAM_PASSWORD = re.compile(r"([?&;\s](?:ssl)?password=)[^&;\s'\"]*", re.IGNORECASE)
"""`?password=...` in a PostgreSQL URL (and `password=...` in a libpq keyword string)."""
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""What could end a line, or drive a terminal, if written as is."""
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029]")
"""What `json.dumps(ensure_ascii=False)` leaves raw that a line reader may split on."""
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
TRACEBACK_INDENT = "    "
"""The start of every line of a traceback in the text format: never a line of its own."""
_secrets: list[str] = []
_secrets_lock = threading.Lock()
MASK = "[redacted]"
_format = ["text"]
"""The format `configure` chose: `say` writes its lines in it too."""


@contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Add `fields` to every log line written inside the block (in this thread or task)."""
    token = _CONTEXT.set({**_CONTEXT.get(), **fields})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current() -> Mapping[str, Any]:
    """The fields of the innermost `context` around the caller."""
    return _CONTEXT.get()


def add_secrets(values: Iterable[str]) -> None:
    """Values that must never be written: each becomes `[redacted]` wherever it appears."""
    with _secrets_lock:
        for value in values:
            if value and len(value) >= 6 and value not in _secrets:
                _secrets.append(value)
        _secrets.sort(key=len, reverse=True)  # a longer secret containing a shorter one first
        _redacted.clear()  # what was safe may hold a secret now


_redacted: dict[str, str] = {}
_REDACTED_MAX = 4096
SHORT = 256
"""Longest text `redact_short` remembers."""


def redact_short(text: str) -> str:
    """`redact` of a short text (at most SHORT characters), remembered: a span's attributes
    repeat the same few values (an inbox, a route, a model) on every request."""
    if len(text) > SHORT:
        return redact(text)
    done = _redacted.get(text)
    if done is None:
        if len(_redacted) >= _REDACTED_MAX:
            _redacted.clear()
        done = _redacted[text] = redact(text)
    return done


def redact(text: str) -> str:
    """`text` with every known secret, token-shaped string and URL password masked."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _SHAPES.sub(MASK, text)
    text = _PARAM_PASSWORD.sub(rf"\1{MASK}", text)
    return _URL_PASSWORD.sub(rf"\1:{MASK}@", text)


_SECRET_KINDS = (
    (re.compile(r"xox[a-z]-[A-Za-z0-9-]+"), "a Slack token"),
    (re.compile(r"xapp-[A-Za-z0-9-]+"), "a Slack app token"),
    (re.compile(r"[sr]k_(?:live|test)_[A-Za-z0-9]+"), "a Stripe key"),
    (re.compile(r"sk-ant-[A-Za-z0-9_-]+"), "an Anthropic key"),
    (re.compile(r"hooks\.slack\.com/", re.IGNORECASE), "a Slack webhook or response URL"),
    (_URL_PASSWORD, "a password in a URL"),
    (_PARAM_PASSWORD, "a password"),
)


def secret_kind(text: str) -> str | None:
    """What kind of secret `text` holds (one `redact` would mask, or a Stripe key), never the
    secret itself; None when it holds none."""
    with _secrets_lock:
        known = any(secret in text for secret in _secrets)
    if known:
        return "a secret this process holds"
    return next((kind for shape, kind in _SECRET_KINDS if shape.search(text)), None)


def inline(text: str) -> str:
    """`text` with every control character, U+2028 and U+2029 escaped (`\\n`, `\\x1b`,
    `\\u2028`): one line that cannot move the cursor, however it was made."""
    return _CONTROLS.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return _SHORT.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def _json_line(value: Any) -> str:
    """One JSON object on one line, whatever its strings hold (see the module's note)."""
    text = redact(json.dumps(value, default=str, ensure_ascii=False))
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _Stamp(logging.Filter):
    """Copies the run context onto the record when it is made, in the thread that made it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.wakeful = dict(_CONTEXT.get())
        return True


class TextFormatter(logging.Formatter):
    """The classic line, then the run context as key=value pairs; redacted, on one line
    (controls escaped), a traceback indented under it."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        fields: Mapping[str, Any] = getattr(record, "wakeful", None) or {}
        if fields:
            line += " [" + " ".join(f"{k}={_flat(v)}" for k, v in fields.items()) + "]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        more = [
            record.exc_text or "",
            self.formatStack(record.stack_info) if record.stack_info else "",
        ]
        lines = [inline(redact(line))]
        for block in more:
            lines += [TRACEBACK_INDENT + inline(redact(part)) for part in block.split("\n") if part]
        return "\n".join(lines)


TRACE_IDS: Callable[[], tuple[str, str] | None] | None = None
"""The (trace id, span id) of the span a line is written in: set by core/tracing.py while it
makes spans, None otherwise (one check per line)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the run context, the trace and
    span ids of the span it was written in (core/tracing.py), and the traceback (as one string)
    when there is one; redacted. It formats in the thread that logs (a StreamHandler)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "wakeful", None) or {})
        if TRACE_IDS is not None and (ids := TRACE_IDS()) is not None:  # inside a span
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return _json_line(line)


def _flat(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def configure(level: str, fmt: str = "text", secrets: Iterable[str] = ()) -> None:
    """Send every logger's lines to stderr in `fmt`, redacted; uncaught exceptions (main
    thread or any other) become log lines too, so they are redacted and parseable alike."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    add_secrets(secrets)
    _format[0] = fmt
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_Stamp())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_thread_uncaught


def say(text: str, stream: TextIO | None = None, level: str = "info") -> None:
    """A line a command writes itself (`wakeful: listening on ...` on stdout, the one line
    that says why a process stopped on stderr), redacted, in the configured format: with
    WAKEFUL_LOG_FORMAT=json it is a JSON object like every log line, so a collector parses
    every line a process writes, its last one included."""
    out = sys.stdout if stream is None else stream
    if _format[0] == "json":
        stamp = datetime.datetime.now(datetime.UTC)
        line = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": level,
            "logger": "wakeful",
            "message": text.removeprefix("wakeful: "),
        }
        print(_json_line(line), file=out, flush=True)
    else:
        print(inline(redact(text)), file=out, flush=True)


def one_line(text: str) -> str:
    """A message that may span lines (psycopg puts a server's DETAIL and HINT on lines of
    their own) as one line: the lines joined with "; ", runs of spaces collapsed."""
    parts = [" ".join(part.split()) for part in str(text).splitlines()]
    return "; ".join(p for p in parts if p)


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("wakeful").critical("uncaught %s", kind.__name__, exc_info=(kind, exc, tb))


def _log_thread_uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread else "?"
    logging.getLogger("wakeful").critical(
        "uncaught %s in thread %s",
        args.exc_type.__name__,
        name,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )
