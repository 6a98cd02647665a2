"""Log lines: JSON with the run's context on every line, and never a secret."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from wakeful.core import logs

BOT = "xoxb-1111-2222-abcdefSECRET"
SIGNING = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    """A handler like the one `logs.configure` installs, writing to a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.addFilter(logs._Stamp())
    log = logging.getLogger("wakeful.test")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    logs.add_secrets([SIGNING])
    yield buffer, handler
    log.removeHandler(handler)


def test_every_line_of_a_run_carries_its_context_in_json(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    buffer, handler = captured
    handler.setFormatter(logs.JsonFormatter())
    log = logging.getLogger("wakeful.test")
    with logs.context(inbox="T1:U1", events=[4, 5], gen=3, run_id="r1"):
        log.info("agent says %s", "hi")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
    log.info("outside")
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert [x["message"] for x in lines] == ["agent says hi", "failed", "outside"]
    for line in lines[:2]:
        assert (line["inbox"], line["events"], line["gen"], line["run_id"]) == (
            "T1:U1",
            [4, 5],
            3,
            "r1",
        )
    assert "RuntimeError: boom" in lines[1]["exc"]
    assert "inbox" not in lines[2]


def test_the_text_format_appends_the_context(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    buffer, handler = captured
    handler.setFormatter(logs.TextFormatter())
    with logs.context(inbox="T1:U1", events=[4, 5], gen=3, run_id="r1"):
        logging.getLogger("wakeful.test").warning("slow")
    assert buffer.getvalue().rstrip().endswith("slow [inbox=T1:U1 events=4,5 gen=3 run_id=r1]")


@pytest.mark.parametrize("formatter", [logs.JsonFormatter(), logs.TextFormatter()])
def test_no_secret_survives_a_log_line_or_its_traceback(
    captured: tuple[io.StringIO, logging.Handler], formatter: logging.Formatter
) -> None:
    buffer, handler = captured
    handler.setFormatter(formatter)
    log = logging.getLogger("wakeful.test")
    log.warning("token %s secret %s", BOT, SIGNING)
    try:
        raise ValueError("postgresql://wakeful:hunter2pw@db:5432/w failed, key sk-ant-api03-XyZ")
    except ValueError:
        log.exception("connect")
    out = buffer.getvalue()
    for secret in (BOT, SIGNING, "hunter2pw", "sk-ant-api03-XyZ", "xapp-"):
        assert secret not in out
    assert out.count(logs.MASK) >= 4


def test_redact_masks_known_values_and_token_shapes() -> None:
    logs.add_secrets(["a-signing-secret-value"])
    text = "a-signing-secret-value xapp-1-A0-99-ff xoxb-9 postgres://u:p@h/d"
    assert logs.redact(text) == ("[redacted] [redacted] [redacted] postgres://u:[redacted]@h/d")


# -- issue 34, item 6 (a): request data never starts a line -------------------------------

FORGED = "U1\n2026-01-01 00:00:00,000 CRITICAL wakeful: \x1b[2Jforged\r\x85x\u2028y\u2029z\x7f"
"""A Slack id as a signed body once carried it: a newline and what looks like a line of its
own, ESC clearing the screen, a carriage return, NEL, U+2028 and U+2029, DEL."""
LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)


def lines_of(out: str) -> list[str]:
    """The lines a reader of the stream sees: split at every line end any reader knows."""
    return out.splitlines()


@pytest.mark.parametrize("level", LEVELS, ids=logging.getLevelName)
def test_a_text_line_quoting_request_data_stays_one_line(
    captured: tuple[io.StringIO, logging.Handler], level: int
) -> None:
    buffer, handler = captured
    handler.setFormatter(logs.TextFormatter())
    log = logging.getLogger("wakeful.test")
    with logs.context(inbox=f"T1:{FORGED}"):
        log.log(level, "message from %s", FORGED)
        log.log(level, FORGED)
    [first, second] = lines_of(buffer.getvalue())
    for line in (first, second):
        assert "\x1b" not in line and "\x7f" not in line
        assert "forged" in line and "\\n2026-01-01" in line and "\\x1b[2J" in line
        assert line.endswith("\\x7f]")  # the context too, its pairs last on the line
    assert "\\u2028y\\u2029z" in first and "\\r\\x85x" in first


def test_a_traceback_quoting_request_data_never_starts_a_line(
    captured: tuple[io.StringIO, logging.Handler],
) -> None:
    """The exception's message is the request's: each line of the traceback is indented
    under the line it belongs to, so every line that starts at the margin is a real one."""
    buffer, handler = captured
    handler.setFormatter(logs.TextFormatter())
    log = logging.getLogger("wakeful.test")
    try:
        raise ValueError(f"bad user {FORGED}")
    except ValueError:
        log.exception("listener failed for %s", FORGED)
    log.info("next")
    lines = lines_of(buffer.getvalue())
    at_margin = [line for line in lines if not line.startswith(logs.TRACEBACK_INDENT)]
    assert len(at_margin) == 2 and at_margin[1].endswith("wakeful.test: next"), lines
    assert "listener failed for U1\\n2026" in at_margin[0]
    assert any("Traceback (most recent call last):" in line for line in lines)
    assert any("ValueError: bad user U1" in line for line in lines)
    assert not any("\x1b" in line for line in lines)


@pytest.mark.parametrize("level", LEVELS, ids=logging.getLevelName)
def test_a_json_line_quoting_request_data_is_one_line_with_2028_escaped(
    captured: tuple[io.StringIO, logging.Handler], level: int
) -> None:
    buffer, handler = captured
    handler.setFormatter(logs.JsonFormatter())
    log = logging.getLogger("wakeful.test")
    with logs.context(inbox=f"T1:{FORGED}"):
        try:
            raise ValueError(FORGED)
        except ValueError:
            log.log(level, "message from %s", FORGED, exc_info=True)
    out = buffer.getvalue()
    [line] = lines_of(out)  # splitlines splits at U+2028, U+2029 and NEL too
    for raw in ("\u2028", "\u2029", "\x85", "\x7f", "\x1b"):
        assert raw not in out
    assert "\\u2028" in line and "\\u2029" in line
    parsed = json.loads(line)
    assert parsed["message"] == f"message from {FORGED}"  # the same text, escaped only
    assert parsed["inbox"] == f"T1:{FORGED}" and FORGED in parsed["exc"]


@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_a_commands_own_line_quoting_request_data_stays_one_line(fmt: str) -> None:
    """`say` (what a command prints itself, e.g. the line saying why it stopped) too."""
    before = logs._format[0]
    logs._format[0] = fmt
    try:
        out = io.StringIO()
        logs.say(f"wakeful: bad {FORGED}", out, "error")
    finally:
        logs._format[0] = before
    [line] = lines_of(out.getvalue())
    assert "\x1b" not in line and "\u2028" not in line
    if fmt == "json":
        assert json.loads(line)["message"] == f"bad {FORGED}"
    else:
        assert line.startswith("wakeful: bad U1\\n2026")
