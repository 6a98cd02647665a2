"""The reference transcript, from the engine and from the installed `wakeful` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MakeStore
from wakeful.devtools.scenarios import SCENARIOS, SETTINGS

REFERENCE = """\
1. webhook delivered twice
   first: True  retry: False  rows: 1
2. two workers ask for the lease at the same time
   A: 1  B: None
3. three quick chat messages
   events in one run: 3
4. A stalls mid-run; B takes over; A wakes up
   B before A's lease expires: None
   B after expiry: gen 2  re-claims ['msg-3']
   A renews after both leases lapsed: gen 3
   A finishes its old claim (gen 1 ): False
   msg-3: ('done', 2)  outbox rows: 1
5. a poison event arrives together with a healthy one
   W0 claimed ['poison', 'healthy'] and crashed
   W1 claimed ['poison'] and crashed
   W2 claimed ['poison'] and crashed
   W3 claimed ['healthy'] and finished
   W4 claimed [] and finished
   poison: ('dead', 3)  healthy: ('done', 2)
6. timers: a second scheduler pass, a replay, a three-day outage
   pass 1: 1  pass 2: 0
   replay of the same occurrence: 1 due, 1 event total
   after the outage: events total 2  skipped 3  late by 10 min  next due in 23.8 h
7. approvals with a four-hour window
   881: expiry ran at 5h, yes at 6h -> expired
   882: yes at 5h, scheduler not run yet -> expired
   883: yes at 1h -> yes  second tap no at 2h -> yes
   883 after its expiry timer fired: yes
   never requested -> unknown
8. outbox: three updates inside an hour
   sends: ['update 0', 'update 1 | update 2']
"""


def _expected(number: int) -> list[str]:
    lines = REFERENCE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{number}. "))
    end = next(
        (i for i, line in enumerate(lines) if line.startswith(f"{number + 1}. ")), len(lines)
    )
    return lines[start + 1 : end]


@pytest.mark.parametrize("number", range(1, len(SCENARIOS) + 1))
def test_scenario_matches_the_reference(make_store: MakeStore, number: int) -> None:
    title, scenario = SCENARIOS[number - 1]
    assert REFERENCE.splitlines()[REFERENCE.splitlines().index(f"{number}. {title}")]
    s = SETTINGS
    store = make_store(lease_ttl=s.lease_ttl, max_attempts=s.max_attempts, outbox_gap=s.outbox_gap)
    assert scenario(store) == _expected(number)


def test_wakeful_scenarios_prints_the_reference_transcript(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "wakeful"
    out = subprocess.run(
        [str(exe), "scenarios"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert REFERENCE in out.stdout
    assert list(tmp_path.iterdir()) == []  # it used a temporary store, not the working dir


def test_wakeful_scenarios_on_postgresql_prints_the_same_transcript(tmp_path: Path) -> None:
    from tests.conftest import need_pg

    dsn = need_pg("the PostgreSQL scenario run")
    exe = Path(sys.executable).parent / "wakeful"
    out = subprocess.run(
        [str(exe), "scenarios", "--db", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert REFERENCE in out.stdout
