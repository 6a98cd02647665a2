"""Stores Slack-shaped DM events straight into a store at a fixed rate: the best case of an
intake that only the front writes, whose events a mover hands to the loops on another file.

`python -m bench.feeder --db PATH --rate R --seconds S`. The events look like the ones the
HTTP front stores for a DM (bot/front/listeners.py), so the loops run, reply and post them.
"""

from __future__ import annotations

import argparse
import sys
import time

from wakeful.core.store import open_store


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--users", type=int, default=1000)
    args = p.parse_args(argv)
    store = open_store(args.db)
    count = int(args.rate * args.seconds)
    started = time.monotonic()
    try:
        for i in range(count):
            due = started + i / args.rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            user = f"U{i % args.users:04d}"
            payload = {
                "kind": "message",
                "text": f"load {i}",
                "channel": f"D{user}",
                "ts": f"{time.time():.6f}",
                "thread_ts": None,
                "user": user,
                "team": "TLOAD",
                "channel_type": "im",
            }
            store.ingest(f"TLOAD:{user}", "slack", f"EvFeed{i:08d}", payload, int(time.time()))
    finally:
        store.close()
    print(f"fed {count} events in {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
