"""`python -m tests.support.writer DB`: a write load on a store, as the HTTP front makes one.

Ingests events `W<n>` one after another (each committed before the next, as an acknowledged
Slack delivery is) and prints each key once `ingest` has returned: a printed key is one the
store acknowledged. Stops on SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from wakeful.core.store import open_store


def main(argv: list[str]) -> int:
    store = open_store(argv[0])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    n = 0
    while not stop.is_set():
        n += 1
        inbox = f"T1:U{n % 7}"
        store.ingest(inbox, "slack", f"W{n}", {"text": "x" * 200, "n": n}, int(time.time()))
        print(f"W{n}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
