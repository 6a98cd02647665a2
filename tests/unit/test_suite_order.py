"""The suite's schedule names real modules: a renamed one would silently lose its place."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_long_module_named_first_exists_once() -> None:
    assert [m for m in LONG_FIRST if not (ROOT / m).is_file()] == []
    assert len(set(LONG_FIRST)) == len(LONG_FIRST)
