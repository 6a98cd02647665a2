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
    assert len(samples) == 5  # every event type; memory; a stream; the harness walk-through; more
    for code, printed in samples:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/agents.md", "exec"), {"__name__": "docs_sample"})
        assert out.getvalue() == printed


def test_every_public_name_of_the_harness_is_documented_here_and_where_it_is_defined() -> None:
    """Issue 35, item 3: the whole of `wakeful.agents.testing` on this page: each exported
    name, each public method and property of `Harness` with its parameters, and each field of
    what a call returns; each with a docstring too."""
    import dataclasses
    import inspect

    import wakeful.agents.testing as testing
    from wakeful.core.records import TimerState

    harness = PAGE[PAGE.index("## Testing an agent") :]
    harness = harness[: harness.index("\n## ", 1)]
    for name in testing.__all__:
        assert f"`{name}" in harness or f"{name}(" in harness, name
        assert (getattr(testing, name).__doc__ or "").strip() or name in ("T0", "TEAM", "BOT")
    for name, member in vars(testing.Harness).items():
        if name.startswith("_"):
            continue
        assert f"h.{name}" in harness, f"Harness.{name} is not on the page"
        doc = member.fget.__doc__ if isinstance(member, property) else member.__doc__
        assert (doc or "").strip(), f"Harness.{name} has no docstring"
        if callable(member):
            for param in list(inspect.signature(member).parameters)[1:]:
                line = harness.split(f"`h.{name}(", 1)[1].split("\n", 1)[0]
                assert param in line, f"h.{name}'s {param} is not on the page"
    for param in list(inspect.signature(testing.Harness).parameters):
        assert f"`{param}`" in harness, f"Harness({param}=) is not on the page"
    for cls in (testing.Outcome, testing.Sent, testing.Asked, TimerState):
        for f in dataclasses.fields(cls):
            assert f"`{f.name}`" in harness, f"{cls.__name__}.{f.name} is not on the page"
    assert "`text`: every reply" in harness  # Outcome.text, a property


def test_the_examples_are_short() -> None:
    """The issue's bar: an agent that replies, runs an approval-gated tool once across a crash
    and sets a daily timer, in under 80 lines."""
    for name in ("echo.py", "ops.py"):
        assert len((ROOT / "examples" / name).read_text().splitlines()) < 80
