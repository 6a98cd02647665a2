"""The suite's schedule names real modules and classes: a renamed one would silently lose its
place."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FIRST, scope_of

ROOT = Path(__file__).resolve().parents[2]


def test_every_long_scope_named_first_exists_once() -> None:
    missing = []
    for scope in LONG_FIRST:
        module, _, cls = scope.partition("::")
        path = ROOT / module
        if not path.is_file() or (cls and f"\nclass {cls}(" not in path.read_text()):
            missing.append(scope)
    assert missing == []
    assert len(set(LONG_FIRST)) == len(LONG_FIRST)


def test_a_class_s_tests_are_one_scope_and_a_function_s_are_its_module_s() -> None:
    assert scope_of("tests/a.py::TestX::test_y[sqlite]") == "tests/a.py::TestX"
    assert scope_of("tests/a.py::test_y[sqlite]") == "tests/a.py"
