"""The README stays a front door and the pages behind it stay whole: short enough to read,
every link between them resolves, and the settings reference names every setting wakeful
reads."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.doc_samples import PAGES, ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
SETTING = re.compile(r'"((?:WAKEFUL|SLACK|ANTHROPIC)_[A-Z0-9_]*[A-Z0-9])"')  # not a prefix
INTERNAL = {"WAKEFUL_GATEWAY_CHILD_PID"}  # set by serve for its gateway child, not by people


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, '-' for ' '."""
    heads = re.findall(r"^#+ (.*)$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    # .ci/run runs exactly the two commands the README starts with.
    ci = (ROOT / ".ci" / "run").read_text()
    first, second = readme.split("```sh\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert first in ci and second in ci
    for page in ("slack", "settings", "agents", "claude", "webhooks", "operating", "scaling"):
        assert f"(docs/{page}.md)" in readme, page


def test_every_code_block_of_the_front_pages_is_opened_with_its_language() -> None:
    """A stray fence (README.md had one after the echo sample) turns the prose after it into
    code, a heading included: on these pages each block opens with its language, so a fence
    without one is a stray."""
    for name in ("README.md", "docs/agents.md", "docs/settings.md"):
        inside = False
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                assert inside or line.strip() != "```", f"{name}:{n}: a fence with no block"
                inside = not inside
        assert not inside, f"{name}: a block is never closed"


def test_every_link_between_the_pages_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path) if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_settings_reference_names_every_setting_wakeful_reads() -> None:
    reference = (ROOT / "docs" / "settings.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z0-9_]+)`", reference, re.MULTILINE))
    documented |= set(re.findall(r"^\| `[A-Z0-9_]+` / `([A-Z0-9_]+)`", reference, re.MULTILINE))
    read = {
        name
        for folder in ("core", "bot", "agents")
        for source in (ROOT / folder).rglob("*.py")
        for name in SETTING.findall(source.read_text())
    }
    assert len(read) > 40
    assert not read - INTERNAL - documented, sorted(read - INTERNAL - documented)
