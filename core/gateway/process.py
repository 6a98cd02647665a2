"""The gateway process's parts besides its HTTP server (bot/gateway/serve.py runs that): the
revocation watch that keeps the kill switch within a second (failing closed when the store
cannot be read), and the Linux hardening that keeps the secret inside the gateway (undumpable;
ended when its parent dies)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time

from wakeful.core.errors import StoreError
from wakeful.core.gateway.server import Revocations
from wakeful.core.store import Store

log = logging.getLogger("wakeful.gateway")
POLL = 0.25
"""Seconds between two reads of the revocations: a revoke reaches every gateway well inside
its one-second promise."""


def not_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): no core dump, no ptrace, no /proc/<pid>/environ or mem for
    other processes of this user. True when it took (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(4, 0, 0, 0, 0)) == 0  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGTERM) on Linux: the kernel ends a child whose parent died."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


class Watch:
    """Reads the revocations from the store every POLL seconds, on a thread of its own."""

    def __init__(self, store: Store, revocations: Revocations) -> None:
        self.store, self.revocations = store, revocations
        self.stop = threading.Event()
        self._warned_at = 0.0
        self.thread = threading.Thread(target=self._run, name="wakeful-gateway-watch", daemon=True)

    def read(self) -> bool:
        started = self.revocations.started()
        try:
            self.revocations.update(self.store.revoked_destinations(), started)
            return True
        except StoreError as exc:
            if time.monotonic() - self._warned_at > 10:
                self._warned_at = time.monotonic()
                log.warning("gateway: cannot read the revocations (refusing all): %s", exc)
            return False

    def _run(self) -> None:
        while not self.stop.wait(POLL):
            self.read()


def orphan_watch(parent: int) -> None:
    """The portable half of dying with the parent: a reparented gateway stops itself."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
