"""The `wakeful` command line: serve, the loops one by one, the demo, dev, scenarios, and the
operator's commands (dead letters, requeue, inspect, backup, restore, doctor; forget and
export, what is kept about a person). Settings come from the environment; flags mirror a few."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from wakeful.bot.commands import dead_letters, ops, privacy
from wakeful.bot.gateway import child as gateway_child
from wakeful.bot.gateway import cli as gateway_cli
from wakeful.bot.process.config import Config, ConfigError, log_format, log_level, secret_values
from wakeful.bot.process.setting_names import gateway_names, unknown_settings
from wakeful.core import logs
from wakeful.core.errors import StoreError, WakefulError
from wakeful.core.store import Store
from wakeful.core.store.target import store_target

if TYPE_CHECKING:
    from wakeful.bot.process.runtime import Runtime
    from wakeful.core.metrics import MetricsServer

log = logging.getLogger("wakeful")
LOOP_ROLES = ("worker", "scheduler", "dispatcher")
_ARGV: list[str] = []
"""The arguments `main` was given: what serve re-executes itself with (bot/gateway/child.py)."""


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    for flag, name in (("db", "WAKEFUL_DB"), ("port", "WAKEFUL_PORT"), ("host", "WAKEFUL_HOST")):
        value = getattr(args, flag, None)
        if value is not None:
            env[name] = str(value)
    return env


def _serve(args: argparse.Namespace) -> int:
    """The Slack app and the loops; first, when configured, the gateway child."""
    env = gateway_child.start(_env(args), _ARGV)
    config = Config.from_env(env, need={"token", "secret", "agent"})
    gateway = gateway_child.child_pid(env)
    gateway_died: list[bool] = []
    if gateway is not None:

        def gateway_gone() -> None:
            gateway_died.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

        gateway_child.watch(gateway, gateway_gone)
    try:
        from wakeful.bot.commands import serve

        serve.run(config, () if args.no_loops else LOOP_ROLES, args.manifest)
    finally:
        if gateway is not None:
            gateway_child.stop(gateway)
    return 1 if gateway_died else 0


def _stop(exporter: MetricsServer | None, runtime: Runtime, store: Store) -> None:
    """Stop what a loop command started, the other way round: metrics port, loop, store."""
    if exporter is not None:
        exporter.close()
    runtime.shutdown()
    store.close()


def _loop(role: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from wakeful.bot.commands.serve import metrics_port
        from wakeful.bot.process.runtime import (
            Runtime,
            install_signal_handlers,
            open_configured_store,
        )

        need = {"token"} if role == "dispatcher" else set()
        if role == "worker":
            need.add("agent")
        config = Config.from_env(_env(args), need=need)
        store = open_configured_store(config)
        dist = None
        if config.distribution:
            from wakeful.bot.slack.distribution import Distribution

            dist = Distribution.build(config, store)
        runtime = Runtime(config, store, (role,), poll=args.poll, distribution=dist)
        install_signal_handlers(runtime.stop.set)
        runtime.start()
        logs.say(f"wakeful: {role} running on {redact(config.db)}")
        exporter: MetricsServer | None = None
        try:
            exporter = metrics_port(config, store)
            runtime.stop.wait()
        finally:
            _stop(exporter, runtime, store)
        return 0

    return run


def redact(db: str) -> str:
    """A store URL fit for a log line: no password."""
    return logs.redact(db)


def _scenarios(args: argparse.Namespace) -> int:
    from wakeful.devtools.scenarios import print_transcript

    return print_transcript(args.db)


def _demo(args: argparse.Namespace) -> int:
    from wakeful.devtools.demo import run_demo

    return run_demo(verbose=args.verbose)


def _dev(args: argparse.Namespace) -> int:
    from wakeful.devtools.dev import run_dev

    return run_dev(args.agent, stripe=args.stripe, db=args.db)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wakeful", description=__doc__)
    parser.add_argument(
        "--log-level",
        default=None,
        help="DEBUG, INFO, WARNING, ERROR or CRITICAL (default: WAKEFUL_LOG_LEVEL, else INFO)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", help="store: a SQLite path or postgresql://... (WAKEFUL_DB)")

    p = sub.add_parser("serve", help="run the Slack app with worker, scheduler and dispatcher")
    common(p)
    p.add_argument("--port", type=int, help="HTTP port (WAKEFUL_PORT, default 3000)")
    p.add_argument("--host", help="HTTP bind address (WAKEFUL_HOST, default 0.0.0.0)")
    p.add_argument("--no-loops", action="store_true", help="serve HTTP only; run loops elsewhere")
    p.add_argument(
        "--manifest", help="distribution mode: the manifest.yml whose bot scopes installs ask for"
    )
    p.set_defaults(func=_serve)
    for role in LOOP_ROLES:
        p = sub.add_parser(role, help=f"run the {role} alone (scale out)")
        common(p)
        p.add_argument("--poll", type=float, default=1.0, help="seconds between idle polls")
        p.set_defaults(func=_loop(role))
    p = sub.add_parser("demo", help="a narrated session against a local Slack emulator")
    p.add_argument("--verbose", action="store_true", help="also print every Web API call")
    p.set_defaults(func=_demo)
    p = sub.add_parser("dev", help="chat with your agent in the terminal, against the emulator")
    p.add_argument("--agent", help="module:factory (WAKEFUL_AGENT, default the refund desk)")
    p.add_argument("--stripe", action="store_true", help="a fake Stripe behind the gateway")
    p.add_argument("--db", help="a SQLite file to keep (default: a temporary one)")
    p.set_defaults(func=_dev, db_from_env=False)
    p = sub.add_parser("scenarios", help="replay the eight reference failure scenarios")
    p.add_argument("--db", help="postgresql://... to run on PostgreSQL (default: temp SQLite)")
    p.set_defaults(func=_scenarios, db_from_env=False)
    # These commands' functions take (args, env): `with_env` instead of `func` (see main).
    dead_letters.register(sub, common)
    ops.register(sub, common)
    privacy.register(sub, common)
    gateway_cli.register(sub, common)
    return parser


def check_store(args: argparse.Namespace) -> None:
    """The one check of the store a command opens (every command with `--db`), before it
    starts anything: `--db` when given, else WAKEFUL_DB (`store_target`: a file path or a
    postgresql:// URL). A refusal names the setting, never its value (it may hold a
    password), and nothing is created."""
    if not hasattr(args, "db"):
        return  # a command that opens no store (demo)
    if args.db is not None:
        store_target(args.db.strip(), "--db")
    elif getattr(args, "db_from_env", True):
        store_target(os.environ.get("WAKEFUL_DB", "").strip() or Config.db, "WAKEFUL_DB")


def gateway_secrets(env: dict[str, str] | os._Environ[str]) -> list[str]:
    """The gateway's secrets, when this process was given them (serve, before it hands them
    to its gateway child and drops them; or a misconfigured worker): masked in every line."""
    config = env.get("WAKEFUL_GATEWAY_CONFIG", "").strip()
    if not config:
        return []
    try:
        from wakeful.core.gateway.config import secret_variables

        names = secret_variables(config)
    except WakefulError:
        return []  # the gateway says what is wrong with its file when it starts
    return [env[n].strip() for n in names if env.get(n, "").strip()]


def _exit_quietly(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    # A stop that arrives while starting up is still a clean stop; each command installs its
    # own handler once it has something to drain.
    signal.signal(signal.SIGTERM, _exit_quietly)
    parser = build_parser()
    _ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    try:
        fmt = log_format(os.environ)
        if args.log_level is not None:
            level = log_level(args.log_level, "--log-level")
        else:
            level = log_level(os.environ.get("WAKEFUL_LOG_LEVEL", "") or "INFO")
    except ConfigError as exc:
        print(f"wakeful: {exc}", file=sys.stderr)
        return 2
    # --db's password and the gateway's secrets too
    logs.configure(level, fmt, secret_values(_env(args)) + gateway_secrets(os.environ))
    if gateway_child.CHILD_PID not in os.environ and getattr(args, "parent", None) is None:
        # said once per serve: not again by serve re-executed, nor by its gateway child
        for warning in unknown_settings(_env(args), gateway_names(os.environ)):
            log.warning(warning)
    try:
        check_store(args)
        with_env = getattr(args, "with_env", None)
        code: int = with_env(args, _env(args)) if with_env is not None else args.func(args)
    except ConfigError as exc:
        logs.say(f"wakeful: {logs.one_line(str(exc))}", sys.stderr, "error")
        return 2
    except StoreError as exc:
        logs.say(f"wakeful: store error: {logs.one_line(str(exc))}", sys.stderr, "error")
        return 1
    except WakefulError as exc:
        logs.say(f"wakeful: {logs.one_line(str(exc))}", sys.stderr, "error")
        return 2
    except BrokenPipeError:
        # The reader went away (`wakeful dead-letters | head`): what it read is all it wanted.
        # Point stdout at /dev/null so the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
