"""`wakeful dev` driven through its line protocol, as a person at the terminal would: an agent
module outside the project (WAKEFUL_AGENT), a typed message answered, a prompt's buttons
numbered, `/approve` running the tool once, `/advance` firing a timer, and `/crash` (SIGKILL of
the worker process) losing nothing: a run killed midway is run again and answered once, a
message sent as the worker dies is answered once, and the prompt asked before the crash is
approved after it; `/reload` loads the agent's code again (and code that does not load leaves
the session waiting, not gone). Also: README's session replayed, a bad agent refused in one
line, no worker left behind by a killed `dev`, and the chat through a pseudo-terminal."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

AGENT = '''"""A person's agent, outside the project."""
import os
import time

from wakeful.agents import Agent, ApprovalAnswer, Message, Run, Timer, TimerTick, Tool


def refund(args, key):
    with open(os.environ["DEV_TOOL_LOG"], "a") as log:
        log.write(key + "\\n")
    return {"order": args["order"]}


class Desk(Agent):
    tools = (Tool("refund", refund, "Refund an order"),)

    def run(self, run: Run) -> None:
        for e in run.events:
            if isinstance(e, Message) and e.text.startswith("refund "):
                order = e.text.split()[1]
                run.ask("refund", {"order": order}, summary=f"refund order {order}", to=e)
            elif isinstance(e, Message) and e.text == "remind me in an hour":
                run.set_timer(Timer.once("remind", run.now + 3600), to=e)
                run.reply("I will remind you in an hour.", to=e)
            elif isinstance(e, Message) and e.text == "slow":
                with open(os.environ["DEV_SLOW_LOG"], "a") as log:
                    log.write("started\\n")
                time.sleep(3)  # long enough for /crash to land mid-run
                run.reply("Slow answer.", to=e)
            elif isinstance(e, Message):
                run.reply(f"You said: {e.text}", to=e)
            elif isinstance(e, ApprovalAnswer) and e.answer == "yes" and e.result:
                run.reply(f"Refunded order {e.result['order']}.", to=e)
            elif isinstance(e, ApprovalAnswer):
                run.reply(f"Not refunded: {e.answer}.", to=e)
            elif isinstance(e, TimerTick):
                run.reply("Reminder: an hour has passed.", to=e)


def make(setup):
    return Desk()
'''


class Session:
    """`wakeful dev` as a subprocess: lines typed on stdin, lines read from stdout."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        exe = Path(sys.executable).parent / "wakeful"
        self.proc = subprocess.Popen(
            [str(exe), "dev"],
            cwd=folder,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.mark = 0
        self.fresh: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.fresh.put(line.rstrip("\n"))

    def type(self, line: str) -> None:
        """Type `line`; `wait_for` looks at what comes from here on, in any order."""
        self.mark = len(self.lines)
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, pattern: str, timeout: float = 30.0) -> str:
        """The first line since the last one typed matching `pattern` (a regex)."""
        return self.wait_until(lambda line: re.search(pattern, line) is not None, pattern, timeout)

    def wait_until(self, match: Callable[[str], bool], what: str, timeout: float = 30.0) -> str:
        for line in self.lines[self.mark :]:
            if match(line):
                return line
        pattern = what
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.fresh.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""  # type: ignore[union-attr]
                raise AssertionError(
                    f"no line matching {pattern!r}; got:\n" + "\n".join(self.lines) + err
                ) from None
            self.lines.append(line)
            if match(line):
                return line

    def close(self) -> None:
        """End the session (its own /quit, else a kill) and close the pipes."""
        if self.proc.poll() is None:
            try:
                self.type("/quit")
                self.proc.wait(30)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()

    def drain(self, settle: float = 1.0) -> list[str]:
        """Every line that comes within `settle` seconds (one short settle at the end)."""
        end = time.monotonic() + settle
        while (left := end - time.monotonic()) > 0:
            try:
                self.lines.append(self.fresh.get(timeout=left))
            except queue.Empty:
                break
        return self.lines


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Session]:
    (tmp_path / "mydesk.py").write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "SLACK_"))}
    env.update(
        WAKEFUL_AGENT="mydesk:make",
        DEV_TOOL_LOG=str(tmp_path / "tool.log"),
        DEV_SLOW_LOG=str(tmp_path / "slow.log"),
    )
    session = Session(tmp_path, env)
    yield session
    session.close()


def test_a_session_replies_approves_once_fires_a_timer_and_survives_a_crash(
    dev: Session, tmp_path: Path
) -> None:
    dev.wait_for(r"^\[dev\] agent mydesk:make, app at http://127\.0\.0\.1:\d+")
    dev.wait_for(r"^\[dev\] you are alice")

    dev.type("hello there")
    dev.wait_for(r"^\[bot\] You said: hello there$")
    # The same words as an @-mention in a channel: the agent reads them without its mention.
    dev.type("/in #ops")
    dev.type("hello there")
    dev.wait_for(r"^\[bot in #ops, thread\] You said: hello there$")
    dev.type("/in dm")

    dev.type("refund 5")
    prompt = dev.wait_for(r"^\[bot\] .*refund order 5")
    assert re.search(r"\[1\] Approve  \[2\] Deny$", prompt), prompt
    dev.type("/approve 2")  # the Approve button beside button 2
    dev.wait_for(r"^\[dev\] alice presses \[Approve\]")
    dev.wait_for(r"^\[bot\] Refunded order 5\.$")
    dev.wait_for(r"^\[bot edited\] .*Approved by @alice")
    tool_log = tmp_path / "tool.log"
    assert len(tool_log.read_text().splitlines()) == 1

    dev.type("remind me in an hour")
    dev.wait_for(r"^\[bot\] I will remind you in an hour\.$")
    dev.type("/advance 1h")
    dev.wait_for(r"^\[dev\] time moved 1h forward")
    dev.wait_for(r"^\[bot\] Reminder: an hour has passed\.$")

    # A prompt asked before the crash; a run killed midway; a message typed as it dies.
    dev.type("refund 7")
    dev.wait_for(r"^\[bot\] .*refund order 7.*\[3\] Approve  \[4\] Deny$")
    dev.type("slow")
    slow_log = tmp_path / "slow.log"
    deadline = time.monotonic() + 30
    while not slow_log.exists() and time.monotonic() < deadline:  # the run has started
        time.sleep(0.05)
    dev.type("typed before the crash")
    dev.type("/crash")
    dev.wait_for(r"^\[dev\] worker \d+ killed \(SIGKILL\)")
    dev.wait_for(r"^\[dev\] worker \d+ running$")
    dev.wait_for(r"^\[bot\] Slow answer\.$")
    dev.wait_for(r"You said: typed before the crash$")  # maybe in the same post (one run)
    assert slow_log.read_text().splitlines() == ["started", "started"]  # killed, then rerun
    dev.type("/approve 3")
    dev.wait_for(r"^\[bot\] Refunded order 7\.$")
    # /reload: the agent's code as it is now.
    agent = tmp_path / "mydesk.py"
    agent.write_text(agent.read_text().replace('f"You said: ', 'f"Now you said: '))
    dev.type("/reload")
    dev.wait_for(r"^\[dev\] worker \d+ running with the code as it is now$")
    dev.type("again")
    dev.wait_for(r"^\[bot\] Now you said: again$")
    # Code that does not load: the session stays, what is sent waits for a worker.
    good = agent.read_text()
    agent.write_text("import nosuchthing\n" + good)
    dev.type("/reload")
    dev.wait_for(r"^\[dev\] error: the worker did not start: .*cannot import 'nosuchthing'")
    dev.type("sent while no worker runs")
    agent.write_text(good)
    dev.type("/reload")
    dev.wait_for(r"^\[bot\] Now you said: sent while no worker runs$")

    dev.type("/inspect")
    dev.wait_for(r"^events: 0 pending, 0 running, 0 dead$")
    lines = dev.drain()
    said = "\n".join(lines)
    assert said.count("You said: typed before the crash") == 1, said
    assert said.count("Slow answer.") == 1, said
    assert lines.count("[bot] Refunded order 5.") == 1, lines
    assert len(tool_log.read_text().splitlines()) == 2  # order 5 once, order 7 once
    dev.type("/quit")
    assert dev.proc.wait(30) == 0
    assert dev.proc.stderr is not None and dev.proc.stderr.read() == ""  # no log line


def test_a_bad_agent_is_one_line_and_nothing_starts(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "wakeful"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "SLACK_"))}
    out = subprocess.run(
        [str(exe), "dev", "--agent", "nosuchmodule:make"],
        cwd=tmp_path,
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "WAKEFUL_AGENT 'nosuchmodule:make' cannot be loaded" in out.stderr
    assert out.stdout == ""


README = Path(__file__).resolve().parents[2] / "README.md"
SESSION = re.compile(r"<!-- dev session: [^>]*-->\n```text\n(.*?)```", re.DOTALL)
VARYING = [
    (re.compile(pattern), to)
    for pattern, to in (
        (r"127\.0\.0\.1:\d+", "127.0.0.1:PORT"),
        (r"/tmp/wakeful-dev-\w+", "/tmp/wakeful-dev-X"),
        (r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", "TIME"),
        (r"\b(re|ch)_[0-9a-f]+", r"\1_ID"),
        (r"refund-order-[\w-]+", "refund-order-ID"),
        (r"worker \d+", "worker PID"),
    )
]


def normal(line: str) -> str:
    """A line with what differs between runs (ports, folders, times, ids, pids) named."""
    for pattern, to in VARYING:
        line = pattern.sub(to, line)
    return line


def test_the_readme_session_is_what_dev_prints(tmp_path: Path) -> None:
    """README's tour shows a real `wakeful dev` session: typed again here, each step's lines
    come (in any order within the step), and nothing else."""
    found = SESSION.search(README.read_text())
    assert found is not None, "README.md lost its dev session"
    command, *rest = found.group(1).splitlines()
    assert command == "$ wakeful dev"
    steps: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in rest:
        if line.startswith("> "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(normal(line))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "SLACK_"))}
    session = Session(tmp_path, env)
    try:
        for typed, expected in steps:
            if typed is not None:
                session.type(typed)
            for want in expected:
                session.wait_until(lambda line, want=want: normal(line) == want, want)
        lines = session.drain()
    finally:
        session.close()
    assert Counter(map(normal, lines)) == Counter(w for _, step in steps for w in step)


def test_a_killed_dev_takes_its_worker_with_it(dev: Session) -> None:
    """`wakeful dev` killed outright (SIGKILL: no clean-up of its own) leaves no worker
    process behind: the worker ends when its input, held by dev, closes."""
    dev.wait_for(r"^\[dev\] you are alice")
    children = Path(f"/proc/{dev.proc.pid}/task/{dev.proc.pid}/children").read_text().split()
    assert len(children) == 1, children
    worker = int(children[0])
    dev.proc.kill()
    dev.proc.wait()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            stat = Path(f"/proc/{worker}/stat").read_text(errors="replace")
            if stat[stat.rfind(")") + 2] in "ZX":  # exited; waiting to be reaped by init
                break
        time.sleep(0.05)
    else:
        assert not Path(f"/proc/{worker}").exists(), "the worker outlived wakeful dev"


def test_at_a_terminal_it_prompts_and_answers(tmp_path: Path) -> None:
    """The same chat through a pseudo-terminal, as a person runs it: a prompt, a reply."""
    import pty

    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAKEFUL_", "SLACK_"))}
    exe = Path(sys.executable).parent / "wakeful"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [str(exe), "dev", "--agent", "examples.echo:factory"],
        cwd=root,
        env=env,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    seen = b""

    def until(needle: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while needle not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            try:
                seen += os.read(primary, 4096)
            except OSError:  # the terminal closed: the process ended
                raise AssertionError(seen.decode(errors="replace")) from None

    try:
        until(b"> ")
        os.write(primary, b"hello from a terminal\n")
        until(b"[bot] You said: hello from a terminal")
        os.write(primary, b"/quit\n")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
