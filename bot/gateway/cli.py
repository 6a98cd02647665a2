"""`wakeful gateway`: run the credential gateway, or flip its kill switch.

- `wakeful gateway` runs it (config from `--config` or WAKEFUL_GATEWAY_CONFIG, the store
  from `--db` or WAKEFUL_DB, where the revocations live);
- `wakeful gateway revoke <name> [--reason ...]` cuts a destination off at every gateway
  reading this store, and returns once they all refuse it (a second after its commit: every
  gateway has read the revocation by then, or refuses everything as it cannot read the store);
  `restore <name>` lets it through again;
- `wakeful gateway status` lists what is revoked.
"""

from __future__ import annotations

import argparse
import getpass
import time
from collections.abc import Callable

from wakeful.bot.process.config import Config, ConfigError
from wakeful.core.store import open_store

MARGIN = 0.05
"""Seconds `revoke` waits beyond FRESH: clocks of two hosts tick at rates a little apart."""


def _run(args: argparse.Namespace, env: dict[str, str]) -> int:
    from wakeful.bot.gateway.serve import serve

    config = args.config or env.get("WAKEFUL_GATEWAY_CONFIG", "").strip()
    if not config:
        raise ConfigError("WAKEFUL_GATEWAY_CONFIG is not set (the gateway's TOML file)")
    db = Config.from_env(env).db
    return serve(config, env, db, ready_fd=args.ready_fd, parent=args.parent)


def _revoke(args: argparse.Namespace, env: dict[str, str]) -> int:
    from wakeful.core.gateway.server import FRESH

    store = open_store(Config.from_env(env).db)
    try:
        fresh = store.revoke_destination(args.name, int(time.time()), _who(), args.reason or "")
    finally:
        store.close()
    # Committed. A gateway trusts a read of the revocations for FRESH seconds from when the
    # read began: once they have passed, each has read this one or refuses everything.
    # (Already revoked: an earlier revoke may have been stopped before its wait.)
    until = time.monotonic() + FRESH + MARGIN
    while (left := until - time.monotonic()) > 0:
        time.sleep(left)
    print(
        f"revoked {args.name}: every gateway on this store refuses it now"
        if fresh
        else f"{args.name} was already revoked: every gateway on this store refuses it"
    )
    return 0


def _restore(args: argparse.Namespace, env: dict[str, str]) -> int:
    store = open_store(Config.from_env(env).db)
    try:
        lifted = store.restore_destination(args.name)
    finally:
        store.close()
    print(f"restored {args.name}" if lifted else f"{args.name} was not revoked")
    return 0


def _status(args: argparse.Namespace, env: dict[str, str]) -> int:
    store = open_store(Config.from_env(env).db)
    try:
        revoked = store.revoked_destinations()
    finally:
        store.close()
    print(f"revoked destinations: {len(revoked)}")
    for r in revoked.values():
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(r.revoked_at))
        reason = f"  reason: {r.reason}" if r.reason else ""
        print(f"  {r.destination}  since {when}  by {r.revoked_by or '?'}{reason}")
    return 0


def _who() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""


def register(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add `wakeful gateway ...` to the `wakeful` parser."""

    p = sub.add_parser("gateway", help="the credential gateway: run it, revoke or restore")
    common(p)
    p.add_argument("--config", help="the gateway's TOML file (WAKEFUL_GATEWAY_CONFIG)")
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    p.add_argument("--parent", type=int, help=argparse.SUPPRESS)
    p.set_defaults(with_env=_run)
    commands = p.add_subparsers(dest="gateway_command", metavar="ACTION")
    q = commands.add_parser("revoke", help="cut a destination off at every gateway, in 1 s")
    common(q)
    q.add_argument("name")
    q.add_argument("--reason", help="why (kept with the revocation)")
    q.set_defaults(with_env=_revoke)
    q = commands.add_parser("restore", help="let a revoked destination through again")
    common(q)
    q.add_argument("name")
    q.set_defaults(with_env=_restore)
    q = commands.add_parser("status", help="list the revoked destinations")
    common(q)
    q.set_defaults(with_env=_status)
