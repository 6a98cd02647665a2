"""docs/agents.md cannot drift: its copies of the examples are the examples, and its harness
sample prints what the page says it prints (run here, on the real harness)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "agents.md").read_text()
COPY = re.compile(r"<!-- the same as (\S+) -->\n```python\n(.*?)```", re.DOTALL)
RUNS = re.compile(
    r"<!-- runs: the lines it prints follow -->\n```python\n(.*?)```\n\n```text\n(.*?)```",
    re.DOTALL,
)


def test_the_page_shows_the_examples_as_they_are() -> None:
    copies = COPY.findall(PAGE)
    assert {name for name, _ in copies} == {"examples/echo.py", "examples/ops.py"}
    for name, code in copies:
        assert code == (ROOT / name).read_text(), f"docs/agents.md's copy of {name} drifted"


def test_each_sample_prints_what_the_page_says() -> None:
    samples = RUNS.findall(PAGE)
    assert len(samples) == 2  # every event type as received; the harness walk-through
    for code, printed in samples:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/agents.md", "exec"), {"__name__": "docs_sample"})
        assert out.getvalue() == printed


def test_the_examples_are_short() -> None:
    """The issue's bar: an agent that replies, runs an approval-gated tool once across a crash
    and sets a daily timer, in under 80 lines."""
    for name in ("echo.py", "ops.py"):
        assert len((ROOT / "examples" / name).read_text().splitlines()) < 80
