"""The front with its ingest taken out: `serve --no-loops`'s WSGI callable (one HMAC, one parse,
Bolt's dispatch, the listener) on the same waitress server, its store answering every delivery
as new without writing it. Measured beside the real front, it shows what the front costs apart
from its durable commit (bench/front.py); nothing else runs it."""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

from wakeful.bot.front.listeners import Listeners
from wakeful.bot.front.wsgi import SlackFront
from wakeful.bot.slack.kinds import SLACK_KINDS
from wakeful.core.store import open_store

from .bare_app import serve


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--secret", required=True)
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="wakeful-bench-stub-"))
    store = open_store(folder / "stub.db", kinds=SLACK_KINDS)
    ids = itertools.count(1)
    store.db.store_event = lambda event: next(ids)  # type: ignore[method-assign]
    return serve(SlackFront(Listeners(store, args.secret, "UBOT", "BBOT")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
