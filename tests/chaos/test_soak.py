"""The soak (tests/support/soak.py): 50 messages a second with reminders, digests and
approvals against `wakeful serve` on SQLite. Resident memory, open file descriptors, threads,
the -wal file and the backlog must stay flat. `-m chaos` runs 10 minutes; `-m soak` runs
WAKEFUL_SOAK_SECONDS (two hours by default) and prints the figures per hour."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.soak import Soak, check, hourly, run_soak


@pytest.mark.chaos
def test_ten_minutes_at_50_messages_a_second_stay_flat(tmp_path: Path) -> None:
    soak = run_soak(Soak(seconds=600, sample_every=30, warmup=120), tmp_path)
    for line in hourly(soak):
        print(line)
    assert check(soak) == []
    assert soak.samples[-1].sent >= 0.95 * 50 * 600


@pytest.mark.soak
def test_a_long_soak_stays_flat(tmp_path: Path) -> None:
    seconds = float(os.environ.get("WAKEFUL_SOAK_SECONDS", "7200"))
    report = Path(os.environ.get("WAKEFUL_SOAK_REPORT", str(tmp_path / "soak.jsonl")))
    soak = run_soak(Soak(seconds=seconds, sample_every=60, warmup=300), tmp_path, report)
    for line in hourly(soak):
        print(line)
    assert check(soak) == []
