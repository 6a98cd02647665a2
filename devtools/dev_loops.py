"""`wakeful dev`'s worker process: the worker, scheduler and dispatcher of `serve`, with the
agent, on the time `/advance` moves (its one argument names the offset's file, see
devtools/local.py). `dev` kills it with SIGKILL on `/crash` and stops it with SIGTERM on
`/reload`, then starts a new one; it prints `ready` on stdout once its loops run."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from wakeful.bot.commands.cli import LOOP_ROLES
from wakeful.bot.process.config import Config, log_format, secret_values
from wakeful.bot.process.runtime import Runtime, install_signal_handlers, open_configured_store
from wakeful.core import logs
from wakeful.devtools.local import ShiftedClock


def main() -> int:
    env = dict(os.environ)
    logs.configure(env.get("WAKEFUL_LOG_LEVEL", "") or "INFO", log_format(env), secret_values(env))
    config = Config.from_env(env, need={"token", "agent"})
    store = open_configured_store(config)
    clock = ShiftedClock(Path(sys.argv[1]))
    runtime = Runtime(config, store, LOOP_ROLES, poll=0.2, clock=clock)
    install_signal_handlers(runtime.stop.set)

    def orphaned() -> None:
        """`dev` holds our stdin open: its end means dev is gone (even killed); so do we."""
        sys.stdin.read()
        runtime.stop.set()

    threading.Thread(target=orphaned, daemon=True).start()
    runtime.start()
    print("ready", flush=True)
    try:
        runtime.stop.wait()
    finally:
        runtime.shutdown()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
