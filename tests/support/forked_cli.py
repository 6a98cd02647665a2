"""`wakeful` commands as processes of their own, without a new interpreter for each.

A `wakeful` process spends about 0.2 s of CPU starting Python and importing wakeful before
its command runs; a module that runs dozens of commands spends most of its CPU there. `Forks`
starts one Python process (the zygote) that imports what the commands import and then waits;
each command is a fork of it. The command is still a process of its own: its environment,
working directory, stdin/stdout/stderr, exit status, signals and interpreter exit (atexit, the
last flush, an uncaught exception's hook) are its own, and it runs `sys.exit(main())` as the
installed `wakeful` script does. What it skips is the interpreter's start and the imports:
each module keeps some commands on the real script for those.

The zygote forks a reaper per command, which forks the command, tells the test its pid and
then its wait status; the zygote reaps the reapers, so every command's CPU is counted in the
test's children, as a subprocess's is.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

PRELOAD = (
    "wakeful.bot.commands.cli",
    "wakeful.bot.commands.doctor",
    "wakeful.bot.commands.serve",
    "wakeful.bot.process.runtime",
    "wakeful.bot.builtin.refund_desk",
    "wakeful.core.store.sqlite",
    "wakeful.core.store.postgres",
)
"""What the commands import (serve, the loops, the reads, doctor and its default agent)."""
BOOT = (
    "import sys; from tests.support.forked_cli import zygote; zygote(int(sys.argv[1])); "
    "from wakeful.bot.commands.cli import main; sys.exit(main())"
)
"""The zygote's program: `zygote` returns only in a forked command, which then runs as the
installed script does."""
MAX_REQUEST = 1 << 20


def zygote(fd: int) -> None:
    """The zygote: import, then fork a reaper per request until the test closes `fd`."""
    for name in PRELOAD:
        importlib.import_module(name)
    assert threading.active_count() == 1, "a preloaded module started a thread: fork is unsafe"
    control = socket.socket(fileno=fd)
    gc.freeze()  # what the imports built stays shared with the forks, not copied by their GC
    while True:
        msg, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, 4)
        _reap(os.WNOHANG)
        if not msg:
            _reap(0)  # every reaper waited for, so every command's CPU is counted
            os._exit(0)
        if os.fork() == 0:
            control.close()
            _reaper(json.loads(msg), fds)
            return  # the command
        for f in fds:
            os.close(f)


def _reap(flags: int) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, flags)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _reaper(request: dict[str, Any], fds: list[int]) -> None:
    """Fork the command (returns in it); report its pid and wait status, then end."""
    *stdio, reply = fds
    pid = os.fork()
    if pid == 0:
        os.close(reply)
        for target, f in enumerate(stdio):
            os.dup2(f, target)
        for f in stdio:
            os.close(f)
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["wakeful", *request["args"]]
        return
    for f in stdio:
        os.close(f)
    os.write(reply, f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    os.write(reply, f"{status}\n".encode())
    os._exit(0)


class Forked:
    """One command forked from the zygote: its pid, and its exit code once it ended
    (negative: the signal that ended it, as `subprocess` says)."""

    def __init__(self, reply: socket.socket, args: Sequence[str]) -> None:
        self.args = list(args)
        self._reply = reply
        self._got = b""
        self.pid = int(self._line(60.0))
        self.returncode: int | None = None
        self.stdout: BinaryIO | None = None
        """`Forks.popen`'s: the read end of the command's stdout."""
        self.stderr: BinaryIO | None = None
        """`Forks.popen`'s: the file the command's stderr goes to."""

    def stderr_text(self) -> str:
        """What `popen`'s command wrote on stderr so far."""
        assert self.stderr is not None
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close_files(self) -> None:
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()

    def _line(self, timeout: float | None) -> bytes:
        self._reply.settimeout(timeout)
        while b"\n" not in self._got:
            chunk = self._reply.recv(64)
            if not chunk:
                raise RuntimeError(f"the zygote's reaper of {self.args} ended without a word")
            self._got += chunk
        line, self._got = self._got.split(b"\n", 1)
        return line

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                status = int(self._line(timeout))
            except (TimeoutError, BlockingIOError):
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self.returncode = os.waitstatus_to_exitcode(status)
            self._reply.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        """As `subprocess.Popen.send_signal`: nothing once the process has ended (the
        zygote may have reaped it before this process read its status)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended since the poll
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forks:
    """A zygote for one test module; `start` and `run` fork commands from it."""

    def __init__(self, folder: Path, env: Mapping[str, str]) -> None:
        """`env`: the zygote's own environment (each command gets its own), e.g.
        `child_env()`: what the interpreter reads at its start (PYTHONPATH, PYTHONUNBUFFERED)
        comes from it."""
        self.log = folder / "zygote.log"
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(self.log, "wb") as log, theirs:
            self._zygote = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env=dict(env),
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        self._started: list[Forked] = []

    def start(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str,
        stdin: int,
        stdout: int,
        stderr: int,
    ) -> Forked:
        """`wakeful *args` with these file descriptors (the caller keeps and closes its own)."""
        ours, theirs = socket.socketpair()
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd)}
        try:
            with theirs:
                socket.send_fds(
                    self._control,
                    [json.dumps(request).encode()],
                    [stdin, stdout, stderr, theirs.fileno()],
                )
            forked = Forked(ours, args)
        except (OSError, RuntimeError) as exc:
            ours.close()
            raise RuntimeError(f"the zygote is gone: {self.log.read_text()[-2000:]}") from exc
        self._started.append(forked)
        return forked

    def popen(self, args: Sequence[str], *, env: Mapping[str, str], cwd: Path | str) -> Forked:
        """A command left running: stdin /dev/null, stdout a pipe (`forked.stdout`), stderr
        a file (`forked.stderr_text()`)."""
        read, write = os.pipe()
        err = tempfile.TemporaryFile()  # noqa: SIM115 (the Forked keeps it; closed by close_files)
        try:
            with open(os.devnull, "rb") as null:
                forked = self.start(
                    args, env=env, cwd=cwd, stdin=null.fileno(), stdout=write, stderr=err.fileno()
                )
        except BaseException:
            os.close(read)
            err.close()
            raise
        finally:
            os.close(write)
        forked.stdout, forked.stderr = os.fdopen(read, "rb"), err
        return forked

    def run(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str,
        stdin: int | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """As `subprocess.run(..., capture_output=True, text=True)`; stdin /dev/null unless
        given (a file descriptor)."""
        with (
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            open(os.devnull, "rb") as null,
        ):
            forked = self.start(
                args,
                env=env,
                cwd=cwd,
                stdin=null.fileno() if stdin is None else stdin,
                stdout=out.fileno(),
                stderr=err.fileno(),
            )
            try:
                code = forked.wait(timeout)
            except subprocess.TimeoutExpired:
                forked.kill()
                forked.wait()
                raise
            texts = []
            for f in (out, err):
                f.seek(0)
                data = f.read().decode(locale.getpreferredencoding(False))
                texts.append(data.replace("\r\n", "\n").replace("\r", "\n"))
        return subprocess.CompletedProcess(list(args), code, texts[0], texts[1])

    def close(self) -> None:
        """Kill the commands still running, end the zygote once it reaped them."""
        for forked in self._started:
            if forked.poll() is None:
                forked.kill()
                forked.wait(30)
            forked.close_files()
        self._control.close()
        try:
            self._zygote.wait(30)
        except subprocess.TimeoutExpired:
            self._zygote.kill()
            self._zygote.wait()

    def __enter__(self) -> Forks:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_SHARED: list[Forks] = []
STARTUP_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "VIRTUAL_ENV")
"""What a zygote shared by a test process keeps of its environment: what the interpreter reads
at its start (and PYTHON*), never a command's settings (each command gets its own)."""


def shared(env: Mapping[str, str]) -> Forks:
    """This test process's zygote, started at first use from `env`'s interpreter variables,
    ended at exit: every module's long-running commands (`serve`, the loops) fork from it."""
    if not _SHARED:
        keep = {k: v for k, v in env.items() if k.startswith("PYTHON") or k in STARTUP_VARIABLES}
        _SHARED.append(Forks(Path(tempfile.mkdtemp(prefix="wakeful-zygote-")), keep))
        atexit.register(_SHARED[0].close)
    return _SHARED[0]


def popen_lines(
    args: Sequence[str], *, env: Mapping[str, str], cwd: Path | str, stderr: int
) -> Forked:
    """`wakeful *args` forked from the shared zygote, left running as `subprocess.Popen(...,
    stdin=DEVNULL, stdout=PIPE, text=True)` would: `forked.stdout` its lines, stderr to the
    file descriptor given."""
    read, write = os.pipe()
    try:
        with open(os.devnull, "rb") as null:
            forked = shared(env).start(
                args, env=env, cwd=cwd, stdin=null.fileno(), stdout=write, stderr=stderr
            )
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    forked.stdout = os.fdopen(read, "r", encoding="utf-8", errors="replace")  # type: ignore[assignment]
    return forked
