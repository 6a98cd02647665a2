"""The samples of the README and docs/: fenced blocks after a marker comment, read, compared
with a fresh run and, on request, written back.

A page marks a sample of command output with `<!-- sample: NAME -->` on the line before a
fenced block. The block is a terminal session: `$ command` lines, each followed by what the
command printed, run in the store's folder (paths are shown relative to it). `$ # ...` lines
are steps the reader takes between commands (stopping a server); a test maps them to actions.
What changes from one run to the next (times, ages, ids, sizes, durations, column widths) is
normalised on both sides before they are compared, so a sample fails only when the command
prints something else.

`WAKEFUL_REGENERATE_SAMPLES=1 pytest tests/unit/test_docs_samples.py` writes each fresh
output into its page instead of comparing, which is how the samples are made.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
MARK = re.compile(
    r"<!-- sample: (?P<name>[^>]+?) -->\n```(?P<lang>[a-z]*)\n(?P<body>.*?)^```", re.S | re.M
)
REGENERATE = os.environ.get("WAKEFUL_REGENERATE_SAMPLES") == "1"

# What differs between two runs of the same session, most specific first.
VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d([.,]\d+)?)?Z?( UTC)?", "<time>"),
        (r"\d{8}T\d{6}Z", "<stamp>"),
        (r"\b1\d{9}\b", "<epoch>"),  # epoch seconds, as JSON shows times (`wakeful export`)
        (r"\bcli:[\w.-]+", "cli:<user>"),  # who ran `wakeful forget`: the OS user
        (r"\bworker-[0-9a-f]{8}\b", "worker-<id>"),
        (r"\bEv[0-9A-F]{16}\b", "Ev<id>"),
        (r"\b[0-9a-f]{12}\b", "<run>"),
        (r"-[0-9a-f]{8}\b", "-<hash>"),
        (r"\b[\d,]+ms\b", "<ms>"),  # a run's duration: 0ms one run, 1ms the next
        (r"\b(in )?(\d+[dhms])+( ago)?\b|\bnow\b", "<age>"),
        (r"\b[\d,]+ bytes\b", "<n> bytes"),
        (r"\b\d+\.\d+ s\b", "<s> s"),
        (r"\b(ahead of|behind)\b", "<off>"),
        (r" {2,}", " "),
    )
)


@dataclass(frozen=True)
class Sample:
    """One marked block: its page, its name and the session it shows."""

    page: Path
    name: str
    body: str

    def steps(self) -> list[tuple[str, str]]:
        """(command, what it printed) for each `$ ` line, in order."""
        out: list[tuple[str, list[str]]] = []
        for line in self.body.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            else:
                assert out, f"{self.page.name} sample {self.name!r} starts without a `$ ` line"
                out[-1][1].append(line)
        return [(cmd, printed("\n".join(lines))) for cmd, lines in out]


def samples(pages: Iterable[Path] = PAGES) -> list[Sample]:
    """Every marked sample of the pages, in page order."""
    return [
        Sample(page, m["name"], m["body"])
        for page in pages
        for m in MARK.finditer(page.read_text())
    ]


def normalise(text: str) -> list[str]:
    """The lines of `text` with what differs between runs replaced by placeholders."""
    lines = []
    for line in text.splitlines():
        for pattern, placeholder in VOLATILE:
            line = pattern.sub(placeholder, line)
        lines.append(line.rstrip())
    return lines


def printed(output: str) -> str:
    """A command's output as a sample shows it: its lines, without trailing blank ones."""
    text = output.rstrip()
    return f"{text}\n" if text else ""


def session(steps: Iterable[tuple[str, str]]) -> str:
    """A block body from (command, output) pairs: a blank line after an output of several
    sections, so the next `$ ` line stands out."""
    parts = []
    for cmd, output in steps:
        out = printed(output)
        parts.append(f"$ {cmd}\n{out}" + ("\n" if "\n\n" in out else ""))
    return "".join(parts).rstrip("\n") + "\n"


def check(sample: Sample, fresh: list[tuple[str, str]]) -> None:
    """Fail unless the fresh run prints what the page shows (or, regenerating, write it)."""
    body = session(fresh)
    if REGENERATE:
        page = sample.page.read_text()
        marker = f"<!-- sample: {sample.name} -->\n"
        start = page.index(marker)
        fence = page.index("\n", start + len(marker)) + 1
        end = page.index(sample.body, fence) + len(sample.body)
        sample.page.write_text(page[:fence] + body + page[end:])
        return
    shown, now = normalise(session(sample.steps())), normalise(body)
    assert shown == now, (
        f"{sample.page.relative_to(ROOT)}: the sample {sample.name!r} drifted from what the "
        f"command prints now (regenerate: WAKEFUL_REGENERATE_SAMPLES=1 pytest "
        f"tests/unit/test_docs_samples.py); it prints:\n{body}"
    )
