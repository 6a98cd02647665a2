"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

NOW = 1_700_000_000
"""The benches' fixed epoch second: stores built and filled at one time."""


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    ratio: float | None = None
    baseline: str = ""
    goal: str = ""
    met: bool | None = None
    note: str = ""
    rounds: list[float] = field(default_factory=list)

    def row(self) -> str:
        ratio = "" if self.ratio is None else f"{self.ratio:.2f}x {self.baseline}"
        verdict = "" if self.met is None else ("met" if self.met else "MISSED")
        value = f"{self.value:.2f}" if self.unit == "x" else f"{self.value:,.1f}"
        cells = [self.name, f"{value} {self.unit}", ratio, self.goal, verdict, self.note]
        return "| " + " | ".join(cells) + " |"


def rate(count: int, fn: Callable[[], None], rounds: int) -> tuple[float, list[float]]:
    """Median of `rounds` runs of fn, as count per second."""
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates), rates


def seconds(fn: Callable[[], None], rounds: int, setup: Callable[[], None] | None = None) -> float:
    """Median wall time of fn over `rounds`, each after an untimed setup."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used (Linux /proc), to say where a ceiling is."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
