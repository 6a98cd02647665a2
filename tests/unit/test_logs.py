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
