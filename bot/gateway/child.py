"""`wakeful serve` and its gateway: the child that holds the secrets, started before anything else.

With `WAKEFUL_GATEWAY_CONFIG` set and no `WAKEFUL_GATEWAY_URL` (a gateway run elsewhere),
`serve` starts `wakeful gateway` as a child, waits until it listens, and tells its own worker
where (`WAKEFUL_GATEWAY_URL`) and with which token (`WAKEFUL_GATEWAY_TOKEN`: made anew at each
start, handed over in the two processes' environments, which other users cannot read, never in
an argument list, which they can). The child gets the environment with the gateway's secret
variables in it and without Slack's and Anthropic's; when serve's own environment held a gateway
secret, serve then re-executes itself (same pid, same arguments) without it, so the process
that runs agents never holds the secret, not even in /proc/<pid>/environ. Serve stops when
the gateway stops (a supervisor restarts both; nothing stored is lost), and the gateway stops
when serve dies.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from wakeful.bot.process.config import SECRET_VARIABLES, ConfigError, switch
from wakeful.core import logs
from wakeful.core.gateway.config import TOKEN, secret_variables

log = logging.getLogger("wakeful")
CHILD_PID = "WAKEFUL_GATEWAY_CHILD_PID"
"""Set by serve for itself across its re-exec: the gateway child it must stop and watch."""
START_TIMEOUT = 20.0
_stopping = threading.Event()


def wants_child(env: Mapping[str, str]) -> bool:
    return bool(
        env.get("WAKEFUL_GATEWAY_CONFIG", "").strip()
        and not env.get("WAKEFUL_GATEWAY_URL", "").strip()
        and switch(env, "WAKEFUL_GATEWAY", True)
    )


def start(env: dict[str, str], argv: Sequence[str]) -> dict[str, str]:
    """Start the gateway child when serve should have one; the environment serve goes on
    with (WAKEFUL_GATEWAY_URL set). Re-executes serve when its environment held a secret."""
    if CHILD_PID in env or not wants_child(env):
        return env
    config = env["WAKEFUL_GATEWAY_CONFIG"].strip()
    held = [name for name in secret_variables(config) if env.get(name)]
    token = secrets.token_urlsafe(32)
    logs.add_secrets([token])
    child_env = {k: v for k, v in env.items() if k not in SECRET_VARIABLES}
    child_env[TOKEN] = token
    read, write = os.pipe()
    cmd = [sys.executable, "-m", "wakeful.bot.commands.cli", "gateway", "--config", config]
    cmd += ["--ready-fd", str(write), "--parent", str(os.getpid())]
    proc = subprocess.Popen(cmd, env=child_env, pass_fds=(write,), stdin=subprocess.DEVNULL)
    os.close(write)
    try:
        url = _ready_line(read, proc)
    finally:
        os.close(read)
    logs.say(f"wakeful: gateway started (pid {proc.pid}) on {url}", sys.stderr)
    after = {k: v for k, v in env.items() if k not in held}
    given = {"WAKEFUL_GATEWAY_URL": url, TOKEN: token, CHILD_PID: str(proc.pid)}
    after.update(given)
    if held:
        # Same pid, same arguments, an environment without the secret: the gateway stays
        # this process's child.
        os.execve(sys.executable, [sys.executable, "-m", "wakeful.bot.commands.cli", *argv], after)
    os.environ.update(given)
    return after


def _ready_line(fd: int, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    got = b""
    while not got.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise ConfigError(f"the gateway did not start within {START_TIMEOUT:g} s")
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if ready:
            chunk = os.read(fd, 512)
            if not chunk:
                code = proc.wait(5)
                raise ConfigError(f"the gateway exited at start-up ({code}); see its error above")
            got += chunk
    return got.decode().strip()


def child_pid(env: Mapping[str, str]) -> int | None:
    raw = env.get(CHILD_PID, "").strip()
    return int(raw) if raw.isdigit() else None


def watch(pid: int, on_exit: Callable[[], None]) -> threading.Thread:
    """Call `on_exit` once the gateway child `pid` has exited (serve then stops)."""

    def run() -> None:
        while True:
            try:
                done, status = os.waitpid(pid, 0)
            except ChildProcessError:
                return  # reaped by stop(): serve is stopping anyway
            if done and _stopping.is_set():
                return
            if done:
                log.error(
                    "the gateway (pid %s) exited (%s); stopping serve so both restart together",
                    pid,
                    os.waitstatus_to_exitcode(status),
                )
                on_exit()
                return

    thread = threading.Thread(target=run, name="wakeful-gateway-child", daemon=True)
    thread.start()
    return thread


def stop(pid: int, timeout: float = 5.0) -> None:
    """SIGTERM the gateway child, then SIGKILL after `timeout` seconds."""
    _stopping.set()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def _gone(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return bool(done)
    except ChildProcessError:
        return True
