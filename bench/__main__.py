"""`python -m bench [--quick] [--write]`: every figure with its ratio to a baseline measured in
the same run. `--quick` is a smoke run of a few seconds (CI); `--write` stores the table in
bench/RESULTS.md with the machine and the date."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sqlite3
import sys
from pathlib import Path

from .common import Figure
from .engine import run_engine
from .ops import run_ops

HEADER = "| figure | value | ratio | goal | verdict | note |\n|---|---|---|---|---|---|"


def machine() -> str:
    cpus = os.cpu_count()
    return (
        f"{platform.system()} {platform.machine()}, {cpus} cores, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    p.add_argument("--write", action="store_true", help="write bench/RESULTS.md")
    p.add_argument("--skip-http", action="store_true")
    args = p.parse_args(argv)
    print(f"wakeful bench ({'quick' if args.quick else 'full'}) on {machine()}")
    print(HEADER)
    figures: list[Figure] = run_engine(args.quick)
    figures += run_ops(args.quick)
    if not args.skip_http:
        from .e2e import run_e2e
        from .http import run_http

        figures += run_http(args.quick)
        figures += run_e2e(args.quick)
    dsn = os.environ.get("WAKEFUL_TEST_PG_DSN", "")
    if dsn:
        from .pg import run_pg

        figures += run_pg(dsn, args.quick)
    else:
        print("  WAKEFUL_TEST_PG_DSN not set: PostgreSQL figures skipped")
    missed = [f.name for f in figures if f.met is False]
    print(f"goals met: {sum(1 for f in figures if f.met)}, missed: {len(missed)}")
    if args.write:
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        text = [
            "# Benchmark results",
            "",
            f"`python -m bench` ({'quick' if args.quick else 'full'} run), {when}, on {machine()}.",
            "Every ratio is against a baseline measured in the same run.",
            "",
            HEADER,
            *(f.row() for f in figures),
            "",
        ]
        Path(__file__).with_name("RESULTS.md").write_text("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
