"""The `wakeful` command line."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.scenarios import transcript
from ..core.settings import Settings
from ..core.store.contract import Store
from ..core.store.sqlite import SQLiteStore


def _scenarios(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="wakeful-scenarios-") as tmp:
        counter = iter(range(1_000_000))

        def make(settings: Settings) -> Store:
            return SQLiteStore(Path(tmp) / f"scenario-{next(counter)}.db", settings)

        for line in transcript(make):
            print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wakeful", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("scenarios", help="replay the eight reference failure scenarios")
    p.set_defaults(func=_scenarios)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
