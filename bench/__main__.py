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
    p.add_argument(
        "--only",
        default="engine,ops,http,e2e,claude,claude-memory,claude-stream,tracing,pg",
        help="comma-separated parts to run (engine, ops, http, front, e2e, claude, "
        "claude-memory, claude-stream, tracing, pg); default all but front (the front alone "
        "against the bare Bolt app, in rounds)",
    )
    args = p.parse_args(argv)
    parts = set(args.only.split(","))
    known = {
        "engine",
        "ops",
        "http",
        "front",
        "e2e",
        "claude",
        "claude-memory",
        "claude-stream",
        "tracing",
    }
    unknown = parts - known - {"pg"}
    if unknown:
        p.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}")
    named = argv is not None and any(a.startswith("--only") for a in argv)
    if named and "pg" in parts and not os.environ.get("WAKEFUL_TEST_PG_DSN"):
        # Asked for by name, the PostgreSQL part must not be skipped after the rest has run.
        p.error("--only pg needs WAKEFUL_TEST_PG_DSN (a PostgreSQL DSN) in the environment")
    print(f"wakeful bench ({'quick' if args.quick else 'full'}) on {machine()}")
    print(HEADER)
    figures: list[Figure] = run_engine(args.quick) if "engine" in parts else []
    if "ops" in parts:
        figures += run_ops(args.quick)
    if not args.skip_http and "http" in parts:
        from .http import run_http

        figures += run_http(args.quick)
    if not args.skip_http and "front" in parts:
        from .front import run_front

        figures += run_front(args.quick)
    if not args.skip_http and "e2e" in parts:
        from .e2e import run_e2e

        figures += run_e2e(args.quick)
    if "claude" in parts:
        from .claude import run_claude

        figures += run_claude(args.quick)
    if "claude-memory" in parts:
        from .claude_memory import run_claude_memory

        figures += run_claude_memory(args.quick)
    if "claude-stream" in parts:
        from .claude_stream import run_claude_stream
        from .claude_stream_chaos import run_stream_chaos

        figures += run_claude_stream(args.quick) + run_stream_chaos(args.quick)
    if not args.skip_http and "tracing" in parts:
        from .tracing import run_tracing

        figures += run_tracing(args.quick)
    dsn = os.environ.get("WAKEFUL_TEST_PG_DSN", "")
    if "pg" not in parts:
        pass
    elif dsn:
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
            f"`python -m bench{'' if len(parts) == 9 else ' --only ' + args.only}`"
            f" ({'quick' if args.quick else 'full'} run), {when}, on {machine()}.",
            "Every ratio is against a baseline measured in the same run.",
            "",
            HEADER,
            *(f.row() for f in figures),
            "",
        ]
        path = Path(__file__).with_name("RESULTS.md")
        # The table is replaced; the prose after it (how the figures are taken, why a goal is
        # missed) is written by hand and kept.
        old = path.read_text() if path.exists() else ""
        prose = old[old.index("\n## ") :] if "\n## " in old else ""
        path.write_text("\n".join(text) + prose)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
