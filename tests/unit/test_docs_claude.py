"""docs/claude.md cannot drift from the bench: its table is the Claude rows of bench/RESULTS.md
(taken by `python -m bench --only claude`), and the cost per message it and the README state is
those rows' tokens at the price table's input price."""

from __future__ import annotations

import re
from pathlib import Path

from wakeful.bot.builtin.claude_prices import PRICES

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "claude.md").read_text()
README = (ROOT / "README.md").read_text()
SETTINGS = (ROOT / "docs" / "settings.md").read_text()
RESULTS = (ROOT / "bench" / "RESULTS.md").read_text()


def claude_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| Claude")]


def test_the_page_shows_the_benchs_claude_rows_as_they_are() -> None:
    rows = claude_rows(RESULTS)
    assert len(rows) == 3 and all("| met |" in r for r in rows), rows
    assert claude_rows(PAGE) == rows


def test_the_cost_per_message_is_the_benchs_tokens_at_the_list_price() -> None:
    [chat] = [r for r in claude_rows(RESULTS) if "conversation" in r]
    cached = float(re.search(r"\| ([\d,.]+) tokens \|", chat).group(1).replace(",", ""))  # type: ignore[union-attr]
    plain = float(re.search(r"([\d,]+) without caching", chat).group(1).replace(",", ""))  # type: ignore[union-attr]
    price = PRICES["claude-sonnet-5"].input / 1_000_000
    with_, without = f"${cached * price:.3f}", f"${plain * price:.3f}"
    stated = f"about **{with_} of input with caching, against {without} without**"
    assert stated in PAGE
    assert f"about {with_} of input with caching\nagainst {without} without" in README
    assert f"{cached:,.0f}\nagainst {plain:,.0f} a turn" in PAGE


def test_the_claude_settings_are_in_the_settings_reference() -> None:
    for name in ("WAKEFUL_CLAUDE_CACHE_TTL", "WAKEFUL_CLAUDE_PRICES"):
        assert f"| `{name}` |" in SETTINGS
        assert name in PAGE
