"""The liveness rule: a process on this host is dead once its pid is gone or reused; one
elsewhere once silent for three heartbeats, counted from when the watcher could see it. And
the /proc readers behind the pid check, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wakeful.core.heartbeat import read_pid_start, this_host
from wakeful.core.records import ProcessRecord
from wakeful.core.rules.liveness import Host, Watch, silence_for

NOW = 1_000_000
HERE = Host("web-1", "boot-a pid:[1]")
SILENCE = silence_for(2)


def proc(
    host: str = "web-1", boot: str = "boot-a pid:[1]", pid_start: str = "500", seen_at: int = NOW
) -> ProcessRecord:
    return ProcessRecord("p", host, boot, 4242, pid_start, "worker", NOW - 100, seen_at)


def watch(pids: dict[int, str | None], since: int = NOW - 600) -> Watch:
    return Watch(HERE, SILENCE, since, lambda pid: pids.get(pid))


def test_three_heartbeats_of_silence() -> None:
    assert SILENCE == 6
    with pytest.raises(ValueError, match="heartbeat must be at least 1 s"):
        silence_for(0)


def test_on_this_host_a_gone_pid_is_dead_at_once_however_fresh_its_heartbeat() -> None:
    verdict = watch({}).judge(proc(seen_at=NOW), NOW)
    assert not verdict.alive and verdict.why == "its process has ended"


def test_on_this_host_a_reused_pid_is_dead_at_once() -> None:
    verdict = watch({4242: "999"}).judge(proc(pid_start="500"), NOW)
    assert not verdict.alive and "another's" in verdict.why


def test_on_this_host_a_running_pid_is_alive_however_long_it_was_silent() -> None:
    # A stalled process (a long tool call, a paused VM) keeps its leases for their TTL.
    assert watch({4242: "500"}).judge(proc(seen_at=NOW - 3600), NOW).alive


def test_a_pid_whose_start_cannot_be_compared_is_judged_by_silence() -> None:
    unknown = watch({4242: ""})
    assert unknown.judge(proc(seen_at=NOW - SILENCE), NOW).alive
    assert not unknown.judge(proc(seen_at=NOW - SILENCE - 1), NOW).alive
    unrecorded = watch({4242: "500"})
    assert not unrecorded.judge(proc(pid_start="", seen_at=NOW - SILENCE - 1), NOW).alive


def test_elsewhere_only_silence_counts_and_three_heartbeats_of_it_is_dead() -> None:
    w = watch({})  # no pid 4242 here: it must not matter for another host's process
    for other in (proc(host="web-2"), proc(boot="boot-b pid:[1]"), proc(boot="boot-a pid:[9]")):
        assert w.judge(other, NOW).alive
        assert w.judge(replace_seen(other, NOW - SILENCE), NOW).alive
        verdict = w.judge(replace_seen(other, NOW - SILENCE - 1), NOW)
        assert not verdict.alive and verdict.why == f"silent for {SILENCE + 1} s"


def test_no_pid_is_checked_where_the_boot_is_unknown() -> None:
    blind = Watch(Host("web-1", ""), SILENCE, NOW - 600, lambda pid: None)
    assert blind.judge(proc(boot=""), NOW).alive
    assert not blind.judge(proc(boot="", seen_at=NOW - SILENCE - 1), NOW).alive


def test_silence_counts_from_when_the_watcher_could_see_it() -> None:
    # The store was away for everyone until NOW - 2: a host silent through the outage gets
    # three heartbeats from then before it counts as dead.
    w = watch({}, since=NOW - 2)
    assert w.judge(proc(host="web-2", seen_at=NOW - 60), NOW).alive
    assert w.judge(proc(host="web-2", seen_at=NOW - 60), NOW - 2 + SILENCE).alive
    assert not w.judge(proc(host="web-2", seen_at=NOW - 60), NOW - 1 + SILENCE).alive


def replace_seen(p: ProcessRecord, seen_at: int) -> ProcessRecord:
    return ProcessRecord(p.id, p.host, p.boot, p.pid, p.pid_start, p.role, p.started_at, seen_at)


# -- the pid check on real processes ---------------------------------------------------------


def test_a_live_process_has_a_start_time_and_the_same_one_each_time() -> None:
    start = read_pid_start(os.getpid())
    assert start and start.isdigit()
    assert read_pid_start(os.getpid()) == start


def test_a_process_that_ended_has_none_even_before_its_parent_waited_for_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = read_pid_start(child.pid)
        assert start and start != read_pid_start(os.getpid())
        child.kill()
        # A zombie until waited for: /proc still lists it, but it runs no more.
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert read_pid_start(child.pid) is None
    finally:
        child.kill()
        child.wait()
    assert read_pid_start(child.pid) is None


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    # The command name sits in parentheses inside the line and may hold both: read past the
    # last ')' only. The child renames itself so its name would shift a naive split by four.
    code = (
        "import sys, time\n"
        "open('/proc/self/comm', 'w').write('x) 1 2 3 (y')\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == b"up\n"
            with open(f"/proc/{child.pid}/stat") as f:
                stat = f.read()
            assert stat.startswith(f"{child.pid} (x) 1 2 3 (y) ")
            start = read_pid_start(child.pid)
            assert start is not None and start.isdigit()
            assert start == stat.split(") ")[-1].split()[19] != stat.split()[21]
        finally:
            child.kill()


def test_this_host_names_its_boot_and_pid_namespace() -> None:
    here = this_host()
    assert here.name == os.uname().nodename
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    assert here.boot == f"{boot_id} {os.readlink('/proc/self/ns/pid')}"
